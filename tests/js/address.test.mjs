// address.js: typing is written once the reader pauses, a deliberate change at once, after the typing before it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { addressWriter, DELAY_MS } from "../../docs/javascripts/calculator/address.js";

// A history of entries and a clock that runs only when told.
function harness() {
  const h = { entries: ["/"], at: 0, timers: new Map(), next: 0, pending: [] };
  h.writer = addressWriter({
    current: () => h.entries[h.at],
    replace: (url) => { h.entries[h.at] = url; },
    push: (url) => { h.entries.splice(h.at + 1, Infinity, url); h.at += 1; },
    later: (fn, ms) => { h.timers.set(++h.next, { fn, ms }); return h.next; },
    cancel: (id) => h.timers.delete(id),
    onPending: (waiting) => h.pending.push(waiting),
  });
  h.tick = () => { const due = [...h.timers.values()]; h.timers.clear(); due.forEach((t) => t.fn()); };
  return h;
}

test("typing is written once, after the pause, into the entry it is in", () => {
  const h = harness();
  for (const seq of ["2", "20", "204", "2048"]) h.writer.write(() => `/?seq=${seq}`);
  assert.deepEqual(h.entries, ["/"]);  // nothing written while the reader types
  assert.equal(h.timers.size, 1);
  assert.equal([...h.timers.values()][0].ms, DELAY_MS);
  h.tick();
  assert.deepEqual(h.entries, ["/?seq=2048"]);
  assert.equal(h.writer.pending(), false);
  assert.deepEqual(h.pending.at(-1), false);
});

test("a deliberate change writes the typing before it, then gets an entry of its own at once", () => {
  const h = harness();
  h.writer.write(() => "/?seq=2048");
  h.writer.write(() => "/?seq=2048&preset=gpt2", true);
  assert.deepEqual(h.entries, ["/?seq=2048", "/?seq=2048&preset=gpt2"]);
  assert.equal(h.timers.size, 0);
  h.writer.write(() => "/?seq=2048&preset=gpt2", true);  // the same address: no entry
  assert.equal(h.entries.length, 2);
});

test("typing back to the address cancels the write; dropped typing is never written; flush writes it now", () => {
  const h = harness();
  h.writer.write(() => "/?seq=1");
  h.writer.write(() => "/");
  assert.equal(h.writer.pending(), false);
  assert.equal(h.timers.size, 0);
  h.writer.write(() => "/?seq=3");
  h.writer.drop();  // Back or Forward meanwhile
  h.tick();
  assert.deepEqual(h.entries, ["/"]);
  h.writer.write(() => "/?seq=4");
  h.writer.flush();  // the page goes away
  assert.deepEqual(h.entries, ["/?seq=4"]);
  assert.equal(h.timers.size, 0);
});

test("the address is asked when written, so a hash reached meanwhile is kept", () => {
  const h = harness();
  let hash = "";
  h.writer.write(() => `/?seq=9${hash}`);
  hash = "#calculator";
  h.tick();
  assert.deepEqual(h.entries, ["/?seq=9#calculator"]);
});

test("nothing is written once the page is another", () => {
  const h = harness();
  let here = true;
  h.writer.write(() => (here ? "/?seq=5" : null));
  here = false;
  h.tick();
  assert.deepEqual(h.entries, ["/"]);
  h.writer.write(() => null, true);
  assert.deepEqual(h.entries, ["/"]);
});
