import assert from "node:assert/strict";
import { test } from "node:test";

import { afterClearing, blame, extrasText, linkConfigProblem } from "../../docs/javascripts/calculator/link.js";

test("a link's config nested too deep says so, as the config box does (issue 20, minor b)", () => {
  const deep = "[".repeat(5000) + "]".repeat(5000);
  assert.match(linkConfigProblem(deep, 1_000_000), /refused.*nested 5,000 levels deep, where at most 32 are read/);
});

test("a link's config too long or not JSON says why too", () => {
  assert.match(linkConfigProblem("x".repeat(11), 10), /11 characters .* at most 10 characters/);
  assert.match(linkConfigProblem('{"model_type": ', 100), /not JSON/);
});

test("a refusal about a field the link did not set blames none of the link's fields (M1)", () => {
  const link = new Set(["walk", "seq", "micro-batch", "recipe"]);
  const gemma = { field: "attention", message: "transformers' Gemma 2 code runs eager attention only: --attention eager" };
  assert.deepEqual(blame(gemma, link), []);
  assert.deepEqual(blame({ field: "seq", message: "must be at most 4,096" }, link), ["seq"]);
  const experts = { field: "experts-per-token", message: "must be at most the experts (--experts)" };
  assert.deepEqual(blame(experts, new Set(["experts", "seq"])), ["experts"]);
  assert.deepEqual(blame({ field: "heads", message: "x" }, new Set()), []);
});

test("the link's settings with no field here are named with their values (minor 5)", () => {
  const line = extrasText(new Map([["walk", "eager"], ["card", "h200"]]));
  assert.match(line, /^This link also sets walk “eager”, card “h200”, which no field here shows; they stay/);
});

test("clearing the link's other settings takes the notice's lines about them along (issue 20's last pass, minor 4)", () => {
  const hasField = (name) => ["layers", "lora-rank"].includes(name);
  const problems = [
    { name: "sliding-window", message: "the eager walk replays no sliding window" },  // dropped: no field here
    { name: "walk", message: "given 2 times; the first, “eager”, is used" },  // cleared
    { name: "layers", message: "at most 256 layers: clear the link's walk, or run the CLI's --walk eager" },
    { name: "lora-rank", message: "applies to --finetune lora or qlora" },
  ];
  assert.deepEqual(afterClearing(problems, new Set(["walk"]), hasField).map((p) => p.name), ["lora-rank"]);
  assert.deepEqual(afterClearing([], new Set(["walk"]), hasField), []);
});
