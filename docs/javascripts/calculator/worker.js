// The page's one worker (calc-worker.mjs: calc.web.handle in Pyodide), shared by the calculator, the planner
// and the fit list: one runtime per page (issue 21). Questions have a kind, and each goes to the worker as it is
// asked; the worker answers the most urgent kind first (a reader's change before its sweep, both before a plan),
// works out a plan in slices so that a change asked meanwhile is answered before the plan goes on, and a newer
// question of a kind supersedes the one of that kind still unanswered (latest request wins). A fatal Python
// error restarts the worker, and the question is answered with an error that says so.

// Most urgent first: what a change draws at once, then its sweep, then the planner's layouts and fit list.
export const KINDS = ["trainer", "numbers", "sweep", "plan"];
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
      else if (data.warmed) return;  // the worker warmed its code once idle (calc-worker.mjs): no answer
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
  const asked = new Map();  // kind -> {kind, request, resolve, id}: its newest question not answered (id: sent)
  let thread = null;
  let nextId = 0;
  let ready = start(url, onProgress, early);

  function send(question) {
    question.id = nextId++;
    thread.postMessage({ id: question.id, kind: question.kind, request: JSON.stringify(question.request) });
  }
  function adopt(started) {
    thread = started;
    thread.onanswer = (data) => {
      const question = [...asked.values()].find((q) => q.id === data.id);
      if (!question || data.superseded) return;  // its kind was asked again: answered SUPERSEDED already
      asked.delete(question.kind);
      if (data.fatal) restart(data.error);
      if (data.error) question.resolve({ ok: false, field: null, message: data.error });
      else question.resolve(JSON.parse(data.answer));
    };
    for (const question of asked.values()) send(question);  // asked while no worker was ready
  }
  // Python in Pyodide cannot go on after a fatal error: a new worker, a new runtime, and the reader is told.
  // The questions the old one had not answered go to the new one.
  function restart(message) {
    thread.terminate();
    thread = null;
    onRestart(message);
    ready = start(url, () => {}, null);
    ready.then(adopt, (error) => onRestart(`it could not start again: ${error.message}`));
  }
  function ask(kind, request) {
    if (!KINDS.includes(kind)) throw new Error(`unknown kind of question: ${kind}`);
    return new Promise((resolve) => {
      asked.get(kind)?.resolve(SUPERSEDED);  // the worker drops it too, on the newer one's arrival
      const question = { kind, request, resolve, id: null };
      asked.set(kind, question);
      if (thread) send(question);
    });
  }
  // Drop a question not yet answered (the form moved on).
  function drop(kind) {
    asked.get(kind)?.resolve(SUPERSEDED);
    asked.delete(kind);
    thread?.postMessage({ drop: kind });
  }
  ready.then(adopt, () => {});
  return { ready: ready.then(() => ({ ask, drop })), ask, drop };
}
