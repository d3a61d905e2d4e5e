// The form: its fields by calc's names, the model it holds (a preset, or a config.json), and the inputs calc
// is sent. The field names come from calc (config.fields, written by hooks/deck.py), never from a list here.
import { pageWords } from "./messages.js";
import { HF_CONFIG, calcInputs } from "./values.js";

export function createForm(root, config) {
  const form = root.querySelector("[data-calc-form]");
  const fields = config.fields;
  const presets = new Map(Object.entries(config.presets));  // looked up as data, never as properties
  const field = (name) => form.elements.namedItem(name);
  const shapeNames = Object.keys(fields.shape);
  const isShape = (name) => Object.hasOwn(fields.shape, name);
  // Fields that apply only to some fine-tunings (lora-rank for lora and qlora...), from the HTML.
  const appliesTo = new Map();
  for (const box of root.querySelectorAll("[data-show-for]")) {
    for (const el of box.querySelectorAll("[name]")) appliesTo.set(el.name, box.dataset.showFor.split(" "));
  }
  const hf = {
    details: root.querySelector("[data-hf]"),
    option: root.querySelector("[data-hf-option]"),
    file: root.querySelector("[data-hf-file]"),
    status: root.querySelector("[data-hf-status]"),
    text: "",
    lastPreset: null,
    ownLabel: null,     // the list's entry for the config as calc read it, no field overridden (keepOwnLabel)
    labelIsOwn: false,  // the answer on show is the config's own: the label main.js writes for it is
  };
  // The list's "your config.json" is an entry only while a config is held (enterHf to forgetHf): a disabled,
  // hidden entry would still be one a screen reader counts, or a keyboard could land on, with nothing behind it.
  hf.option.remove();
  hf.option.disabled = false;
  hf.option.hidden = false;
  const state = {
    overrides: new Set(),  // shape fields the reader or the link set: sent to calc, kept in the link
    extras: new Map(),     // the link's fields with no control here (walk, experts...): sent and kept
    fromLink: new Set(),   // fields set from the link that calc has not yet accepted
    seqAuto: false,        // seq was emptied for the model's own default: filled in from calc's answer
    seqTyped: false,       // the reader (or the link) gave the sequence: kept across a change of model
  };

  // The form's label of a field, or null where the form has no control for it.
  const labelOf = (name) => form.querySelector(`label[for="calc-${CSS.escape(name)}"]`)?.textContent.trim() ?? null;
  const known = new Set(fields.all);
  const isField = (name) => known.has(name);  // one of calc's fields, with a control here or not (a link's)
  const words = (message) => pageWords(message, labelOf, isField);  // calc's message as the page says it
  function setField(name, value) {
    const el = field(name);
    if (!el) return;
    if (el.type === "checkbox") el.checked = value === true || value === "true";
    else el.value = String(value);
  }
  const valueOf = (name) => {
    const el = field(name);
    if (!el) return undefined;
    return el.type === "checkbox" ? String(el.checked) : el.value.trim();
  };
  const hfMode = () => valueOf("preset") === HF_CONFIG;
  // Whether a field applies to a fine-tuning (the form's, unless another is named: a fit row's own).
  const applies = (name, mode = valueOf("finetune")) => !appliesTo.has(name) || appliesTo.get(name).includes(mode);
  function showApplicable() {
    const mode = valueOf("finetune");
    for (const box of root.querySelectorAll("[data-show-for]")) box.hidden = !box.dataset.showFor.split(" ").includes(mode);
  }
  // The shape fields not set by the reader, as calc used them (a preset's values, or the answer's shape).
  function fillShape(values) {
    for (const name of shapeNames) {
      if (state.overrides.has(name) || !field(name)) continue;
      const value = values[name];
      if (value === undefined) continue;
      setField(name, value);
      if (field(name).type === "text") field(name).placeholder = String(value);
    }
  }
  const fillPreset = (name) => presets.has(name) && fillShape(presets.get(name));
  // The model's fields its numbers do not read (calc.fields.page_unread: the experts' width of a dense model,
  // the dense FFN's of a model all experts) are hidden, unless the reader set one: its message shows by it.
  function showRead(unread) {
    for (const name of shapeNames) {
      const box = field(name)?.closest(".calc-field");
      if (box) box.hidden = unread.includes(name) && !state.overrides.has(name);
    }
  }
  // main.js writes the list's entry for the config after each answer ("your config.json — 8.2B"), the size of
  // the model calc answered for; only an answer with no shape field overridden gives the config's own.
  function keepOwnLabel() {
    if (hf.labelIsOwn) hf.ownLabel = hf.option.textContent;
  }
  function fillFromAnswer(shape) {
    keepOwnLabel();  // the label written for the last answer
    hf.labelIsOwn = hfMode() && state.overrides.size === 0;
    fillShape(Object.fromEntries(shapeNames.map((n) => [n, shape[fields.shape[n]]])));
  }
  // The config box says whether its text is in use: a preset chosen while it holds one leaves it, not in use,
  // and closes it; the list's entry then reads the config's own model, what choosing it again gives (its
  // overrides went with the change of model).
  function showHfStatus() {
    const idle = hf.text !== "" && !hfMode();
    hf.status.hidden = !idle;
    hf.status.textContent = idle ? `Not in use: the numbers below are for the preset ${valueOf("preset")}. ` +
      "Choose “your config.json” under Preset to use this config again, or Clear." : "";
  }
  function configLeft() {
    keepOwnLabel();
    hf.labelIsOwn = false;
    if (!hf.text) return;
    hf.option.textContent = hf.ownLabel ?? "your config.json";
    hf.details.open = false;
  }
  // A new model (another preset, or "Clear, back to the presets"): the shape fields the reader or the link set
  // go; the run's fields (a loop preset's included) and a sequence the reader typed stay. Where calc refuses
  // that sequence for the new model, main.js resets it, and only it, to the model's own (messages.seqResetNote).
  function newModel() {
    state.overrides.clear();
    for (const name of shapeNames) state.extras.delete(name);
    if (state.seqTyped) return;
    setField("seq", "");
    state.seqAuto = true;
  }
  function fillDefaults() {
    for (const [key, value] of Object.entries(config.defaults)) setField(key, value);
    state.overrides.clear();
    state.extras.clear();
    fillPreset(config.defaults.preset);
    state.seqAuto = false;
    state.seqTyped = false;
    showApplicable();
  }
  // Into config.json mode with this text (calc answers for it on the next update).
  function enterHf(text) {
    if (!hfMode()) hf.lastPreset = valueOf("preset");
    if (text !== hf.text) {  // another config: the last one's size is not its own
      hf.ownLabel = null;
      hf.labelIsOwn = false;
      hf.option.textContent = "your config.json";
    }
    hf.text = text;
    if (!hf.option.isConnected) field("preset").prepend(hf.option);
    setField("preset", HF_CONFIG);
    if (field(HF_CONFIG).value !== text) field(HF_CONFIG).value = text;
    hf.details.open = true;
    newModel();
    showHfStatus();
  }
  // The config forgotten: its text, its list entry's label, the entry itself.
  function forgetHf() {
    hf.text = "";
    hf.ownLabel = null;
    hf.labelIsOwn = false;
    hf.option.remove();
    hf.option.textContent = "your config.json";
  }
  // Back to a preset: the config is forgotten.
  function leaveHf(preset = hf.lastPreset ?? config.defaults.preset) {
    forgetHf();
    field(HF_CONFIG).value = "";
    setField("preset", preset);
    newModel();
    fillPreset(preset);
    showHfStatus();
  }
  // The box emptied while a preset is in use: the config is forgotten, the preset and its fields stay.
  function dropHf() {
    forgetHf();
    showHfStatus();
  }
  function choosePreset(name) {
    newModel();
    fillPreset(name);
    if (name !== HF_CONFIG) configLeft();
    showHfStatus();
  }
  // One field back to its default: a shape field to the model's value, the sequence to the model's own.
  function resetField(name) {
    state.extras.delete(name);
    if (name === "preset") {
      setField("preset", config.defaults.preset);
      fillPreset(config.defaults.preset);
      configLeft();
      showHfStatus();
    } else if (name === "seq") {
      setField("seq", "");
      state.seqAuto = true;
      state.seqTyped = false;
    } else if (name === HF_CONFIG) {
      leaveHf(config.defaults.preset);
    } else if (isShape(name)) {
      state.overrides.delete(name);  // the model's value comes back with the next answer
      if (!hfMode()) fillPreset(valueOf("preset"));
    } else if (name in config.defaults) {
      setField(name, config.defaults[name]);
    }
  }
  // The reader changed a field: a shape field is theirs now; a sequence they typed is kept.
  function touched(name) {
    if (isShape(name)) state.overrides.add(name);
    // Another model has its own sequence (learned positions cap it at their context, calc.inputs): one the
    // reader did not type follows the model, as the CLI's default does.
    if (isShape(name) && !state.seqTyped) {
      setField("seq", "");
      state.seqAuto = true;
    }
    if (name === "seq") {
      state.seqAuto = false;
      state.seqTyped = valueOf("seq") !== "";
    }
    state.extras.delete(name);
    if (name === "capacity-gb") state.extras.delete("card");  // a capacity typed replaces the link's card
  }
  function inputs() {
    const shown = new Map([...state.overrides, ...fields.run].map((name) => [name, valueOf(name)]));
    const out = calcInputs({
      hf: hfMode() ? hf.text : null, preset: valueOf("preset"), shown, overrides: state.overrides,
      run: fields.run, applies, fromLink: state.fromLink, extras: state.extras,
    });
    // A link's card is calc's --card: the capacity field shows its capacity and is not sent beside it (unless
    // the link gave both, which calc refuses with its own reason).
    if (state.extras.has("card") && !state.fromLink.has("capacity-gb")) delete out["capacity-gb"];
    return out;
  }
  return {
    form, fields, presets, hf, state, field, labelOf, isField, words, setField, valueOf, hfMode, applies, isShape,
    showApplicable, fillPreset, fillFromAnswer, showRead, fillDefaults, enterHf, leaveHf, dropHf, choosePreset, resetField,
    touched, inputs,
  };
}
