// Run calc inside Pyodide under Node: node tests/pyodide_calc.mjs <repo root> <python expression>
// Copies calc/*.py and calc/configs/*.json (the presets' package data) into Pyodide's file system, evaluates the expression, prints its value (a string).
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { loadPyodide } from "pyodide";

const [root, expression] = process.argv.slice(2);
const pyodide = await loadPyodide();
for (const [dir, suffix] of [["calc", ".py"], ["calc/configs", ".json"]]) {
  pyodide.FS.mkdirTree(`/home/pyodide/${dir}`);
  for (const name of readdirSync(join(root, dir)).filter((n) => n.endsWith(suffix))) {
    pyodide.FS.writeFile(`/home/pyodide/${dir}/${name}`, readFileSync(join(root, dir, name), "utf8"));
  }
}
pyodide.runPython("import sys; sys.path.insert(0, '/home/pyodide')");
process.stdout.write(String(pyodide.runPython(expression)));
