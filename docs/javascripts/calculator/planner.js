// The planner and "What fits on one card": asked of the page's one worker (as its least urgent kind of
// question, so a reader's change always goes first) once the reader pauses; Load puts a row in the form.
import { capacityText, formatInt } from "./format.js";
import { drawFit, drawPlan, rove, roveWithArrows } from "./tables.js";
import { loadFields, planQuestion } from "./values.js";

// A plan is asked once the reader pauses, after the chart is drawn: typing is never made to wait for one.
const PLAN_DELAY_MS = 250;
const datasetKey = (name) => name.replace(/-(.)/g, (_, c) => c.toUpperCase());  // "micro-batch" -> "microBatch"
// How many layouts a table lists, said as the live planner and the build-time table both say it: the list stops
// at `limit`, and a full one is the first that fit, not all.
const countedLayouts = (n, limit) => n >= limit ? `The first ${n} layouts that fit` : `${n} layout${n === 1 ? "" : "s"} fit`;

export function createPlanner(root, config, f, { ask, update }) {
  const layout = config.fields.layout;
  const fitFields = config.fields.fit;  // {field: the fit row's key}
  // The planner's question's fields a row gives its own value of (sequence parallelism is off in a row of tp 1), and
  // of those the ones a fit row, on one card, sets to their defaults: a Load leaves none the row's step refuses.
  const rowAlso = config.fields.row_also, fitResets = config.fields.fit_resets;
  const rowNames = [...new Set([...layout, ...Object.keys(fitFields)])];
  const planner = {
    root: root.querySelector("[data-planner]"),
    body: root.querySelector("[data-plan-body]"),
    status: root.querySelector("[data-plan-status]"),
    caption: root.querySelector("[data-plan-caption]"),
    loadNote: root.querySelector("[data-plan-load-note]"),
    timer: null,
    shown: null,        // the question the table answers (inputs without the layout's own fields)
    readyMessage: null,
  };
  const fitView = {
    body: root.querySelector("[data-fit-body]"),
    status: root.querySelector("[data-fit-status]"),
    caption: root.querySelector("[data-fit-caption]"),
  };
  let live = false;  // the Load buttons work once the worker is ready
  const question = () => JSON.stringify(planQuestion(f.inputs(), layout));

  function state(name, message) {
    planner.root.dataset.planState = name;
    if (message) planner.status.textContent = message;
  }
  function markLoaded() {
    for (const tr of planner.body.querySelectorAll("tr[data-plan-row]")) {
      const loaded = layout.every((name) => f.valueOf(name) === tr.dataset[datasetKey(name)]);
      tr.classList.toggle("calc-row--selected", loaded);
    }
  }
  function setLoadButtons() {
    rove(fitView.body, "[data-fit-use]");
    rove(planner.body, "[data-plan-use]");
    const current = question() === planner.shown;  // rows for other settings would overwrite the reader's
    for (const button of fitView.body.querySelectorAll("[data-fit-use]")) button.disabled = !live || !current;
    for (const button of planner.body.querySelectorAll("[data-plan-use]")) {
      button.disabled = !live || !current;
      if (!live) button.setAttribute("aria-describedby", "calc-plan-load-note");
      else button.removeAttribute("aria-describedby");
    }
    planner.loadNote.hidden = live;
  }
  function schedule() {
    clearTimeout(planner.timer);
    markLoaded();
    if (question() === planner.shown) {  // back to the rows on show: their status again, whatever was said since
      setLoadButtons();
      if (planner.root.dataset.planState !== "ready") state("ready", planner.readyMessage);
      return;
    }
    setLoadButtons();
    state("pending", "Waiting to plan for the inputs above…");
    planner.timer = setTimeout(askPlan, PLAN_DELAY_MS);
  }
  function draw(result, ms) {
    const plan = result.plan;
    const run = result.config;  // the run the rows are for (calc.web.plan_only)
    // Inputs the CLI's --plan refuses (another walk, optimizer or fine-tuning): calc's reason, and no rows.
    const refused = result.plan_refused;
    const reason = refused && `No layouts: ${f.labelOf(refused.field) ?? refused.field}: ${f.words(refused.message)}.`;
    if (refused) drawPlan(planner.body, [], 0, reason);
    else drawPlan(planner.body, plan, Number(planner.root.dataset.maxDevices));
    // Inputs the CLI's --fit-card refuses (a mixture of experts; another walk than the deck's, whose peaks its
    // rows are): calc's reason, naming its field as the planner does, the list not computed.
    const fitRefused = result.fit_refused;
    const fitField = fitRefused && fitRefused.field !== "fit-card" ? `${f.labelOf(fitRefused.field) ?? fitRefused.field}: ` : "";
    const fitReason = fitRefused && `Not computed: ${fitField}${f.words(fitRefused.message)}.`;
    drawFit(fitView.body, result.fit, fitReason || "Nothing fits one card.", live);
    fitView.caption.textContent = `Fine-tunings of ${run.shape.name}, sequence ${formatInt(run.seq)}, ` +
      `on one ${capacityText(result.capacity)} device.`;
    // With no row the table's one cell says so (its reason, or that nothing fits): the status does not say it again.
    const fits = result.fit.length;
    fitView.status.textContent = fitReason ||
      (fits ? `${fits} fine-tuning${fits === 1 ? "" : "s"} fit (computed in your browser).` : "Computed in your browser.");
    setLoadButtons();
    planner.caption.textContent = `Layouts for ${run.shape.name}, sequence ${formatInt(run.seq)}, ` +
      `global batch ${formatInt(result.global_batch)}, on ${capacityText(result.capacity)} devices.`;
    const counted = countedLayouts(plan.length, config.planLimit);
    const took = `in your browser in ${formatInt(Math.round(ms))} ms`;  // with no row its one cell says so, once
    planner.readyMessage = refused ? reason : plan.length ? `${counted} (computed ${took}).` : `Computed ${took}.`;
    planner.root.dataset.planSource = "live";
    markLoaded();
    state("ready", planner.readyMessage);
  }
  async function askPlan() {
    const key = question();
    state("pending", "Planning…");
    planner.root.dataset.planBusy = "true";
    const start = performance.now();
    // numbers: false: the rows alone, not the step the change before drew already (calc.web.plan_only)
    const result = await ask("plan", { inputs: f.inputs(), sweep: false, plan: true, fit: true, numbers: false });
    delete planner.root.dataset.planBusy;
    if (result.superseded || key !== question()) return;  // the form moved on; a newer plan is scheduled
    if (!result.ok) {
      state("error", `The planner needs valid inputs (${f.words(result.message)}).`);
      return;
    }
    planner.shown = key;
    const ms = performance.now() - start;
    draw(result, ms);
    performance.mark("calc:planned");
    root.dispatchEvent(new CustomEvent("calc:planned", { detail: { rows: result.plan.length, ms } }));
  }
  // A row into the form: every field either kind of row sets, at its default unless this row gives it.
  function load(values) {
    for (const [name, value] of Object.entries(loadFields(values, rowNames, config.defaults))) f.setField(name, value);
    f.showApplicable();
    clearTimeout(planner.timer);
    update();
  }
  // The row's values by field name, from its data attributes (named after calc's row keys, micro_batch -> microBatch).
  const fromRow = (tr, names) => Object.fromEntries(names.map(([name, key]) => [name, tr.dataset[datasetKey(key.replace(/_/g, "-"))]]));
  planner.body.addEventListener("click", (event) => {
    const button = event.target.closest("[data-plan-use]");
    if (button && !button.disabled && question() === planner.shown) {
      load(fromRow(button.closest("tr"), [...layout, ...rowAlso].map((n) => [n, n])));
    }
  });
  fitView.body.addEventListener("click", (event) => {
    const button = event.target.closest("[data-fit-use]");
    if (!button || button.disabled || question() !== planner.shown) return;
    const values = fromRow(button.closest("tr"), Object.entries(fitFields));
    // A row's field that is empty (Python's None) or does not apply to its own fine-tuning (a full row's rank 0
    // and no targets) is not the row's to set: it goes back to its default, so LoRA chosen later starts there.
    for (const [name, value] of Object.entries(values)) {
      if ([undefined, "", "null", "None"].includes(value) || !f.applies(name, values.finetune)) delete values[name];
    }
    for (const name of fitResets) values[name] = config.defaults[name];
    load(values);
  });
  // Before the worker is ready the rows stay the build-time ones: a question that differs says it waits for the
  // live planner (an edit made meanwhile, or a link's settings), and the same question again says what the rows are.
  function waitForLive(whose) {
    if (live) return;
    if (question() !== planner.shown) {
      state("pending", `The layouts below are for the default settings; planning for ${whose} once the live calculator starts…`);
    } else if (planner.root.dataset.planState !== "ready") state("ready", planner.readyMessage);
  }
  // Once the form has followed: rows for the settings before the edit cannot be loaded until they are current.
  f.form.addEventListener("input", () => queueMicrotask(() => { setLoadButtons(); waitForLive("yours"); }));
  roveWithArrows(planner.body, "[data-plan-use]");
  roveWithArrows(fitView.body, "[data-fit-use]");

  planner.shown = question();  // the build-time table answers the defaults
  const built = planner.body.querySelectorAll("tr[data-plan-row]").length;
  planner.readyMessage = `${countedLayouts(built, config.planLimit)} (computed when this site was built).`;
  planner.status.textContent = planner.readyMessage;
  return {
    schedule, markLoaded, setLoadButtons, state,
    cancel() { clearTimeout(planner.timer); },
    goLive(isLive) { live = isLive; setLoadButtons(); },
    failed() {
      planner.loadNote.textContent = "The Load buttons need the live calculator, which could not start.";
      live = false;
      setLoadButtons();
      if (question() === planner.shown) state("ready", planner.readyMessage);  // the fields are the defaults again
    },
    // The link's question differs from the build-time table's: it says the table waits for the live answer.
    waitForLink() { waitForLive("this link's"); },
  };
}
