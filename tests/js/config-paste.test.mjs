import assert from "node:assert/strict";
import { test } from "node:test";

import { MAX_DEPTH, configProblem, nestingDepth } from "../../docs/javascripts/calculator/config-paste.js";

test("nesting is counted outside strings, without recursion, even 5,000 deep", () => {
  assert.equal(nestingDepth('{"a": [1, {"b": "[[[{"}]}'), 3);
  assert.equal(nestingDepth("[".repeat(5000) + "]".repeat(5000)), 5000);
  assert.equal(nestingDepth('{"a": "\\"[["}'), 1);
});

test("a deep paste is refused in the page, before the worker (issue 20, item 2)", () => {
  const deep = "[".repeat(5000) + "]".repeat(5000);
  assert.match(configProblem(deep, 1_000_000), /nested 5,000 levels deep/);
  assert.equal(configProblem(`${"{\"a\":".repeat(MAX_DEPTH)}1${"}".repeat(MAX_DEPTH)}`, 1_000_000), null);
});

test("too long, not JSON, or not an object: each says so; a real config passes", () => {
  assert.match(configProblem("x".repeat(11), 10), /11 characters .* at most 10 characters/);
  assert.match(configProblem('{"model_type": ', 100), /^not JSON/);
  assert.match(configProblem("[1]", 100), /one JSON object/);
  assert.equal(configProblem('{"model_type": "llama", "hidden_size": 4096}', 100), null);
});

test("a leading byte-order mark, as Windows editors write one, is accepted; one elsewhere is not JSON", () => {
  assert.equal(configProblem('\ufeff{"model_type": "llama"}', 100), null);
  assert.match(configProblem('{"model_type": "llama"}\ufeff', 100), /^not JSON/);
});
