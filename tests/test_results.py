"""docs/results.md is what scripts/make_results.py writes."""

import subprocess
import sys

from conftest import ROOT


def test_results_md_is_up_to_date():
    """The committed file equals the generator's output."""
    out = subprocess.run(
        [sys.executable, "scripts/make_results.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr


def test_results_md_has_the_memory_section():
    """§10 holds the four-recipe table and the Decoder's figures."""
    text = (ROOT / "docs" / "results.md").read_text()
    assert "## 10. Memory" in text
    assert "199,539,351,552" in text and "286,208 bytes" in text and "2,496 values" in text
