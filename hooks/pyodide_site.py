"""What the calculator's worker loads, made at build time the Pyodide way.

1. calc's wheel from the standard build front end (hooks/wheel.py);
2. in Node, with the site's own Pyodide (hooks/pyodide_prepare.mjs): install it with
   ``loadPackage``, import every calc module, answer every kind of request (``requests()``), and
   keep from the standard library zip only the modules that loaded; compile those and calc to
   ``.pyc`` with Pyodide's Python 3.14 (a ``.pyc`` must come from the runtime's own interpreter);
3. ``pyodide lockfile add-wheels`` (pyodide-build, in the Python 3.12+ tool environment that
   ``make setup`` creates, ``.venv-pyodide``) writes the site's ``pyodide-lock.json`` with the
   wheel's sha256, so ``pyodide.loadPackage("calc")`` refuses a wheel whose bytes changed;
4. the cut runtime is started once more, as the worker starts it, and must answer every request
   exactly as the full one did, or the build fails.

Everything is deterministic and cached under ``build/pyodide-site/`` by a hash of its inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import calc  # noqa: E402
from hooks import wheel  # noqa: E402

PYODIDE = ROOT / "node_modules" / "pyodide"
TOOL_VENV = Path(os.environ.get("PYODIDE_BUILD_VENV", ROOT / ".venv-pyodide"))
CACHE = ROOT / "build" / "pyodide-site"
HERE = Path(__file__).resolve().parent
PREPARE = (HERE / "pyodide_prepare.mjs", HERE / "pyodide_prepare.py", HERE / "wheel.py", Path(__file__).resolve())
LOCK = "pyodide-lock.json"
STDLIB = "python_stdlib.zip"


class BuildError(RuntimeError):
    pass


def requests() -> list[str]:
    """Every kind of request the page sends calc.web.handle, as JSON strings: each preset with its
    sweep and plan, each recipe, each walk, parallelism, a custom shape, and rejected input."""
    from calc.fields import WALKS

    asks: list[object] = [{}]
    asks += [{"inputs": {"preset": name}, "sweep": True, "plan": True} for name in calc.PRESETS]
    asks += [{"inputs": {"recipe": r, "recompute": c}, "sweep": True} for r, c in calc.TABLE_ROWS]
    asks += [{"inputs": {"walk": w}, "sweep": False} for w in WALKS]
    asks += [{"inputs": {"seq": "3000", "finetune": "lora"}, "sweep": True, "numbers": False}]  # a change's sweep
    asks += [
        {"inputs": {"dp": "8", "tp": "2", "pp": "2", "zero": "1", "sequence-parallel": "true", "flash": "true",
                    "grad-accum": "4", "global-batch": "512", "capacity-gb": "40"}, "plan": True},
        {"inputs": {"layers": "12", "hidden": "768", "heads": "12", "kv-heads": "4", "ffn": "3072", "vocab": "50257",
                    "seq": "1,024", "micro-batch": "8", "norm": "layer", "positions": "learned", "context": "2048",
                    "tied": "true", "gated-ffn": "false", "bias": "true"}, "sweep": True, "plan": True},
        *trainer_requests(),
        {"inputs": {"heads": "33"}},
        {"inputs": {"seq": "-1"}},
        {"inputs": {"preset": "nope"}},
    ]
    return [json.dumps(a, sort_keys=True) for a in asks] + ["not json", "[1, 2]"]


TRAINER_EXAMPLES = ROOT / "tests" / "trainer_configs"
# The trainer box's requests (calc.web.trainer_answer): YAML (PyYAML's reader, and the standard library it
# imports), JSON and TOML files, and refusals (YAML that does not parse, TOML of no tool's).
TRAINER_FILES = (("axolotl/qlora.yml",), ("llamafactory/llama3_lora_sft.yaml",), ("torchtitan/llama3_8b.toml",),
                 ("llamafactory/deepspeed/ds_z0_config.json",), ("accelerate/trl_zero3.yaml",))  # fmt: skip


def trainer_requests() -> list[dict]:
    asks: list[dict] = [{"trainer": [(TRAINER_EXAMPLES / name).read_text() for name in names],
                         "inputs": {"walk": "deck", "device": "cuda"}} for names in TRAINER_FILES]  # fmt: skip
    asks += [{"trainer": "base_model: x\n  bad: [", "inputs": {}}, {"trainer": ["[a]\nb = 1"], "inputs": {}}]
    return asks


def pyodide_tool() -> Path:
    """The ``pyodide`` command of pyodide-build's tool environment (Python 3.12+)."""
    tool = TOOL_VENV / "bin" / "pyodide"
    if not tool.exists():
        raise BuildError(f"{tool} is missing: run `make setup`, which creates {TOOL_VENV.name} with Python 3.12+ "
                         "and pyodide-build (see CONTRIBUTING.md, 'How the build finds Python 3.12')")
    return tool


