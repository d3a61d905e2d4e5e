"""The same core under Pyodide (Python 3.14, WebAssembly) in Node gives the same JSON."""

import json
import subprocess

import calc
from conftest import ROOT

RUNNER = ROOT / "tests" / "pyodide_calc.mjs"


def in_pyodide(expression: str) -> str:
    out = subprocess.run(["node", str(RUNNER), str(ROOT), expression], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_pyodide_matches_cpython():
    """The four recipes' full steps (events included) and the web answer are identical."""
    expr = (
        "import calc, json, sys\n"
        "json.dumps({'version': sys.version_info[:2], 'steps': [calc.step(calc.PRESETS['llama-7b'], 4096, 1, r, c)"
        " for r, c in calc.TABLE_ROWS], 'web': json.loads(calc.web.handle('{}'))})"
    )
    got = json.loads(in_pyodide(expr))
    assert tuple(got["version"]) >= (3, 12)  # really Pyodide's interpreter, not ours
    want = [calc.step(calc.PRESETS["llama-7b"], 4096, 1, r, c) for r, c in calc.TABLE_ROWS]
    assert got["steps"] == json.loads(json.dumps(want))
    assert got["web"] == json.loads(calc.web.handle("{}"))
