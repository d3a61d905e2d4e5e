// The config.json box: a pasted, chosen or dropped config (read here, never uploaded), checked in the page
// (config-paste.js) before anything reaches the worker; "Clear" goes back to the presets.
import { configProblem } from "./config-paste.js";
import { formatInt } from "./format.js";
import { HF_CONFIG } from "./values.js";

export function createConfigBox(root, config, f, msg) {
  let refused = null;  // {text, problem}: the box's text the page refused, said until the text changes
  function say(problem) {
    msg.showError(HF_CONFIG, `${problem}. The numbers below are for the last model calc accepted.`);
    root.dataset.stale = "true";
  }
  function refuse(problem, text) {
    refused = { text, problem };
    say(problem);
  }
  // The refusal said again after an answer cleared the messages: a paste refused while calc was answering
  // the change before it (the first live answer, say) stays named under the box (a fresh reviewer's minor).
  function again() {
    if (refused && refused.text === f.field(HF_CONFIG).value) say(refused.problem);
    else refused = null;
  }
  // A config's text from the box, a file or a link: true when the form now holds it (or left it, for "").
  function take(text) {
    refused = null;
    root.querySelector(`[data-error-for="${HF_CONFIG}"]`).textContent = "";
    f.field(HF_CONFIG).removeAttribute("aria-invalid");
    if (text.trim() === "") {
      if (f.hfMode()) f.leaveHf();
      else f.dropHf();
      return true;
    }
    const problem = configProblem(text, config.hfMaxChars);
    if (problem) {
      refuse(problem, text);
      return false;
    }
    f.enterHf(text);
    return true;
  }
  function readFile(file) {
    if (!file) return;
    if (file.size > config.hfMaxChars) {
      say(`a file of ${formatInt(file.size)} bytes is not a config.json; at most ${formatInt(config.hfMaxChars)} characters are read`);
      return;
    }
    file.text().then((text) => {
      f.field(HF_CONFIG).value = text;
      f.field(HF_CONFIG).dispatchEvent(new Event("input", { bubbles: true }));
    });
  }
  f.hf.file.addEventListener("change", () => { readFile(f.hf.file.files[0]); f.hf.file.value = ""; });
  f.field(HF_CONFIG).addEventListener("dragover", (event) => event.preventDefault());
  f.field(HF_CONFIG).addEventListener("drop", (event) => {
    if (!event.dataTransfer?.files.length) return;
    event.preventDefault();
    readFile(event.dataTransfer.files[0]);
  });
  root.querySelector("[data-hf-clear]").addEventListener("click", () => {
    f.field(HF_CONFIG).value = "";
    f.field(HF_CONFIG).dispatchEvent(new Event("input", { bubbles: true }));
  });
  return { take, again };
}
