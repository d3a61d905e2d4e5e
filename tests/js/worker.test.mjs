import assert from "node:assert/strict";
import { test } from "node:test";

import { SUPERSEDED, connect } from "../../docs/javascripts/calculator/worker.js";

// A stand-in for the page's Web Worker: it records what the client posts and answers when the test says.
class FakeWorker {
  static started = [];
  constructor(url) {
    this.url = url;
    this.posted = [];
    this.terminated = false;
    FakeWorker.started.push(this);
    queueMicrotask(() => this.onmessage({ data: { type: "ready" } }));
  }
  postMessage(data) { this.posted.push(data); }
  terminate() { this.terminated = true; }
  say(data) { this.onmessage({ data }); }
}
globalThis.Worker = FakeWorker;

async function started() {
  FakeWorker.started = [];
  const client = connect("calc-worker.mjs");
  await client.ready;
  return { client, thread: FakeWorker.started[0] };
}
const answer = (obj) => JSON.stringify(obj);

test("each question goes to the worker as it is asked, a plan under way holding no change back", async () => {
  const { client, thread } = await started();
  const plan = client.ask("plan", { plan: true });
  const numbers = client.ask("numbers", { seq: 1 });
  assert.deepEqual(thread.posted.map((m) => m.kind), ["plan", "numbers"]);
  const [planId, numbersId] = thread.posted.map((m) => m.id);
  thread.say({ id: numbersId, answer: answer({ ok: true, n: 1 }) });  // the change, answered first
  assert.deepEqual(await numbers, { ok: true, n: 1 });
  thread.say({ id: planId, answer: answer({ ok: true, plan: [] }) });
  assert.deepEqual(await plan, { ok: true, plan: [] });
});

test("a newer question of a kind supersedes the older: its answer is dropped, the newer one's kept", async () => {
  const { client, thread } = await started();
  const older = client.ask("plan", { batch: 1 });
  const newer = client.ask("plan", { batch: 2 });
  assert.equal(await older, SUPERSEDED);
  const [olderId, newerId] = thread.posted.map((m) => m.id);
  assert.equal(JSON.parse(thread.posted[1].request).batch, 2);
  thread.say({ id: olderId, superseded: true });
  thread.say({ id: newerId, answer: answer({ ok: true, batch: 2 }) });
  assert.deepEqual(await newer, { ok: true, batch: 2 });
  client.ask("numbers", {});
  client.drop("numbers");
  assert.deepEqual(thread.posted.at(-1), { drop: "numbers" });
});

test("a fatal error starts a new worker, which gets the questions the old one left unanswered", async () => {
  const restarts = [];
  FakeWorker.started = [];
  const client = connect("calc-worker.mjs", { onRestart: (m) => restarts.push(m) });
  await client.ready;
  const thread = FakeWorker.started[0];
  const numbers = client.ask("numbers", { seq: 1 });
  const plan = client.ask("plan", { batch: 8 });
  thread.say({ id: thread.posted[0].id, error: "Pyodide fatally failed", fatal: true });
  assert.deepEqual(await numbers, { ok: false, field: null, message: "Pyodide fatally failed" });
  assert.ok(thread.terminated);
  assert.deepEqual(restarts, ["Pyodide fatally failed"]);
  await new Promise((resolve) => setTimeout(resolve, 0));
  const second = FakeWorker.started[1];
  assert.deepEqual(second.posted.map((m) => [m.kind, JSON.parse(m.request).batch]), [["plan", 8]]);
  second.say({ id: second.posted[0].id, answer: answer({ ok: true }) });
  assert.deepEqual(await plan, { ok: true });
});
