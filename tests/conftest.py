import contextlib
import io
import itertools
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression  # what -m compiles to (pytest's own parser)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import settings  # noqa: E402

# Timing is not what these properties test: a busy 2-core CI machine must not fail them on a deadline.
settings.register_profile("ci", deadline=None)
settings.load_profile("ci")


def cli_json(args: list[str]) -> dict:
    """calc's answer as a user gets it: `python -m calc ARGS --json`, run from the repository. In this process:
    calc/__main__.py runs calc.cli.main and nothing else (tests that start `python -m calc` itself check that),
    and a Python started for each answer was most of these tests' time."""
    from calc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([*args, "--json"], prog="python -m calc")
        except SystemExit as e:  # argparse's refusals
            rc = e.code
    if rc != 0:  # as subprocess.run(..., check=True) raised
        raise subprocess.CalledProcessError(rc, ["python", "-m", "calc", *args], out.getvalue(), err.getvalue())
    return json.loads(out.getvalue())


def assert_cli_predicts(args: list[str], got: dict, bound: float) -> None:
    """The CLI, given `args`, trains the parameters a measured fine-tuning step trained (got["measured_trainable"])
    and predicts the peak of its tensors within `bound` (assert_predicts_tensors)."""
    predicted = cli_json(args)
    assert predicted["trainable_params"] == got["measured_trainable"]
    assert_predicts_tensors(predicted["peak"], got, bound)


def assert_predicts_tensors(predicted: int, got: dict, bound: float) -> None:
    """`predicted` is within `bound` of the measured step's tensors (got["measured_peak_tensors"]: its peak less
    the matrix library's workspace, scripts/training/profile_step.py); and what leaving the workspace out takes
    off the measured peak is at most the largest workspace block seen, so that it hides nothing else."""
    peak, tensors, largest = got["measured_peak"], got["measured_peak_tensors"], got["workspace_peak"]
    assert 0 <= peak - tensors <= largest, f"measured {peak:,}, tensors {tensors:,}, largest workspace {largest:,}"
    ratio = predicted / tensors
    assert abs(ratio - 1) <= bound, (
        f"predicted / step's tensors = {ratio:.4f} (predicted / measured peak = {predicted / peak:.4f}; "
        f"workspace up to {largest:,} bytes, {got['workspace_at']})"
    )


# The parts of a check over recorded rows (docs/data/*.json): the core runs a sample, `make test` (plain
# `pytest`) the rest too, marked `slow`: every row is still checked by the whole suite.
PARTS = ["sample", pytest.param("rest", marks=pytest.mark.slow)]


def part_of(rows: list[dict], part: str, key: Callable[[dict], object]) -> list[dict]:
    """The rows of one of PARTS: "sample", the first row of each key(row) (each model and setting measured),
    or "rest", every other row."""
    seen: set = set()
    chosen = []
    for row in rows:
        k = key(row)
        if (k not in seen) == (part == "sample"):
            chosen.append(row)
        seen.add(k)
    return chosen


TORCH_MODULE = re.compile(r"^pytestmark = pytest\.mark\.torch$", re.M)  # a module whose every test needs torch


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A module whose every test needs torch is not imported where `-m` deselects every test marked torch: the
    core's run (-m "not torch and ...") would import torch and transformers only to deselect them, some 3 s."""
    expr = config.getoption("markexpr")
    if not expr or collection_path.suffix != ".py" or not TORCH_MODULE.search(collection_path.read_text()):
        return None
    names = sorted(set(re.findall(r"[\w.-]+", expr)) - {"and", "or", "not", "torch"})
    compiled = Expression.compile(expr)
    for values in itertools.product((False, True), repeat=len(names)):  # any other marks a test may carry
        marked = {"torch", *(n for n, v in zip(names, values, strict=True) if v)}
        if compiled.evaluate(marked.__contains__):
            return None  # some test marked torch may be selected
    return True


def pytest_collection_modifyitems(items):
    """Every test of the built site (tests/site/test_site_*.py, and test_pyodide.py, which starts the site's own
    runtime) is marked `browser`, so `pytest -m "not torch and not browser"` runs the core alone."""
    for item in items:
        if item.path.name.startswith("test_site_") or item.path.name == "test_pyodide.py":
            item.add_marker("browser")
