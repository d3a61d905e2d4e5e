import assert from "node:assert/strict";
import { test } from "node:test";

import { calcInputs, loadFields, matchChoice, parseBool, planQuestion } from "../../docs/javascripts/calculator/values.js";

const base = {
  hf: null, preset: "llama-7b", overrides: new Set(), run: ["seq", "finetune", "lora-rank"],
  applies: (name) => name !== "lora-rank", fromLink: new Set(), extras: new Map(),
};

test("every shape field set is sent, even at the preset's own value (kv-heads 32 beside heads 64)", () => {
  const shown = new Map([["heads", "64"], ["kv-heads", "32"], ["seq", "4096"], ["finetune", "full"], ["lora-rank", "8"]]);
  const out = calcInputs({ ...base, shown, overrides: new Set(["heads", "kv-heads"]) });
  assert.deepEqual(out, { preset: "llama-7b", heads: "64", "kv-heads": "32", seq: "4096", finetune: "full" });
});

test("a field that does not apply is sent when the link set it, so calc refuses it as the CLI does", () => {
  const shown = new Map([["seq", ""], ["finetune", "full"], ["lora-rank", "64"]]);
  assert.equal(calcInputs({ ...base, shown }).seq, undefined);
  assert.equal(calcInputs({ ...base, shown })["lora-rank"], undefined);
  assert.equal(calcInputs({ ...base, shown, fromLink: new Set(["lora-rank"]) })["lora-rank"], "64");
});

test("the link's fields with no control are sent; a config replaces the preset", () => {
  const out = calcInputs({ ...base, hf: "{}", shown: new Map(), extras: new Map([["walk", "eager"], ["experts", "8"]]) });
  assert.deepEqual(out, { "hf-config": "{}", walk: "eager", experts: "8" });
});

test("the planner's question leaves out the layout", () => {
  assert.deepEqual(planQuestion({ preset: "x", dp: "2", seq: "8" }, ["dp"]), { preset: "x", seq: "8" });
});

test("a Load sets every field either kind of row sets, at its default unless the row gives it", () => {
  const defaults = { dp: "1", tp: "1", finetune: "full", "grad-accum": "", "lora-rank": "8" };
  const names = ["dp", "tp", "grad-accum", "finetune", "lora-rank"];
  assert.deepEqual(loadFields({ finetune: "lora", "lora-rank": "16" }, names, defaults),
    { dp: "1", tp: "1", "grad-accum": "", finetune: "lora", "lora-rank": "16" });
  assert.deepEqual(loadFields({ dp: "8", "grad-accum": "1024" }, names, defaults),
    { dp: "8", tp: "1", "grad-accum": "1024", finetune: "full", "lora-rank": "8" });
});

test("choices and booleans are read as calc reads them", () => {
  assert.equal(matchChoice(["full", "lora"], " LoRA "), "lora");
  assert.equal(matchChoice(["full"], "nope"), null);
  assert.equal(parseBool("Yes"), true);
  assert.equal(parseBool("off"), false);
  assert.equal(parseBool("maybe"), null);
});
