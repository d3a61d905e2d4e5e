// Site-wide, on every page Material shows (instant navigation included):
// - a formula wider than the column is set smaller, down to FORMULA_MIN_SCALE of its size, to fit;
// - a table or formula still wider than the page scrolls inside its own box: give that box keyboard
//   access and a distinct name (WCAG 2.1.1, axe: scrollable-region-focusable).
const FORMULA_MIN_SCALE = 0.7;

function fitFormulas() {
  for (const display of document.querySelectorAll(".md-typeset .katex-display")) {
    const formula = display.querySelector(".katex");
    if (!formula) continue;
    formula.style.fontSize = "";
    const ratio = display.clientWidth / display.scrollWidth;
    if (ratio < 1) formula.style.fontSize = `${Math.max(FORMULA_MIN_SCALE, Math.floor(ratio * 100) / 100)}em`;
  }
}

function labelScrollers() {
  const wraps = [...document.querySelectorAll(".md-typeset__scrollwrap, .md-typeset .katex-display")];
  let tables = 0;
  let formulas = 0;
  for (const wrap of wraps) {
    const formula = wrap.classList.contains("katex-display");
    const n = formula ? ++formulas : ++tables;
    const scrolls = wrap.scrollWidth > wrap.clientWidth;
    if (!scrolls) {
      if (wrap.dataset.scrollLabelled) {
        for (const name of ["tabindex", "role", "aria-label", "data-scroll-labelled"]) wrap.removeAttribute(name);
      }
      continue;
    }
    if (wrap.hasAttribute("tabindex") && !wrap.dataset.scrollLabelled) continue;
    const caption = wrap.querySelector("caption")?.textContent.trim();
    wrap.tabIndex = 0;
    wrap.dataset.scrollLabelled = "true";
    wrap.setAttribute("role", "region");
    wrap.setAttribute("aria-label", formula ? `Formula ${n} (scrolls sideways)` : caption || `Table ${n} (scrolls sideways)`);
  }
}

function layout() {
  fitFormulas();
  labelScrollers();
}

let pending = 0;
document$.subscribe(() => requestAnimationFrame(layout));
window.addEventListener("resize", () => {
  cancelAnimationFrame(pending);
  pending = requestAnimationFrame(layout);
});
