import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

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


def pytest_collection_modifyitems(items):
    """Every test of the built site (tests/site/test_site_*.py, and test_pyodide.py, which starts the site's own
    runtime) is marked `browser`, so `pytest -m "not torch and not browser"` runs the core alone."""
    for item in items:
        if item.path.name.startswith("test_site_") or item.path.name == "test_pyodide.py":
            item.add_marker("browser")
