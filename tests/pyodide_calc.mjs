// Run calc inside Pyodide under Node: node tests/pyodide_calc.mjs <repo root> <python expression>
// Copies calc/*.py into Pyodide's file system, evaluates the expression, prints its value (a string).
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { loadPyodide } from "pyodide";

const [root, expression] = process.argv.slice(2);
const pyodide = await loadPyodide();
pyodide.FS.mkdirTree("/home/pyodide/calc");
for (const name of readdirSync(join(root, "calc")).filter((n) => n.endsWith(".py"))) {
  pyodide.FS.writeFile(`/home/pyodide/calc/${name}`, readFileSync(join(root, "calc", name), "utf8"));
}
pyodide.runPython("import sys; sys.path.insert(0, '/home/pyodide')");
process.stdout.write(String(pyodide.runPython(expression)));
