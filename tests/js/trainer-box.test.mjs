import assert from "node:assert/strict";
import { test } from "node:test";

import { readingRows } from "../../docs/javascripts/calculator/trainer-box.js";

// calc.trainers.Reading.as_dict()'s shape, as calc.web.trainer_answer sends it
const reading = {
  tools: ["axolotl"],
  read: [{ key: "sequence_len", value: "4096", gives: "--seq 4096" }],
  defaults: [{ gives: "--attention sdpa", why: "axolotl's default attention" }],
  ignored: [{ key: "output_dir", why: "where checkpoints go" }, { key: "logging_steps", why: "logging" }],
};

test("the box lists what each key gave, the tools' defaults and the keys ignored, in the CLI's order", () => {
  assert.deepEqual(readingRows(reading), [
    ["Keys read (axolotl)", [["sequence_len: 4096", "--seq 4096"]], false],
    ["The tools' own defaults, no key given", [["axolotl's default attention", "--attention sdpa"]], false],
    ["Keys that change nothing calc counts (2)",
      [["output_dir", "where checkpoints go"], ["logging_steps", "logging"]], true],
  ]);
});

test("a list with nothing in it is left out", () => {
  assert.deepEqual(readingRows({ ...reading, defaults: [], ignored: [] }).map(([heading]) => heading),
    ["Keys read (axolotl)"]);
});
