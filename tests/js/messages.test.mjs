import assert from "node:assert/strict";
import { test } from "node:test";

import { seqResetNote } from "../../docs/javascripts/calculator/messages.js";

test("the note of a sequence reset for a new model says what was reset and what stays (issue 20, minor d)", () => {
  const note = seqResetNote("8192", "seq: must be at most the context of 1,024 (learned positions)");
  assert.match(note, /^Reset to the new model's own sequence length, the one field the page reset/);
  assert.match(note, /a loop preset's included, stay/);
  assert.match(note, /calc refused 8192 for it \(seq: must be at most the context of 1,024/);
});
