// Runs calc inside Pyodide, off the page's main thread: a JSON request in, calc.web.handle's JSON out.
// Everything is a file of this site (hooks/assets.py, hooks/pyodide_site.py); nothing comes from another host:
//   assets/pyodide/   Pyodide 314, its standard library cut to what calc uses and precompiled to .pyc;
//   assets/wheels/    calc's wheel and the site's pyodide-lock.json (made by pyodide-build), which holds
//                     the wheel's sha256: loadPackage("calc") refuses a wheel whose bytes differ.
// Messages to the page: {progress: {done, total, label}} while loading, with {download: {received}} (bytes
// downloaded so far) between them, then {type: "ready"} or {type: "failed", message}; then, for each
// {id, kind, request}, {id, answer} or {id, error, fatal} (fatal: Python can no longer run here, and the page
// starts a new worker), or {id, superseded: true} when a newer question of its kind came first; and
// {warmed: n} when it has warmed its code while idle (WARM_RUNS): once, and once more for each other model.
// The questions are answered most urgent kind first (KINDS), one kind's newest only: a reader's change (the
// numbers, then their sweep) before the planner's, and the planner's (calc.web.Sliced) a slice of a few ms at
// a time, back to the event loop after each, so a change that comes while a plan runs is answered before the
// plan's next slice (issue 21). A {drop: kind} drops that kind's question.
const assets = new URL("../assets/", import.meta.url);
const lockUrl = new URL("wheels/pyodide-lock.json", assets);
// The steps, in order; the first (about 5 MB to download, then WebAssembly to compile) is the long one.
const STEPS = ["Downloading and starting Python (Pyodide) and calc", "Starting calc"];
let shown = -1;  // progress only moves forward
let received = 0;  // bytes of the runtime's downloads so far, for a slow link (issue 20, item 15)
function progress(done, label = STEPS[done]) {
  if (done <= shown) return;
  shown = done;
  postMessage({ progress: { done, total: STEPS.length, label } });
}

// Pyodide's downloads (the WebAssembly, the standard library, the lock file, the wheel) go through fetch:
// count their bytes as they arrive, and say so at most every REPORT_MS. In the order the start needs them
// (issue 21):
// - the WebAssembly, the standard library and the lock file are asked for first thing, before Pyodide's own
//   module (imported below, not statically: a static import is fetched before any of this runs), and handed
//   to Pyodide when it asks for them: on a 40 ms link they start a round trip sooner;
// - calc's wheel is asked for once the WebAssembly's last byte is in: Python's start needs the WebAssembly,
//   the runtime's module and the standard library, not the wheel (Pyodide installs it after its bootstrap),
//   so on a slow link the wheel no longer takes bandwidth from them, and arrives while Python starts.
const REPORT_MS = 200;
const nativeFetch = globalThis.fetch.bind(globalThis);
const early = new Map([new URL("pyodide/pyodide.asm.wasm", assets), new URL("pyodide/python_stdlib.zip", assets),
  lockUrl].map((url) => {
  const response = nativeFetch(url);
  response.catch(() => {});  // a failure is Pyodide's to report, when it asks
  return [url.href, response];
}));
let reported = 0;
let wasmIn;
const wasmArrived = new Promise((resolve) => { wasmIn = resolve; });
setTimeout(() => wasmIn(), 60000);  // a WebAssembly never fetched (or from elsewhere) holds nothing up for good
globalThis.fetch = async (...args) => {
  const url = String(args[0]?.url ?? args[0]).split("?")[0];
  if (url.endsWith(".whl")) await wasmArrived;
  const wasm = url.endsWith(".wasm");
  let response;
  try {
    const started = early.get(url);
    early.delete(url);  // handed over once; a later fetch (whyNotLoaded's) asks the network again
    response = await (started && !args[1]?.integrity ? started : nativeFetch(...args));
  } catch (error) {
    if (wasm) wasmIn();
    throw error;
  }
  if (!response.body || shown >= STEPS.length) {
    if (wasm) wasmIn();
    return response;
  }
  const counted = response.body.pipeThrough(new TransformStream({
    transform(chunk, out) {
      received += chunk.byteLength;
      if (performance.now() - reported > REPORT_MS) {
        reported = performance.now();
        postMessage({ download: { received } });
      }
      out.enqueue(chunk);
    },
    flush() {
      if (wasm) wasmIn();
    },
  }));
  const { status, statusText, headers } = response;
  return new Response(counted, { status, statusText, headers });
};

