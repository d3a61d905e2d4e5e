"""Build calc's pure-Python wheel with the standard library alone.

The browser installs it with ``pyodide.unpackArchive(buffer, "wheel")``: calc has
no dependencies, so neither micropip nor pyodide-build (which needs Python 3.12+)
is needed, and the wheel is made by the same interpreter that runs MkDocs.
"""

from __future__ import annotations

import base64
import hashlib
import tomllib
import zipfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "calc"
TAG = "py3-none-any"
EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same sources give the same bytes


def version(root: Path = ROOT) -> str:
    """calc's version from pyproject.toml's [project] table, else "0"."""
    pyproject = root / "pyproject.toml"
    if pyproject.exists():
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        if isinstance(project.get("version"), str):
            return project["version"]
    return "0"


def filename(root: Path = ROOT) -> str:
    """The wheel's file name, e.g. ``calc-0.1.0-py3-none-any.whl``."""
    return f"{PACKAGE}-{version(root)}-{TAG}.whl"


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build(root: Path = ROOT) -> bytes:
    """The wheel's bytes: every module of calc/ plus its .dist-info (no caches, no editor backups)."""
    sources = sorted(p for p in (root / PACKAGE).rglob("*.py") if "__pycache__" not in p.parts)
    if not any(p.name == "__init__.py" for p in sources):
        raise RuntimeError(f"{root / PACKAGE} has no __init__.py: nothing to put in the wheel")
    ver = version(root)
    dist_info = f"{PACKAGE}-{ver}.dist-info"
    entries = [(p.relative_to(root).as_posix(), p.read_bytes()) for p in sources]
    entries += [
        (f"{dist_info}/METADATA",
         f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {ver}\n".encode()),
        (f"{dist_info}/WHEEL",
         f"Wheel-Version: 1.0\nGenerator: hooks/wheel.py\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode()),
    ]
    record = "\n".join([_record_line(path, data) for path, data in entries] + [f"{dist_info}/RECORD,,", ""])
    entries.append((f"{dist_info}/RECORD", record.encode()))

    buffer = BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in entries:
            info = zipfile.ZipInfo(path, EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()
