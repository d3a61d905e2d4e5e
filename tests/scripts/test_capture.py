"""The stored capture (scripts/capture_outputs.py): calc's answers are byte for byte those taken before the
refactor, on the quick subset (the whole: `python scripts/capture_outputs.py --check`)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # some 2,000 answers, many an eager walk: `make test` runs it, the core's quick run does not
def test_fast_subset_equals_the_capture():
    """The CLI, the planner, the fit list, fine-tuning, configs, calc.web and the presets' data, as captured."""
    out = subprocess.run([sys.executable, "scripts/capture_outputs.py", "--check", "--fast"], cwd=ROOT,
                         capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "answers equal the capture" in out.stderr
