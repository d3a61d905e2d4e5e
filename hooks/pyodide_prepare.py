"""Runs inside Pyodide (Python 3.14) under Node, called by hooks/pyodide_prepare.mjs: compiles the
standard library modules the site uses and calc's wheel to .pyc with the runtime's own interpreter.

Unchecked-hash .pyc (PEP 552) carry no timestamp, so the same sources give the same bytes; each
code object keeps the file name the source would have had, so tracebacks name the right module.
Globals set by the caller: USED (the standard library zip's members to keep), STDLIB (its mount).
"""

import ast
import base64
import hashlib
import importlib.util
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc

EPOCH = (1980, 1, 1, 0, 0, 0)
# The standard library is compiled as `python -OO` would (no docstrings, no asserts): 15% fewer bytes to
# download. calc keeps its asserts, so it runs exactly as under CPython in the tests, and its classes'
# docstrings (dataclasses would make one with inspect.signature at import); its modules' and functions'
# docstrings go, which nothing in calc reads.
STDLIB_OPTIMIZE, CALC_OPTIMIZE = 2, 0


def pyc(source: bytes, filename: str, optimize: int, strip: bool = False) -> bytes:
    tree = ast.parse(source, filename)
    code = compile(without_docstrings(tree) if strip else tree, filename, "exec", dont_inherit=True, optimize=optimize)
    return _code_to_hash_pyc(code, importlib.util.source_hash(source), checked=False)


def without_docstrings(tree: ast.Module) -> ast.Module:
    """The module less its own docstring and its functions' (a body left empty becomes `pass`); every other
    statement keeps its line, so tracebacks point where the source does."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            node.body = node.body[1:] or [ast.copy_location(ast.Pass(), first)]
    return tree


def write_zip(path: str, entries: list[tuple[str, bytes]]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data, compresslevel=9)


def compile_stdlib(out: str) -> None:
    """The standard library zip cut to USED, every module as .pyc."""
    with zipfile.ZipFile(STDLIB.rstrip("/")) as full:  # noqa: F821 (set by the caller)
        entries = []
        for name in USED:  # noqa: F821
            if not name.endswith(".py"):
                raise RuntimeError(f"{name}: only .py modules are expected in the standard library zip")
            entries.append((name + "c", pyc(full.read(name), STDLIB + name, STDLIB_OPTIMIZE)))  # noqa: F821
    write_zip(out, sorted(entries))


def compile_wheel(wheel: str, out: str, site_packages: str) -> None:
    """The same wheel with each .py replaced by its .pyc (as `pyodide py-compile` does) and a new RECORD."""
    with zipfile.ZipFile(wheel) as archive:
        names = sorted(archive.namelist())
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        entries = []
        for name in names:
            if name == record or name.endswith("/"):
                continue
            data = archive.read(name)
            if name.endswith(".py"):
                entries.append((name + "c", pyc(data, f"{site_packages}/{name}", CALC_OPTIMIZE, strip=True)))
            else:
                entries.append((name, data))
    lines = []
    for name, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    entries.append((record, ("\n".join([*lines, f"{record},,"]) + "\n").encode()))
    write_zip(out, entries)
