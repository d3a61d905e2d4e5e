// The live calculator's glue. The form's values go, as strings named like the CLI's flags, to
// calc.web.handle running in Pyodide in a Web Worker (calc-worker.mjs); its JSON answer is drawn
// here: the table, two SVG charts and the step's animation. No memory formula lives in this file.
// Until the worker is ready the page shows the build-time answer (embedded by hooks/placeholders.py).
(() => {
  "use strict";

  // The categories' order and names come from calc, through the page's config (set in mount).
  let CATEGORIES = [];
  let CATEGORY_LABELS = {};
  const SHAPE_FIELDS = ["layers", "hidden", "heads", "kv-heads", "ffn", "vocab", "context",
    "norm", "positions", "gated-ffn", "tied", "bias", "final-norm"];
  const RUN_FIELDS = ["seq", "micro-batch", "grad-accum", "recipe", "recompute", "attention", "device",
    "dp", "tp", "pp", "ep", "zero",
    "sequence-parallel", "flash", "global-batch", "capacity-gb",
    "finetune", "optimizer", "lora-rank", "lora-targets", "freeze-layers", "paged-optimizer"];
  // What a planner row sets; none of these changes the planner's question.
  const LAYOUT_FIELDS = ["dp", "tp", "pp", "ep", "zero", "recompute", "micro-batch", "grad-accum"];
  const HF_CONFIG = "hf-config";  // the field (and the preset list's entry) of a pasted transformers config.json
  const datasetKey = (name) => name.replace(/-(.)/g, (_, c) => c.toUpperCase());  // "micro-batch" -> "microBatch"
  // The planner runs once the reader pauses, after the chart is drawn, so it never delays a redraw.
  const PLAN_DELAY_MS = 250;
  const URL_FIELDS = ["preset", HF_CONFIG, ...SHAPE_FIELDS, ...RUN_FIELDS];
  const SVG_NS = "http://www.w3.org/2000/svg";
  const GB = 1e9;
  const PLAY_INTERVAL_MS = 80;

  // ---------------------------------------------------------------- the worker (one per page)

  let worker = null;  // the page's worker for the calculator
  let planWorker = null;  // a second one for the planner, so a plan never delays a redraw

  // Why the live calculator cannot start here, before trying; null when it may.
  function cannotStart() {
    if (location.protocol === "file:") {
      return "the page was opened from a file, and browsers do not run the calculator's worker from " +
        "disk; serve the site over HTTP (make serve) to use it";
    }
    if (typeof Worker === "undefined") return "this browser does not run Web Workers";
    if (typeof WebAssembly === "undefined") return "this browser does not run WebAssembly, which Python in the page needs";
    return null;
  }

  // A worker running calc.web.handle: resolves to call(request) -> Promise(answer) once ready.
  // onProgress({done, total, label}) follows the worker's progress messages while it loads (if it sends any).
  // `early`: the worker the page's <head> already started (site_overrides/main.html), adopted with what it
  // said before this script listened.
  function spawnWorker(root, onProgress = () => {}, early = null) {
    return new Promise((resolve, reject) => {
      const reason = cannotStart();
      if (reason) { reject(new Error(reason)); return; }
      const url = new URL(root.dataset.worker, document.baseURI);
      let thread = early?.thread;
      try {
        thread ??= new Worker(url, { type: "module" });
      } catch (error) {  // e.g. a SecurityError for a page the browser will not give a worker
        reject(new Error(`the browser refused to start its worker: ${error.message}`));
        return;
      }
      const pending = new Map();
      let nextId = 0;
      function call(request) {
        const id = nextId++;
        return new Promise((done, fail) => {
          pending.set(id, { done, fail });
          thread.postMessage({ id, request: JSON.stringify(request) });
        });
      }
      thread.onerror = (event) => {
        event.preventDefault();
        reject(new Error(event.message || "the worker could not start"));
      };
      thread.onmessage = ({ data }) => {
        if (data.progress) onProgress(data.progress);
        else if (data.type === "ready") resolve(call);
        else if (data.type === "failed") reject(new Error(data.message));
        else if (pending.has(data.id)) {
          const { done, fail } = pending.get(data.id);
          pending.delete(data.id);
          if (data.error) fail(new Error(data.error));
          else done(JSON.parse(data.answer));
        }
      };
      early?.stop();
      early?.messages.forEach((data) => thread.onmessage({ data }));
    });
  }

  function startWorker(root, onProgress) {
    if (!worker) worker = spawnWorker(root, onProgress, window.calcWorker);
    return worker;
  }

  // The planner's worker, started when the first plan is asked (not competing with the calculator's start
  // or with its redraws while the reader types). Falls back to the calculator's own worker if a second one cannot start.
  function startPlanWorker(root, fallback) {
    if (!planWorker) planWorker = spawnWorker(root).catch(() => fallback);
    return planWorker;
  }

  // ---------------------------------------------------------------- small helpers

  // One decimal, rounded half up on the integer, as calc.format_gb does (display only).
  function fixed(bytes, unit) {
    const n = BigInt(bytes);
    const q = ((n < 0n ? -n : n) * 20n + unit) / (2n * unit);
    return `${n < 0n ? "-" : ""}${q / 10n}.${q % 10n}`;
  }
  const formatGB = (bytes) => fixed(bytes, 1000000000n);
  const EN_US = new Intl.NumberFormat("en-US");  // as toLocaleString("en-US"), without a new formatter per call
  const formatInt = (n) => EN_US.format(Number(n));
  // As calc.format_size: "1,234.5 GB", and from 10,000 GB on "861.1 TB" (display only).
  function formatSize(bytes) {
    let text = formatGB(bytes);
    let unit = "GB";
    if (Math.abs(Number(text)) >= 10000) [text, unit] = [fixed(bytes, 1000000000000n), "TB"];
    const negative = text.startsWith("-");
    const [whole, frac] = text.replace("-", "").split(".");
    return `${negative ? "-" : ""}${EN_US.format(BigInt(whole))}.${frac} ${unit}`;
  }
  // A value from a link or a field, quoted for a message, never more than 40 characters of it.
  function quote(value) {
    const text = String(value);
    return text.length <= 40 ? `“${text}”` : `“${text.slice(0, 40)}…” (${formatInt(text.length)} characters)`;
  }

  function svg(tag, attrs = {}, parent = null) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, value);
    if (parent) parent.appendChild(el);
    return el;
  }

  function text(parent, x, y, content, attrs = {}) {
    const el = svg("text", { x, y, ...attrs }, parent);
    el.textContent = content;
    return el;
  }

  // Round axis ticks: 1, 2 or 5 times a power of ten, about `count` of them.
  function ticks(max, count = 5) {
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
  const charWidth = (s) => String(s).length * CHART_FONT_PX * 0.6;  // a generous estimate for layout

  // The charts' widths, read once per redraw before it writes to the page (withWidths): each read of
  // clientWidth after a write would lay the whole page out again.
  // The sweep drawn after the numbers reuses the widths their redraw read (a resize redraws every chart).
  let knownWidths = null;
  let lastWidths = new Map();
  function withWidths(containers, draw, widths = null) {
    knownWidths = widths ?? new Map(containers.map((c) => [c, c.clientWidth]));
    lastWidths = knownWidths;
    try { draw(); } finally { knownWidths = null; }
  }

  function chartFrame(container, title, desc, { height = null, bottom = 44 } = {}) {
    const width = Math.max(280, Math.round((knownWidths?.get(container) ?? container.clientWidth) || 640));
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

  // The axis unit: GB, or TB where the values run past 10,000 GB.
  const unitFor = (maxBytes) => (maxBytes >= 1e13 ? { name: "TB", bytes: 1e12 } : { name: "GB", bytes: GB });

  function yAxis(frame, maxBytes, label) {
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

  // The device's capacity (calc's answer, in bytes) as "80 GB" or "94.5 GB".
  const capacityText = (bytes) => formatSize(bytes).replace(/\.0 /, " ");

  function capacityLine(frame, y, capacity) {
    const { root, margin, plotW } = frame;
    const g = svg("g", { class: "calc-capacity", "data-capacity": capacity }, root);
    svg("line", { x1: margin.left, x2: margin.left + plotW, y1: y(capacity), y2: y(capacity) }, g);
    text(g, margin.left + plotW + 4, y(capacity) + 4, capacityText(capacity));
  }

  // ---------------------------------------------------------------- drawing the answer

  function drawBreakdown(container, answer, selectedId) {
    const rows = answer.table;
    const totals = rows.map((row) => CATEGORIES.reduce((sum, c) => sum + row.bytes[c], 0));
    const maxBytes = Math.max(answer.capacity, ...totals, ...rows.map((r) => r.peak)) * 1.14;
    const frame = chartFrame(container, "Memory by category for each recipe",
      `Stacked bars for ${rows.map((r) => `${r.id}, peak ${formatSize(r.peak)}`).join("; ")}; ` +
      `the device holds ${capacityText(answer.capacity)}. The table above lists every value.`, { bottom: 58 });
    frame.root.setAttribute("aria-describedby", "calc-table");
    const y = yAxis(frame, maxBytes, "on one device");
    const slot = frame.plotW / rows.length;
    const barW = slot * 0.56;
    rows.forEach((row, i) => {
      const x = frame.margin.left + slot * i + (slot - barW) / 2;
      const g = svg("g", { class: "calc-bar", "data-recipe": row.id, "data-peak": row.peak }, frame.root);
      let bottom = 0;
      for (const cat of CATEGORIES) {
        const bytes = row.bytes[cat];
        svg("rect", {
          x, width: barW, y: y(bottom + bytes), height: Math.max(0, y(bottom) - y(bottom + bytes)),
          class: `calc-fill-${cat}`, "data-part": cat, "data-bytes": bytes,
        }, g);
        bottom += bytes;
      }
      svg("line", { x1: x - 4, x2: x + barW + 4, y1: y(row.peak), y2: y(row.peak), class: "calc-peak" }, g);
      // The label sits above both the bar and its peak line, never on them; in a narrow slot, the number alone.
      const label = charWidth(formatSize(row.peak)) <= slot - 4 ? formatSize(row.peak) : formatSize(row.peak).split(" ")[0];
      text(g, x + barW / 2, Math.min(y(row.peak), y(totals[i])) - 6, label, { "text-anchor": "middle", class: "calc-peak-label" });
      const base = frame.margin.top + frame.plotH;
      const [recipe, recompute] = row.id.split("-");
      const cls = row.id === selectedId ? "calc-selected-label" : "";
      text(g, x + barW / 2, base + 16, recipe, { "text-anchor": "middle", class: cls });
      text(g, x + barW / 2, base + 30, recompute, { "text-anchor": "middle", class: cls });
      if (row.id === selectedId) text(g, x + barW / 2, base + 44, "(selected)", { "text-anchor": "middle" });
    });
    capacityLine(frame, y, answer.capacity);
  }

  // The four recipes, then the fine-tuning step (the sweep's "finetune" row) when there is one.
  const RECIPE_LINES = ["calc-line-1", "calc-line-2", "calc-line-3", "calc-line-4", "calc-line-5"];

  // The sweep's rows: the table's recipes by id, and "finetune", the reader's fine-tuning step.
  const sweepLabel = (id) => (id === "finetune" ? "your fine-tuning step" : id);

  function drawSweep(container, answer) {
    const { seq: seqs, peaks } = answer.sweep;
    const ids = Object.keys(peaks);
    const current = answer.step.config.seq;
    const all = ids.flatMap((id) => peaks[id]);
    const maxBytes = Math.max(answer.capacity, ...all) * 1.08;
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
    capacityLine(frame, y, answer.capacity);
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
      for (const id of ids) tr.insertCell().textContent = formatSize(peaks[id][j]);
    }
    const wrap = document.createElement("div");
    wrap.className = "calc-data-scroll";
    wrap.appendChild(table);
    details.appendChild(wrap);
    container.append(legend, details);
  }

  // The animation: memory by category over the step's events, a cursor on the current event.
  function drawWalk(container, step, capacity) {
    const events = step.events;
    const maxBytes = Math.max(capacity, ...events.map((e) => e.total)) * 1.12;
    const frame = chartFrame(container, "Memory over one training step",
      `${events.length} events of the step for ${step.config.recipe} precision with ${step.config.recompute} ` +
      `recomputation; the peak, ${formatSize(step.peak)}, is reached at event ${step.peak_index + 1}: ${step.peak_event}.`);
    frame.root.dataset.events = events.length;
    frame.root.dataset.peakIndex = step.peak_index;
    frame.root.dataset.peak = step.peak;
    const y = yAxis(frame, maxBytes, "on one device");
    const w = frame.plotW / events.length;
    const x = (i) => frame.margin.left + i * w;
    const base = new Array(events.length).fill(0);
    for (const cat of CATEGORIES) {
      const top = events.map((e, i) => base[i] + e.totals[cat]);
      let d = "";
      events.forEach((_, i) => { d += `${i ? "L" : "M"}${x(i).toFixed(2)},${y(top[i]).toFixed(2)}H${x(i + 1).toFixed(2)}`; });
      for (let i = events.length - 1; i >= 0; i--) d += `L${x(i + 1).toFixed(2)},${y(base[i]).toFixed(2)}H${x(i).toFixed(2)}`;
      svg("path", { d: `${d}Z`, class: `calc-fill-${cat}`, "data-category": cat }, frame.root);
      top.forEach((v, i) => { base[i] = v; });
    }
    const peakX = x(step.peak_index) + w / 2;
    const peak = svg("g", { class: "calc-peak-marker" }, frame.root);
    svg("line", { x1: peakX, x2: peakX, y1: frame.margin.top, y2: frame.margin.top + frame.plotH, class: "calc-peak" }, peak);
    const peakText = `peak ${formatSize(step.peak)}`;
    const leftOfLine = peakX - 4 - charWidth(peakText) >= frame.margin.left;  // else to its right
    text(peak, leftOfLine ? peakX - 4 : peakX + 4, frame.margin.top + 10, peakText,
      { "text-anchor": leftOfLine ? "end" : "start", class: "calc-peak-label" });
    capacityLine(frame, y, capacity);
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

  // The step's fine-tuning as calc describes it (step.config.finetune, absent for the deck's own step).
  function tuningText(tune) {
    if (!tune) return "";
    const what = { full: "every parameter", lora: "LoRA", qlora: "QLoRA", freeze: "freezing" }[tune.mode] ?? tune.mode;
    const detail = tune.mode === "lora" || tune.mode === "qlora" ? ` rank ${tune.rank} on ${tune.targets.join(", ")}`
      : tune.mode === "freeze" ? ` the first ${formatInt(tune.freeze_layers)} layers` : "";
    return `Fine-tuning: ${what}${detail}, ${tune.optimizer}${tune.paged ? " (paged)" : ""}. `;
  }

  // ---------------------------------------------------------------- the planner's table

  const recomputeText = (policy) => (policy === "none" ? "no recomputation" : `${policy} recomputation`);
  const planLabel = (row) => `Load the layout with ${row.devices} devices: dp ${row.dp}, tp ${row.tp}, ` +
    `pp ${row.pp}, ep ${row.ep}, ZeRO ${row.zero}, ${recomputeText(row.recompute)}, micro-batch ${row.micro_batch}, ` +
    `${row.grad_accum} micro-batches per step`;

  // A table whose rows each have a Load button (the planner's and the fit list's): `kind` names their data
  // attributes (data-KIND-row, data-KIND-use, data-KIND-none); shown(row) gives the row's data attributes,
  // its cells' text and its button's name; `none` is said across the table's columns when there is no row.
  function drawLoadTable(body, kind, rows, shown, none, disabled = false) {
    const trs = rows.map((row) => {
      const { data, cells, label } = shown(row);
      const tr = document.createElement("tr");
      tr.dataset[`${kind}Row`] = "";
      Object.assign(tr.dataset, data);
      for (const value of cells) tr.insertCell().textContent = value;
      const button = document.createElement("button");
      button.type = "button";
      button.className = "md-button";
      button.dataset[`${kind}Use`] = "";
      button.disabled = disabled;
      button.textContent = "Load";
      button.setAttribute("aria-label", label);
      tr.insertCell().appendChild(button);
      return tr;
    });
    if (!trs.length) {
      const tr = document.createElement("tr");
      tr.dataset[`${kind}None`] = "";
      const td = tr.insertCell();
      td.colSpan = body.closest("table").tHead.rows[0].cells.length;
      td.textContent = none;
      trs.push(tr);
    }
    body.replaceChildren(...trs);
    rove(body, `[data-${kind}-use]`);
  }

  function drawPlan(body, plan, maxDevices) {
    drawLoadTable(body, "plan", plan, (row) => ({
      data: {
        devices: row.devices, dp: row.dp, tp: row.tp, pp: row.pp, ep: row.ep, zero: row.zero,
        recompute: row.recompute, microBatch: row.micro_batch, gradAccum: row.grad_accum, peak: row.peak, extraCompute: row.extra_compute,
      },
      cells: [row.devices, row.dp, row.tp, row.pp, row.ep, row.zero, row.recompute, row.micro_batch,
        formatInt(row.grad_accum), formatSize(row.peak), row.display.extra_compute],
      label: planLabel(row),
    }), `No layout up to ${formatInt(maxDevices)} devices fits.`);
  }

  // A table's Load buttons are one Tab stop: the arrow keys (and Home, End) move between them.
  function rove(body, selector) {
    [...body.querySelectorAll(selector)].forEach((button, i) => { button.tabIndex = i === 0 ? 0 : -1; });
  }
  function roveWithArrows(body, selector) {
    const moves = { ArrowDown: 1, ArrowUp: -1, Home: -Infinity, End: Infinity };
    body.addEventListener("keydown", (event) => {
      if (!Object.hasOwn(moves, event.key) || !event.target.matches(selector)) return;
      const buttons = [...body.querySelectorAll(selector)];
      const at = buttons.indexOf(event.target) + moves[event.key];
      const next = buttons[Number.isFinite(at) ? Math.max(0, Math.min(buttons.length - 1, at)) : (at < 0 ? 0 : buttons.length - 1)];
      event.preventDefault();
      for (const button of buttons) button.tabIndex = button === next ? 0 : -1;
      next.focus();
    });
  }

  // "What fits on one card": calc's fine-tunings that fit one device, cheapest first (calc.plan.fit_card).
  const fitLabel = (row) => `Load ${row.finetune}${row.rank ? ` rank ${row.rank} on ${row.targets.join(",")}` : ""}, ` +
    `${recomputeText(row.recompute)}, micro-batch ${row.micro_batch}, on one device`;
  function drawFit(body, fit, moe, live) {
    drawLoadTable(body, "fit", fit, (row) => ({
      data: {
        finetune: row.finetune, rank: row.rank, targets: row.targets.join(","), recompute: row.recompute,
        microBatch: row.micro_batch, peak: row.peak, trainable: row.trainable_params,
      },
      cells: [row.finetune, row.rank || "", row.targets.join(","), row.recompute, row.micro_batch,
        formatInt(row.trainable_params), formatSize(row.peak), row.display.extra_compute],
      label: fitLabel(row),
    }), moe ? "A mixture of experts is not modelled here." : "Nothing fits one card.", !live);
  }

  // ---------------------------------------------------------------- one calculator

  function mount(root) {
    if (root.dataset.mounted) return;
    root.dataset.mounted = "true";
    const config = JSON.parse(root.querySelector("[data-calc-config]").textContent);
    CATEGORIES = config.categories;
    CATEGORY_LABELS = config.categoryLabels;
    const presets = new Map(Object.entries(config.presets));  // looked up as data, never as properties
    const form = root.querySelector("[data-calc-form]");
    const status = root.querySelector("[data-calc-status]");
    const notice = root.querySelector("[data-calc-notice]");
    const pendingNote = root.querySelector("[data-calc-pending]");
    const progress = {
      root: root.querySelector("[data-calc-progress]"),
      bar: root.querySelector("[data-calc-progress] progress"),
      label: root.querySelector("[data-progress-label]"),
    };
    const field = (name) => form.elements.namedItem(name);
    const charts = Object.fromEntries([...root.querySelectorAll("[data-chart]")].map((c) => [c.dataset.chart, c]));
    const anim = {
      play: root.querySelector('[data-anim="play"]'),
      back: root.querySelector('[data-anim="back"]'),
      forward: root.querySelector('[data-anim="forward"]'),
      scrub: root.querySelector('[data-anim="scrub"]'),
      label: root.querySelector('[data-anim="label"]'),
      timer: null, index: 0, moveCursor: null,
    };
    let answer = config.initial;
    let call = null;        // the worker's entry point, once it is ready
    let planCall = null;    // the planner's worker (its own, so a plan never delays a redraw)
    let busy = false;       // a request is with the worker
    let again = false;      // the form changed while it was
    const linkFields = new Set();  // fields set from the link that calc has not yet accepted
    const linkProblems = [];       // [{name, message}]: what the link asked for that could not be used
    let seqAuto = false;    // seq was emptied for a preset's own default: fill it in from calc's answer
    const planner = {
      root: root.querySelector("[data-planner]"),
      body: root.querySelector("[data-plan-body]"),
      status: root.querySelector("[data-plan-status]"),
      caption: root.querySelector("[data-plan-caption]"),
      loadNote: root.querySelector("[data-plan-load-note]"),
      timer: null,
      shown: null,    // the question the table answers (inputs without the layout's own fields)
      asking: null,   // the question with the worker
    };
    const fitView = {
      body: root.querySelector("[data-fit-body]"),
      status: root.querySelector("[data-fit-status]"),
      caption: root.querySelector("[data-fit-caption]"),
    };
    // A transformers config.json (issue 10): the text calc was last given, the fields the reader (or the
    // link) set beside it, which override it, and the preset to go back to.
    const hf = {
      details: root.querySelector("[data-hf]"),
      option: root.querySelector("[data-hf-option]"),
      file: root.querySelector("[data-hf-file]"),
      text: "",
      overrides: new Set(),
      lastPreset: null,
    };
    // Fields that apply only to some fine-tunings (lora-rank for lora and qlora...), from the HTML.
    const appliesTo = new Map();
    for (const box of root.querySelectorAll("[data-show-for]")) {
      for (const el of box.querySelectorAll("[name]")) appliesTo.set(el.name, box.dataset.showFor.split(" "));
    }

    // -- form <-> values
    const labelOf = (name) => form.querySelector(`label[for="calc-${CSS.escape(name)}"]`)?.textContent.trim() ?? name;
    function setField(name, value) {
      const el = field(name);
      if (!el) return;
      if (el.type === "checkbox") el.checked = value === true || value === "true";
      else el.value = String(value);
    }
    const valueOf = (name) => {
      const el = field(name);
      return el.type === "checkbox" ? String(el.checked) : el.value.trim();
    };
    // As calc reads them: choices trimmed and in lower case; true/false also as 1/0, yes/no, on/off.
    function matchChoice(name, raw) {
      const value = String(raw).trim().toLowerCase();
      return [...field(name).options].some((o) => o.value === value) ? value : null;
    }
    function parseBool(raw) {
      const value = String(raw).trim().toLowerCase();
      if (["1", "true", "yes", "on"].includes(value)) return true;
      if (["0", "false", "no", "off"].includes(value)) return false;
      return null;
    }
    const choicesText = (name) => [...field(name).options].map((o) => o.value).join(", ");
    const hfMode = () => valueOf("preset") === HF_CONFIG;
    const applies = (name) => !appliesTo.has(name) || appliesTo.get(name).includes(valueOf("finetune"));
    function showApplicable() {
      const mode = valueOf("finetune");
      for (const box of root.querySelectorAll("[data-show-for]")) box.hidden = !box.dataset.showFor.split(" ").includes(mode);
    }
    function fillPreset(name) {
      const preset = presets.get(name);
      if (!preset) return;  // "your config.json": its shape comes with calc's answer (fillFromAnswer)
      for (const key of SHAPE_FIELDS) {
        setField(key, preset[key]);
        if (field(key).type === "text") field(key).placeholder = String(preset[key]);
      }
    }
    function fillDefaults() {
      for (const [key, value] of Object.entries(config.defaults)) setField(key, value);
      fillPreset(config.defaults.preset);
      seqAuto = false;
      showApplicable();
    }
    // The shape fields the reader has not set, as calc read them from the config.json.
    function fillFromAnswer(shape) {
      for (const key of SHAPE_FIELDS) {
        if (hf.overrides.has(key)) continue;
        const value = shape[key.replace(/-/g, "_")];
        setField(key, value);
        if (field(key).type === "text") field(key).placeholder = String(value);
      }
    }
    // Into config.json mode with this text (calc answers for it on the next update).
    function enterHf(text) {
      if (!hfMode()) hf.lastPreset = valueOf("preset");
      hf.text = text;
      hf.overrides.clear();
      hf.option.disabled = false;
      hf.option.hidden = false;
      setField("preset", HF_CONFIG);
      if (field(HF_CONFIG).value !== text) field(HF_CONFIG).value = text;
      hf.details.open = true;
      setField("seq", "");  // the config's own default sequence, filled in from the answer
      seqAuto = true;
    }
    // Back to a preset: the config is forgotten.
    function leaveHf(preset = hf.lastPreset ?? config.defaults.preset) {
      hf.text = "";
      hf.overrides.clear();
      hf.option.disabled = true;
      hf.option.hidden = true;
      hf.option.textContent = "your config.json";
      field(HF_CONFIG).value = "";
      setField("preset", preset);
      fillPreset(preset);
      setField("seq", "");
      seqAuto = true;
    }
    function refuseLong(size) {
      showError(HF_CONFIG, `${size} is not a config.json (a few kB); at most ${formatInt(config.hfMaxChars)} ` +
        "characters are read. The numbers below are for the last model calc accepted.");
      root.dataset.stale = "true";
    }
    // A config's text from the box, a file or a link: refused here, before the worker, when far too long.
    function takeConfig(text) {
      const slot = root.querySelector(`[data-error-for="${HF_CONFIG}"]`);
      slot.textContent = "";
      field(HF_CONFIG).removeAttribute("aria-invalid");
      if (text.length > config.hfMaxChars) {
        refuseLong(`${formatInt(text.length)} characters`);
        return false;
      }
      if (text.trim() === "") {
        if (hfMode()) leaveHf();
        else hf.text = "";
        return true;
      }
      enterHf(text);
      return true;
    }
    // One field back to its default: a shape field to the preset's value, the sequence to the preset's own.
    function resetField(name) {
      if (name === "preset") {
        setField("preset", config.defaults.preset);
        fillPreset(config.defaults.preset);
      } else if (name === "seq") {
        setField("seq", "");
        seqAuto = true;
      } else if (name === HF_CONFIG) {
        leaveHf(config.defaults.preset);
      } else if (SHAPE_FIELDS.includes(name) && hfMode()) {
        hf.overrides.delete(name);  // the config's value comes back with the next answer
      } else if (SHAPE_FIELDS.includes(name)) {
        setField(name, presets.get(valueOf("preset"))[name]);
      } else if (name in config.defaults) {
        setField(name, config.defaults[name]);
      }
    }
    // The inputs for calc: the preset and shape fields that differ from it, or the config.json and the
    // fields set beside it; then the run's fields (the fine-tuning ones where they apply).
    function inputs() {
      const preset = valueOf("preset");
      const out = {};
      if (preset === HF_CONFIG) {
        out[HF_CONFIG] = hf.text;
        for (const key of SHAPE_FIELDS) if (hf.overrides.has(key) && valueOf(key) !== "") out[key] = valueOf(key);
      } else {
        out.preset = preset;
        for (const key of SHAPE_FIELDS) {
          if (valueOf(key) !== String(presets.get(preset)?.[key])) out[key] = valueOf(key);
        }
      }
      for (const key of RUN_FIELDS) if (valueOf(key) !== "" && applies(key)) out[key] = valueOf(key);
      return out;
    }

    // The planner's question: the inputs less the layout it chooses itself.
    function planQuestion() {
      const out = inputs();
      for (const key of LAYOUT_FIELDS) delete out[key];
      return out;
    }

    // -- the URL holds every value that differs from the defaults
    function writeUrl(drawn = inputs()) {
      const params = new URLSearchParams();
      const given = { ...drawn };
      // The config in calc's short form (calc.hf.compact): what calc reads of it, and a shorter link.
      if (HF_CONFIG in given && answer.hf_config) given[HF_CONFIG] = answer.hf_config;
      for (const [key, value] of Object.entries(given)) {
        if (Object.hasOwn(config.defaults, key) ? value !== config.defaults[key] : true) params.set(key, value);
      }
      const query = params.toString();
      // A shared link opens at the calculator, not at the top of the page it lives on.
      const hash = location.hash || (query ? `#${root.id}` : "");
      const url = `${location.pathname}${query ? `?${query}` : ""}${hash}`;
      if (url !== `${location.pathname}${location.search}${location.hash}`) history.replaceState(history.state, "", url);
    }
    // A link never loses settings it can use: parameters that are not ours (utm_source, fbclid...) are
    // ignored; each value that cannot be used is reported by name and only its field keeps its default.
    function readUrl() {
      const values = new Map();
      const counts = new Map();
      for (const [key, value] of new URLSearchParams(location.search)) {
        if (!URL_FIELDS.includes(key)) continue;
        counts.set(key, (counts.get(key) ?? 0) + 1);
        if (!values.has(key)) values.set(key, value);
      }
      if (!values.size) return;
      for (const [key, n] of counts) {
        if (n > 1) linkProblems.push({ name: key, message: `given ${n} times; the first, ${quote(values.get(key))}, is used` });
      }
      let preset = config.defaults.preset;
      if (values.has(HF_CONFIG)) {
        const text = values.get(HF_CONFIG);
        if (values.has("preset")) {
          linkProblems.push({ name: "preset", message: "a link gives a preset or a config.json, not both; the config is used" });
        }
        values.delete("preset");
        if (takeConfig(text)) linkFields.add(HF_CONFIG);
        else linkProblems.push({ name: HF_CONFIG, message: `${formatInt(text.length)} characters is far too long for a config.json` });
      } else if (values.has("preset")) {
        const asked = String(values.get("preset")).trim().toLowerCase();
        if (presets.has(asked)) preset = asked;
        else {
          linkProblems.push({ name: "preset", message: `${quote(values.get("preset"))} is not a preset here; ` +
            `the presets are ${[...presets.keys()].join(", ")}` });
        }
      }
      if (!hfMode()) {
        setField("preset", preset);
        fillPreset(preset);
      }
      if ((values.has("preset") || hfMode()) && !values.has("seq")) { setField("seq", ""); seqAuto = true; }
      for (const [key, raw] of values) {
        if (key === "preset" || key === HF_CONFIG) continue;
        if (SHAPE_FIELDS.includes(key) && hfMode()) hf.overrides.add(key);
        const el = field(key);
        let value = raw.trim();
        if (el.tagName === "SELECT") {
          value = matchChoice(key, raw);
          if (value === null) {
            linkProblems.push({ name: key, message: `${quote(raw)} is not one of ${choicesText(key)}` });
            continue;
          }
        } else if (el.type === "checkbox") {
          value = parseBool(raw);
          if (value === null) {
            linkProblems.push({ name: key, message: `${quote(raw)} is not true or false (or 1 or 0, yes or no)` });
            continue;
          }
        }
        setField(key, value);
        linkFields.add(key);
        if (key === "seq") seqAuto = false;
      }
      showApplicable();
      showLinkNotice();
    }
    function showLinkNotice() {
      if (!linkProblems.length) return;
      const intro = document.createElement("span");
      intro.textContent = "Some of this link's settings could not be used as given; the rest apply. Fields named here show their defaults unless the line says otherwise:";
      const list = document.createElement("ul");
      for (const { name, message } of linkProblems) {
        const li = document.createElement("li");
        li.dataset.linkProblem = name;
        li.textContent = `${labelOf(name)}: ${message}.`;
        list.appendChild(li);
      }
      notice.replaceChildren(intro, list);
      notice.dataset.kind = "link";  // it stays: the reader should see what the link lost
      notice.hidden = false;
    }

    // -- errors shown beside the field they name; hints for fields left empty
    function clearErrors() {
      for (const el of root.querySelectorAll("[data-error-for]")) el.textContent = "";
      for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
    }
    function showError(name, message) {
      const slot = root.querySelector(`[data-error-for="${CSS.escape(name ?? "")}"]`);
      if (!slot) {
        notice.textContent = `The calculator could not use these inputs: ${message}`;
        notice.dataset.kind = "input";  // hidden again by the next good answer (a link's notice stays)
        notice.hidden = false;
        return;
      }
      slot.textContent = `${labelOf(name)}: ${message}`;
      field(name)?.setAttribute("aria-invalid", "true");
    }
    // An empty field is not silent: it says which value calc used in its place.
    function emptyValue(name) {
      if (SHAPE_FIELDS.includes(name) && hfMode()) return "the config's value";
      if (SHAPE_FIELDS.includes(name)) return `the preset's ${formatInt(presets.get(valueOf("preset"))[name])}`;
      if (name === "seq") return `the preset's default, ${formatInt(answer.step.config.seq)}`;
      return `the default, ${config.defaults[name]}`;
    }
    function showHints() {
      for (const slot of root.querySelectorAll("[data-hint-for]")) {
        const name = slot.dataset.hintFor;
        slot.textContent = valueOf(name) === "" && name !== "grad-accum" ? `Empty: uses ${emptyValue(name)}.` : "";
      }
    }

    // -- drawing
    function setStatus(message) { status.textContent = message; }
    // `sweep`: false while the new sweep is being computed (the last one stays, marked pending, until it comes).
    function drawCharts(sweep = true) {
      const step = answer.step;
      drawBreakdown(charts.breakdown, answer, `${step.config.recipe}-${step.config.recompute}`);
      if (sweep && answer.sweep) drawSweep(charts.sweep, answer);
      anim.moveCursor = drawWalk(charts.walk, step, answer.capacity);
      anim.moveCursor(anim.index);
    }
    // The table, the summary, the bars and the step; the sweep chart too once the answer has it.
    function renderNumbers(sweep = true) {
      withWidths(Object.values(charts), () => renderNumbersNow(sweep));
    }
    function renderNumbersNow(sweep) {
      const step = answer.step;
      const selected = `${step.config.recipe}-${step.config.recompute}`;
      for (const row of answer.table) {
        const tr = root.querySelector(`tr[data-recipe="${row.id}"]`);
        for (const part of [...CATEGORIES, "peak"]) {
          const cell = tr.querySelector(`[data-part="${part}"]`);
          const bytes = part === "peak" ? row.peak : row.bytes[part];
          cell.dataset.bytes = bytes;
          (cell.querySelector("strong") ?? cell).textContent = row.display[part].text ?? formatSize(bytes);
        }
        tr.classList.toggle("calc-row--selected", row.id === selected);
      }
      const shape = step.config.shape;
      root.querySelector('[data-out="caption"]').textContent =
        `Bytes on one device: ${shape.name}, sequence ${formatInt(step.config.seq)}, micro-batch ${step.config.micro_batch}.` +
        (step.config.finetune && step.config.finetune.mode !== "full"
          ? " The four recipes train every parameter: the deck's step, for comparison with your fine-tuning above." : "");
      const peakOut = root.querySelector('[data-out="peak"]');
      peakOut.textContent = formatSize(step.peak);
      peakOut.dataset.bytes = step.peak;
      const summary = root.querySelector("[data-calc-summary]");
      const device = `one ${capacityText(answer.capacity)} device`;
      const fits = answer.fits ? `fits on ${device}` : `does not fit on ${device}`;
      summary.innerHTML = "";
      const gib = document.createElement("span");
      gib.dataset.out = "peak-gib";
      gib.textContent = `${answer.peak_display.gib} GiB`;
      summary.append(tuningText(step.config.finetune),
        `With ${config.recipeLabels[step.config.recipe]} and ${recomputeText(step.config.recompute)} the peak is `,
        peakOut, " (", gib, "), reached at “");
      const event = document.createElement("span");
      event.dataset.out = "peak-event";
      event.textContent = step.peak_event;
      summary.append(event, `”: it ${fits}.`);
      const trainable = root.querySelector('[data-out="trainable"]');
      trainable.textContent = formatInt(answer.trainable_params);
      trainable.dataset.count = answer.trainable_params;
      const params = root.querySelector('[data-out="params"]');
      params.textContent = formatInt(step.params);
      params.dataset.count = step.params;
      renderEager();
      if (!anim.timer) anim.index = step.peak_index;
      drawCharts(sweep);
      showEvent(Math.min(anim.index, step.events.length - 1));
    }
    // What PyTorch allocates for the same step (calc's eager walk), with the error measured on that code.
    function renderEager() {
      const out = root.querySelector("[data-calc-eager]");
      const eager = answer.eager;
      const link = document.createElement("a");
      out.replaceChildren();
      if (!eager.available) {
        const reason = document.createElement("span");
        reason.dataset.out = "eager-reason";
        reason.textContent = `What PyTorch allocates is not shown for this step: ${eager.reason}.`;
        out.append(reason);
        return;
      }
      const cfg = answer.step.config;
      const code = document.createElement("code");
      const flag = document.createElement("span");
      flag.className = "calc-flag";  // no line break after its "--" (hooks/flags.py does the same for the pages)
      flag.textContent = "--walk";
      code.append(flag, " eager");
      const peak = document.createElement("strong");
      peak.dataset.out = "eager-peak";
      peak.dataset.bytes = eager.peak;
      peak.textContent = formatSize(eager.peak);
      const event = document.createElement("span");
      event.dataset.out = "eager-event";
      event.textContent = eager.peak_event;
      const where = cfg.device === "cuda" ? "GPU" : "CPU";
      out.append("What PyTorch allocates for the same step (", code,
        `: transformers' code, ${cfg.attention} attention, AdamW as PyTorch runs it on a ${where}): `,
        peak, ", reached at “", event, "”.");
      const band = config.eagerBands[eager.band];
      if (!band) return;
      link.href = `${config.resultsUrl}#${band.anchor}`;
      const pct = (x) => `${(100 * x).toFixed(2)}%`;
      const said = document.createElement("span");
      said.dataset.out = "eager-band";
      said.dataset.low = band.low;
      said.dataset.high = band.high;
      const setting = band.setting ? `, ${band.setting}` : "";
      said.textContent = ` Measured against ${band.runs} real steps of this code (${band.models.join(", ")}${setting}), ` +
        `it predicted ${pct(band.low)} to ${pct(band.high)} of the measured peak`;
      link.textContent = `results §${band.section}`;
      out.append(said, " (", link, ").");
    }
    // Everything drawn, the sweep included: "calc:drawn" (the tests and the benchmark wait for it).
    function finish(source) {
      root.dataset.source = source;
      performance.mark("calc:drawn");
      root.dispatchEvent(new CustomEvent("calc:drawn", { detail: { source } }));
    }
    function render(source) {
      renderNumbers();
      finish(source);
    }
    // The charts follow their container's width (a phone turned, a window resized).
    let resizeFrame = 0;
    new ResizeObserver(() => {
      cancelAnimationFrame(resizeFrame);
      resizeFrame = requestAnimationFrame(() => {
        if (Math.round(charts.breakdown.clientWidth) === Number(charts.breakdown.dataset.drawnWidth)) return;
        // A sweep being computed is drawn, at these widths, when it comes.
        withWidths(Object.values(charts), () => drawCharts(!charts.sweep.dataset.pending));
      });
    }).observe(charts.breakdown);

    // -- the animation's controls
    function showEvent(i) {
      const events = answer.step.events;
      anim.index = Math.max(0, Math.min(i, events.length - 1));
      const e = events[anim.index];
      const sign = e.bytes > 0 ? "+" : e.bytes < 0 ? "−" : "±";
      const change = `${sign}${formatSize(Math.abs(e.bytes))} ${CATEGORY_LABELS[e.category]}`;
      const isPeak = anim.index === answer.step.peak_index;
      const description = `Event ${anim.index + 1} of ${events.length}${isPeak ? " (the peak)" : ""}, ${e.phase}: ` +
        `${e.label}; ${change}; total ${formatSize(e.total)}.`;
      anim.label.textContent = description;
      anim.label.classList.toggle("calc-anim-label--peak", isPeak);
      anim.scrub.max = events.length - 1;
      anim.scrub.value = anim.index;
      anim.scrub.setAttribute("aria-valuetext", description);
      anim.moveCursor?.(anim.index);
    }
    function stop() {
      clearInterval(anim.timer);
      anim.timer = null;
      anim.play.textContent = "Play";
      anim.play.setAttribute("aria-pressed", "false");
      anim.label.setAttribute("aria-live", "polite");
    }
    function play() {
      if (anim.index >= answer.step.events.length - 1) showEvent(0);
      anim.play.textContent = "Pause";
      anim.play.setAttribute("aria-pressed", "true");
      anim.label.setAttribute("aria-live", "off"); // do not read every frame aloud
      anim.timer = setInterval(() => {
        if (anim.index >= answer.step.events.length - 1) stop();
        else showEvent(anim.index + 1);
      }, PLAY_INTERVAL_MS);
    }
    anim.play.addEventListener("click", () => (anim.timer ? stop() : play()));
    anim.back.addEventListener("click", () => { stop(); showEvent(anim.index - 1); });
    anim.forward.addEventListener("click", () => { stop(); showEvent(anim.index + 1); });
    anim.scrub.addEventListener("input", () => { stop(); showEvent(Number(anim.scrub.value)); });
    root.querySelector("[data-anim-controls]").hidden = false;

    // -- the planner: its own worker, asked once the chart is drawn and the reader pauses
    function planState(state, message) {
      planner.root.dataset.planState = state;
      if (message) planner.status.textContent = message;
    }
    function markLoadedLayout() {
      for (const tr of planner.body.querySelectorAll("tr[data-plan-row]")) {
        const loaded = LAYOUT_FIELDS.every((name) => valueOf(name) === tr.dataset[datasetKey(name)]);
        tr.classList.toggle("calc-row--selected", loaded);
      }
    }
    function setLoadButtons() {
      rove(fitView.body, "[data-fit-use]");
      rove(planner.body, "[data-plan-use]");
      for (const button of fitView.body.querySelectorAll("[data-fit-use]")) button.disabled = !call;
      for (const button of planner.body.querySelectorAll("[data-plan-use]")) {
        button.disabled = !call;
        if (!call) button.setAttribute("aria-describedby", "calc-plan-load-note");
        else button.removeAttribute("aria-describedby");
      }
      planner.loadNote.hidden = Boolean(call);
    }
    function schedulePlan() {
      clearTimeout(planner.timer);
      markLoadedLayout();
      if (JSON.stringify(planQuestion()) === planner.shown) {
        if (planner.root.dataset.planState === "pending") planState("ready", planner.readyMessage);
        return;
      }
      planState("pending", "Waiting to plan for the inputs above…");
      planner.timer = setTimeout(askPlan, PLAN_DELAY_MS);
    }
    async function askPlan() {
      // One question at a time; on the calculator's own worker (a fallback) only between its redraws.
      if (!planCall) startPlanWorker(root, call).then((entry) => { planCall = entry; });
      if (!planCall || planner.asking || (planCall === call && busy)) {
        planner.timer = setTimeout(askPlan, PLAN_DELAY_MS);
        return;
      }
      const question = planQuestion();
      const key = JSON.stringify(question);
      planner.asking = key;
      planState("pending", "Planning…");
      planner.root.dataset.planBusy = "true";
      const start = performance.now();
      let result;
      try {
        result = await planCall({ inputs: inputs(), sweep: false, plan: true, fit: true });
      } catch (error) {
        result = { ok: false, field: null, message: error.message };
      }
      planner.asking = null;
      delete planner.root.dataset.planBusy;
      if (key !== JSON.stringify(planQuestion())) return;  // the form moved on; a newer plan is scheduled
      if (!result.ok) {
        planState("error", `The planner needs valid inputs (${result.message}).`);
        return;
      }
      const plan = result.plan;
      const run = result.step.config;
      drawPlan(planner.body, plan, Number(planner.root.dataset.maxDevices));
      drawFit(fitView.body, result.fit, run.shape.experts > 0, Boolean(call));
      fitView.caption.textContent = `Fine-tunings of ${run.shape.name}, sequence ${formatInt(run.seq)}, ` +
        `on one ${capacityText(result.capacity)} device.`;
      fitView.status.textContent = `${result.fit.length} fine-tuning${result.fit.length === 1 ? "" : "s"} fit ` +
        "(computed in your browser).";
      setLoadButtons();
      planner.caption.textContent = `Layouts for ${run.shape.name}, sequence ${formatInt(run.seq)}, ` +
        `global batch ${formatInt(result.global_batch)}, on ${capacityText(result.capacity)} devices.`;
      planner.shown = key;
      const ms = performance.now() - start;
      planner.readyMessage = `${plan.length} layout${plan.length === 1 ? "" : "s"} fit (computed in your browser ` +
        `in ${formatInt(Math.round(ms))} ms).`;
      planner.root.dataset.planSource = "live";
      markLoadedLayout();
      planState("ready", planner.readyMessage);
      performance.mark("calc:planned");
      root.dispatchEvent(new CustomEvent("calc:planned", { detail: { rows: plan.length, ms } }));
    }
    function loadLayout(tr) {
      for (const name of LAYOUT_FIELDS) setField(name, tr.dataset[datasetKey(name)]);
      clearTimeout(planner.timer);
      update();
    }
    planner.body.addEventListener("click", (event) => {
      const button = event.target.closest("[data-plan-use]");
      if (button && !button.disabled) loadLayout(button.closest("tr"));
    });
    // A fine-tuning that fits: on one device, as calc.plan.fit_card answered it.
    function loadFit(tr) {
      for (const name of ["dp", "tp", "pp", "ep"]) setField(name, "1");
      setField("zero", "0");
      const { finetune, rank, targets, recompute, microBatch } = tr.dataset;
      setField("finetune", finetune);
      if (finetune === "lora" || finetune === "qlora") {
        setField("lora-rank", rank);
        setField("lora-targets", targets);
      }
      setField("recompute", recompute);
      setField("micro-batch", microBatch);
      showApplicable();
      clearTimeout(planner.timer);
      update();
    }
    roveWithArrows(planner.body, "[data-plan-use]");
    roveWithArrows(fitView.body, "[data-fit-use]");
    fitView.body.addEventListener("click", (event) => {
      const button = event.target.closest("[data-fit-use]");
      if (button && !button.disabled) loadFit(button.closest("tr"));
    });

    // -- asking calc
    async function ask(request) {
      try {
        return await call(request);
      } catch (error) {
        return { ok: false, field: null, message: error.message };
      }
    }
    // "calc:live": the worker's first answer drawn (the benchmark's time to live); "calc:ready": its sweep too.
    function markLive() {
      if (!performance.getEntriesByName("calc:live").length) performance.mark("calc:live");
    }
    function becomeReady() {
      if (root.dataset.state === "ready") return;
      root.dataset.state = "ready";
      delete root.dataset.stale;
      pendingNote.hidden = true;
      progress.root.hidden = true;
      markLive();
      performance.mark("calc:ready");
      setStatus("Live: computed in your browser by calc, running in Pyodide.");
    }
    // Two questions per change: first the table, the bars and the step (a fraction of calc's work),
    // drawn at once ("calc:numbers"); then the peak-versus-sequence sweep, most of the work ("calc:drawn").
    async function update() {
      if (!call) return;
      if (busy) { again = true; return; }
      busy = true;
      const given = inputs();
      const numbers = ask({ inputs: given, sweep: false });
      // Asked at once, so the worker computes the sweep while the page draws the numbers (dropped if the form moves on).
      const withSweep = ask({ inputs: given, sweep: true, numbers: false });
      const result = await numbers;
      performance.mark("calc:answered");
      if (again) { busy = false; again = false; update(); return; }  // the form moved on: answer the latest
      if (!result.ok && linkFields.size) {
        // A value from the link that calc refuses: only that field falls back (all of the link's,
        // if calc names a field the link did not set), and the notice says which and why.
        busy = false;
        const culprits = linkFields.has(result.field) ? [result.field] : [...linkFields];
        linkProblems.push({ name: result.field ?? culprits[0], message: result.message });
        for (const name of culprits) { resetField(name); linkFields.delete(name); }
        showLinkNotice();
        update();
        return;
      }
      linkFields.clear();
      if (!result.ok) {
        busy = false;
        clearErrors();
        // A refused input leaves the last answer calc gave on show, dimmed, and says so.
        const kept = result.field === HF_CONFIG ? "; the numbers below are for the last model calc accepted"
          : "; the numbers shown are the last accepted";
        showError(result.field, result.message + kept);
        clearTimeout(planner.timer);
        planState("error", "The planner waits for valid inputs (see the message beside the field).");
        becomeReady();
        root.dataset.stale = "true";
        return;
      }
      delete root.dataset.stale;
      answer = { ...result, sweep: answer.sweep };  // the last sweep stays until the new one comes
      clearErrors();
      if (notice.dataset.kind === "input") { notice.hidden = true; delete notice.dataset.kind; }
      // A preset's own sequence is filled in, but never under the reader's cursor.
      if (seqAuto && valueOf("seq") === "" && document.activeElement !== field("seq")) setField("seq", answer.step.config.seq);
      seqAuto = false;
      if (hfMode()) {
        fillFromAnswer(answer.step.config.shape);
        hf.option.textContent = `your config.json — ${answer.params_label}`;  // calc's count, as the presets show theirs
      }
      showHints();
      charts.sweep.dataset.pending = "true";
      renderNumbers(false);
      performance.mark("calc:numbers");
      markLive();
      root.dispatchEvent(new CustomEvent("calc:numbers"));
      const full = await withSweep;
      busy = false;
      if (again) { again = false; writeUrl(given); update(); return; }  // the address of the numbers on show
      if (full.ok) {  // the numbers drawn, with their sweep; else the last sweep stays, marked pending
        answer = { ...answer, sweep: full.sweep };
        delete charts.sweep.dataset.pending;
        withWidths([charts.sweep], () => drawSweep(charts.sweep, answer), lastWidths.has(charts.sweep) ? lastWidths : null);
      }
      finish("live");
      writeUrl(given);  // after the chart: the address follows, the reader's eyes first
      schedulePlan();
      becomeReady();
    }

    function onInput(event) {
      const name = event.target.name;
      if (!name || name === "event") return;
      clearTimeout(planner.timer);  // a plan waits until the reader pauses
      if (name === "preset") {
        hf.overrides.clear();
        fillPreset(event.target.value);  // "your config.json" again: its shape comes with the answer
        setField("seq", "");  // each preset's own default sequence (calc decides), filled in from the answer
        seqAuto = true;
      } else if (name === HF_CONFIG) {
        if (!takeConfig(event.target.value)) return;  // far too long: refused with a message, never sent
      } else if (name === "finetune") {
        showApplicable();
      } else if (SHAPE_FIELDS.includes(name) && hfMode()) {
        hf.overrides.add(name);  // the reader's value, beside the config's
      } else if (name === "seq") {
        seqAuto = false;  // the reader's own sequence, even an empty one
      }
      if (!call) {  // not live yet: the change waits, and the page says so
        pendingNote.textContent = "Your changes will apply once the live calculator has started; until then the numbers below are for the default settings.";
        root.dataset.stale = "true";
        pendingNote.hidden = false;
        return;
      }
      update();
    }
    form.addEventListener("input", onInput);
    // A config.json from a file, chosen or dropped on the box: read here, never uploaded.
    function readConfigFile(file) {
      if (!file) return;
      if (file.size > config.hfMaxChars) {
        refuseLong(`a file of ${formatInt(file.size)} bytes`);
        return;
      }
      file.text().then((text) => {
        field(HF_CONFIG).value = text;
        field(HF_CONFIG).dispatchEvent(new Event("input", { bubbles: true }));
      });
    }
    hf.file.addEventListener("change", () => { readConfigFile(hf.file.files[0]); hf.file.value = ""; });
    field(HF_CONFIG).addEventListener("dragover", (event) => event.preventDefault());
    field(HF_CONFIG).addEventListener("drop", (event) => {
      if (!event.dataTransfer?.files.length) return;
      event.preventDefault();
      readConfigFile(event.dataTransfer.files[0]);
    });
    root.querySelector("[data-hf-clear]").addEventListener("click", () => {
      field(HF_CONFIG).value = "";
      field(HF_CONFIG).dispatchEvent(new Event("input", { bubbles: true }));
    });
    form.addEventListener("submit", (event) => event.preventDefault());
    for (const button of root.querySelectorAll("[data-capacity-preset]")) {
      button.addEventListener("click", () => {
        setField("capacity-gb", button.dataset.capacityPreset);
        field("capacity-gb").dispatchEvent(new Event("input", { bubbles: true }));
      });
    }

    // -- loading: a progress bar from the worker's progress messages (indeterminate until one comes)
    function showProgress({ done, total, label }) {
      root.dispatchEvent(new CustomEvent("calc:progress", { detail: { done, total, label } }));  // for tests
      if (!(Number(total) > 0)) return;
      const part = Math.min(Number(done), Number(total));
      progress.bar.max = Number(total);
      progress.bar.value = part;
      const amount = total > 100000
        ? `${(part / 1e6).toFixed(1)} of ${(total / 1e6).toFixed(1)} MB`
        : `${formatInt(part)} of ${formatInt(total)}`;
      progress.label.textContent = `${label ? `${label}: ` : ""}${amount}`;
    }
    function failed(error) {
      root.dataset.state = "failed";
      delete root.dataset.stale;
      progress.root.hidden = true;
      pendingNote.hidden = true;
      fillDefaults();  // the fields agree with the build-time numbers they sit beside
      for (const fieldset of form.querySelectorAll("fieldset")) fieldset.disabled = true;
      planner.loadNote.textContent = "The Load buttons need the live calculator, which could not start.";
      setLoadButtons();
      const lost = linkFields.size || linkProblems.length ? " This link's settings cannot be shown without it." : "";
      setStatus(`The live calculator could not start: ${error.message}. The numbers shown were computed when ` +
        `this site was built, for the default settings, and the fields are disabled.${lost}`);
    }

    // -- start: the link's settings (or the defaults), the build-time answer, then the worker
    planner.shown = JSON.stringify(planQuestion());  // the build-time table answers the defaults
    planner.readyMessage = planner.status.textContent;
    fillPreset(valueOf("preset"));
    const defaultsKey = JSON.stringify(inputs());
    readUrl();
    const fromLink = JSON.stringify(inputs()) !== defaultsKey;
    render("build");
    if (JSON.stringify(planQuestion()) !== planner.shown) planState("pending", "The layouts below are for the default settings; planning for this link's once the live calculator starts…");
    markLoadedLayout();
    setLoadButtons();
    const reason = cannotStart();
    if (reason) { failed(new Error(reason)); return; }
    for (const fieldset of form.querySelectorAll("fieldset")) fieldset.disabled = false;
    if (fromLink) {
      pendingNote.textContent = "This link's settings are in the fields; the numbers below follow them once the live calculator has started.";
      root.dataset.stale = "true";
      pendingNote.hidden = false;
    }
    progress.root.hidden = false;
    setStatus("Showing the numbers computed when this site was built, for the default settings. Starting the live calculator…");
    startWorker(root, showProgress).then(
      (entry) => {
        call = entry;
        setLoadButtons();
        return update();
      },
      failed,
    );
  }

  function mountAll() {
    for (const root of document.querySelectorAll("[data-calc]")) mount(root);
  }
  // Material's document$ emits on every page load, instant navigation included.
  if (typeof document$ !== "undefined") document$.subscribe(mountAll);
  else if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mountAll);
  else mountAll();
})();
