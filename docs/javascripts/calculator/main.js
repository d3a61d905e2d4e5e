// The live calculator's glue. The form's values go, as strings named like the CLI's flags, to calc.web.handle
// running in Pyodide in the page's one Web Worker (worker.js, calc-worker.mjs); its JSON answer is drawn by
// view.js. No memory formula lives here. Until the worker is ready the page shows the build-time answer
// (embedded by hooks/placeholders.py, with the field names calc knows: hooks/deck.py's page_fields).
import { createConfigBox } from "./config-box.js";
import { createForm } from "./form.js";
import { createLink } from "./link.js";
import { createMessages, seqResetNote } from "./messages.js";
import { createPlanner } from "./planner.js";
import { createTrainerBox } from "./trainer-box.js";
import { HF_CONFIG } from "./values.js";
import { createView } from "./view.js";
import { cannotStart, connect } from "./worker.js";

let client = null;  // the page's one worker, shared by everything that asks calc
let restarts = 0;
let restartNote = "";  // said in the status line once Python had to be started again

function mount(root) {
  if (root.dataset.mounted) return;
  root.dataset.mounted = "true";
  const config = JSON.parse(root.querySelector("[data-calc-config]").textContent);
  const f = createForm(root, config);
  const msg = createMessages(root, config, f);
  const pendingNote = root.querySelector("[data-calc-pending]");
  let answer = config.initial;
  const view = createView(root, config, () => answer, f.labelOf, f.isField);
  let ask = null;   // the worker's ask(kind, request), once it is ready
  let asked = 0;    // the latest change's number: an answer to an older one is not drawn
  let seqKept = false;  // a typed sequence was kept for a new model (calc may refuse it for that model)
  let deliberate = false;  // the change being answered is a choice (a list's, a config, a Load), not typing:
  // its address gets a history entry of its own (link.write)
  const choose = () => { deliberate = true; };
  const planner = createPlanner(root, config, f,
    { ask: (kind, request) => ask(kind, request), update: () => { choose(); update(); } });
  const box = createConfigBox(root, config, f, msg);
  const link = createLink(root, config, f, msg.notice, box.take, () => update());
  // A trainer config's fields: an address of their own, read as a link is (restore), a history entry.
  createTrainerBox(root, config, f, {
    ask: (request) => (ask ? ask("trainer", request)
      : Promise.resolve({ ok: false, message: "the live calculator has not started yet: read it once it has" })),
    apply: (query) => {
      history.pushState(null, "", `${location.pathname}${query ? `?${query}` : ""}#${root.id}`);
      restore();
    },
  });

  // "calc:live": the worker's first answer drawn (the benchmark's time to live); "calc:ready": its sweep too.
  function markLive() {
    if (!performance.getEntriesByName("calc:live").length) performance.mark("calc:live");
  }
  // "calc:started" on the document: the live start is over (first answer and sweep drawn, or failed), and the
  // page's held scripts may load (site_overrides/main.html).
  const started = () => document.dispatchEvent(new CustomEvent("calc:started"));
  function becomeReady() {
    if (root.dataset.state === "ready") return;
    root.dataset.state = "ready";
    delete root.dataset.stale;
    pendingNote.hidden = true;
    msg.progress.root.hidden = true;
    markLive();
    performance.mark("calc:ready");
    msg.setStatus(`Live: computed in your browser by calc, running in Pyodide.${restartNote}`);
    started();
  }
  // The messages of the last answer cleared; a config the box refused meanwhile stays said (box.again).
  const clearErrors = () => { msg.clearErrors(); box.again(); };
  function refuse(result, given) {
    link.write(given, {}, deliberate);  // the address follows the form, the refused value with it
    deliberate = false;
    clearErrors();
    // A refused input leaves the last answer calc gave on show, dimmed, and says so.
    const kept = f.hfMode() && (result.field === HF_CONFIG || f.isShape(result.field))
      ? "; the numbers below are for the last model calc accepted" : "; the numbers shown are the last accepted";
    msg.showError(result.field, result.message + kept);
    if (result.plans) {  // a switch the step refuses and the planner reads for itself (calc.web.answer_steps)
      becomeReady();
      planner.schedule();
      root.dataset.stale = "true";
      return;
    }
    planner.cancel();
    planner.state("error", "The planner waits for valid inputs (see the message beside the field).");
    becomeReady();
    root.dataset.stale = "true";
  }
  // Two questions per change: first the table, the bars and the step, drawn at once ("calc:numbers"); then the
  // peak-versus-sequence sweep ("calc:drawn"). A newer change supersedes both (latest request wins).
  async function update() {
    if (!ask) return;
    const given = f.inputs();
    const ticket = ++asked;
    const numbers = ask("numbers", { inputs: given, sweep: false });
    const withSweep = ask("sweep", { inputs: given, sweep: true, numbers: false });
    const result = await numbers;
    if (result.superseded || ticket !== asked) return;
    performance.mark("calc:answered");
    // a switch the step refuses and the planner reads (result.plans) stays as the link gave it
    if (!result.ok && !result.plans && (link.refused(result) || link.dropped(result))) { update(); return; }
    f.state.fromLink.clear();
    if (!result.ok && result.field === "seq" && seqKept) {  // the typed sequence does not suit the new model
      msg.notes.set("seq", seqResetNote(f.valueOf("seq"), f.words(result.message)));
      seqKept = false;
      f.resetField("seq");
      update();
      return;
    }
    seqKept = false;
    if (!result.ok) { refuse(result, given); return; }
    delete root.dataset.stale;
    answer = { ...result, sweep: answer.sweep };  // the last sweep stays until the new one comes
    clearErrors();
    msg.clearInputNotice();
    // The model's own sequence is filled in, but never under the reader's cursor (unless the page reset it).
    const typing = document.activeElement === f.field("seq") && !msg.notes.has("seq");
    if (f.state.seqAuto && f.valueOf("seq") === "" && !typing) f.setField("seq", answer.step.config.seq);
    f.state.seqAuto = false;
    f.fillFromAnswer(answer.step.config.shape);  // the shape fields not set show what calc used
    f.showRead(answer.unread);
    if (f.state.extras.has("card")) f.setField("capacity-gb", answer.capacity / 1e9);  // the card's GB (10^9 B)
    if (f.hfMode()) f.hf.option.textContent = `your config.json — ${answer.params_label}`;
    msg.showHints(answer);
    view.sweepPending();
    view.renderNumbers(false);
    performance.mark("calc:numbers");
    markLive();
    root.dispatchEvent(new CustomEvent("calc:numbers"));
    // The address of the numbers on show: a choice's entry at once, typing once the reader pauses (address.js:
    // each write costs the browser some 10 ms of CPU, which a change at every keystroke paid beside its sweep).
    link.write(given, answer, deliberate);
    deliberate = false;
    const full = await withSweep;
    if (full.superseded || ticket !== asked) return;
    performance.mark("calc:swept");
    if (full.ok) {  // else the last sweep stays, marked pending
      answer = { ...answer, sweep: full.sweep };
      view.renderSweep();
    }
    view.finish("live");
    planner.schedule();
    becomeReady();
  }

  function onInput(event) {
    const name = event.target.name;
    if (!name || name === "event") return;
    planner.cancel();  // a plan waits until the reader pauses
    msg.notes.delete(name);
    // A choice from a list (a preset, Trains, the recipe...) or a config is a history entry; typing is not. The
    // arrow keys through a list choose at every step: the first step of such a run is the entry, the later
    // ones are typing, written into it once the reader pauses (issue 33: one entry, not one a preset passed).
    if (name === HF_CONFIG || (event.target.tagName === "SELECT" && !presetting && entryOf(event.target))) choose();
    if (name === "preset") {
      seqKept = f.state.seqTyped;
      f.choosePreset(event.target.value);  // "your config.json" again: its shape comes with the answer
    } else if (name === HF_CONFIG) {
      seqKept = f.state.seqTyped;
      if (!box.take(event.target.value)) return;  // refused with a message, never sent
    } else {
      if (name === "finetune") f.showApplicable();
      f.touched(name);
      link.showExtras();  // a capacity typed replaces the link's card
    }
    if (!ask) {  // not live yet: the change waits, and the page says so
      pendingNote.textContent = "Your changes will apply once the live calculator has started; until then the numbers below are for the default settings.";
      root.dataset.stale = "true";
      pendingNote.hidden = false;
      return;
    }
    update();
  }
  // A loop preset ("as Trainer runs it") sets the fields that loop defaults to (calc.loops.LOOP_PRESETS), each
  // as if the reader had chosen it; the preset itself is no field of calc's and is never sent.
  const loopPreset = root.querySelector("[data-loop-preset]");
  loopPreset?.addEventListener("input", (event) => {
    event.stopPropagation();
    if (entryOf(loopPreset)) choose();
    presetting = true;  // the fields it sets are its choice, not one each
    try {
      for (const [name, value] of Object.entries(config.loopPresets[loopPreset.value] || {})) {
        f.setField(name, value);
        f.field(name).dispatchEvent(new Event("input", { bubbles: true }));
      }
    } finally {
      presetting = false;
    }
  });
  // The last key pressed in a list, and the keyboard run of choices through one: a choice the keys make within
  // RUN_MS of the run's last one, in the same list, is a later step of it (typing); a pause, another list, the
  // focus leaving or a choice made otherwise starts afresh, a history entry of its own.
  const KEY_MS = 500, RUN_MS = 1000;
  let lastKey = { target: null, at: -Infinity }, keyRun = { target: null, at: -Infinity }, presetting = false;
  function entryOf(list) {
    const now = performance.now();
    const keyed = list === lastKey.target && now - lastKey.at < KEY_MS;
    const later = keyed && keyRun.target === list && now - keyRun.at < RUN_MS;
    keyRun = keyed ? { target: list, at: now } : { target: null, at: -Infinity };
    return !later;
  }
  root.addEventListener("keydown", (event) => {
    if (event.target.tagName === "SELECT") lastKey = { target: event.target, at: performance.now() };
  });
  root.addEventListener("focusout", () => { keyRun = { target: null, at: -Infinity }; });
  f.form.addEventListener("input", onInput);
  f.form.addEventListener("submit", (event) => event.preventDefault());
  for (const button of root.querySelectorAll("[data-capacity-preset]")) {
    button.addEventListener("click", () => {
      choose();
      f.setField("capacity-gb", button.dataset.capacityPreset);
      f.field("capacity-gb").dispatchEvent(new Event("input", { bubbles: true }));
    });
  }

  // Back or Forward between the page's own entries: the form is the address's again, read as a link is.
  function restore() {
    planner.cancel();
    msg.notes.clear();
    if (f.hf.text) f.leaveHf(config.defaults.preset);
    f.fillDefaults();
    link.reset();
    link.read();
    seqKept = false;
    deliberate = false;
    update();
  }
  window.addEventListener("popstate", () => { if (root.isConnected && ask && link.moved()) restore(); });

  function failed(error) {
    const lost = f.state.fromLink.size || link.problems.length ? " This link's settings cannot be shown without it." : "";
    root.dataset.state = "failed";
    delete root.dataset.stale;
    msg.progress.root.hidden = true;
    pendingNote.hidden = true;
    f.fillDefaults();  // the fields agree with the build-time numbers they sit beside
    for (const fieldset of f.form.querySelectorAll("fieldset")) fieldset.disabled = true;
    planner.failed();
    msg.setStatus(`The live calculator could not start: ${error.message}. The numbers shown were computed when ` +
      `this site was built, for the default settings, and the fields are disabled.${lost}`);
    started();
  }
  // Python stopped for good (a fatal error in Pyodide): the worker started a new runtime and the page says so.
  function restarted(message) {
    root.dataset.restarts = ++restarts;
    restartNote = ` Python in the page stopped (${String(message).slice(0, 120)}) and was started again; the ` +
      "last numbers calc gave stay until your next change.";
    msg.setStatus(`Live, after a restart.${restartNote}`);
  }

  // -- start: the link's settings (or the defaults), the build-time answer, then the worker
  f.fillPreset(f.valueOf("preset"));
  const defaultsKey = JSON.stringify(f.inputs());
  link.read();
  const fromLink = JSON.stringify(f.inputs()) !== defaultsKey;
  view.renderNumbers();
  view.finish("build");
  planner.waitForLink();
  planner.markLoaded();
  planner.setLoadButtons();
  const reason = cannotStart();
  if (reason) { failed(new Error(reason)); return; }
  for (const fieldset of f.form.querySelectorAll("fieldset")) fieldset.disabled = false;
  if (fromLink) {
    pendingNote.textContent = "This link's settings are in the fields; the numbers below follow them once the live calculator has started.";
    root.dataset.stale = "true";
    pendingNote.hidden = false;
  }
  msg.progress.root.hidden = false;
  msg.setStatus("Showing the numbers computed when this site was built, for the default settings. Starting the live calculator…");
  client ??= connect(new URL(root.dataset.worker, document.baseURI),
    { onProgress: msg.showProgress, onRestart: restarted, early: window.calcWorker });
  client.ready.then(
    (entry) => {
      ask = entry.ask;
      planner.goLive(true);
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
