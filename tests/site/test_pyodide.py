"""The same core under Pyodide (Python 3.14, WebAssembly) in Node gives the same JSON: from its sources
in the stock runtime, and as the site ships it (cut standard library, .pyc, loaded through the lock file)."""

import json
import random
import subprocess

from site_fixtures import built_site

import calc
from conftest import ROOT
from hooks import pyodide_site

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


def sample_requests() -> list[str]:
    """The deck's four recipes, every preset with its sweep and plan, a sample of drawn shapes and runs
    (some of them rejected), and every kind of request the build's trace sends."""
    rnd = random.Random(11)
    asks: list[dict] = [{"inputs": {"recipe": r, "recompute": c}, "sweep": True} for r, c in calc.TABLE_ROWS]
    asks += [{"inputs": {"preset": name, "seq": str(rnd.choice([128, 1000, 2048, 8192])),
                         "micro-batch": str(rnd.randint(1, 8))}, "sweep": True, "plan": True} for name in calc.PRESETS]
    for _ in range(16):
        heads = rnd.choice([1, 2, 4, 8, 12, 16, 32, 40, 64])
        recipe, recompute = rnd.choice(calc.TABLE_ROWS)
        asks.append({"inputs": {
            "layers": str(rnd.randint(1, 96)), "hidden": str(heads * rnd.choice([8, 64, 128])), "heads": str(heads),
            "kv-heads": str(rnd.choice([d for d in range(1, heads + 1) if heads % d == 0])),
            "ffn": str(rnd.randint(1, 30000)), "vocab": str(rnd.randint(1, 256_000)), "seq": str(rnd.randint(1, 16384)),
            "micro-batch": str(rnd.randint(1, 16)), "recipe": recipe, "recompute": recompute,
            "dp": str(rnd.choice([1, 2, 8])), "zero": str(rnd.randint(0, 3)), "tp": str(rnd.choice([1, 2, 3]))},
            "sweep": rnd.random() < 0.5, "plan": rnd.random() < 0.3})
    return [json.dumps(a) for a in asks] + pyodide_site.requests()


def test_the_sites_cut_precompiled_runtime_answers_like_cpython(tmp_path):
    """The site's own files: its cut standard library (.pyc) and calc loaded with loadPackage through its lock
    file, started as the worker starts them. Every calc module imports, and every answer equals CPython's."""
    site = built_site()
    requests = sample_requests()
    (tmp_path / "requests.json").write_text(json.dumps(requests))
    out = subprocess.run(
        ["node", str(ROOT / "hooks" / "pyodide_prepare.mjs"), "--check", str(ROOT / "node_modules" / "pyodide"),
         str(site / "assets" / "pyodide" / "python_stdlib.zip"), str(site / "assets" / "wheels" / "pyodide-lock.json"),
         str(tmp_path / "requests.json")],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert out.returncode == 0, out.stderr
    answers = [json.loads(a) for a in json.loads(out.stdout)]
    assert len(answers) == len(requests)
    assert sum(a["ok"] for a in answers) >= len(calc.TABLE_ROWS) + len(calc.PRESETS)  # not all rejections
    for request, answer in zip(requests, answers, strict=True):
        assert answer == json.loads(calc.web.handle(request)), request
