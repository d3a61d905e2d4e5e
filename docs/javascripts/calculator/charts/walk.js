// The step's animation: memory by category over the step's events, the peak marked; returns i -> move the cursor.
// peakText: calc's string for the step's peak.
import { capacityLine, capacityOnScale, charWidth, chartFrame, svg, text, yAxis } from "../svg.js";

// The animation: memory by category over the step's events, a cursor on the current event.
export function drawWalk(container, step, capacity, categories, peakText) {
  const events = step.events;
  const largest = Math.max(...events.map((e) => e.total));
  const onScale = capacityOnScale(capacity, largest);
  const maxBytes = Math.max(onScale ? capacity : 0, largest) * 1.12;
  const frame = chartFrame(container, "Memory over one training step",
    `${events.length} events of the step for ${step.config.recipe} precision with ${step.config.recompute} ` +
    `recomputation; the peak, ${peakText}, is reached at event ${step.peak_index + 1}: ${step.peak_event}.`);
  frame.root.dataset.events = events.length;
  frame.root.dataset.peakIndex = step.peak_index;
  frame.root.dataset.peak = step.peak;
  const y = yAxis(frame, maxBytes, "on one device");
  const w = frame.plotW / events.length;
  const x = (i) => frame.margin.left + i * w;
  // The bands in whole pixels (crisp edges): a step's edges fall on pixel boundaries, each as wide as the
  // next, and a band that holds bytes is at least a pixel tall (16-bit logits beside 600 GB are half of one),
  // not a blurred, broken fringe along the top (a fresh reviewer's minor: qwen3-30b-a3b's edge at 1280 px).
  const px = (i) => Math.round(x(i));
  const base = new Array(events.length).fill(0);
  const basePx = new Array(events.length).fill(Math.round(y(0)));
  for (const cat of categories) {
    const top = events.map((e, i) => base[i] + e.totals[cat]);
    const topPx = events.map((e, i) => (e.totals[cat] > 0 ? Math.min(basePx[i] - 1, Math.round(y(top[i]))) : basePx[i]));
    let d = "";
    events.forEach((_, i) => { d += `${i ? "L" : "M"}${px(i)},${topPx[i]}H${px(i + 1)}`; });
    for (let i = events.length - 1; i >= 0; i--) d += `L${px(i + 1)},${basePx[i]}H${px(i)}`;
    svg("path", { d: `${d}Z`, class: `calc-fill-${cat}`, "data-category": cat, "shape-rendering": "crispEdges" }, frame.root);
    top.forEach((v, i) => { base[i] = v; basePx[i] = topPx[i]; });
  }
  const peakX = x(step.peak_index) + w / 2;
  const peak = svg("g", { class: "calc-peak-marker" }, frame.root);
  svg("line", { x1: peakX, x2: peakX, y1: frame.margin.top, y2: frame.margin.top + frame.plotH, class: "calc-peak" }, peak);
  const peakLabel = `peak ${peakText}`;
  const leftOfLine = peakX - 4 - charWidth(peakLabel) >= frame.margin.left;  // else to its right
  text(peak, leftOfLine ? peakX - 4 : peakX + 4, frame.margin.top + 10, peakLabel,
    { "text-anchor": leftOfLine ? "end" : "start", class: "calc-peak-label" });
  capacityLine(frame, y, capacity, onScale);
  const axis = svg("g", { class: "calc-axis" }, frame.root);
  text(axis, frame.margin.left + frame.plotW / 2, frame.height - 6, "events of one training step", { "text-anchor": "middle" });
  const phases = [];
  events.forEach((e, i) => { if (!i || e.phase !== events[i - 1].phase) phases.push([e.phase, i]); });
  let free = 0;  // label a phase where it starts, unless the previous label is in the way
  for (const [phase, i] of phases) {
    if (x(i) < free || x(i) + charWidth(phase) > frame.width - 4) continue;
    text(axis, x(i) + 2, frame.margin.top + frame.plotH + 16, phase, { class: "calc-phase" });
    svg("line", { x1: x(i), x2: x(i), y1: frame.margin.top + frame.plotH, y2: frame.margin.top + frame.plotH + 6, class: "calc-tick" }, axis);
    free = x(i) + charWidth(phase) + 8;
  }
  const cursor = svg("rect", { y: frame.margin.top, height: frame.plotH, width: Math.max(w, 2), class: "calc-cursor-band" }, frame.root);
  return (i) => cursor.setAttribute("x", x(i) + w / 2 - Math.max(w, 2) / 2);
}