// loadPackage only reports "Failed to fetch" when the bytes do not match: fetch the wheel again, unchecked,
// and say whether it is missing or differs from the lock file's sha256.
async function whyNotLoaded() {
  try {
    const { file_name: name, sha256 } = (await (await fetch(lockUrl)).json()).packages.calc;
    const response = await fetch(new URL(name, lockUrl), { cache: "no-store" });
    if (!response.ok) return `calc's wheel could not be fetched (HTTP ${response.status})`;
    const digest = await crypto.subtle.digest("SHA-256", await response.arrayBuffer());
    const hex = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
    if (hex !== sha256) {
      return `calc's wheel was refused: its sha256 is ${hex.slice(0, 12)}…, the lock file says ${sha256.slice(0, 12)}…`;
    }
    return "calc's wheel matches the lock file but could not be installed";
  } catch (error) {
    return `calc's wheel could not be fetched or checked (${error?.message ?? error})`;
  }
}

const web = (async () => {
  progress(0);
  const { loadPyodide } = await import("../assets/pyodide/pyodide.mjs");
  const pyodide = await loadPyodide({
    indexURL: new URL("pyodide/", assets).href,
    lockFileURL: lockUrl.href,  // packages are found beside it
    packages: ["calc"],  // fetched as soon as the lock file is in, alongside the runtime's own downloads
  });
  if (!pyodide.loadedPackages.calc) throw new Error(await whyNotLoaded());
  progress(1);
  const module = pyodide.pyimport("calc.web");
  progress(STEPS.length, "Ready");
  // PyYAML (hooks/wheel.py's pure-Python wheel, in the site's lock file) is loaded when a trainer config is
  // first read, not before: nothing else needs it.
  // loadPackage reports a failed download and resolves: a failure is said, and the next read tries again.
  let yaml = null;
  const loadYaml = () => (yaml ??= pyodide.loadPackage("pyyaml", { messageCallback: () => {} }).then(() => {
    if (!pyodide.loadedPackages.pyyaml) {
      yaml = null;
      throw new Error("PyYAML, which reads a YAML file, could not be fetched from this site: try again");
    }
  }));
  return { handle: module.handle, Sliced: module.Sliced, loadYaml };
})();

web.then(
  () => postMessage({ type: "ready" }),
  (error) => postMessage({ type: "failed", message: String(error?.message ?? error) }),
);

const KINDS = ["trainer", "numbers", "sweep", "plan"];  // most urgent first (calculator/worker.js asks them)
const SLICE_S = 0.004;  // a plan's slice, in seconds: what a reader's change may wait for (at least one layout)
const waiting = new Map();  // kind -> {id, request}: its newest question not yet begun
let sliced = null;  // the plan being worked out: {id, job} (job: a calc.web.Sliced)
let woken = false;

// Warming: Chromium compiles Pyodide's WebAssembly twice, first quickly, then each function that runs often
// again, optimised, in the background, once it has run enough. A change's code paths (the eager replay, the
// sweep) have run only a few times when the page goes live, so the reader's first changes ran the quick code:
// in bench_site.py, the first ten changes after live took a median 32 to 46 ms, the thirty after them 16 to
// 19 (Chromium with every function optimised at once: 16 for the first ten). Once the worker has been idle for
// WARM_IDLE_MS, it runs the last change's two questions again, answering nothing (the same inputs: no cache
// holds other answers for it), one at a time with the event loop between, until WARM_RUNS have run; a question
// that comes meanwhile waits for at most one of them. A large model's questions are not run again: none whose
// answer, or whose warming run, took longer than WARM_MAX_MS (the default's first answers, cold, took 24 to
// 88 ms in the page). Then it says {warmed: runs}, and again for each other model (preset, family or pasted
// config) the reader chooses once it has warmed. After a 2 s pause the first ten changes took a median
// 19 to 25 ms in five runs with 24 warming runs, 21 to 49 ms with 12.
const WARM_IDLE_MS = 150;
const WARM_RUNS = 24;
const WARM_MAX_MS = 100;
let warmLeft = WARM_RUNS;
let warmRuns = 0;
let warmedFor = null;  // the model the runs were for: another model's code (its family's layers) warms again
function modelOf(request) {
  try {
    const { preset, family, "hf-config": config } = JSON.parse(request).inputs ?? {};
    return JSON.stringify([preset, family, config]);
  } catch {
    return null;  // no model to tell apart (a request calc answered is JSON: not expected)
  }
}
let warmTimer = null;
const lastAsked = new Map();  // kind -> the last request of that kind answered, and quickly ("numbers", "sweep")

