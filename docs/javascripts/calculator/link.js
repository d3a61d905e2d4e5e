// The address and the form: a link's settings into the fields (each value that cannot be used named in a
// notice, only its field falling back), and the address rewritten for the numbers on show.
import { addressWriter } from "./address.js";
import { configProblem } from "./config-paste.js";
import { flagsIn, quote } from "./format.js";
import { cliCommand, linkQuery, readLink } from "./url.js";
import { HF_CONFIG, matchChoice, parseBool } from "./values.js";

// Why a link's config.json was not taken, in the config box's own words (too long, nested too deep, not JSON,
// not an object: config-paste.js), for the link's notice. Pure (tests/js/link.test.mjs).
export const linkConfigProblem = (text, maxChars) =>
  `refused, as the config box refuses it: ${configProblem(text, maxChars) ?? "it cannot be a config.json"}`;

// The link's fields to blame for calc's refusal: the field it names if the link set it, else the link's fields
// its message names (`?experts=8` for "experts-per-token: ... (--experts)"), else none: a refusal about a field
// the link did not set keeps every field the link set that calc accepts. Pure (tests/js/link.test.mjs).
export function blame(result, fromLink) {
  if (fromLink.has(result.field)) return [result.field];
  return flagsIn(result.message ?? "").filter((name) => fromLink.has(name));
}

// The notice's lines that still hold once the link's settings with no field here are cleared (`cleared`, their
// names): not those about a setting with no field here (`hasField(name)` false: cleared, or dropped before),
// nor those whose reason names a cleared one (`Layers: ... --walk eager`). Pure (tests/js/link.test.mjs).
export const afterClearing = (problems, cleared, hasField) => problems.filter(({ name, message }) =>
  hasField(name) && !flagsIn(message ?? "").some((flag) => cleared.has(flag)));

// The line of the link's settings that have no field here (walk, experts, sliding-window, card): `walk “eager”,
// card “h200”`. Pure (tests/js/link.test.mjs).
export const extrasText = (extras) =>
  `This link also sets ${[...extras].map(([name, value]) => `${name} ${quote(value)}`).join(", ")}, which ` +
  "no field here shows; they stay through every other choice until cleared. ";

