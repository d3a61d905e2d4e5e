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
    """calc's answer as a user gets it: `python -m calc ARGS --json`, run from the repository."""
    out = subprocess.run([sys.executable, "-m", "calc", *args, "--json"], capture_output=True, text=True, cwd=ROOT,
                         check=True)  # fmt: skip
    return json.loads(out.stdout)


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
    """Every test of the built site (tests/test_site_*.py, and test_pyodide.py, which starts the site's own
    runtime) is marked `browser`, so `pytest -m "not torch and not browser"` runs the core alone."""
    for item in items:
        if item.path.name.startswith("test_site_") or item.path.name == "test_pyodide.py":
            item.add_marker("browser")
