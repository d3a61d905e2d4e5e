// Runs calc inside Pyodide, off the page's main thread: a JSON request in, calc.web.handle's JSON out.
// Everything is a file of this site (hooks/assets.py, hooks/pyodide_site.py); nothing comes from another host:
//   assets/pyodide/   Pyodide 314, its standard library cut to what calc uses and precompiled to .pyc;
//   assets/wheels/    calc's wheel and the site's pyodide-lock.json (made by pyodide-build), which holds
//                     the wheel's sha256: loadPackage("calc") refuses a wheel whose bytes differ.
// Messages to the page: {progress: {done, total, label}} while loading, with {download: {received}} (bytes
// downloaded so far) between them, then {type: "ready"} or {type: "failed", message}; then {id, answer} or {id, error, fatal} for each
// {id, request} (fatal: Python can no longer run here, and the page starts a new worker).
import { loadPyodide } from "../assets/pyodide/pyodide.mjs";

const assets = new URL("../assets/", import.meta.url);
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
// count their bytes as they arrive, and say so at most every REPORT_MS.
const REPORT_MS = 200;
const nativeFetch = globalThis.fetch.bind(globalThis);
let reported = 0;
globalThis.fetch = async (...args) => {
  const response = await nativeFetch(...args);
  if (!response.body || shown >= STEPS.length) return response;
  const counted = response.body.pipeThrough(new TransformStream({
    transform(chunk, out) {
      received += chunk.byteLength;
      if (performance.now() - reported > REPORT_MS) {
        reported = performance.now();
        postMessage({ download: { received } });
      }
      out.enqueue(chunk);
    },
  }));
  const { status, statusText, headers } = response;
  return new Response(counted, { status, statusText, headers });
};

const lockUrl = new URL("wheels/pyodide-lock.json", assets);

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

const handle = (async () => {
  progress(0);
  const pyodide = await loadPyodide({
    indexURL: new URL("pyodide/", assets).href,
    lockFileURL: lockUrl.href,  // packages are found beside it
    packages: ["calc"],  // fetched as soon as the lock file is in, alongside the runtime's own downloads
  });
  if (!pyodide.loadedPackages.calc) throw new Error(await whyNotLoaded());
  progress(1);
  const entry = pyodide.pyimport("calc.web").handle;
  progress(STEPS.length, "Ready");
  return entry;
})();

handle.then(
  () => postMessage({ type: "ready" }),
  (error) => postMessage({ type: "failed", message: String(error?.message ?? error) }),
);

onmessage = async ({ data }) => {
  try {
    postMessage({ id: data.id, answer: (await handle)(data.request) });
  } catch (error) {
    // After a fatal error (a stack overflow in the WebAssembly, say) Pyodide refuses every later call.
    const fatal = Boolean(error?.pyodide_fatal_error) || /fatal/i.test(String(error?.message ?? error));
    postMessage({ id: data.id, error: String(error?.message ?? error), fatal });
  }
};
