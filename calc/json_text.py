"""The CLI's --json text: `json.dumps(obj, indent=1)` character for character, in a fraction of its time.

With an indent, CPython 3.11's json module leaves its C encoder for the pure-Python one, whose nested
generators pass every number of an eager walk's event list up through each level of nesting: most of the time
of a `--json` answer was spent there. Here each run of scalar members of an object or array (strings,
numbers, true/false/null, empty containers: their text does not depend on the indent) is written by the C
encoder in one call, with the separators that put each member on its own indented line; only the members that
are non-empty containers are written member by member. tests/calc/test_cli.py checks the text equals
json.dumps(obj, indent=1) on any JSON value (Hypothesis), and scripts/capture_outputs.py --check on every
answer.
"""

from __future__ import annotations

import json
from functools import lru_cache
from json.encoder import c_make_encoder, encode_basestring_ascii

INDENT = 1  # spaces a level, as the CLI has always printed


def dumps(obj: object) -> str:
    """json.dumps(obj, indent=1)'s text."""
    if c_make_encoder is None or not _nested(obj):  # no C encoder (json's own then), or no layout to do
        return json.dumps(obj, indent=INDENT)
    out: list[str] = []
    _write(obj, 0, out)
    return "".join(out)


def _nested(value: object) -> bool:
    """Whether the value is a non-empty object or array (whose text the indent lays out)."""
    return isinstance(value, (dict, list, tuple)) and len(value) > 0


@lru_cache(maxsize=64)
def _encoder(depth: int):
    """The C encoder laying out members at `depth` (each after a newline and depth x INDENT spaces), as
    json.JSONEncoder.iterencode makes it without an indent; called with (value, 0), it answers text chunks."""
    plain = json.JSONEncoder()
    return c_make_encoder({}, plain.default, encode_basestring_ascii, None, ": ", ",\n" + " " * (depth * INDENT),
                          False, False, True)  # fmt: skip


@lru_cache(maxsize=4096, typed=True)
def _key(key: object) -> str:
    """An object's key as the C encoder writes it, with the separator after it."""
    return "".join(_encoder(0)({key: 0}, 0))[1:-2]


def _members(run: dict | list, depth: int) -> str:
    """The text of scalar members at `depth`, without the brackets around them."""
    return "".join(_encoder(depth)(run, 0))[1:-1]


def _write(value: dict | list | tuple, depth: int, out: list[str]) -> None:
    """Append the text of a non-empty object or array whose opening bracket stands at `depth`."""
    inner = "\n" + " " * ((depth + 1) * INDENT)
    is_dict = isinstance(value, dict)
    items = value.items() if is_dict else value
    sep, run = inner, ({} if is_dict else [])
    out.append("{" if is_dict else "[")
    for item in items:
        member = item[1] if is_dict else item
        if not _nested(member):
            if is_dict:
                run[item[0]] = member
            else:
                run.append(member)
            continue
        if run:
            out.append(sep + _members(run, depth + 1))
            sep, run = "," + inner, ({} if is_dict else [])
        out.append(sep + _key(item[0]) if is_dict else sep)
        _write(member, depth + 1, out)
        sep = "," + inner
    if run:
        out.append(sep + _members(run, depth + 1))
    out.append("\n" + " " * (depth * INDENT) + ("}" if is_dict else "]"))
