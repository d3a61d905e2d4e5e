// Build-time step of hooks/pyodide_site.py, run in Node with the site's own Pyodide:
//   node hooks/pyodide_prepare.mjs <pyodide dir> <calc wheel (.py)> <pyyaml wheel (.py)> <requests.json> <out dir>
// 1. Starts Pyodide with its full standard library, installs the wheel with loadPackage (as the worker
//    does), imports every calc module, answers every request and raises one Python error: the modules
//    that loads from the standard library zip are the ones the site needs.
// 2. Writes, compiled to .pyc by Pyodide's own Python (unchecked-hash .pyc: no timestamps, same bytes
//    each build): <out>/python_stdlib.zip (only those modules) and <out>/<wheel name> (calc as .pyc),
//    and <out>/<pyyaml wheel name> (PyYAML as .pyc: the page loads it for a trainer config's YAML),
//    plus <out>/stdlib-modules.json (the list) and <out>/answers.json (the answers, for the check).
//    node hooks/pyodide_prepare.mjs --check <pyodide dir> <stdlib zip> <lock file> <requests.json>
// starts the cut runtime the way the worker does and prints its answers as JSON, one per request.
import { readFileSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const STDLIB = "/lib/python314.zip/";  // where Pyodide 314 mounts python_stdlib.zip (a zipimport entry)

async function start(pyodideDir, options = {}) {
  const { loadPyodide } = await import(pathToFileURL(join(pyodideDir, "pyodide.mjs")).href);
  return loadPyodide({ indexURL: resolve(pyodideDir) + "/", ...options });
}

// calc's modules, from the installed package's files (subpackages included, __main__ left out: it runs the CLI).
function calcModules(pyodide, dir, prefix) {
  const names = [];
  for (const entry of pyodide.FS.readdir(dir).filter((n) => n !== "." && n !== "..").sort()) {
    const path = `${dir}/${entry}`;
    if (pyodide.FS.isDir(pyodide.FS.stat(path).mode)) {
      if (pyodide.FS.readdir(path).some((n) => n === "__init__.py" || n === "__init__.pyc")) {
        names.push(`${prefix}.${entry}`, ...calcModules(pyodide, path, `${prefix}.${entry}`));
      }
    } else if (/\.pyc?$/.test(entry) && !entry.startsWith("__")) {
      names.push(`${prefix}.${entry.replace(/\.pyc?$/, "")}`);
    }
  }
  return names;
}

function exercise(pyodide, requests) {
  const site = pyodide.runPython("import sys; [p for p in sys.path if p.endswith('site-packages')][0]");
  for (const name of ["calc", ...calcModules(pyodide, `${site}/calc`, "calc")]) pyodide.pyimport(name);
  const handle = pyodide.pyimport("calc.web").handle;  // exactly the worker's calls
  const answers = requests.map((request) => handle(request));
  try {
    pyodide.runPython("raise RuntimeError('a Python error reaching JavaScript is formatted by traceback')");
  } catch {
    // expected: the point was to load what formatting an error needs
  }
  return answers;
}

async function prepare(pyodideDir, wheel, yamlWheel, requestsPath, out) {
  const pyodide = await start(pyodideDir);
  await pyodide.loadPackage([resolve(wheel), resolve(yamlWheel)], { messageCallback: () => {} });
  const answers = exercise(pyodide, JSON.parse(readFileSync(requestsPath, "utf8")));
  // Read sys.modules before anything else is imported: this snippet itself uses only `sys`.
  const prefix = JSON.stringify(STDLIB);
  const used = pyodide.runPython([
    "import sys",
    `sorted({m.__spec__.origin[len(${prefix}):] for m in list(sys.modules.values())`,
    `        if getattr(getattr(m, "__spec__", None), "origin", None) and m.__spec__.origin.startswith(${prefix})})`,
  ].join("\n")).toJs();

  pyodide.FS.writeFile("/tmp/calc.whl", readFileSync(wheel));
  pyodide.FS.writeFile("/tmp/yaml.whl", readFileSync(yamlWheel));
  pyodide.globals.set("USED", pyodide.toPy(used));
  pyodide.globals.set("STDLIB", STDLIB);
  pyodide.runPython(readFileSync(new URL("pyodide_prepare.py", import.meta.url), "utf8"));
  const site = pyodide.runPython("import sys; [p for p in sys.path if p.endswith('site-packages')][0]");
  pyodide.runPython(`compile_stdlib("/tmp/stdlib.zip"); compile_wheel("/tmp/calc.whl", "/tmp/calc-pyc.whl", ${JSON.stringify(site)}); compile_wheel("/tmp/yaml.whl", "/tmp/yaml-pyc.whl", ${JSON.stringify(site)})`);
  writeFileSync(join(out, "python_stdlib.zip"), pyodide.FS.readFile("/tmp/stdlib.zip"));
  writeFileSync(join(out, basename(wheel)), pyodide.FS.readFile("/tmp/calc-pyc.whl"));
  writeFileSync(join(out, basename(yamlWheel)), pyodide.FS.readFile("/tmp/yaml-pyc.whl"));
  writeFileSync(join(out, "stdlib-modules.json"), JSON.stringify(used, null, 1) + "\n");
  writeFileSync(join(out, "answers.json"), JSON.stringify(answers));
}

if (process.argv[2] === "--check") {
  const [pyodideDir, stdlib, lock, requestsPath] = process.argv.slice(3);
  // As the worker does: the package through the lock file, loaded while Pyodide starts.
  const pyodide = await start(pyodideDir, { stdLibURL: resolve(stdlib), lockFileURL: resolve(lock), packages: ["calc"] });
  if (!pyodide.loadedPackages.calc) throw new Error("calc did not load from the lock file");
  await pyodide.loadPackage("pyyaml", { messageCallback: () => {} });  // as the worker does, for a trainer config
  if (!pyodide.loadedPackages.pyyaml) throw new Error("PyYAML did not load from the lock file");
  const answers = JSON.stringify(exercise(pyodide, JSON.parse(readFileSync(requestsPath, "utf8"))));
  process.stdout.write(answers, () => process.exit(0));  // exit only once the pipe has it all
} else {
  await prepare(...process.argv.slice(2));
}
