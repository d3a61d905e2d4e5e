import assert from "node:assert/strict";
import { test } from "node:test";

import { eagerLead } from "../../docs/javascripts/calculator/view.js";

const HOW = "AdamW (foreach) as PyTorch runs it on a GPU";
const config = (walk, attention, flash) => ({ walk, attention, parallel: { flash } });
const figure = (attention) => ({ attention, how: HOW });

test("the eager walk's line says its attention differs from the deck peak's when each walk keeps its default", () => {
  // no --attention, no --flash: the deck's peak keeps the s x s scores (its config says eager), the eager walk
  // runs sdpa
  const [before, after] = eagerLead(config("deck", "eager", false), figure("sdpa"));
  assert.match(before, /with sdpa attention, where the peak above keeps eager attention's s x s scores/);
  assert.doesNotMatch(before, /same step/);
  assert.equal(after, `: transformers' code, ${HOW}): `);
});

test("the same attention in both walks: the same step, its attention named once", () => {
  for (const cfg of [config("deck", "eager", false), config("deck", "sdpa", true), config("eager", "sdpa", false)]) {
    const [before, after] = eagerLead(cfg, figure(cfg.attention));
    assert.equal(before, "What PyTorch allocates for the same step (");
    assert.equal(after, `: transformers' code, ${cfg.attention} attention, ${HOW}): `);
  }
});
