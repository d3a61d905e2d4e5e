// The form's values as calc reads them, and the inputs calc is sent (pure; tests/js/values.test.mjs).

export const HF_CONFIG = "hf-config";  // the field (and the preset list's entry) of a pasted config.json

// As calc reads them: choices trimmed and in lower case; true/false also as 1/0, yes/no, on/off.
export function matchChoice(choices, raw) {
  const value = String(raw).trim().toLowerCase();
  return choices.includes(value) ? value : null;
}
export function parseBool(raw) {
  const value = String(raw).trim().toLowerCase();
  if (["1", "true", "yes", "on"].includes(value)) return true;
  if (["0", "false", "no", "off"].includes(value)) return false;
  return null;
}

// The inputs calc is sent, so that what the page shows, its link and the CLI agree (issue 20, item 1):
// the model (a preset, or the config's text) and every shape field the reader or the link set, even to the
// preset's own value (the shape fields not set show what calc used: key/value heads follow heads, as in the
// CLI); every run field that has a value and applies, or that the link set (calc refuses what does not
// apply, as the CLI does); and the link's fields that have no control here (walk, experts...).
//   state: {hf: the config's text or null, preset, shown: Map(field -> value shown, "" for empty),
//           overrides: Set of shape fields set, run: [run fields], applies(name), fromLink: Set, extras: Map}
export function calcInputs({ hf, preset, shown, overrides, run, applies, fromLink, extras }) {
  const out = hf === null ? { preset } : { [HF_CONFIG]: hf };
  for (const name of overrides) {
    const value = shown.get(name);
    if (value !== undefined && value !== "") out[name] = value;
  }
  for (const name of run) {
    const value = shown.get(name);
    if (value !== undefined && value !== "" && (applies(name) || fromLink.has(name))) out[name] = value;
  }
  for (const [name, value] of extras) if (!(name in out)) out[name] = value;
  return out;
}

// The planner's question: the inputs less the layout a row chooses itself.
export function planQuestion(inputs, layout) {
  const out = { ...inputs };
  for (const key of layout) delete out[key];
  return out;
}

// What a Load button sets (issue 20, item 3): every field either kind of row sets (`rowNames`: the planner's
// layout and the fit list's fields, from calc), at its default unless this row gives it, so no field of an
// earlier choice is left to conflict with it. row: the row's values by field name; defaults: the form's.
export function loadFields(row, rowNames, defaults) {
  const out = {};
  for (const name of rowNames) if (Object.hasOwn(defaults, name)) out[name] = defaults[name];
  return { ...out, ...row };
}