def _run(args: list[str], what: str, **kwargs) -> str:
    out = subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)
    if out.returncode != 0:
        command = " ".join(map(str, args[:3]))
        raise BuildError(f"{what} failed ({command} ...):\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    return out.stdout


def _key(requests_json: str) -> str:
    digest = hashlib.sha256(requests_json.encode())
    for path in [*wheel.sources(), *wheel.yaml_sources(), *PREPARE, PYODIDE / "package.json", TOOL_VENV / "pyvenv.cfg"]:
        digest.update(str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path).encode())
        digest.update(path.read_bytes() if path.exists() else b"-")
    return digest.hexdigest()[:20]


def build(out: Path) -> None:
    """Write into `out`: python_stdlib.zip (cut, .pyc), calc's .pyc wheel, pyodide-lock.json,
    stdlib-modules.json and answers.json."""
    if not (PYODIDE / "pyodide.mjs").is_file():
        raise BuildError(f"{PYODIDE} is missing: run `make setup` (npm ci) first")
    tool = pyodide_tool()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pyodide-site-") as scratch:
        tmp = Path(scratch)
        (tmp / "dist").mkdir()
        source_wheel = tmp / "dist" / wheel.filename()
        source_wheel.write_bytes(wheel.build())
        yaml_wheel = tmp / "dist" / wheel.yaml_filename()
        yaml_wheel.write_bytes(wheel.yaml_wheel())
        (tmp / "requests.json").write_text(json.dumps(requests()))
        _run(["node", str(HERE / "pyodide_prepare.mjs"), str(PYODIDE), str(source_wheel), str(yaml_wheel),
              str(tmp / "requests.json"), str(out)], "compiling calc, PyYAML and the standard library in Pyodide")
        # The site's lock file: Pyodide's own, less its packages (the page loads none of them), plus calc and
        # PyYAML.
        base = json.loads((PYODIDE / LOCK).read_text())
        (tmp / "base-lock.json").write_text(json.dumps({**base, "packages": {}}))
        _run([str(tool), "lockfile", "add-wheels", "--input", str(tmp / "base-lock.json"), "--output",
              str(out / LOCK), "--base-path", str(out), str(out / wheel.filename()), str(out / wheel.yaml_filename())],
             "pyodide lockfile add-wheels", cwd=tmp)
        check = _run(["node", str(HERE / "pyodide_prepare.mjs"), "--check", str(PYODIDE), str(out / STDLIB),
                      str(out / LOCK), str(tmp / "requests.json")], "starting the cut runtime")
    if json.loads(check) != json.loads((out / "answers.json").read_text()):
        raise BuildError("the cut, precompiled runtime answers differently from Pyodide's full standard library")


def outputs() -> Path:
    """The directory holding this build's files (built now unless cached); PYODIDE_SITE_CACHE=0 rebuilds."""
    key = _key(json.dumps(requests()))
    done = CACHE / key
    if (done / LOCK).is_file() and os.environ.get("PYODIDE_SITE_CACHE") != "0":
        return done
    work = CACHE / f".{key}.{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    build(work)
    shutil.rmtree(done, ignore_errors=True)
    work.rename(done)
    for old in CACHE.iterdir():  # keep the newest build only (a concurrent build's work dir starts with '.')
        if old != done and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    return done


def lock_entry(directory: Path) -> dict:
    """calc's entry in the site's lock file."""
    return json.loads((directory / LOCK).read_text())["packages"]["calc"]
