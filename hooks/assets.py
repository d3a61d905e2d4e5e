"""MkDocs hook: put everything the pages load into the site itself.

- Pyodide's runtime, from the npm package ``pyodide`` (node_modules, see package.json), with its
  standard library cut to what calc uses and precompiled (hooks/pyodide_site.py);
- calc's wheel (.pyc) and the site's ``pyodide-lock.json`` holding its sha256, in assets/wheels/,
  which the worker loads with ``pyodide.loadPackage("calc")``;
- a gzip sibling (``name.gz``) and a Brotli sibling (``name.br``) of each compressible runtime file
  and of the calculator's scripts (calculator.js and its ES modules under calculator/), for hosts
  that serve precompressed files (GitHub Pages compresses on its own; Netlify, Cloudflare,
  nginx's gzip_static and brotli_static, Caddy's precompressed send these); the standard library's
  siblings compress the same archive with its members stored (``stored_zip``), not deflated one by
  one: Brotli over the whole archive sends 0.87 MB where the deflated zip is 1.25 MB;
- KaTeX's stylesheet and fonts (the formulas are typeset at build time, hooks/katex.py);
- static figures of the deck's configuration (hooks/figures.py), drawn from calc.

Nothing is written into docs/: the files are added to the build as generated
files, so ``mkdocs build`` alone produces the complete site and ``mkdocs serve``
serves the same. A missing node_modules fails the build with what to run.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import mimetypes
import sys
import zipfile
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: hooks/ and calc/
from hooks import deck, figures, pyodide_site, wheel

NODE_MODULES = deck.ROOT / "node_modules"
# Pyodide's runtime as the npm package ships it; its python_stdlib.zip is replaced by the cut one.
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm")
# Compressible files that get .gz and .br siblings (a .zip or .whl is compressed already).
COMPRESSIBLE_SUFFIXES = (".mjs", ".js", ".wasm", ".json")
JAVASCRIPTS = deck.ROOT / "docs" / "javascripts"
# Pages of docs/ already, which get only their siblings here: the worker, the calculator's start and its modules.
PAGE_SCRIPTS = ("calc-worker.mjs", "calculator.js", "calculator/**/*.js")
COMPRESSED_CACHE = deck.ROOT / "build" / "compressed"  # by content hash: Brotli at quality 11 is slow
BROTLI_QUALITY = 11  # Brotli's maximum (RFC 7932 encoders: 0-11); the same bytes for the same input
# `mkdocs serve` too must send WebAssembly as application/wasm: Pyodide 314 hangs on anything else.
mimetypes.add_type("application/wasm", ".wasm")
mimetypes.add_type("text/javascript", ".mjs")


def _brotli(data: bytes) -> bytes:
    try:
        import brotli
    except ImportError as error:
        raise PluginError("Python's brotli is missing: run `make setup` (pip install -e '.[docs]')") from error
    return brotli.compress(data, quality=BROTLI_QUALITY)


ENCODERS = {  # sibling suffix: encoder, each giving the same bytes each build
    "gz": lambda data: gzip.compress(data, compresslevel=9, mtime=0),  # -9, no timestamp or name
    "br": _brotli,
}


def compressed(data: bytes, suffix: str) -> bytes:
    """`data` as its `.gz` or `.br` sibling, cached by content under build/compressed/."""
    path = COMPRESSED_CACHE / f"{hashlib.sha256(data).hexdigest()}.{suffix}"
    if path.is_file():
        return path.read_bytes()
    out = ENCODERS[suffix](data)
    COMPRESSED_CACHE.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{id(out)}.tmp")
    tmp.write_bytes(out)
    tmp.replace(path)
    return out


def stored_zip(data: bytes) -> bytes:
    """The zip archive `data` with every member stored (uncompressed): the same names, bytes, dates and order,
    which zipimport reads as it reads the deflated one. Its siblings are what a host sends compressed: one
    stream over every member finds what the .pyc files share, which deflating each alone cannot."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as stored:
        for info in source.infolist():
            stored.writestr(info, source.read(info), compress_type=zipfile.ZIP_STORED)
    return out.getvalue()


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


def runtime_files() -> dict[str, bytes]:
    """Everything the calculator's worker loads, by its path in the site, .gz and .br siblings included, and
    the siblings of the calculator's scripts."""
    pyodide = NODE_MODULES / "pyodide"
    for name in PYODIDE_FILES:
        if not (pyodide / name).is_file():
            raise PluginError(f"{pyodide / name} is missing: run `make setup` (npm ci) first")
    try:
        built = pyodide_site.outputs()
    except pyodide_site.BuildError as error:
        raise PluginError(str(error)) from error
    out = {f"assets/pyodide/{name}": (pyodide / name).read_bytes() for name in PYODIDE_FILES}
    out["assets/pyodide/python_stdlib.zip"] = (built / pyodide_site.STDLIB).read_bytes()
    out[f"assets/wheels/{wheel.filename()}"] = (built / wheel.filename()).read_bytes()
    out[f"assets/wheels/{wheel.yaml_filename()}"] = (built / wheel.yaml_filename()).read_bytes()
    out[f"assets/wheels/{pyodide_site.LOCK}"] = (built / pyodide_site.LOCK).read_bytes()
    scripts = {f"javascripts/{p.relative_to(JAVASCRIPTS).as_posix()}": p.read_bytes()
               for pattern in PAGE_SCRIPTS for p in sorted(JAVASCRIPTS.glob(pattern))}  # fmt: skip
    out.update(scripts)
    for path, data in list(out.items()):
        if path.endswith(COMPRESSIBLE_SUFFIXES):
            for suffix in ENCODERS:
                out[f"{path}.{suffix}"] = compressed(data, suffix)
    stdlib = stored_zip(out["assets/pyodide/python_stdlib.zip"])  # the plain file stays deflated, for a host
    for suffix in ENCODERS:                                        # that sends files as they are
        out[f"assets/pyodide/python_stdlib.zip.{suffix}"] = compressed(stdlib, suffix)
    for path in scripts:  # pages of docs/ already: only their siblings are added here
        del out[path]
    return out


def on_files(files, config):
    for path, data in runtime_files().items():
        files.append(File.generated(config, path, content=data))
    katex = NODE_MODULES / "katex" / "dist"
    files.append(_vendored(config, "assets/katex/katex.min.css", katex / "katex.min.css"))
    for font in sorted((katex / "fonts").glob("*.woff2")):  # every browser we target reads woff2 first
        files.append(_vendored(config, f"assets/katex/fonts/{font.name}", font))
    for name, svg in figure_files().items():
        files.append(File.generated(config, f"figures/{name}", content=svg))
    return files
