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
  const RUN_FIELDS = ["seq", "micro-batch", "grad-accum", "recipe", "recompute", "dp", "tp", "pp", "zero",
    "sequence-parallel", "flash", "global-batch", "capacity-gb"];
  // What a planner row sets; none of these changes the planner's question.
  const LAYOUT_FIELDS = ["dp", "tp", "pp", "zero", "recompute", "micro-batch", "grad-accum"];
  const datasetKey = (name) => name.replace(/-(.)/g, (_, c) => c.toUpperCase());  // "micro-batch" -> "microBatch"
  // The planner runs once the reader pauses, after the chart is drawn, so it never delays a redraw.
  const PLAN_DELAY_MS = 250;
  const URL_FIELDS = ["preset", ...SHAPE_FIELDS, ...RUN_FIELDS];
  const SVG_NS = "http://www.w3.org/2000/svg";
  const GB = 1e9;
  const PLAY_INTERVAL_MS = 80;

  // ---------------------------------------------------------------- the worker (one per page)

  let worker = null;

  function startWorker(root) {
    if (worker) return worker;
    const url = new URL(root.dataset.worker, document.baseURI);
    url.searchParams.set("wheel", new URL(root.dataset.wheel, document.baseURI).href);
    const early = window.calcWorker;  // started in <head> (site_overrides/main.html)
    const thread = early?.thread ?? new Worker(url, { type: "module" });
    const pending = new Map();
    let nextId = 0;
    worker = new Promise((resolve, reject) => {
      thread.onerror = (event) => {
        event.preventDefault();
        reject(new Error(event.message || "the worker could not start"));
      };
      thread.onmessage = ({ data }) => {
        if (data.type === "ready") resolve(call);
        else if (data.type === "failed") reject(new Error(data.message));
        else if (data.progress) root.dispatchEvent(new CustomEvent("calc:progress", { detail: data.progress }));
        else {
          const { resolve: done, reject: fail } = pending.get(data.id);
          pending.delete(data.id);
          if (data.error) fail(new Error(data.error));
          else done(JSON.parse(data.answer));
        }
      };
    });
    early?.stop();
    early?.messages.forEach((data) => thread.onmessage({ data }));  // what it said before we listened
    function call(request) {
      const id = nextId++;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject });
        thread.postMessage({ id, request: JSON.stringify(request) });
      });
    }
    return worker;
  }

  // ---------------------------------------------------------------- small helpers

  // One decimal, rounded half up on the integer, as calc.format_gb does (display only).
  function formatGB(bytes) {
    const n = BigInt(bytes);
    const q = ((n < 0n ? -n : n) * 20n + 1000000000n) / 2000000000n;
    return `${n < 0n ? "-" : ""}${q / 10n}.${q % 10n}`;
  }
  const formatInt = (n) => Number(n).toLocaleString("en-US");

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

  function chartFrame(container, title, desc, { width = 640, height = 300 } = {}) {
    const margin = { top: 18, right: 52, bottom: 44, left: 56 };
    const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", class: "calc-svg" });
    const titleId = `${container.dataset.chart}-title`;
    const descId = `${container.dataset.chart}-desc`;
    svg("title", { id: titleId }, root).textContent = title;
    svg("desc", { id: descId }, root).textContent = desc;
    root.setAttribute("aria-labelledby", `${titleId} ${descId}`);
    container.replaceChildren(root);
    return {
      root, margin, width, height,
      plotW: width - margin.left - margin.right,
      plotH: height - margin.top - margin.bottom,
    };
  }

  function yAxis(frame, maxGB, label) {
    const { root, margin, plotW, plotH } = frame;
    const y = (gb) => margin.top + plotH - (gb / maxGB) * plotH;
    const axis = svg("g", { class: "calc-axis" }, root);
    for (const t of ticks(maxGB)) {
      svg("line", { x1: margin.left, x2: margin.left + plotW, y1: y(t), y2: y(t), class: "calc-grid" }, axis);
      text(axis, margin.left - 6, y(t) + 4, String(Math.round(t * 10) / 10), { "text-anchor": "end" });
    }
    text(axis, 14, margin.top + plotH / 2, label, {
      transform: `rotate(-90 14 ${margin.top + plotH / 2})`, "text-anchor": "middle",
    });
    return y;
  }

  // The device's capacity (calc's answer, in bytes) as "80 GB" or "94.5 GB".
  const capacityText = (bytes) => `${formatGB(bytes).replace(/\.0$/, "")} GB`;

  function capacityLine(frame, y, capacity) {
    const { root, margin, plotW } = frame;
    const g = svg("g", { class: "calc-capacity", "data-capacity": capacity }, root);
    svg("line", { x1: margin.left, x2: margin.left + plotW, y1: y(capacity / GB), y2: y(capacity / GB) }, g);
    text(g, margin.left + plotW + 4, y(capacity / GB) + 4, capacityText(capacity));
  }

  // ---------------------------------------------------------------- drawing the answer

  function drawBreakdown(container, answer, selectedId) {
    const rows = answer.table;
    const totals = rows.map((row) => CATEGORIES.reduce((sum, c) => sum + row.bytes[c], 0));
    const maxGB = Math.max(answer.capacity, ...totals) / GB * 1.08;
    const frame = chartFrame(container, "Memory by category for each recipe",
      `Stacked bars for ${rows.map((r) => `${r.id}, peak ${r.display.peak.gb} GB`).join("; ")}; ` +
      `the device holds ${capacityText(answer.capacity)}. The table above lists every value.`);
    frame.root.setAttribute("aria-describedby", "calc-table");
    const y = yAxis(frame, maxGB, "GB on one device");
    const slot = frame.plotW / rows.length;
    const barW = slot * 0.56;
    rows.forEach((row, i) => {
      const x = frame.margin.left + slot * i + (slot - barW) / 2;
      const g = svg("g", { class: "calc-bar", "data-recipe": row.id, "data-peak": row.peak }, frame.root);
      let bottom = 0;
      for (const cat of CATEGORIES) {
        const gb = row.bytes[cat] / GB;
        svg("rect", {
          x, width: barW, y: y(bottom + gb), height: Math.max(0, y(bottom) - y(bottom + gb)),
          class: `calc-fill-${cat}`, "data-part": cat, "data-bytes": row.bytes[cat],
        }, g);
        bottom += gb;
      }
      svg("line", { x1: x - 6, x2: x + barW + 6, y1: y(row.peak / GB), y2: y(row.peak / GB), class: "calc-peak" }, g);
      text(g, x + barW / 2, y(row.peak / GB) - 5, `${row.display.peak.gb} GB`, { "text-anchor": "middle", class: "calc-peak-label" });
      text(g, x + barW / 2, frame.margin.top + frame.plotH + 18, row.id,
        { "text-anchor": "middle", class: row.id === selectedId ? "calc-selected-label" : "" });
      if (row.id === selectedId) text(g, x + barW / 2, frame.margin.top + frame.plotH + 32, "(selected)", { "text-anchor": "middle" });
    });
    capacityLine(frame, y, answer.capacity);
  }

  const RECIPE_LINES = ["calc-line-1", "calc-line-2", "calc-line-3", "calc-line-4"];

  function drawSweep(container, answer) {
    const { seq: seqs, peaks } = answer.sweep;
    const ids = Object.keys(peaks);
    const current = answer.step.config.seq;
    const all = ids.flatMap((id) => peaks[id]);
    const maxGB = Math.max(answer.capacity, ...all) / GB * 1.08;
    const frame = chartFrame(container, "Peak memory against sequence length",
      `Peak for each recipe from sequence ${formatInt(seqs[0])} to ${formatInt(seqs[seqs.length - 1])}, ` +
      `with the ${capacityText(answer.capacity)} device. The table after the chart lists sample points.`);
    const y = yAxis(frame, maxGB, "peak GB");
    const lo = seqs[0];
    const span = Math.max(1, seqs[seqs.length - 1] - lo);
    const x = (s) => frame.margin.left + ((s - lo) / span) * frame.plotW;
    const axis = svg("g", { class: "calc-axis" }, frame.root);
    for (const s of [seqs[0], current, seqs[seqs.length - 1]]) {
      text(axis, x(s), frame.margin.top + frame.plotH + 16, formatInt(s), { "text-anchor": "middle" });
    }
    text(axis, frame.margin.left + frame.plotW / 2, frame.height - 6, "sequence length (tokens)", { "text-anchor": "middle" });
    svg("line", { x1: x(current), x2: x(current), y1: frame.margin.top, y2: frame.margin.top + frame.plotH, class: "calc-cursor" }, frame.root);
    ids.forEach((id, i) => {
      const points = seqs.map((s, j) => `${x(s).toFixed(1)},${y(peaks[id][j] / GB).toFixed(1)}`).join(" ");
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
      li.append(id);
      legend.appendChild(li);
    });
    const picks = [...new Set([0, 25, 50, 75, 100, 125, 150, 175, seqs.length - 1].map((j) => Math.min(j, seqs.length - 1)))];
    const details = document.createElement("details");
    details.className = "calc-data";
    details.innerHTML = "<summary>The chart's data (sample points)</summary>";
    const table = document.createElement("table");
    const head = table.createTHead().insertRow();
    for (const label of ["Sequence", ...ids]) {
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
      for (const id of ids) tr.insertCell().textContent = `${formatGB(peaks[id][j])} GB`;
    }
    details.appendChild(table);
    container.append(legend, details);
  }

  // The animation: memory by category over the step's events, a cursor on the current event.
  function drawWalk(container, step, capacity) {
    const events = step.events;
    const maxGB = Math.max(capacity, ...events.map((e) => e.total)) / GB * 1.08;
    const frame = chartFrame(container, "Memory over one training step",
      `${events.length} events of the step for ${step.config.recipe} precision with ${step.config.recompute} ` +
      `recomputation; the peak, ${formatGB(step.peak)} GB, is reached at event ${step.peak_index + 1}: ${step.peak_event}.`);
    frame.root.dataset.events = events.length;
    frame.root.dataset.peakIndex = step.peak_index;
    frame.root.dataset.peak = step.peak;
    const y = yAxis(frame, maxGB, "GB on one device");
    const w = frame.plotW / events.length;
    const x = (i) => frame.margin.left + i * w;
    const base = new Array(events.length).fill(0);
    for (const cat of CATEGORIES) {
      const top = events.map((e, i) => base[i] + e.totals[cat] / GB);
      let d = "";
      events.forEach((_, i) => { d += `${i ? "L" : "M"}${x(i).toFixed(2)},${y(top[i]).toFixed(2)}H${x(i + 1).toFixed(2)}`; });
      for (let i = events.length - 1; i >= 0; i--) d += `L${x(i + 1).toFixed(2)},${y(base[i]).toFixed(2)}H${x(i).toFixed(2)}`;
      svg("path", { d: `${d}Z`, class: `calc-fill-${cat}`, "data-category": cat }, frame.root);
      top.forEach((v, i) => { base[i] = v; });
    }
    const peakX = x(step.peak_index) + w / 2;
    const peak = svg("g", { class: "calc-peak-marker" }, frame.root);
    svg("line", { x1: peakX, x2: peakX, y1: frame.margin.top, y2: frame.margin.top + frame.plotH, class: "calc-peak" }, peak);
    text(peak, peakX - 4, frame.margin.top + 10, `peak ${formatGB(step.peak)} GB`, { "text-anchor": "end", class: "calc-peak-label" });
    capacityLine(frame, y, capacity);
    const axis = svg("g", { class: "calc-axis" }, frame.root);
    text(axis, frame.margin.left + frame.plotW / 2, frame.height - 6, "events of one training step", { "text-anchor": "middle" });
    const phases = [];
    events.forEach((e, i) => { if (!i || e.phase !== events[i - 1].phase) phases.push([e.phase, i]); });
    let free = 0;  // label a phase where it starts, unless the previous label is in the way
    for (const [phase, i] of phases) {
      if (x(i) < free) continue;
      text(axis, x(i) + 2, frame.margin.top + frame.plotH + 16, phase, { class: "calc-phase" });
      svg("line", { x1: x(i), x2: x(i), y1: frame.margin.top + frame.plotH, y2: frame.margin.top + frame.plotH + 6, class: "calc-tick" }, axis);
      free = x(i) + 8 * phase.length;
    }
    const cursor = svg("rect", { y: frame.margin.top, height: frame.plotH, width: Math.max(w, 2), class: "calc-cursor-band" }, frame.root);
    return (i) => cursor.setAttribute("x", x(i) + w / 2 - Math.max(w, 2) / 2);
  }

  // ---------------------------------------------------------------- the planner's table

  const planLabel = (row) => `Load the layout with ${row.devices} devices: dp ${row.dp}, tp ${row.tp}, ` +
    `pp ${row.pp}, ZeRO ${row.zero}, ${row.recompute} recomputation, micro-batch ${row.micro_batch}, ` +
    `${row.grad_accum} micro-batches per step`;
  // Python's "{:.1%}" (display only; the row's data attributes keep the exact value).

  function drawPlan(body, plan, maxDevices) {
    const rows = plan.map((row) => {
      const tr = document.createElement("tr");
      tr.dataset.planRow = "";
      Object.assign(tr.dataset, {
        devices: row.devices, dp: row.dp, tp: row.tp, pp: row.pp, zero: row.zero,
        recompute: row.recompute, microBatch: row.micro_batch, gradAccum: row.grad_accum, peak: row.peak, extraCompute: row.extra_compute,
      });
      for (const value of [row.devices, row.dp, row.tp, row.pp, row.zero, row.recompute, row.micro_batch,
        formatInt(row.grad_accum), `${row.display.peak} GB`, row.display.extra_compute]) tr.insertCell().textContent = value;
      const button = document.createElement("button");
      button.type = "button";
      button.className = "md-button";
      button.dataset.planUse = "";
      button.textContent = "Load";
      button.setAttribute("aria-label", planLabel(row));
      tr.insertCell().appendChild(button);
      return tr;
    });
    if (!rows.length) {
      const tr = document.createElement("tr");
      tr.dataset.planNone = "";
      const td = tr.insertCell();
      td.colSpan = 11;
      td.textContent = `No layout up to ${formatInt(maxDevices)} devices fits.`;
      rows.push(tr);
    }
    body.replaceChildren(...rows);
  }

  // ---------------------------------------------------------------- one calculator

  function mount(root) {
    if (root.dataset.mounted) return;
    root.dataset.mounted = "true";
    const config = JSON.parse(root.querySelector("[data-calc-config]").textContent);
    CATEGORIES = config.categories;
    CATEGORY_LABELS = config.categoryLabels;
    const form = root.querySelector("[data-calc-form]");
    const status = root.querySelector("[data-calc-status]");
    const notice = root.querySelector("[data-calc-notice]");
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
    let busy = false;       // a request is with the worker
    let again = false;      // the form changed while it was
    let fromLink = false;   // the inputs came from the URL and are not yet checked by calc
    const planner = {
      root: root.querySelector("[data-planner]"),
      body: root.querySelector("[data-plan-body]"),
      status: root.querySelector("[data-plan-status]"),
      caption: root.querySelector("[data-plan-caption]"),
      timer: null,
      shown: null,    // the question the table answers (inputs without the layout's own fields)
      asking: null,   // the question with the worker
    };

    // -- form <-> values
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
    function fillPreset(name) {
      const preset = config.presets[name];
      for (const key of SHAPE_FIELDS) setField(key, preset[key]);
    }
    function fillDefaults() {
      for (const [key, value] of Object.entries(config.defaults)) setField(key, value);
      fillPreset(config.defaults.preset);
    }
    // The inputs for calc: the preset, shape fields that differ from it, the run's fields.
    function inputs() {
      const preset = valueOf("preset");
      const out = { preset };
      for (const key of SHAPE_FIELDS) {
        if (valueOf(key) !== String(config.presets[preset]?.[key])) out[key] = valueOf(key);
      }
      for (const key of RUN_FIELDS) if (valueOf(key) !== "") out[key] = valueOf(key);
      return out;
    }

    // The planner's question: the inputs less the layout it chooses itself.
    function planQuestion() {
      const out = inputs();
      for (const key of LAYOUT_FIELDS) delete out[key];
      return out;
    }

    // -- the URL holds every value that differs from the defaults
    function writeUrl() {
      const params = new URLSearchParams();
      const given = inputs();
      for (const [key, value] of Object.entries(given)) {
        if (key in config.defaults ? value !== config.defaults[key] : true) params.set(key, value);
      }
      const query = params.toString();
      history.replaceState(history.state, "", `${location.pathname}${query ? `?${query}` : ""}${location.hash}`);
    }
    function readUrl() {
      const params = new URLSearchParams(location.search);
      const keys = [...params.keys()];
      if (!keys.length) return true;
      const bad = keys.find((k, i) => !URL_FIELDS.includes(k) || keys.indexOf(k) !== i);
      const preset = params.get("preset") ?? config.defaults.preset;
      if (bad || !(preset in config.presets)) {
        return `“${bad ?? "preset"}” is not a setting this calculator knows`;
      }
      fillPreset(preset);
      if (params.has("preset") && !params.has("seq")) setField("seq", "");  // the preset's own default (calc decides)
      for (const [key, value] of params) setField(key, value);
      fromLink = true;
      return true;
    }
    function linkRejected(reason) {
      fillDefaults();
      fromLink = false;
      notice.textContent = `This link's settings could not be used (${reason}); the calculator shows the defaults instead.`;
      delete notice.dataset.kind;
      notice.hidden = false;
      history.replaceState(history.state, "", `${location.pathname}${location.hash}`);
    }

    // -- errors shown beside the field they name
    function clearErrors() {
      for (const el of root.querySelectorAll("[data-error-for]")) el.textContent = "";
      for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
    }
    function showError(name, message) {
      const slot = root.querySelector(`[data-error-for="${CSS.escape(name ?? "")}"]`);
      const label = slot && form.querySelector(`label[for="calc-${CSS.escape(name)}"]`);
      if (!slot) {
        notice.textContent = `The calculator could not use these inputs: ${message}`;
        notice.dataset.kind = "input";  // hidden again by the next good answer (a link's notice stays)
        notice.hidden = false;
        return;
      }
      slot.textContent = `${label ? label.textContent : name}: ${message}`;
      field(name)?.setAttribute("aria-invalid", "true");
    }

    // -- drawing
    function setStatus(message) { status.textContent = message; }
    function render(source) {
      const step = answer.step;
      const selected = `${step.config.recipe}-${step.config.recompute}`;
      for (const row of answer.table) {
        const tr = root.querySelector(`tr[data-recipe="${row.id}"]`);
        for (const part of [...CATEGORIES, "peak"]) {
          const cell = tr.querySelector(`[data-part="${part}"]`);
          const bytes = part === "peak" ? row.peak : row.bytes[part];
          cell.dataset.bytes = bytes;
          (cell.querySelector("strong") ?? cell).textContent = `${row.display[part].gb} GB`;
        }
        tr.classList.toggle("calc-row--selected", row.id === selected);
      }
      const shape = step.config.shape;
      root.querySelector('[data-out="caption"]').textContent =
        `Bytes on one device: ${shape.name}, sequence ${formatInt(step.config.seq)}, micro-batch ${step.config.micro_batch}.`;
      const peakOut = root.querySelector('[data-out="peak"]');
      peakOut.textContent = `${formatGB(step.peak)} GB`;
      peakOut.dataset.bytes = step.peak;
      const summary = root.querySelector("[data-calc-summary]");
      const recompute = step.config.recompute === "none" ? "no" : step.config.recompute;
      const device = `one ${capacityText(answer.capacity)} device`;
      const fits = answer.fits ? `fits on ${device}` : `does not fit on ${device}`;
      summary.innerHTML = "";
      summary.append(`With ${config.recipeLabels[step.config.recipe]} and ${recompute} recomputation the peak is `,
        peakOut, ", reached at “");
      const event = document.createElement("span");
      event.dataset.out = "peak-event";
      event.textContent = step.peak_event;
      summary.append(event, `”: it ${fits}.`);
      drawBreakdown(charts.breakdown, answer, selected);
      drawSweep(charts.sweep, answer);
      anim.moveCursor = drawWalk(charts.walk, step, answer.capacity);
      if (!anim.timer) showEvent(step.peak_index);
      else showEvent(Math.min(anim.index, step.events.length - 1));
      root.dataset.source = source;
      performance.mark("calc:drawn");
      root.dispatchEvent(new CustomEvent("calc:drawn", { detail: { source } }));
    }

    // -- the animation's controls
    function showEvent(i) {
      const events = answer.step.events;
      anim.index = Math.max(0, Math.min(i, events.length - 1));
      const e = events[anim.index];
      const sign = e.bytes > 0 ? "+" : e.bytes < 0 ? "−" : "±";
      const change = `${sign}${formatGB(Math.abs(e.bytes))} GB ${CATEGORY_LABELS[e.category]}`;
      const isPeak = anim.index === answer.step.peak_index;
      const description = `Event ${anim.index + 1} of ${events.length}${isPeak ? " (the peak)" : ""}, ${e.phase}: ` +
        `${e.label}; ${change}; total ${formatGB(e.total)} GB.`;
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

    // -- the planner: asked separately, once the chart is drawn and the reader pauses
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
      if (busy || planner.asking) { planner.timer = setTimeout(askPlan, PLAN_DELAY_MS); return; }
      const question = planQuestion();
      const key = JSON.stringify(question);
      planner.asking = key;
      planState("pending", "Planning…");
      const start = performance.now();
      let result;
      try {
        result = await call({ inputs: inputs(), sweep: false, plan: true });
      } catch (error) {
        result = { ok: false, field: null, message: error.message };
      }
      planner.asking = null;
      if (key !== JSON.stringify(planQuestion())) return;  // the form moved on; a newer plan is scheduled
      if (!result.ok) {
        planState("error", `The planner needs valid inputs (${result.message}).`);
        return;
      }
      const plan = result.plan;
      const run = result.step.config;
      drawPlan(planner.body, plan, Number(planner.root.dataset.maxDevices));
      planner.caption.textContent = `Layouts for ${run.shape.name}, sequence ${formatInt(run.seq)}, ` +
        `global batch ${formatInt(result.global_batch)}, on ${capacityText(result.capacity)} devices.`;
      planner.shown = key;
      const ms = performance.now() - start;
      planner.readyMessage = `${plan.length} layout${plan.length === 1 ? "" : "s"} fit (computed in your browser ` +
        `in ${Math.round(ms)} ms).`;
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

    // -- asking calc
    async function update() {
      if (!call) return;
      if (busy) { again = true; return; }
      busy = true;
      let result;
      try {
        result = await call({ inputs: inputs(), sweep: true });
      } catch (error) {
        result = { ok: false, field: null, message: error.message };
      }
      busy = false;
      if (again) { again = false; update(); return; }  // the form moved on: answer the latest
      if (result.ok) {
        answer = result;
        fromLink = false;
        clearErrors();
        if (notice.dataset.kind === "input") { notice.hidden = true; delete notice.dataset.kind; }
        if (valueOf("seq") === "") setField("seq", answer.step.config.seq);
        writeUrl();
        render("live");
        schedulePlan();
      } else if (fromLink) {
        linkRejected(`${result.field ?? "input"}: ${result.message}`);
        update();
        return;
      } else {
        clearErrors();
        showError(result.field, result.message);
        clearTimeout(planner.timer);
        planState("error", "The planner waits for valid inputs (see the message beside the field).");
      }
      if (root.dataset.state !== "ready") {
        root.dataset.state = "ready";
        performance.mark("calc:live");
        setStatus("Live: computed in your browser by calc, running in Pyodide.");
      }
    }

    function onInput(event) {
      const name = event.target.name;
      if (!name || name === "event") return;
      clearTimeout(planner.timer);  // a plan waits until the reader pauses
      if (name === "preset") {
        fillPreset(event.target.value);
        setField("seq", "");  // each preset's own default sequence (calc decides), filled in from the answer
      }
      update();
    }
    form.addEventListener("input", onInput);
    form.addEventListener("submit", (event) => event.preventDefault());
    for (const button of root.querySelectorAll("[data-capacity-preset]")) {
      button.addEventListener("click", () => {
        setField("capacity-gb", button.dataset.capacityPreset);
        field("capacity-gb").dispatchEvent(new Event("input", { bubbles: true }));
      });
    }

    // -- start: the link's settings (or the defaults), the build-time answer, then the worker
    planner.shown = JSON.stringify(planQuestion());  // the build-time table answers the defaults
    planner.readyMessage = planner.status.textContent;
    const link = readUrl();
    if (link !== true) linkRejected(link);
    for (const fieldset of form.querySelectorAll("fieldset")) fieldset.disabled = false;
    render("build");
    if (JSON.stringify(planQuestion()) !== planner.shown) planState("pending", "The layouts below are for the default settings; planning for this link's once the live calculator starts…");
    markLoadedLayout();
    const builtFor = fromLink ? " They are for the default settings, not yet for this link's." : "";
    setStatus(`Showing the numbers computed when this site was built.${builtFor} Starting the live calculator…`);
    startWorker(root).then(
      (entry) => {
        call = entry;
        for (const button of planner.body.querySelectorAll("[data-plan-use]")) button.disabled = false;
        return update();
      },
      (error) => {
        root.dataset.state = "failed";
        setStatus(`The live calculator could not start (${error.message}); the numbers shown were computed when this site was built.`);
      },
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
