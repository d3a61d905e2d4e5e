import assert from "node:assert/strict";
import { test } from "node:test";

import { pageWords, seqResetNote } from "../../docs/javascripts/calculator/messages.js";

test("the note of a sequence reset for a new model says what was reset and what stays (issue 20, minor d)", () => {
  const note = seqResetNote("8192", "seq: must be at most the context of 1,024 (learned positions)");
  assert.match(note, /^Reset to the new model's own sequence length, the one field the page reset/);
  assert.match(note, /a loop preset's included, stay/);
  assert.match(note, /calc refused 8192 for it \(seq: must be at most the context of 1,024/);
});

test("calc's messages name the page's planner, fit list and labels, never the CLI's modes (minor 1)", () => {
  const labels = { finetune: "Trains", tp: "Tensor parallel" };
  const said = pageWords("--table and --plan train every parameter with AdamW; use --fit-card", (n) => labels[n] ?? null);
  assert.equal(said, "the table and the planner train every parameter with AdamW; use “What fits on one card”");
  assert.equal(pageWords("leave --tp unset, --planner stays", (n) => labels[n] ?? null),
    "leave “Tensor parallel” unset, --planner stays");
});
