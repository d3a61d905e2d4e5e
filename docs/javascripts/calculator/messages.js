// What the calculator says beside its fields: calc's errors (named by the form's labels), the hints of empty
// fields, the status line and the loading bar.
import { capacityText, formatInt, receivedText, withLabels } from "./format.js";
import { HF_CONFIG } from "./values.js";

// The note beside the sequence when a new model (another preset, or "Clear, back to the presets") refused the
// sequence the reader typed: what the page reset (the sequence alone, to the model's own; the reader's shape
// fields went with the old model, the run's fields, a loop preset's included, stay) and calc's reason. Pure
// (tests/js/messages.test.mjs).
export const seqResetNote = (typed, reason) =>
  `Reset to the new model's own sequence length, the one field the page reset (the run's other fields, a loop ` +
  `preset's included, stay): calc refused ${typed} for it (${reason}).`;

// The CLI's modes as the page calls them: its table, its planner and its fit list (hooks/calculator.html).
const MODE_WORDS = { table: "the table", plan: "the planner", "fit-card": "“What fits on one card”" };
// calc's message in the page's words: its modes' flags (--plan, --fit-card) by the page's names for them, its
// fields' flags by the form's labels (withLabels). Pure (tests/js/messages.test.mjs).
export const pageWords = (message, labelOf, isField) =>
  withLabels(String(message).replace(/--(table|plan|fit-card)\b(?!-)/g, (_, mode) => MODE_WORDS[mode]), labelOf,
    isField);

export function createMessages(root, config, f) {
  const status = root.querySelector("[data-calc-status]");
  const notice = root.querySelector("[data-calc-notice]");
  const progress = {
    root: root.querySelector("[data-calc-progress]"),
    bar: root.querySelector("[data-calc-progress] progress"),
    label: root.querySelector("[data-progress-label]"),
    step: "",
  };
  const notes = new Map();  // field -> what the page did to it (seqResetNote: a sequence reset for a new model)
  const labelOf = (name) => f.labelOf(name);

  function clearErrors() {
    for (const el of root.querySelectorAll("[data-error-for]")) el.textContent = "";
    for (const el of f.form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  }
  // calc's message beside the field it names, in the form's words. A config.json's own value that calc
  // refuses (a shape field the reader did not set) belongs to the config box, not to the field showing it.
  function showError(name, message) {
    const inConfig = f.hfMode() && f.isShape(name) && !f.state.overrides.has(name);
    const at = inConfig ? HF_CONFIG : name;
    const said = f.words(message);
    const slot = root.querySelector(`[data-error-for="${CSS.escape(at ?? "")}"]`);
    if (!slot) {
      notice.textContent = `The calculator could not use these inputs: ${name && labelOf(name) ? `${labelOf(name)}: ` : ""}${said}`;
      notice.dataset.kind = "input";  // hidden again by the next good answer (a link's notice stays)
      notice.hidden = false;
      return;
    }
    slot.textContent = `${labelOf(at) ?? at}: ${inConfig ? `${labelOf(name) ?? name}: ` : ""}${said}`;
    f.field(at)?.setAttribute("aria-invalid", "true");
  }
  function clearInputNotice() {
    if (notice.dataset.kind === "input") { notice.hidden = true; delete notice.dataset.kind; }
  }
  // An empty field is not silent: it says which value calc used in its place.
  function emptyValue(name, answer) {
    if (f.isShape(name) && f.hfMode()) return "the config's value";
    if (f.isShape(name)) return `the preset's ${formatInt(f.presets.get(f.valueOf("preset"))[name])}`;
    if (name === "seq") return `the model's default, ${formatInt(answer.step.config.seq)}`;
    if (name === "capacity-gb") return `the default, ${capacityText(answer.capacity)}`;  // calc's own bytes
    return `the default, ${config.defaults[name]}`;
  }
  function showHints(answer) {
    for (const slot of root.querySelectorAll("[data-hint-for]")) {
      const name = slot.dataset.hintFor;
      const empty = f.valueOf(name) === "" && name !== "grad-accum" ? `Empty: uses ${emptyValue(name, answer)}.` : "";
      slot.textContent = notes.get(name) ?? empty;
    }
  }
  const setStatus = (message) => { status.textContent = message; };
  // The worker's {progress: {done, total, label}} (its steps, also sent on as calc:progress) and
  // {download: {received}} (the bytes so far, for a slow link).
  function showProgress(data) {
    if (data.download) {
      progress.label.textContent = `${progress.step || "Downloading"}: ${receivedText(data.download.received)}`;
      return;
    }
    const { done, total, label } = data.progress;
    root.dispatchEvent(new CustomEvent("calc:progress", { detail: { done, total, label } }));  // for tests
    if (!(Number(total) > 0)) return;
    const part = Math.min(Number(done), Number(total));
    progress.bar.max = Number(total);
    progress.bar.value = part;
    progress.step = label ?? "";
    const amount = total > 100000  // a total of bytes, or of steps
      ? `${(part / 1e6).toFixed(1)} of ${(total / 1e6).toFixed(1)} MB`
      : `${formatInt(part)} of ${formatInt(total)}`;
    progress.label.textContent = `${label ? `${label}: ` : ""}${amount}`;
  }
  return {
    notice, progress, notes, clearErrors, showError, clearInputNotice, showHints, setStatus, showProgress,
  };
}
