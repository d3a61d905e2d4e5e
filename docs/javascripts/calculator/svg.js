// SVG primitives the charts share: elements, round ticks, a frame at the container's width, the y axis and
// the device's capacity line.
import { capacityText, formatInt, unitFor } from "./format.js";

const SVG_NS = "http://www.w3.org/2000/svg";

export function svg(tag, attrs = {}, parent = null) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, value);
  if (parent) parent.appendChild(el);
  return el;
}

export function text(parent, x, y, content, attrs = {}) {
  const el = svg("text", { x, y, ...attrs }, parent);
  el.textContent = content;
  return el;
}

// Round axis ticks: 1, 2 or 5 times a power of ten, about `count` of them.
export function ticks(max, count = 5) {
  const raw = max / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
  const out = [];
  for (let t = 0; t <= max + 1e-9; t += step) out.push(t);
  return out;
}

// Charts are drawn at the container's own width in CSS pixels (redrawn when it changes), so their
// text is CHART_FONT_PX on every screen instead of shrinking with a fixed viewBox.
const CHART_FONT_PX = 12;
export const charWidth = (s) => String(s).length * CHART_FONT_PX * 0.6;  // a generous estimate for layout

// The charts' widths, read before a redraw writes to the page (withWidths) and kept until a chart's container
// changes size (forgetWidths, from the view's ResizeObserver): a read of clientWidth after a write lays the
// page out again, and a change writes its messages and fields before it draws (some 4 ms of the main thread
// a change in Chromium's trace). The sweep drawn after the numbers reuses the widths their redraw read.
let knownWidths = null;
let lastWidths = new Map();
export function withWidths(containers, draw, widths = null) {
  knownWidths = widths ?? new Map(containers.map((c) => [c, lastWidths.get(c) ?? c.clientWidth]));
  lastWidths = new Map([...lastWidths, ...knownWidths]);
  try { draw(); } finally { knownWidths = null; }
}
export const widthsKnownFor = (container) => (lastWidths.has(container) ? lastWidths : null);
export function forgetWidths() { lastWidths = new Map(); }

// A chart's width for its container's clientWidth: at least 280 px, 640 where it has none (hidden).
export const frameWidth = (clientWidth) => Math.max(280, Math.round(clientWidth || 640));

export function chartFrame(container, title, desc, { height = null, bottom = 44 } = {}) {
  const width = frameWidth(knownWidths?.get(container) ?? container.clientWidth);
  const tall = height ?? Math.round(Math.min(320, Math.max(250, width * 0.48)));
  const margin = { top: 20, right: 56, bottom, left: 60 };
  const root = svg("svg", {
    viewBox: `0 0 ${width} ${tall}`, width, height: tall, role: "img", class: "calc-svg",
  });
  const titleId = `${container.dataset.chart}-title`;
  const descId = `${container.dataset.chart}-desc`;
  svg("title", { id: titleId }, root).textContent = title;
  svg("desc", { id: descId }, root).textContent = desc;
  root.setAttribute("aria-labelledby", `${titleId} ${descId}`);
  container.replaceChildren(root);
  container.dataset.drawnWidth = width;
  return {
    root, margin, width, height: tall,
    plotW: width - margin.left - margin.right,
    plotH: tall - margin.top - margin.bottom,
  };
}

// A capacity this many times the largest value would flatten the chart to nothing (the course's Decoder,
// 286 kB, beside an 80 GB card): it is then named above the plot instead of drawn to scale.
export const OFF_SCALE = 20;
export const capacityOnScale = (capacity, largest) => capacity <= OFF_SCALE * largest;

// The y axis in the unit the largest value reads best in (B, kB, MB, GB, TB); returns bytes -> y.
export function yAxis(frame, maxBytes, label) {
  const { root, margin, plotW, plotH } = frame;
  const unit = unitFor(maxBytes);
  const max = maxBytes / unit.bytes;
  const y = (bytes) => margin.top + plotH - (bytes / unit.bytes / max) * plotH;
  const axis = svg("g", { class: "calc-axis" }, root);
  for (const t of ticks(max, plotH < 200 ? 4 : 5)) {
    const at = y(t * unit.bytes);
    svg("line", { x1: margin.left, x2: margin.left + plotW, y1: at, y2: at, class: "calc-grid" }, axis);
    text(axis, margin.left - 6, at + 4, formatInt(Math.round(t * 10) / 10), { "text-anchor": "end" });
  }
  text(axis, 14, margin.top + plotH / 2, `${label} (${unit.name})`, {
    transform: `rotate(-90 14 ${margin.top + plotH / 2})`, "text-anchor": "middle",
  });
  return y;
}

// The device's capacity as a line at its height, or, off the scale, as a note along the plot's top.
export function capacityLine(frame, y, capacity, onScale = true) {
  const { root, margin, plotW } = frame;
  const g = svg("g", { class: "calc-capacity", "data-capacity": capacity }, root);
  if (!onScale) {
    g.dataset.offScale = "true";
    text(g, margin.left + plotW, margin.top - 6, `device: ${capacityText(capacity)} (off the scale)`, { "text-anchor": "end" });
    return;
  }
  svg("line", { x1: margin.left, x2: margin.left + plotW, y1: y(capacity), y2: y(capacity) }, g);
  text(g, margin.left + plotW + 4, y(capacity) + 4, capacityText(capacity));
}