export function createLink(root, config, f, notice, takeConfig, changed = () => {}) {
  const problems = [];  // [{name, message, line}]: what the link asked for that could not be used
  let written = location.search;  // the query of the form's address, last written or waiting to be (address.js)
  const here = () => `${location.pathname}${location.search}${location.hash}`;
  const address = addressWriter({
    current: here,
    replace: (url) => history.replaceState(history.state, "", url),
    push: (url) => history.pushState(null, "", url),
    // the tests read the address once it is written (tests/site/site_fixtures.py: settled_url)
    onPending: (waiting) => { if (waiting) root.dataset.address = "pending"; else delete root.dataset.address; },
  });
  window.addEventListener("pagehide", () => address.flush());  // the entry left holds what was on show
  const say = (name, message, line = null) => problems.push({ name, message, line });

  // One value of the link into its field (or, with no control here, kept to send as it is).
  function apply(key, raw) {
    const el = f.field(key);
    if (f.isShape(key)) f.state.overrides.add(key);
    if (!el) {
      f.state.extras.set(key, raw.trim());
      f.state.fromLink.add(key);
      return;
    }
    let value = raw.trim();
    if (el.tagName === "SELECT") {
      value = matchChoice([...el.options].map((o) => o.value), raw);
      if (value === null) {
        say(key, `${quote(raw)} is not one of ${[...el.options].map((o) => o.value).join(", ")}`);
        f.state.overrides.delete(key);
        return;
      }
    } else if (el.type === "checkbox") {
      value = parseBool(raw);
      if (value === null) {
        say(key, `${quote(raw)} is not true or false (or 1 or 0, yes or no)`);
        f.state.overrides.delete(key);
        return;
      }
    }
    f.setField(key, value);
    f.state.fromLink.add(key);
    if (key === "seq") f.touched("seq");
  }

  // A link never loses settings it can use: parameters that are not fields are ignored.
  function read() {
    const { values, problems: found } = readLink(location.search, config.fields.all);
    problems.push(...found);
    if (!values.size) {  // a link of mistyped names alone (?Seq=4096) still says what it ignored
      if (problems.length) showNotice();
      return;
    }
    let preset = config.defaults.preset;
    if (values.has(HF_CONFIG)) {
      if (values.has("preset")) say("preset", "a link gives a preset or a config.json, not both; the config is used");
      values.delete("preset");
      const text = values.get(HF_CONFIG);
      if (takeConfig(text)) f.state.fromLink.add(HF_CONFIG);
      else say(HF_CONFIG, linkConfigProblem(text, config.hfMaxChars));
    } else if (values.has("preset")) {
      const asked = String(values.get("preset")).trim().toLowerCase();
      if (f.presets.has(asked)) preset = asked;
      else say("preset", `${quote(values.get("preset"))} is not a preset here; the presets are ${[...f.presets.keys()].join(", ")}`);
    }
    if (!f.hfMode()) {
      f.setField("preset", preset);
      f.fillPreset(preset);
    }
    if (!values.has("seq")) {  // the link's model decides its own sequence (learned positions: their context)
      f.setField("seq", "");
      f.state.seqAuto = true;
    }
    for (const [key, raw] of values) if (key !== "preset" && key !== HF_CONFIG) apply(key, raw);
    f.fillPreset(f.valueOf("preset"));  // the shape fields the link did not set show the preset's values
    f.showApplicable();
    showNotice();
  }
  const labelOf = (name) => f.labelOf(name);
  function showNotice() {
    showExtras();
    if (!problems.length) {  // none left (clearExtras): the link's notice goes
      if (notice.dataset.kind === "link") { notice.hidden = true; notice.replaceChildren(); delete notice.dataset.kind; }
      return;
    }
    const intro = document.createElement("span");
    intro.textContent = "Some of this link's settings could not be used as given; the rest apply. Fields named here show their defaults unless the line says otherwise:";
    const list = document.createElement("ul");
    for (const { name, message, line } of problems) {
      const li = document.createElement("li");
      li.dataset.linkProblem = name;
      li.textContent = line ?? `${labelOf(name) ?? name}: ${f.words(message)}.`;
      list.appendChild(li);
    }
    notice.replaceChildren(intro, list);
    notice.dataset.kind = "link";  // it stays: the reader should see what the link lost
    notice.hidden = false;
  }
  // The link's settings with no field here, in a line under the notice with the one way to take them back off
  // the page (minor 5): a button that clears them all, the line then saying what was cleared (and holding the
  // focus the button had). No line where the link set none.
  const extrasLine = document.createElement("p");
  extrasLine.className = "calc-link-extras";
  extrasLine.dataset.linkExtras = "";
  extrasLine.hidden = true;
  notice.after(extrasLine);
  function showExtras() {
    if (!f.state.extras.size) {
      if (!extrasLine.dataset.cleared) extrasLine.hidden = true;
      return;
    }
    const button = document.createElement("button");
    button.type = "button";
    button.className = "md-button";
    button.textContent = "Clear the link's other settings";
    button.addEventListener("click", clearExtras);
    delete extrasLine.dataset.cleared;
    extrasLine.replaceChildren(extrasText(f.state.extras), button);
    extrasLine.hidden = false;
  }
  // Cleared, they take the notice's lines about them along (afterClearing), and the notice where none is left.
  function clearExtras() {
    const cleared = [...f.state.extras].map(([name, value]) => `${name} ${quote(value)}`).join(", ");
    const left = afterClearing(problems, new Set(f.state.extras.keys()), (name) => Boolean(f.field(name)));
    for (const name of f.state.extras.keys()) { f.state.overrides.delete(name); f.state.fromLink.delete(name); }
    f.state.extras.clear();
    extrasLine.dataset.cleared = "true";
    extrasLine.tabIndex = -1;
    extrasLine.textContent = `Cleared the link's ${cleared}: the page's own fields apply.`;
    problems.splice(0, problems.length, ...left);
    if (notice.dataset.kind === "link") showNotice();
    extrasLine.focus();
    changed();
  }
  // calc refused a value the link set, or named the link's (blame): only those fields fall back, the notice
  // saying which and why. False when the link is not to blame: the refusal is shown beside its field.
  function refused(result) {
    const fromLink = f.state.fromLink;
    const culprits = blame(result, fromLink);
    if (!culprits.length) return false;
    const named = (list) => list.map((n) => labelOf(n) ?? n).join(", ");
    const also = culprits.includes(result.field) ? "" : `; the link's ${named(culprits)} dropped`;
    for (const name of culprits) { f.resetField(name); fromLink.delete(name); }
    // What the link set for the choice that fell back (LoRA's rank for its fine-tuning) goes with it, named.
    const along = [...fromLink].filter((name) => f.field(name) && !f.applies(name));
    for (const name of along) { f.resetField(name); fromLink.delete(name); }
    f.showApplicable();
    say(result.field ?? culprits[0], result.message + also + (along.length ? `; the link's ${named(along)} dropped with it` : ""));
    showNotice();
    return true;
  }
  // calc refused a setting the link carries with no field here (`lora-alpha` once Trains is full): nothing on
  // the page could remove it, so it is dropped from what is sent and from the address, in one line naming it.
  // False when calc named no such setting.
  function dropped(result) {
    const name = result.field;
    if (!name || f.field(name) || !f.state.extras.has(name)) return false;
    const value = f.state.extras.get(name);
    f.state.extras.delete(name);
    f.state.overrides.delete(name);
    say(name, result.message, `${name} ${quote(value)} from the link no longer applies and was dropped ` +
      `(${f.words(result.message)}).`);
    showNotice();
    return true;
  }
  // The address of the form as it stands: every value that differs from the defaults, those of the numbers on
  // show, or a value calc refused (answer {}: the address follows the field, so a link copied then reopens to
  // the same refusal, named in its notice, not silently to the value before). `push`: a deliberate change (a
  // preset, a config, a Load) gets its own history entry at once, which Back leaves for the one before; typing
  // replaces the entry it is in, once the reader pauses (address.js).
  function write(drawn, answer, push = false) {
    const given = { ...drawn };
    // The config in calc's short form (calc.hf.compact): what calc reads of it, and a shorter link.
    if (HF_CONFIG in given && answer.hf_config) given[HF_CONFIG] = answer.hf_config;
    // A number typed in another form ("1,000") as calc read it (calc.inputs.canonical_numbers): the link
    // reopens the same answer.
    for (const [name, value] of Object.entries(answer.canonical ?? {})) {
      if (Object.hasOwn(given, name)) given[name] = value;
    }
    const query = linkQuery(given, config.defaults);
    // A shared link opens at the calculator, not at the top of the page it lives on. Asked when written (the
    // hash then), and nothing once the reader is on another page.
    const path = location.pathname;
    const url = () => location.pathname !== path ? null
      : `${path}${query ? `?${query}` : ""}${location.hash || (query ? `#${root.id}` : "")}`;
    written = query ? `?${query}` : "";
    address.write(url, push);
    if (answer.step) showCommand(cliCommand(query, config.fields.switches, undefined, config.fields.rows_only));
  }
  // Each flag unbroken after its "--" (hooks/flags.py's calc-flag), the command's text as cliCommand gives it.
  function showCommand(text) {
    command.replaceChildren(...text.split(" ").flatMap((word, i) => {
      const flag = word.startsWith("--") && Object.assign(document.createElement("span"),
        { className: "calc-flag", textContent: word });
      return i ? [" ", flag || word] : [flag || word];
    }));
  }
  // The same answer in the CLI (the address's values as flags), and the address copied for the reader.
  const command = root.querySelector('[data-out="cli"]');
  const copied = root.querySelector("[data-copy-said]");
  root.querySelector("[data-copy-link]").addEventListener("click", () => {
    const said = (text) => { copied.textContent = text; };
    const clipboard = navigator.clipboard;  // none on an insecure origin (plain http, some file:// pages)
    if (!clipboard) return said("Copy it from the address bar: this page may not use the clipboard.");
    address.flush();  // typing writes the address once the reader pauses: the settings shown, now
    clipboard.writeText(location.href).then(() => said("Link copied."),
      () => said("Copy it from the address bar: the browser refused the clipboard."));
  });
  // Back or Forward to another entry: what the link said before is forgotten, its notice with it (read again).
  // Whether the address is another than the form's (Back past a deliberate change; not a jump to a heading).
  const moved = () => location.search !== written;
  function reset() {
    address.drop();  // Back or Forward: the typing not yet written was the entry left's, not this one's
    problems.splice(0, problems.length);
    f.state.fromLink.clear();
    delete extrasLine.dataset.cleared;
    showNotice();
  }
  return { read, write, reset, moved, refused, dropped, problems, showExtras };
}
