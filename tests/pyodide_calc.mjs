// Run calc inside Pyodide under Node: node tests/pyodide_calc.mjs <repo root> <python expression>
// Copies calc's .py files (its subpackages too) and calc/configs/*.json (the presets' package data) into Pyodide's
// file system, evaluates the expression, prints its value (a string).
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { loadPyodide } from "pyodide";

const [root, expression] = process.argv.slice(2);
const pyodide = await loadPyodide();
function copy(dir) {
  pyodide.FS.mkdirTree(`/home/pyodide/${dir}`);
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory() && entry.name !== "__pycache__") copy(path);
    else if (entry.name.endsWith(dir.endsWith("configs") ? ".json" : ".py")) {
      pyodide.FS.writeFile(`/home/pyodide/${path}`, readFileSync(join(root, path), "utf8"));
    }
  }
}
copy("calc");
pyodide.runPython("import sys; sys.path.insert(0, '/home/pyodide')");
process.stdout.write(String(pyodide.runPython(expression)));
