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


def test_the_deck_walk_on_the_loops_is_said_the_way_its_ratios_point():
    """§13.2 says which way the deck walk misses each loop from the rows themselves: over, under, or both."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import make_results

    def runs(trainer: list[float], sft: list[float]) -> list[dict]:
        rows = [{"loop": "trainer-adamw", "deck": {"ratio": r}, "eager": {}} for r in trainer]
        tiles = {"peak_event": "ChunkedLogProbFunction backward working memory"}
        return rows + [{"loop": "sft-lora", "deck": {"ratio": r}, "eager": tiles} for r in sft]

    said = make_results._deck_on_loops(runs([1.3, 1.5], [0.09, 0.2]))
    assert (said["deck_trainer_way"], said["deck_sft_way"]) == ("over-counts", "under-counts")
    assert said["deck_sft"] == "0.090 to 0.200" and said["sft_tiles"] == said["sft_rows"] == 2
    said = make_results._deck_on_loops(runs([0.6, 1.5], [1.2, 1.4]))
    assert (said["deck_trainer_way"], said["deck_sft_way"]) == ("is off both ways on", "over-counts")
