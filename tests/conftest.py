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

from hypothesis import HealthCheck, settings  # noqa: E402

# Timing is not what these properties test: a busy 2-core CI machine must not fail them on a deadline.
settings.register_profile("ci", deadline=None)
settings.load_profile("ci")


def cli_json(args: list[str]) -> dict:
    """calc's answer as a user gets it: `python -m calc ARGS --json`, run from the repository (in this process,
    as cli_run)."""
    done = cli_run([*args, "--json"])
    if done.returncode != 0:  # as subprocess.run(..., check=True) raised
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    return json.loads(done.stdout)


def cli_run(args: list[str]) -> subprocess.CompletedProcess:
    """`python -m calc ARGS` run from the repository: its exit status, stdout and stderr, as subprocess.run(...,
    capture_output=True, text=True) gives them. In this process: calc/__main__.py runs calc.cli.main and nothing
    else (tests that start `python -m calc` itself check that), and a Python started for each answer was most
    of these tests' time. An exception main lets out (a traceback) fails the test that called it."""
    from calc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(args), prog="python -m calc")
        except SystemExit as e:  # argparse's refusals
            rc = e.code
    return subprocess.CompletedProcess(["python", "-m", "calc", *args], rc, out.getvalue(), err.getvalue())


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


TORCH_MODULE = re.compile(r"^pytestmark = pytest\.mark\.torch(\s*#.*)?$", re.M)  # every test needs torch
QUICK_EXAMPLES = (5, 20)  # the quick run's share of a property's examples: a fifth, at least 20


def deselects(config: pytest.Config, mark: str) -> bool:
    """Whether `-m` deselects every test marked `mark`, whatever other marks it carries."""
    expr = config.getoption("markexpr")
    if not expr:
        return False
    names = sorted(set(re.findall(r"[\w.-]+", expr)) - {"and", "or", "not", mark})
    compiled = Expression.compile(expr)
    for values in itertools.product((False, True), repeat=len(names)):  # any other marks a test may carry
        marked = {mark, *(n for n, v in zip(names, values, strict=True) if v)}
        if compiled.evaluate(marked.__contains__):
            return False
    return True


def browser_module(path: Path) -> bool:
    """Whether every test of the module is marked browser (pytest_collection_modifyitems marks them)."""
    return path.name.startswith("test_site_") or path.name == "test_pyodide.py"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A module whose every test needs torch, or the browser, is not imported where `-m` deselects every test
    so marked: the core's run (-m "not torch and not browser ...") would import torch and transformers, and
    compute the site's answers, only to deselect them (some 4 s)."""
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    if browser_module(collection_path) and deselects(config, "browser"):
        return True
    if TORCH_MODULE.search(collection_path.read_text()) and deselects(config, "torch"):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test of the built site (tests/site/test_site_*.py, and test_pyodide.py, which starts the site's own
    runtime) is marked `browser`, so `pytest -m "not torch and not browser and not slow"` runs the core alone.
    That quick run (it deselects `slow`) draws a fifth of each Hypothesis property's examples, at least 20;
    every other run (make test: plain pytest) draws each property's own max_examples."""
    for item in items:
        if browser_module(item.path):
            item.add_marker("browser")
    if deselects(config, "slow"):
        for test in {item.obj for item in items if isinstance(item, pytest.Function)}:
            quick(getattr(test, "__func__", test))  # a method's function


def quick(test: object) -> None:
    """A Hypothesis test's settings (as @settings left them) with QUICK_EXAMPLES' share of its examples."""
    chosen = getattr(test, "_hypothesis_internal_use_settings", None)  # where @settings and @given keep them
    if isinstance(chosen, settings):
        share, least = QUICK_EXAMPLES
        fewer = max(least, chosen.max_examples // share)
        if fewer < chosen.max_examples:
            # Hypothesis's filtering check counts filtered draws against max_examples: with fewer examples a
            # property that filters (assume) fails it by chance; the run of every example still checks it.
            checks = (*chosen.suppress_health_check, HealthCheck.filter_too_much)
            test._hypothesis_internal_use_settings = settings(chosen, max_examples=fewer, suppress_health_check=checks)