// Back to the event loop, then work on: a MessageChannel's message, which no timer clamps, runs after the
// questions that came meanwhile.
const channel = new MessageChannel();
channel.port1.onmessage = () => { woken = false; work(); };
function later() {
  if (!woken) channel.port2.postMessage(null);
  woken = true;
}
function supersede(question) {
  if (question) postMessage({ id: question.id, superseded: true });
}
function stopPlan() {
  try {
    sliced?.job.destroy();
  } catch {
    // a Python that failed for good frees nothing more
  }
  sliced = null;
}
function failure(id, error) {
  // After a fatal error (a stack overflow in the WebAssembly, say) Pyodide refuses every later call.
  const fatal = Boolean(error?.pyodide_fatal_error) || /fatal/i.test(String(error?.message ?? error));
  postMessage({ id, error: String(error?.message ?? error), fatal });
}

onmessage = ({ data }) => {
  clearTimeout(warmTimer);
  const kind = data.drop ?? (KINDS.includes(data.kind) ? data.kind : "numbers");
  supersede(waiting.get(kind));
  waiting.delete(kind);
  if (kind === "plan" && sliced) {
    supersede(sliced);
    stopPlan();
  }
  if (!data.drop) waiting.set(kind, data);
  later();
};

// One step of work: the most urgent question waiting, answered whole (a plan begun), or the plan's next slice.
async function work() {
  let calc;
  try {
    calc = await web;
  } catch {
    return;  // "failed" was said; the page starts no question
  }
  const kind = KINDS.find((k) => waiting.has(k));
  if (kind === "plan") {
    const { id, request } = waiting.get(kind);
    waiting.delete(kind);
    try {
      sliced = { id, job: calc.Sliced(request) };
    } catch (error) {
      failure(id, error);
    }
  } else if (kind) {
    const { id, request } = waiting.get(kind);
    waiting.delete(kind);
    try {
      if (kind === "trainer") await calc.loadYaml();
      const began = performance.now();
      const answer = calc.handle(request);
      postMessage({ id, answer });
      // a refused input's answer runs none of a change's code: only answers given are warmed
      if (kind !== "trainer" && performance.now() - began <= WARM_MAX_MS && answer.startsWith('{"ok": true')) {
        lastAsked.set(kind, request);
        const model = modelOf(request);
        if (warmedFor !== null && model !== warmedFor && warmLeft === 0) {
          warmLeft = WARM_RUNS;
          warmRuns = 0;
        }
        warmedFor = model;
      } else {
        lastAsked.delete(kind);
      }
    } catch (error) {
      failure(id, error);
      warmLeft = 0;
    }
  } else if (sliced) {
    const { id, job } = sliced;
    try {
      const answer = job.step(SLICE_S);
      if (answer !== undefined) {
        stopPlan();
        postMessage({ id, answer });
      }
    } catch (error) {
      stopPlan();
      failure(id, error);
    }
  }
  if (waiting.size || sliced) later();
  else if (warmLeft > 0 && lastAsked.size) warmTimer = setTimeout(() => warm(calc), WARM_IDLE_MS);
}

// One warming run (see WARM_RUNS), its answer dropped; then the next, after the event loop, while idle.
function warm(calc) {
  const requests = [...lastAsked.values()];
  if (waiting.size || sliced || warmLeft <= 0 || !requests.length) return;
  const began = performance.now();
  try {
    calc.handle(requests[warmLeft % requests.length]);
  } catch {
    warmLeft = 0;  // the same question was answered a moment ago; a failure now ends the warming, unsaid
    return;
  }
  warmRuns += 1;
  warmLeft = performance.now() - began > WARM_MAX_MS ? 0 : warmLeft - 1;
  if (warmLeft > 0) warmTimer = setTimeout(() => warm(calc), 0);
  else postMessage({ warmed: warmRuns });  // for the tests and the benchmark: the page answers nothing to it
}
