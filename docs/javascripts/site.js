// Site-wide: a table wider than the page scrolls inside Material's wrapper; give such a wrapper
// keyboard access and a distinct name (WCAG 2.1.1, axe: scrollable-region-focusable).
document$.subscribe(() => requestAnimationFrame(() => {
  const wraps = [...document.querySelectorAll(".md-typeset__scrollwrap")];
  wraps.forEach((wrap, i) => {
    if (wrap.hasAttribute("tabindex") || wrap.scrollWidth <= wrap.clientWidth) return;
    const caption = wrap.querySelector("caption")?.textContent.trim();
    wrap.tabIndex = 0;
    wrap.setAttribute("role", "region");
    wrap.setAttribute("aria-label", caption || `Table ${i + 1} (scrolls sideways)`);
  });
}));
