"""MkDocs hook: put everything the pages load into the site itself.

- Pyodide's runtime, from the npm package ``pyodide`` (node_modules, see package.json);
- KaTeX's stylesheet and fonts (the formulas are typeset at build time, hooks/katex.py);
- calc as a wheel built from calc/ (hooks/wheel.py), which the worker unpacks;
- static figures of the deck's configuration (hooks/figures.py), drawn from calc.

Nothing is written into docs/: the files are added to the build as generated
files, so ``mkdocs build`` alone produces the complete site and ``mkdocs serve``
serves the same. A missing node_modules fails the build with what to run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: hooks/ and calc/
from hooks import deck, figures, wheel

NODE_MODULES = deck.ROOT / "node_modules"
# What loadPyodide() fetches for a pure-Python program: no packages from the lock file.
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json")


def _vendored(config, src_uri: str, path: Path) -> File:
    if not path.is_file():
        raise PluginError(f"{path} is missing: run `make setup` (npm ci) first")
    return File.generated(config, src_uri, abs_src_path=str(path))


def figure_files() -> dict[str, bytes]:
    """The static figures for the deck's configuration, as SVG bytes."""
    answer = deck.compute(deck.DEFAULT_INPUTS)
    capacity = answer["capacity"]
    return {
        "memory-breakdown.svg": figures.breakdown(answer["table"], capacity),
        "peak-vs-seq.svg": figures.sweep(answer["sweep"]["seq"], answer["sweep"]["peaks"], capacity),
        "step-walk.svg": figures.walk(answer["step"]),
    }


def on_files(files, config):
    pyodide = NODE_MODULES / "pyodide"
    for name in PYODIDE_FILES:
        files.append(_vendored(config, f"assets/pyodide/{name}", pyodide / name))
    katex = NODE_MODULES / "katex" / "dist"
    files.append(_vendored(config, "assets/katex/katex.min.css", katex / "katex.min.css"))
    for font in sorted((katex / "fonts").glob("*.woff2")):  # every browser we target reads woff2 first
        files.append(_vendored(config, f"assets/katex/fonts/{font.name}", font))
    files.append(File.generated(config, f"assets/wheels/{wheel.filename()}", content=wheel.build()))
    for name, svg in figure_files().items():
        files.append(File.generated(config, f"figures/{name}", content=svg))
    return files
