// Peak against sequence length for each recipe of calc's sweep, a legend, and its sample points as a table.
import { capacityText, formatInt, sizeText } from "../format.js";
import { capacityLine, capacityOnScale, charWidth, chartFrame, svg, text, yAxis } from "../svg.js";

// The four recipes, then the fine-tuning step (the sweep's "finetune" row) when there is one.
const RECIPE_LINES = ["calc-line-1", "calc-line-2", "calc-line-3", "calc-line-4", "calc-line-5"];

// The sweep's rows: the table's recipes by id, and "finetune", the reader's own step: its fine-tuning, or only
// its optimizer, another than AdamW (issue 33: it read "your fine-tuning step" where only the optimizer changed).
const sweepLabel = (id) => (id === "finetune" ? "your step (its training and optimizer)" : id);

export function drawSweep(container, answer) {
  const { seq: seqs, peaks } = answer.sweep;
  const ids = Object.keys(peaks);
  const current = answer.step.config.seq;
  const all = ids.flatMap((id) => peaks[id]);
  const onScale = capacityOnScale(answer.capacity, Math.max(...all));
  const maxBytes = Math.max(onScale ? answer.capacity : 0, ...all) * 1.08;
  const frame = chartFrame(container, "Peak memory against sequence length",
    `Peak for each recipe from sequence ${formatInt(seqs[0])} to ${formatInt(seqs[seqs.length - 1])}, ` +
    `with the ${capacityText(answer.capacity)} device. The table after the chart lists sample points.`);
  const y = yAxis(frame, maxBytes, "peak");
  const lo = seqs[0];
  const span = Math.max(1, seqs[seqs.length - 1] - lo);
  const x = (s) => frame.margin.left + ((s - lo) / span) * frame.plotW;
  const axis = svg("g", { class: "calc-axis" }, frame.root);
  let free = -Infinity;  // tick labels that would touch the previous one are left out
  for (const s of [...new Set([seqs[0], current, seqs[seqs.length - 1]])]) {
    const half = charWidth(formatInt(s)) / 2;
    if (x(s) - half < free) continue;
    text(axis, x(s), frame.margin.top + frame.plotH + 16, formatInt(s), { "text-anchor": "middle" });
    free = x(s) + half + 6;
  }
  text(axis, frame.margin.left + frame.plotW / 2, frame.height - 6, "sequence length (tokens)", { "text-anchor": "middle" });
  svg("line", { x1: x(current), x2: x(current), y1: frame.margin.top, y2: frame.margin.top + frame.plotH, class: "calc-cursor" }, frame.root);
  ids.forEach((id, i) => {
    const points = seqs.map((s, j) => `${x(s).toFixed(1)},${y(peaks[id][j]).toFixed(1)}`).join(" ");
    svg("polyline", {
      points, class: `calc-line ${RECIPE_LINES[i % RECIPE_LINES.length]}`, "data-recipe": id,
      "data-first": peaks[id][0], "data-last": peaks[id][seqs.length - 1],
    }, frame.root);
  });
  capacityLine(frame, y, answer.capacity, onScale);
  // Legend and text alternative: a few sample points as a table.
  const legend = document.createElement("ul");
  legend.className = "calc-legend";
  ids.forEach((id, i) => {
    const li = document.createElement("li");
    li.innerHTML = `<svg viewBox="0 0 24 8" aria-hidden="true"><line x1="0" x2="24" y1="4" y2="4" class="calc-line ${RECIPE_LINES[i % RECIPE_LINES.length]}"/></svg>`;
    li.append(sweepLabel(id));
    legend.appendChild(li);
  });
  const picks = [...new Set([0, 25, 50, 75, 100, 125, 150, 175, seqs.length - 1].map((j) => Math.min(j, seqs.length - 1)))];
  const details = document.createElement("details");
  details.className = "calc-data";
  details.innerHTML = "<summary>The chart's data (sample points)</summary>";
  const table = document.createElement("table");
  const head = table.createTHead().insertRow();
  for (const label of ["Sequence", ...ids.map(sweepLabel)]) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = label;
    head.appendChild(th);
  }
  const body = table.createTBody();
  for (const j of picks) {
    const tr = body.insertRow();
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = formatInt(seqs[j]);
    tr.appendChild(th);
    for (const id of ids) tr.insertCell().textContent = sizeText(peaks[id][j]);
  }
  const wrap = document.createElement("div");
  wrap.className = "calc-data-scroll";
  wrap.appendChild(table);
  details.appendChild(wrap);
  container.append(legend, details);
}
