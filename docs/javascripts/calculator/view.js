// Drawing calc's answer: the four-recipe table, the summary, the eager walk's line, the charts and the step.
// Sizes are calc's own strings (the answer's "display"), except where the answer has none (format.sizeText).
import { createAnimation } from "./animation.js";
import { drawBreakdown } from "./charts/breakdown.js";
import { drawSweep } from "./charts/sweep.js";
import { drawWalk } from "./charts/walk.js";
import { capacityText, formatInt, recipeText, recomputeText, tuningText, walkText, withLabels } from "./format.js";
import { forgetWidths, frameWidth, widthsKnownFor, withWidths } from "./svg.js";
import { tableCsv } from "./url.js";

// The eager walk's line around its `--walk eager` flag: [before, after], for the step's config and the eager
// figure (its attention and how it ran). With neither --attention nor --flash given the two walks keep their
// own defaults (calc.inputs.attention_fields): the deck's peak keeps the s x s scores, as eager attention does
// (config.attention "eager"), and the eager walk runs sdpa; the line then says the attentions differ (unless
// the peak above is the eager walk's own). hooks/calculator.html says the same for the page as built.
export function eagerLead(cfg, { attention, how }) {
  if (cfg.walk !== "eager" && attention !== cfg.attention) {
    return ["What PyTorch allocates for this step with sdpa attention, where the peak above keeps eager " +
      "attention's s x s scores (", `: transformers' code, ${how}): `];
  }
  return ["What PyTorch allocates for the same step (", `: transformers' code, ${attention} attention, ${how}): `];
}

