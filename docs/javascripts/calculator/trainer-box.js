// The trainer config box (issue 32): a pasted, chosen or dropped trainer config (axolotl, LLaMA-Factory, TRL or
// Trainer, DeepSpeed, accelerate, torchtitan), read by calc in the worker as the CLI's --trainer-config reads it
// (calc.web.trainer_answer). Its fields become the page's address, read as a link is (every other field at its
// default, as in the CLI), and what each key gave is listed under the box until the text changes.
import { linkQuery } from "./url.js";

export const TRAINER = "trainer-config";  // the name calc's messages give the box (--trainer-config)
export const MAX_FILE_BYTES = 200_000;  // calc.trainers.MAX_CHARS: a trainer config is a few kB

// The lists under the box, from calc's reading: [heading, rows of [key, what it gives], folded (the keys that
// change nothing: a file holds many, in a list of their own the reader opens)]. Pure
// (tests/js/trainer-box.test.mjs).
export function readingRows(reading) {
  return [
    [`Keys read (${reading.tools.join(", ")})`, reading.read.map((r) => [`${r.key}: ${r.value}`, r.gives]), false],
    ["The tools' own defaults, no key given", reading.defaults.map((d) => [d.why, d.gives]), false],
    [`Keys that change nothing calc counts (${reading.ignored.length})`,
      reading.ignored.map((i) => [i.key, i.why]), true],
  ].filter(([, rows]) => rows.length);
}

export function createTrainerBox(root, config, f, { ask, apply }) {
  const text = root.querySelector("[data-trainer-text]");
  const error = root.querySelector("[data-trainer-error]");  // not the form's: an answer's clearing keeps it
  const shown = root.querySelector("[data-trainer-reading]");
  const file = root.querySelector("[data-trainer-file]");
  let files = null;  // the texts of the files chosen or dropped, sent as they are until the box is edited
  function say(message) {
    error.textContent = message;
    text.setAttribute("aria-invalid", "true");
  }
  function clear() {
    error.textContent = "";
    text.removeAttribute("aria-invalid");
    shown.hidden = true;
    shown.replaceChildren();
  }
  function list(reading) {
    const parts = [];
    for (const [heading, rows, folded] of readingRows(reading)) {
      const title = document.createElement(folded ? "summary" : "p");
      title.textContent = heading;
      const items = document.createElement("ul");
      for (const [key, gives] of rows) {
        const li = document.createElement("li");
        const code = document.createElement("code");
        code.textContent = key;
        // each flag unbroken after its "--" (hooks/flags.py's calc-flag), as the CLI command's
        const words = gives.split(" ").flatMap((word) => [" ", word.startsWith("--")
          ? Object.assign(document.createElement("span"), { className: "calc-flag", textContent: word }) : word]);
        li.append(code, " →", ...words);
        items.appendChild(li);
      }
      if (!folded) parts.push(title, items);
      else parts.push(Object.assign(document.createElement("details"), { className: "calc-trainer-ignored" }));
      if (folded) parts.at(-1).append(title, items);
    }
    shown.replaceChildren(...parts);
    shown.hidden = !parts.length;
  }
  // The page's walk, device and config.json stay, as flags given beside --trainer-config: those chosen, not
  // a default the form always sends (a file's own device, say, is then the file's, as in the CLI).
  function context() {
    const sent = f.inputs();
    return Object.fromEntries(["walk", "device", "hf-config"]
      .filter((k) => sent[k] !== undefined && sent[k] !== config.defaults[k]).map((k) => [k, sent[k]]));
  }
  async function read() {
    const texts = files ?? [text.value];
    clear();
    if (!texts.some((t) => t.trim())) return say("Paste a trainer's config first, or choose its files.");
    const answer = await ask({ trainer: texts, inputs: context() });
    if (answer.superseded) return;  // read again since: that answer is the one shown
    if (!answer.ok) return say(f.words(answer.message));
    const { fields, reading } = answer.trainer;
    apply(linkQuery(fields, config.defaults));
    list(reading);
  }
  function take(texts) {
    files = texts;
    text.value = texts.join("\n---\n");
    read();
  }
  async function readFiles(chosen) {
    clear();
    const big = chosen.find((one) => one.size > MAX_FILE_BYTES);
    if (big) return say(`${big.name} is ${big.size.toLocaleString("en-US")} bytes: a trainer config is a few kB`);
    take(await Promise.all(chosen.map((one) => one.text())));
  }
  text.addEventListener("input", () => { files = null; clear(); });
  // Another field changed: a refusal of the last read no longer answers anything on show. Back or Forward to
  // another address: neither the refusal nor what the file gave is that address's.
  f.form.addEventListener("input", (event) => {
    if (event.target !== text && error.textContent) { error.textContent = ""; text.removeAttribute("aria-invalid"); }
  });
  window.addEventListener("popstate", clear);
  text.addEventListener("paste", () => setTimeout(read, 0));  // once the pasted text is in the box
  text.addEventListener("dragover", (event) => event.preventDefault());
  text.addEventListener("drop", (event) => {
    if (!event.dataTransfer?.files.length) return;
    event.preventDefault();
    readFiles([...event.dataTransfer.files]);
  });
  file.addEventListener("change", () => { readFiles([...file.files]); file.value = ""; });
  root.querySelector("[data-trainer-read]").addEventListener("click", read);
}
