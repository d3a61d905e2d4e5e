"""Inputs as the page and the CLI receive them: malformed and very long numbers, the size limit,
and sizes written for people (separators, TB)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import calc
from calc.inputs import MAX_BYTES, parse_inputs, size_bound
from calc.units import format_size
from conftest import ROOT


def cli(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "calc", *flags], cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--seq", "9" * 4301),
        ("--seq", "9" * 10_000),
        ("--seq", "x" * 10_000),
        ("--seq", "1" * 31),
        ("--layers", "4" * 5000),
        ("--micro-batch", "-" + "7" * 6000),
        ("--capacity-gb", "8" * 5000),
        ("--capacity-gb", "8" * 5000 + ".5"),
        ("--global-batch", "1,000" * 2000),
        ("--zero", "3" * 5000),
        ("--recompute", "FULLY" * 2000),
    ],
)
def test_any_malformed_number_exits_2_with_one_short_line_naming_the_field(flag, value):
    """Whatever its length, a bad value gives exit status 2 and one line that names the flag."""
    out = cli(flag, value)
    assert out.returncode == 2, out.stderr[-500:]
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: "), lines[:3]
    assert len(lines[0]) < 200


def test_the_browser_entry_point_names_the_field_of_a_huge_value_and_quotes_it_short():
    """calc.web.handle answers a 5,000-digit or 10,000-character value with the field and a short message."""
    for value in ["9" * 5000, "z" * 10_000]:
        answer = json.loads(calc.web.handle(json.dumps({"inputs": {"seq": value}})))
        assert answer["ok"] is False and answer["field"] == "seq"
        assert len(answer["message"]) < 120 and "ValueError" not in answer["message"]


def test_a_long_sequence_with_flash_and_full_recomputation_is_computed():
    """llama-7b at 524,288 tokens with FlashAttention and full recomputation is accepted: about 334 GB."""
    inputs = parse_inputs({"seq": "524288", "flash": "true", "recompute": "full"})
    peak = calc.step(inputs.shape, inputs.seq, 1, "mixed", "full", par=inputs.par)["peak"]
    assert 330e9 < peak < 340e9
    request = {"inputs": {"seq": "524288", "flash": "true", "recompute": "full"}}
    answer = json.loads(calc.web.handle(json.dumps(request)))
    assert answer["ok"] and answer["step"]["peak"] == peak
    assert answer["sweep"]["seq"][-1] == 2 * 524288  # the whole sweep stays exact


def test_what_cannot_be_counted_exactly_is_refused_by_name():
    """Without FlashAttention, 16M tokens would pass 2^53 bytes: refused, naming seq and the way out."""
    answer = json.loads(calc.web.handle(json.dumps({"inputs": {"seq": str(1 << 24)}})))
    assert answer["ok"] is False and answer["field"] == "seq"
    assert "FlashAttention" in answer["message"]


@pytest.mark.parametrize(
    "inputs",
    [
        {},
        {"preset": "gpt2", "seq": "1024", "micro-batch": "16", "walk": "eager"},
        {"preset": "decoder", "seq": "8", "micro-batch": "16", "walk": "eager", "recipe": "fp32"},
        {"preset": "llama-2-70b", "seq": "8", "zero": "3", "dp": "8", "recipe": "fp32", "recompute": "full"},
        {"preset": "llama-2-13b", "seq": "65536", "pp": "4", "tp": "2", "sequence-parallel": "true"},
        {"seq": "131072", "flash": "true", "micro-batch": "4"},
    ],
)
def test_the_size_bound_is_above_every_reported_peak(inputs):
    """The limit is a real upper bound: no row of the table or the step exceeds it."""
    parsed = parse_inputs(inputs)
    bound = size_bound(parsed.shape, parsed.seq, parsed.micro_batch, parsed.par)
    answer = json.loads(calc.web.handle(json.dumps({"inputs": inputs, "sweep": False})))
    assert max(answer["step"]["peak"], *(row["peak"] for row in answer["table"])) <= bound <= MAX_BYTES


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (110_664_663_040, "110.7 GB"),
        (1_234_500_000_000, "1,234.5 GB"),
        (9_999_949_999_999, "9,999.9 GB"),
        (9_999_950_000_000, "10.0 TB"),
        (861_076_000_000_000, "861.1 TB"),
        (2**53 - 1, "9,007.2 TB"),
    ],
)
def test_sizes_read_with_separators_and_in_tb_when_large(n, text):
    """format_size: GB with thousands separators, TB from 10,000 GB."""
    assert format_size(n) == text
