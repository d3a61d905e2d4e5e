// Runs calc inside Pyodide, off the page's main thread: a JSON request in, calc.web.handle's JSON out.
// Everything is a file of this site (hooks/assets.py, hooks/pyodide_site.py); nothing comes from another host:
//   assets/pyodide/   Pyodide 314, its standard library cut to what calc uses and precompiled to .pyc;
//   assets/wheels/    calc's wheel and the site's pyodide-lock.json (made by pyodide-build), which holds
//                     the wheel's sha256: loadPackage("calc") refuses a wheel whose bytes differ.
// Messages to the page: {progress: {done, total, label}} while loading, then {type: "ready"} or
// {type: "failed", message}; then {id, answer} or {id, error} for each {id, request}.
import { loadPyodide } from "../assets/pyodide/pyodide.mjs";

const assets = new URL("../assets/", import.meta.url);
// The steps, in order; the first (about 5 MB to download, then WebAssembly to compile) is the long one.
const STEPS = ["Downloading and starting Python (Pyodide) and calc", "Starting calc"];
let shown = -1;  // progress only moves forward
function progress(done, label = STEPS[done]) {
  if (done <= shown) return;
  shown = done;
  postMessage({ progress: { done, total: STEPS.length, label } });
}

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
    postMessage({ id: data.id, error: String(error?.message ?? error) });
  }
};
