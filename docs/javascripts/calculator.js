// The live calculator's start. Its code is native ES modules (calculator/main.js and what it imports); opened
// from disk, where browsers run neither modules nor workers, the page says why and keeps the build-time numbers
// (the form stays disabled, as the HTML has it).
(() => {
  "use strict";
  const main = new URL("calculator/main.js", document.currentScript.src).href;
  if (location.protocol !== "file:") {
    const script = document.createElement("script");
    script.type = "module";
    script.src = main;
    document.head.append(script);
    return;
  }
  const lost = location.search ? " This link's settings cannot be shown without it." : "";
  for (const root of document.querySelectorAll("[data-calc]")) {
    root.dataset.state = "failed";
    root.querySelector("[data-calc-status]").textContent = "The live calculator could not start: the page was " +
      "opened from a file, and browsers do not run the calculator's modules or worker from disk; serve the site " +
      "over HTTP (make serve) to use it. The numbers shown were computed when this site was built, for the " +
      `default settings, and the fields are disabled.${lost}`;
    const note = root.querySelector("[data-plan-load-note]");
    if (note) note.textContent = "The Load buttons need the live calculator, which could not start.";
  }
})();
