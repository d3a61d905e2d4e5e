import assert from "node:assert/strict";
import { test } from "node:test";

import { carriedIndex } from "../../docs/javascripts/calculator/animation.js";

test("a playing animation goes on from the same point of a new step (issue 20's last pass, minor 5)", () => {
  assert.equal(carriedIndex(60, 108, 48), 26);  // LLaMA 7B's event 61 of 108: GPT-2's 27 of 48, not its last
  assert.equal(carriedIndex(20, 48, 108), 46);
  assert.equal(carriedIndex(0, 108, 48), 0);
  assert.equal(carriedIndex(107, 108, 48), 47);
});

test("the same step (a field that changes no event) keeps the event on show", () => {
  assert.equal(carriedIndex(60, 108, 108), 60);
  assert.equal(carriedIndex(0, 1, 48), 0);
  assert.equal(carriedIndex(5, 0, 48), 5);
});
