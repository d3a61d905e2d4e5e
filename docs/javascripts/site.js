// Site-wide: a table or a formula wider than the page scrolls inside its own box; give such a box
// keyboard access and a distinct name (WCAG 2.1.1, axe: scrollable-region-focusable).
document$.subscribe(() => requestAnimationFrame(() => {
  const wraps = [...document.querySelectorAll(".md-typeset__scrollwrap, .md-typeset .katex-display")];
  let tables = 0;
  let formulas = 0;
  for (const wrap of wraps) {
    const formula = wrap.classList.contains("katex-display");
    const n = formula ? ++formulas : ++tables;
    if (wrap.hasAttribute("tabindex") || wrap.scrollWidth <= wrap.clientWidth) continue;
    const caption = wrap.querySelector("caption")?.textContent.trim();
    wrap.tabIndex = 0;
    wrap.setAttribute("role", "region");
    wrap.setAttribute("aria-label", formula ? `Formula ${n} (scrolls sideways)` : caption || `Table ${n} (scrolls sideways)`);
  }
}));
