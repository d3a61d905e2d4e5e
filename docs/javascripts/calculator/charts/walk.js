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
  // Drawn by pixel column, not by event: each event covers the columns from its start to the next event's (at
  // least its first), and a column shows the largest running total of the events that cover it, split as that
  // event splits it, so the drawn top is the stated peak however many events share a pixel (a fresh reviewer's
  // major: the eager walk's 6,638 events on 800 pixels drew none of its short spikes, the peak's included).
  // With fewer events than pixels every column has one event, and each event is a bar of its own.
  const first = px(0), best = new Array(Math.max(1, px(events.length) - first)).fill(-1);
  // The peak's event covers at least 3 columns, so that a spike of one event stays in sight beside its marker.
  const least = (i) => (i === step.peak_index && px(i + 1) - px(i) < 3 ? 3 : 1);
  events.forEach((e, i) => {
    const from = Math.max(0, Math.min(px(i) - first - (least(i) > 1 ? 1 : 0), best.length - least(i)));
    const end = Math.min(best.length, Math.max(px(i + 1) - first, from + least(i)));
    for (let c = from; c < end; c++) {
      if (best[c] < 0 || e.total > events[best[c]].total) best[c] = i;
    }
  });
  const bars = [];  // [event, from pixel, to pixel]: a run of columns that show the same event
  best.forEach((i, c) => {
    if (i < 0) return;  // no event at all
    if (bars.length && bars[bars.length - 1][0] === i) bars[bars.length - 1][2] = first + c + 1;
    else bars.push([i, first + c, first + c + 1]);
  });
  frame.root.dataset.drawnEvents = new Set(bars.map(([i]) => i)).size;
  const base = new Array(bars.length).fill(0);
  const basePx = new Array(bars.length).fill(Math.round(y(0)));
  for (const cat of categories) {
    const top = bars.map(([e], b) => base[b] + events[e].totals[cat]);
    const topPx = bars.map(([e], b) => (events[e].totals[cat] > 0 ? Math.min(basePx[b] - 1, Math.round(y(top[b]))) : basePx[b]));
    let d = "";
    bars.forEach(([, from, to], b) => { d += `${b ? "L" : "M"}${from},${topPx[b]}H${to}`; });
    for (let b = bars.length - 1; b >= 0; b--) d += `L${bars[b][2]},${basePx[b]}H${bars[b][1]}`;
    svg("path", { d: `${d}Z`, class: `calc-fill-${cat}`, "data-category": cat, "shape-rendering": "crispEdges" }, frame.root);
    top.forEach((v, b) => { base[b] = v; basePx[b] = topPx[b]; });
  }
  frame.root.dataset.peakY = Math.round(y(largest));
  const peakX = x(step.peak_index) + w / 2;
  const peak = svg("g", { class: "calc-peak-marker" }, frame.root);
  // the marker stops at the drawn peak, which it would otherwise hide when its event is a few pixels wide
  svg("line", { x1: peakX, x2: peakX, y1: frame.margin.top, y2: Math.max(frame.margin.top, Math.round(y(largest)) - 2), class: "calc-peak" }, peak);
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