// labelOf(name): the form's label for a field (calc's reasons name its flags; the page names its fields);
// isField(name): whether calc has that field (format.js: withLabels).
export function createView(root, config, answerOf, labelOf, isField) {
  const charts = Object.fromEntries([...root.querySelectorAll("[data-chart]")].map((c) => [c.dataset.chart, c]));
  const categories = config.categories;
  const anim = createAnimation(root, () => answerOf().step, config.categoryLabels);
  const out = (name) => root.querySelector(`[data-out="${name}"]`);
  // The numbers on show as files: the step as the CLI's --json prints it (the worker's answer is that object),
  // the recipes' table as CSV, each named for the model and the sequence.
  const save = (text, type, name) => {
    const link = Object.assign(document.createElement("a"), { download: name,
      href: URL.createObjectURL(new Blob([text], { type })) });
    link.click();
    setTimeout(() => URL.revokeObjectURL(link.href), 0);
  };
  const said = root.querySelector("[data-copy-said]");
  for (const button of root.querySelectorAll("[data-export]")) {
    button.addEventListener("click", () => {
      const answer = answerOf();
      said.textContent = "";
      if (button.dataset.export === "table" && answer.table_refused) {  // --offload: the CLI refuses --table
        said.textContent = `No file: ${answer.table_refused}.`;
        return;
      }
      const { shape, seq } = answer.step.config;
      const stem = `${String(shape.name).replace(/[^A-Za-z0-9._-]+/g, "-")}-seq${seq}`;
      if (button.dataset.export === "step") save(JSON.stringify(answer.step, null, 1), "application/json", `${stem}-step.json`);
      else save(tableCsv(answer.table, categories), "text/csv", `${stem}-table.csv`);
    });
  }
  // The table's row that is the step on show: the recipe's row when its peak is the step's (it is not when the
  // step fine-tunes, uses another optimizer or another walk: the table is the deck walk's four AdamW recipes).
  const selectedId = (answer) => {
    const step = answer.step;
    const id = `${step.config.recipe}-${step.config.recompute}`;
    return answer.table.some((row) => row.id === id && row.peak === step.peak) ? id : null;
  };

  // `sweep`: false while the new sweep is being computed (the last one stays, marked pending, until it comes).
  function drawCharts(sweep, follow) {
    const answer = answerOf();
    const step = answer.step;
    drawBreakdown(charts.breakdown, answer, selectedId(answer), categories);
    if (sweep && answer.sweep) drawSweep(charts.sweep, answer);
    const moveCursor = drawWalk(charts.walk, step, answer.capacity, categories, answer.peak_display.text);
    if (follow) anim.follow(step, moveCursor);
    else anim.setCursor(moveCursor);
  }
  function renderTable(answer) {
    const selected = selectedId(answer);
    for (const row of answer.table) {
      const tr = root.querySelector(`tr[data-recipe="${row.id}"]`);
      for (const part of [...categories, "peak"]) {
        const cell = tr.querySelector(`[data-part="${part}"]`);
        cell.dataset.bytes = part === "peak" ? row.peak : row.bytes[part];
        (cell.querySelector("strong") ?? cell).textContent = row.display[part].text;
      }
      tr.classList.toggle("calc-row--selected", row.id === selected);
    }
    const { shape, seq, micro_batch: b, finetune } = answer.step.config;
    out("caption").textContent = `Bytes on one device: ${shape.name}, sequence ${formatInt(seq)}, micro-batch ${b}.` +
      (answer.host_text ? " Offloaded: Adam's state and the master copy live in the host's memory, whose figure " +
        "for your step is in the summary above." : "") +
      (selected === null
        ? " None of these rows is your step: they are the deck walk's four recipes, training every parameter with " +
          `AdamW, for comparison with your ${finetune && finetune.mode !== "full" ? "fine-tuning" : "step"} above.` : "");
  }
  function renderSummary(answer) {
    const step = answer.step;
    const peakOut = out("peak");
    peakOut.textContent = answer.peak_display.text;
    peakOut.dataset.bytes = step.peak;
    const device = `one ${capacityText(answer.capacity)} device`;
    const gib = document.createElement("span");
    gib.dataset.out = "peak-gib";
    gib.textContent = `${answer.peak_display.gib} GiB`;
    const event = document.createElement("span");
    event.dataset.out = "peak-event";
    event.textContent = step.peak_event;
    const summary = root.querySelector("[data-calc-summary]");
    summary.replaceChildren(tuningText(step.config.finetune, config.optimizerLabels, step.config.shape?.tied),
      `With ${recipeText(config.recipeLabels[step.config.recipe], step.config, config.optimizerLabels)} and ` +
      `${recomputeText(step.config.recompute)}${walkText(step.config.walk, answer.engine_text)} the peak is `,
      peakOut, " (", gib, "), reached at “", event, `”: it ${answer.fits ? "fits" : "does not fit"} on ${device}.`);
    if (answer.host_text) {  // --offload: the host's figure beside the device's (calc.web.host_text)
      const host = document.createElement("span");
      host.dataset.out = "host";
      host.textContent = ` Offloaded, ${answer.host_text}.`;
      summary.append(host);
    }
    const trainable = out("trainable");
    trainable.textContent = formatInt(answer.trainable_params);
    trainable.dataset.count = answer.trainable_params;
    const params = out("params");
    params.textContent = formatInt(step.params);
    params.dataset.count = step.params;
  }
  // What PyTorch allocates for the same step (calc's eager walk), with the error measured on that code.
  function renderEager(answer) {
    const line = root.querySelector("[data-calc-eager]");
    const eager = answer.eager;
    line.replaceChildren();
    if (!eager.available) {
      const reason = document.createElement("span");
      reason.dataset.out = "eager-reason";
      reason.textContent = `What PyTorch allocates is not shown for this step: ${withLabels(eager.reason, labelOf, isField)}.`;
      line.append(reason);
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
    peak.textContent = eager.display.text;
    const event = document.createElement("span");
    event.dataset.out = "eager-event";
    event.textContent = eager.peak_event;
    const [before, after] = eagerLead(cfg, eager);
    line.append(before, code, after, peak, ", reached at “", event, "”.");
    // the first band of this kind of step whose steps ran its setting (hooks/deck.py's band_for)
    const kind = config.eagerBands[eager.band] || [];
    const band = kind.find((b) => b.settings === null || b.settings.includes(eager.setting));
    if (!band) {
      if (!kind.length) return;
      const none = document.createElement("span");
      none.dataset.out = "eager-unmeasured";
      none.textContent = " No measured step ran this recipe, optimizer and loop";
      line.append(none, " (measured ones: ");
      [...new Map(kind.map((b) => [b.section, b])).values()].forEach((b, i) => {
        const where = document.createElement("a");
        where.href = `${config.resultsUrl}#${b.anchor}`;
        where.textContent = `results §${b.section}`;
        line.append(...(i ? [", ", where] : [where]));
      });
      line.append(").");
      return;
    }
    const link = document.createElement("a");
    link.href = `${config.resultsUrl}#${band.anchor}`;
    const pct = (x) => `${(100 * x).toFixed(2)}%`;
    const said = document.createElement("span");
    said.dataset.out = "eager-band";
    said.dataset.low = band.low;
    said.dataset.high = band.high;
    const setting = band.setting ? `, ${band.setting}` : "";
    said.textContent = ` Measured against ${band.runs} real steps of this code (${band.models.join(", ")}${setting}), ` +
      `it predicted ${pct(band.low) === pct(band.high) ? pct(band.low) : `${pct(band.low)} to ${pct(band.high)}`} ` +
      "of the measured peak";
    link.textContent = `results §${band.section}`;
    line.append(said, " (", link, ").");
  }
  // The table, the summary, the bars and the step; the sweep chart too once the answer has it.
  function renderNumbers(sweep = true) {
    withWidths(Object.values(charts), () => {
      const answer = answerOf();
      renderTable(answer);
      renderSummary(answer);
      renderEager(answer);
      drawCharts(sweep, true);
    });
  }
  // The sweep that follows the numbers, drawn at the widths their redraw read.
  function renderSweep() {
    delete charts.sweep.dataset.pending;
    withWidths([charts.sweep], () => drawSweep(charts.sweep, answerOf()), widthsKnownFor(charts.sweep));
  }
  // Everything drawn, the sweep included: "calc:drawn" (the tests and the benchmark wait for it).
  function finish(source) {
    root.dataset.source = source;
    performance.mark("calc:drawn");
    root.dispatchEvent(new CustomEvent("calc:drawn", { detail: { source } }));
  }
  // The charts follow their containers' width (a phone turned, a window resized): the widths kept are
  // forgotten when a chart's container is not as wide as kept (read as the observer reports, the layout done),
  // and the charts redrawn when one's width is not the width it was drawn at.
  let resizeFrame = 0;
  const drawnAt = (chart) =>
    !chart.dataset.drawnWidth || frameWidth(chart.clientWidth) === Number(chart.dataset.drawnWidth);
  const resized = new ResizeObserver((entries) => {
    const kept = (chart) => widthsKnownFor(chart)?.get(chart);
    if (entries.some(({ target }) => kept(target) !== target.clientWidth)) forgetWidths();
    cancelAnimationFrame(resizeFrame);
    resizeFrame = requestAnimationFrame(() => {
      if (Object.values(charts).every(drawnAt)) return;
      // A sweep being computed is drawn, at these widths, when it comes.
      withWidths(Object.values(charts), () => drawCharts(!charts.sweep.dataset.pending, false));
    });
  });
  for (const chart of Object.values(charts)) resized.observe(chart);
  return {
    renderNumbers, renderSweep, finish,
    sweepPending() { charts.sweep.dataset.pending = "true"; },
  };
}
