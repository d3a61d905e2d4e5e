"""Build calc's wheel with the standard build front end (``python -m build``, PyPA's ``build``).

The sources (calc/, pyproject.toml and the files its metadata names) are copied into a scratch
directory first, so setuptools leaves no ``build/`` or ``*.egg-info`` in the work tree and a module
deleted from calc/ cannot linger in the wheel. Whatever package data pyproject.toml declares goes
in, because setuptools reads the same declaration. ``SOURCE_DATE_EPOCH`` fixes the timestamps in
the zip: the same sources give the same bytes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "calc"
TAG = "py3-none-any"
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest time a zip can hold
# Besides calc/ itself, what setuptools may read to build the wheel.
PROJECT_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "LICENSE.txt")
# The wheel's README (its metadata's long description): one line, where the project's README is 26 kB
PAGE_README = "calc: the memory a training step needs, as the course's site runs it (see the repository's README).\n"


def _project(root: Path) -> dict:
    pyproject = root / "pyproject.toml"
    return tomllib.loads(pyproject.read_text()).get("project", {}) if pyproject.exists() else {}


def version(root: Path = ROOT) -> str:
    """calc's version from pyproject.toml's [project] table, else "0"."""
    ver = _project(root).get("version")
    return ver if isinstance(ver, str) else "0"


def filename(root: Path = ROOT) -> str:
    """The wheel's file name, e.g. ``calc-0.1.0-py3-none-any.whl``."""
    return f"{PACKAGE}-{version(root)}-{TAG}.whl"


def sources(root: Path = ROOT) -> list[Path]:
    """Every file the wheel is built from (caches and editor leftovers aside), in a stable order."""
    files = [p for p in (root / PACKAGE).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith((".pyc", "~", ".swp"))]
    files += [root / name for name in PROJECT_FILES if (root / name).is_file()]
    return sorted(files)


def build(root: Path = ROOT) -> bytes:
    """The wheel's bytes, from ``python -m build --wheel --no-isolation`` (offline: setuptools is installed)."""
    if not (root / PACKAGE / "__init__.py").is_file():
        raise RuntimeError(f"{root / PACKAGE} has no __init__.py: nothing to put in the wheel")
    with tempfile.TemporaryDirectory(prefix="calc-wheel-") as scratch:
        src, dist = Path(scratch) / "src", Path(scratch) / "dist"
        for path in sources(root):
            target = src / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        if (src / "README.md").is_file():  # the metadata's long description: the page never reads it, and every
            (src / "README.md").write_text(PAGE_README)  # reader would download the README's 26 kB with calc
        env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH, "PYTHONHASHSEED": "0"}
        out = subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)],
            capture_output=True, text=True, env=env, check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"python -m build failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        wheel = dist / filename(root)
        if not wheel.is_file():
            raise RuntimeError(f"python -m build made {sorted(p.name for p in dist.iterdir())}, not {wheel.name}")
        return wheel.read_bytes()


# PyYAML for the page: the pure-Python `yaml` package of the PyYAML installed here (the one the CLI reads trainer
# configs with: calc.trainers), as a py3-none-any wheel. Its C extension (_yaml, libyaml's) is left out; `yaml`
# falls back to its own Python reader without it (yaml/__init__.py: __with_libyaml__ False), which is what
# yaml.safe_load uses in CPython too (SafeLoader is the pure-Python one; CSafeLoader is only used when asked).
YAML_DIST = "PyYAML"


def _yaml_dist():
    from importlib.metadata import distribution

    return distribution(YAML_DIST)


def yaml_sources() -> list[Path]:
    """The installed PyYAML's files that go into the page's wheel (its Python modules and its licence)."""
    dist = _yaml_dist()
    keep = [f for f in dist.files or [] if (f.parts[0] == "yaml" and f.name.endswith(".py"))
            or f.name in ("LICENSE", "METADATA")]  # fmt: skip
    return sorted(Path(dist.locate_file(f)) for f in keep)


def yaml_filename() -> str:
    return f"pyyaml-{_yaml_dist().version}-{TAG}.whl"


def yaml_wheel() -> bytes:
    """The page's PyYAML wheel: the same bytes for the same installed PyYAML."""
    import base64
    import hashlib
    import io
    import zipfile

    dist = _yaml_dist()
    info = f"pyyaml-{dist.version}.dist-info"
    entries = []
    for path in yaml_sources():
        name = (f"yaml/{path.name}" if path.parent.name == "yaml" else f"{info}/{path.name}")
        entries.append((name, path.read_bytes()))
    entries.append((f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: hooks/wheel.py\nRoot-Is-Purelib: true\n"
                                     f"Tag: {TAG}\n".encode()))  # fmt: skip
    entries.append((f"{info}/top_level.txt", b"yaml\n"))
    lines = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
             for n, d in entries]  # fmt: skip
    entries.append((f"{info}/RECORD", ("\n".join([*lines, f"{info}/RECORD,,"]) + "\n").encode()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in sorted(entries):
            item = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
            item.external_attr = 0o644 << 16
            item.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(item, data, compresslevel=9)
    return out.getvalue()
