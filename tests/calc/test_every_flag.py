"""Every field of the CLI through every walk and output mode (issue 19): each is used (changes some answer
for some input) or refused in one line naming a field; none is accepted and ignored. The fields are the
parser's options that calc.inputs.FIELDS declares; their values come from the parser (a metavar's choices,
a switch's two sides) or, for a number, a few small ones."""

import argparse
import contextlib
import functools
import io
import json
from unittest import mock

import pytest

from calc import cli, inputs
from calc.cli import build_parser, main

BASES = [  # inputs where each field can matter: dense, a mixture of experts, learned positions, tensor parallel,
    # eager attention (the eager walk keeps Llama's attention probabilities and their dropout masks)
    ["--preset", "llama-3.2-1b", "--seq", "1024"],
    ["--preset", "llama-3.2-1b", "--seq", "1024", "--attention", "eager"],
    ["--preset", "mixtral-8x7b", "--seq", "1024"],
    ["--preset", "gpt2", "--seq", "512", "--no-tied", "--bias"],
    ["--preset", "mistral-7b", "--seq", "1024", "--tp", "2", "--dp", "2", "--zero", "1"],
]
MODES = {  # the walks and output modes, as a user selects them
    "deck": [],
    "table": ["--table"],
    "eager": ["--walk", "eager"],
    "lora": ["--finetune", "lora"],
    "qlora": ["--finetune", "qlora"],
    "freeze": ["--finetune", "freeze", "--freeze-layers", "4"],
    "eager-lora": ["--walk", "eager", "--finetune", "lora"],
    "plan": ["--plan"],
    "fit-card": ["--fit-card"],
}
OUTPUTS = ("--table", "--plan", "--fit-card")
SPECIAL = {  # values for the fields whose metavar names no choices and that are no small number
    "preset": ["llama-3.1-8b", "gpt2"],
    "hf-config": [],  # a file: tests/test_hf.py
    "card": ["rtx-4090", "h200"],
    "capacity-gb": ["24", "1000"],
    "lora-targets": ["q,k,v,o", "all-linear"],
    "capacity-factor": ["1.25"],
}
NO_MEMORY = {"lora-alpha": "LoRA's alpha scales the update: its help says it changes no memory; echoed in --json"}


def run(args: list[str]) -> tuple[int, str, str]:
    """(exit status, the --json answer, stderr) of the CLI in-process. The same arguments come back often (a
    mode's bases once per field; in a walk without an output mode, the step's run is the mode's): asked once."""
    return _run(tuple(args))


def _compact(obj) -> str:
    """calc.cli's --json text without the indent (json's C encoder, at least twice as fast on an eager walk's
    thousands of events): the data are the same either way, and this file compares answers, never their layout
    (tests/calc/test_cli.py reads the CLI's)."""
    return json.dumps(obj)


@functools.cache
def _run(args: tuple[str, ...]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    compact = mock.patch.object(cli, "json_text", _compact)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), compact:
        try:
            rc = main([*args, "--json"])
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


@functools.cache  # a mode's base answer is compared with every value of every field
def numbers(text: str) -> str:
    """An answer without the config it echoes: what the field changes, not what it says it was given."""
    got = json.loads(text)
    if isinstance(got, dict):
        got.pop("config", None)
    return json.dumps(got)


def values(action: argparse.Action) -> list[list[str]]:
    flag, name = action.option_strings[0], action.option_strings[0][2:]
    if isinstance(action, argparse.BooleanOptionalAction):
        return [[flag], [f"--no-{name}"]]
    if name in SPECIAL:
        return [[flag, v] for v in SPECIAL[name]]
    if action.metavar and "|" in action.metavar:
        return [[flag, v] for v in action.metavar.split("|")]
    return [[flag, v] for v in ("2", "3", "8", "64", "4096")]


FIELDS = [a for a in build_parser()._actions if a.option_strings and a.option_strings[0][2:] in inputs.FIELDS]


def ignored(mode: str, action: argparse.Action) -> bool:
    """Whether some value of the field is taken (the step echoes a config other than the base's) and accepted
    in this mode while no value changes any answer for any base."""
    extra, taken_somewhere = MODES[mode], False
    step_extra = [a for a in extra if a not in OUTPUTS]
    for base in BASES:
        start = run([*base, *extra])
        if start[0] != 0:
            continue
        step = run([*base, *step_extra])[1]
        for value in values(action):
            rc, out, err = run([*base, *extra, *value])
            if rc != 0:
                assert err.count("\n") == 1 and err.startswith("error: --"), (mode, value, err)
                continue
            if numbers(out) != numbers(start[1]):
                return False
            taken_somewhere |= run([*base, *step_extra, *value])[1] != step
    return taken_somewhere


def test_the_fields_come_from_calc():
    """The list is calc's own: every declared field but the config file has an option, and there are many."""
    names = {a.option_strings[0][2:] for a in FIELDS}
    assert names == set(inputs.FIELDS) and len(names) > 50


# The eager walk's two modes replay every base's step for each value of each field, most of this file's time:
# `slow` (make test runs them). What each field does there has its own quicker test (test_attention.py,
# test_loops.py, test_eager.py; the refusals: test_fields.py, test_inputs.py); the other modes run in the core.
EAGER_MODES = ("eager", "eager-lora")


@pytest.mark.parametrize(
    "mode", [pytest.param(m, marks=pytest.mark.slow) if m in EAGER_MODES else m for m in sorted(MODES)])
def test_no_field_is_accepted_and_ignored(mode):
    """In this walk or mode every field changes some answer for some input or is refused in one line."""
    found = {a.option_strings[0][2:] for a in FIELDS if a.option_strings[0][2:] not in NO_MEMORY and ignored(mode, a)}
    assert found == set()
