// Runs calc inside Pyodide, off the page's main thread: a JSON request in, calc.web.handle's JSON out.
// Pyodide and the calc wheel are files of this site (hooks/assets.py); nothing comes from another host.
// The wheel is unpacked with unpackArchive: calc is pure Python with no dependencies, so micropip
// (and the pyodide-build toolchain, which needs a second, newer Python) is not needed.
import { loadPyodide } from "../assets/pyodide/pyodide.mjs";

const wheelUrl = new URL(self.location.href).searchParams.get("wheel");

async function fetchWheel() {
  const response = await fetch(wheelUrl);
  if (!response.ok) throw new Error(`could not fetch the calc wheel (HTTP ${response.status})`);
  return response.arrayBuffer();
}

// Start Pyodide and fetch the wheel at the same time; the wheel is small and arrives first.
const handle = (async () => {
  const [pyodide, wheel] = await Promise.all([
    loadPyodide({ indexURL: new URL("../assets/pyodide/", import.meta.url).href }),
    fetchWheel(),
  ]);
  pyodide.unpackArchive(wheel, "wheel");
  return pyodide.pyimport("calc.web").handle;
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
