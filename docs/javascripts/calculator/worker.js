// The page's one worker (calc-worker.mjs: calc.web.handle in Pyodide), shared by the calculator, the planner
// and the fit list: one runtime per page (issue 21). Questions have a kind; the worker answers one at a time,
// the most urgent kind first (a reader's change before its sweep, both before a plan), and a newer question
// of a kind supersedes one of that kind still waiting (latest request wins). A fatal Python error restarts
// the worker, and the question is answered with an error that says so.

// Most urgent first: what a change draws at once, then its sweep, then the planner's layouts and fit list.
export const KINDS = ["numbers", "sweep", "plan"];
export const SUPERSEDED = Object.freeze({ ok: false, superseded: true, field: null, message: "superseded" });

// Why the live calculator cannot start here, before trying; null when it may.
export function cannotStart() {
  if (location.protocol === "file:") {
    return "the page was opened from a file, and browsers do not run the calculator's worker from " +
      "disk; serve the site over HTTP (make serve) to use it";
  }
  if (typeof Worker === "undefined") return "this browser does not run Web Workers";
  if (typeof WebAssembly === "undefined") return "this browser does not run WebAssembly, which Python in the page needs";
  return null;
}

// A started worker: resolves once it says "ready"; onProgress gets its {progress} and {download} messages. `early`: the worker
// the page's <head> started (site_overrides/main.html), adopted with what it said before this script listened.
function start(url, onProgress, early) {
  let thread = early?.thread;
  const ready = new Promise((resolve, reject) => {
    try {
      thread ??= new Worker(url, { type: "module" });
    } catch (error) {  // e.g. a SecurityError for a page the browser will not give a worker
      reject(new Error(`the browser refused to start its worker: ${error.message}`));
      return;
    }
    thread.onerror = (event) => {
      event.preventDefault();
      reject(new Error(event.message || "the worker could not start"));
    };
    thread.onmessage = ({ data }) => {
      if (data.progress || data.download) onProgress(data);
      else if (data.type === "ready") resolve(thread);
      else if (data.type === "failed") reject(new Error(data.message));
      else thread.onanswer?.(data);
    };
    early?.stop();
    early?.messages.forEach((data) => thread.onmessage({ data }));
  });
  return ready;
}

// The client: ask(kind, request) -> Promise(calc's answer, or SUPERSEDED). ready: a promise of the first start.
// onRestart(message) is told when a fatal error made it start a new runtime.
export function connect(url, { onProgress = () => {}, onRestart = () => {}, early = null } = {}) {
  const waiting = new Map();  // kind -> {request, resolve}: at most one per kind
  let thread = null;
  let current = null;  // the question with the worker: {resolve}
  let nextId = 0;
  let ready = start(url, onProgress, early);

  function adopt(started) {
    thread = started;
    thread.onanswer = (data) => {
      if (!current || data.id !== current.id) return;
      const { resolve } = current;
      current = null;
      if (data.fatal) restart(data.error);
      if (data.error) resolve({ ok: false, field: null, message: data.error });
      else resolve(JSON.parse(data.answer));
      pump();
    };
    pump();
  }
  // Python in Pyodide cannot go on after a fatal error: a new worker, a new runtime, and the reader is told.
  function restart(message) {
    thread.terminate();
    thread = null;
    onRestart(message);
    ready = start(url, () => {}, null);
    ready.then(adopt, (error) => onRestart(`it could not start again: ${error.message}`));
  }
  function pump() {
    if (!thread || current) return;
    const kind = KINDS.find((k) => waiting.has(k));
    if (!kind) return;
    const { request, resolve } = waiting.get(kind);
    waiting.delete(kind);
    current = { id: nextId++, resolve };
    thread.postMessage({ id: current.id, request: JSON.stringify(request) });
  }
  function ask(kind, request) {
    if (!KINDS.includes(kind)) throw new Error(`unknown kind of question: ${kind}`);
    return new Promise((resolve) => {
      waiting.get(kind)?.resolve(SUPERSEDED);
      waiting.set(kind, { request, resolve });
      pump();
    });
  }
  // Drop a question still waiting (the form moved on); one with the worker runs to its end.
  function drop(kind) {
    waiting.get(kind)?.resolve(SUPERSEDED);
    waiting.delete(kind);
  }
  ready.then(adopt, () => {});
  return { ready: ready.then(() => ({ ask, drop })), ask, drop };
}
