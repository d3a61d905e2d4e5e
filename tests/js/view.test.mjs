import assert from "node:assert/strict";
import { test } from "node:test";

import { eagerLead } from "../../docs/javascripts/calculator/view.js";

const HOW = "AdamW (foreach) as PyTorch runs it on a GPU";
const config = (walk, attention, flash) => ({ walk, attention, parallel: { flash } });

test("the eager walk's line says its attention differs from the deck peak's when each walk keeps its default", () => {
  // no --attention, no --flash: the deck's peak keeps the s x s scores, the eager walk runs sdpa
  const [before, after] = eagerLead(config("deck", "sdpa", false), HOW);
  assert.match(before, /with sdpa attention, where the peak above keeps eager attention's s x s scores/);
  assert.doesNotMatch(before, /same step/);
  assert.equal(after, `: transformers' code, ${HOW}): `);
});

test("the same attention in both walks: the same step, its attention named once", () => {
  for (const cfg of [config("deck", "eager", false), config("deck", "sdpa", true), config("eager", "sdpa", false)]) {
    const [before, after] = eagerLead(cfg, HOW);
    assert.equal(before, "What PyTorch allocates for the same step (");
    assert.equal(after, `: transformers' code, ${cfg.attention} attention, ${HOW}): `);
  }
});
