"""The command line: outputs, and one-line errors with exit status 2."""

import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import calc
from calc.cli import main
from calc.inputs import FIELDS
from calc.json_text import dumps as json_text
from conftest import ROOT, cli_run

SCRIPT = ROOT / "scripts" / "training" / "memory.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)


def test_json_is_the_core_result():
    """--json prints step() for the chosen inputs, with stable field names."""
    out = run("--preset", "decoder", "--seq", "8", "--micro-batch", "16", "--json")
    assert out.returncode == 0
    data = json.loads(out.stdout)
    assert data == json.loads(json.dumps(calc.step(calc.PRESETS["decoder"], 8, 16)))
    assert {"params", "bytes", "activations_per_layer", "peak", "peak_event", "events"} <= set(data)
    assert set(data["bytes"]) == set(calc.CATEGORIES)
    assert all(isinstance(v, int) for v in data["bytes"].values())


def test_table_prints_the_four_recipes(capsys):
    """--table: the deck's table for LLaMA 7B."""
    assert main(["--table"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6
    assert lines[2].endswith("| 104.2 GB | 0.8 GB | 199.5 GB")
    assert lines[5].startswith("FP32 Adam") and lines[5].endswith("186.3 GB")


def test_events_marks_the_peak(capsys):
    """--events lists every event and marks the peak once."""
    assert main(["--recompute", "full", "--events"]) == 0
    out = capsys.readouterr().out
    assert out.count("<- peak") == 1
    assert len(out.splitlines()) == 1 + len(calc.step(calc.PRESETS["llama-7b"], recompute="full")["events"])


def test_shape_flags_override_the_preset(capsys):
    """Shape flags start from the preset; changing heads keeps attention multi-head."""
    assert main(["--preset", "gpt2", "--layers", "24", "--heads", "16", "--seq", "1024", "--json"]) == 0
    cfg = json.loads(capsys.readouterr().out)["config"]["shape"]
    assert (cfg["layers"], cfg["heads"], cfg["kv_heads"], cfg["hidden"]) == (24, 16, 16, 768)


def test_learned_positions_default_to_the_context(capsys):
    """A learned-position preset defaults its sequence to its context."""
    assert main(["--preset", "gpt2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["seq"] == 1024


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--seq", "0"], "seq"),
        (["--seq", "-5"], "seq"),
        (["--micro-batch", "abc"], "micro-batch"),
        (["--hidden", "1.5"], "hidden"),
        (["--heads", "0"], "heads"),
        (["--hidden", "4100"], "heads"),  # 32 heads do not divide 4100
        (["--kv-heads", "5"], "kv-heads"),
        (["--layers", "100000"], "layers"),
        (["--seq", "10000000", "--micro-batch", "60000"], "seq"),
        (["--preset", "nope"], "preset"),
        (["--recipe", "fp8"], "recipe"),
        (["--attention", "flash"], "attention"),
        (["--device", "tpu"], "device"),
        (["--walk", "eager", "--recompute", "selective"], "recompute"),
        (["--recompute", "some"], "recompute"),
        (["--norm", "batch"], "norm"),
        (["--preset", "gpt2", "--seq", "2048"], "seq"),  # beyond the learned position table
        (["--layers", "²"], "layers"),  # a digit to str.isdigit, not to int()
        (["--layers=--1"], "layers"),
        (["--layers", "1,0,0"], "layers"),
        (["--tp", "3"], "tp"),
        (["--pp", "33"], "pp"),
        (["--zero", "5"], "zero"),
        (["--dp", "0"], "dp"),
        (["--grad-accum", "0"], "grad-accum"),
        (["--capacity-gb", "0", "--plan"], "capacity-gb"),
        (["--capacity-gb", "abc", "--plan"], "capacity-gb"),
        (["--capacity-gb", "1e3", "--plan"], "capacity-gb"),
        (["--walk", "eager", "--tp", "2", "--sequence-parallel", "--tp-plan", "transformers"], "sequence-parallel"),
        (["--sequence-parallel"], "sequence-parallel"),  # the deck walk too: one rank splits nothing
        (["--dp", "4", "--device", "cpu", "--tp-plan", "transformers"], "tp-plan"),  # before the figure beside
        (["--dp", "4", "--device", "cpu", "--pp-schedule", "gpipe"], "pp-schedule"),
        (["--pp", "2", "--grad-accum", "64", "--recipe", "autocast", "--device", "cpu"], "device"),  # too long
        (["--sequence-parallel", "--table"], "sequence-parallel"),
        (["--walk", "eager", "--pp", "2"], "recipe"),  # the default mixed recipe: a pipeline steps fp32 parameters
        (["--walk", "lazy"], "walk"),
    ],
)
def test_bad_input_one_line_exit_2(args, field):
    """Bad input: exit 2, one line on stderr naming the field, no traceback (in this process: cli_run; the
    script's own process: test_unknown_flag_is_one_line, test_a_bad_value_is_one_line_from_the_script)."""
    out = cli_run(args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    assert f"--{field}" in lines[0]
    assert "Traceback" not in out.stderr


def test_a_bad_value_is_one_line_from_the_script():
    """The script itself, started as a user starts it: a bad value is one line on stderr and exit 2."""
    out = run("--seq", "0")
    assert (out.returncode, out.stdout, out.stderr) == (2, "", cli_run(["--seq", "0"]).stderr)
    assert out.stderr.count("\n") == 1 and "--seq" in out.stderr and "Traceback" not in out.stderr


def test_unknown_flag_is_one_line():
    """argparse's own errors are one line too."""
    out = run("--bogus")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1


def test_python_m_calc():
    """python -m calc is the same CLI."""
    out = subprocess.run([sys.executable, "-m", "calc", "--table"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout == run("--table").stdout


def test_summary_names_the_peak_and_the_devices(capsys):
    """The default output: bytes per category, the peak in GB and GiB, and the layout when split."""
    assert main(["--preset", "decoder", "--micro-batch", "16"]) == 0
    out = capsys.readouterr().out
    assert "286,208 bytes" in out and "peak event:  loss and head backward" in out
    assert main(["--dp", "4", "--zero", "1", "--tp", "2"]) == 0
    assert "per device of 8 (dp 4, tp 2, pp 1, ZeRO 1)" in capsys.readouterr().out


def test_table_json(capsys):
    """--table --json prints the table's rows as data."""
    assert main(["--table", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(calc.table(calc.PRESETS["llama-7b"])))


@given(st.dictionaries(st.sampled_from(FIELDS), st.one_of(st.text(max_size=12), st.integers(), st.booleans())))
def test_parse_inputs_only_raises_input_errors(raw):
    """Whatever a URL or a form sends, parsing either succeeds or names the field."""
    try:
        calc.parse_inputs(raw)
    except calc.InputError as e:
        assert e.field in FIELDS


def test_the_plans_table_has_the_same_columns_for_every_model(capsys):
    """--plan's table has an ep column for a dense model as for a mixture of experts, as the page's planner and
    --plan --json (whose rows always carry "ep") do (issue 20, a fresh reviewer's minor)."""
    heads = []
    for preset in ("llama-7b", "mixtral-8x7b"):
        assert main(["--preset", preset, "--plan"]) == 0
        lines = capsys.readouterr().out.splitlines()
        heads.append(lines[0])
        assert preset != "llama-7b" or {line.split(" | ")[4] for line in lines[2:]} == {"1"}  # dense: no ep
    assert heads[0] == heads[1] and " | ep | " in heads[0]


JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
JSON_KEYS = st.text() | st.integers() | st.booleans() | st.none() | st.floats()
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(JSON_KEYS, inner, max_size=5),
    max_leaves=40,
)


@given(JSON_VALUES)
def test_the_json_text_is_jsons_own(value):
    """--json's text (calc.json_text, the C encoder for each run of scalars) is json.dumps(value, indent=1)'s,
    character for character, for any JSON value: nesting, empty containers, NaN, non-ASCII text, non-str keys."""
    assert json_text(value) == json.dumps(value, indent=1)


def test_the_json_text_of_an_eager_walk_is_jsons_own():
    """An eager walk's whole answer (thousands of events, each with its totals) prints as json.dumps would."""
    result = calc.step(calc.PRESETS["gpt2"], 128, 1, "mixed", "none", walk="eager")
    assert json_text(result) == json.dumps(result, indent=1)


@pytest.mark.parametrize("layout", [[], ["--pp", "2"], ["--dp", "2", "--zero", "3"], ["--tp", "2"]])
@pytest.mark.parametrize("mode", ["--table", "--plan"])
def test_the_rows_refuse_the_eager_walk_before_a_field_it_would_refuse(layout, mode, capsys):
    """--table and --plan walk the deck's step: with --walk eager they say so, whatever else the eager walk would
    refuse first (its engines' recipes: the table's default mixed precision), so the refusal names what to change
    and the change answers (a review found --walk eager --pp 2 --table asking for --recipe, then for none)."""
    args = ["--preset", "llama-3.2-1b", "--walk", "eager", "--device", "cpu", *layout, mode]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    walk = "error: --walk: eager walks one step; --table and --plan use the deck walk"
    assert err == walk or (mode == "--plan" and layout and "--plan chooses it itself" in err), err  # its layout
    rest = [a for a in args if a not in ("--walk", "eager", "--device", "cpu")]
    if mode == "--table":
        assert main(rest) == 0 and "Recipe" in capsys.readouterr().out
