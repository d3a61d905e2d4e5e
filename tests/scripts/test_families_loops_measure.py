"""The recorded family and loop measurements (docs/data/families.json, docs/data/loops.json) are what a real
step gives today: a sample of every family and every loop is measured again on the CPU and compared with
its recorded row; and what the CLI is recorded to have said is what it says for the same command.

One step of each family and one of each loop (a different grid point each, so the sample covers both
precisions, both attentions and checkpointing off and on); tiny models, a few seconds each."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "training"))

FAMILIES = json.loads((ROOT / "docs" / "data" / "families.json").read_text())
LOOPS = json.loads((ROOT / "docs" / "data" / "loops.json").read_text())


def _sample(rows: list[dict], key: str) -> list[dict]:
    """One measured row of each `key` value, the i-th value's i-th row (rotating through the grid)."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        if "measured_peak" in row:
            groups.setdefault(row[key], []).append(row)
    return [group[i % len(group)] for i, group in enumerate(groups.values())]


def _tensors(run: dict) -> int:
    """A step's peak as its tensors hold it (profile_step's split): the matrix library's own workspace apart,
    which the CPU decides (oneDNN blocks its matmuls one way with AMX and AVX-512, another without: a row
    recorded on one machine held a 26,240-byte block at its peak that this kind of machine never takes there).
    A row recorded before the split was kept: its whole peak."""
    return run.get("measured_peak_tensors", run["measured_peak"])


def _model(row: dict):
    import hf_models

    m = row["model"]
    return hf_models.Model(**{**m, "extra": tuple((k, v) for k, v in m["extra"])})


@pytest.mark.torch
@pytest.mark.parametrize("row", _sample(FAMILIES["runs"], "family"), ids=lambda r: r["family"])
def test_family_step_measures_as_recorded(row):
    """A family's step, measured again, allocates exactly the recorded bytes at its start and end, and its
    tensors hold exactly the recorded bytes at its peak."""
    import measure_families

    m = _model(row)
    assert m == measure_families.shapes(row["family"])[row["shape"]], "the recorded model is the script's"
    got = measure_families.measure(row["family"], m, row["precision"], row["attention"], row["checkpointing"])
    for key in ("measured_start", "measured_end"):
        assert got[key] == row[key], key
    assert _tensors(got) == _tensors(row)


@pytest.mark.torch
@pytest.mark.parametrize("row", _sample(LOOPS["runs"], "loop"), ids=lambda r: r["loop"])
def test_loop_step_measures_as_recorded(row):
    """A loop's second optimizer step, measured again, allocates exactly the recorded bytes at its start and end,
    its tensors hold exactly the recorded bytes at its peak, and it trains the recorded parameters."""
    import measure_loops

    loop = measure_loops.LOOPS[row["loop"]]
    got = measure_loops.measure_step(loop, _model(row), row["precision"], row["checkpointing"], row["seq"],
                                     row["micro_batch"])  # fmt: skip
    for key in ("measured_start", "measured_end", "measured_trainable"):
        assert got[key] == row[key], key
    assert _tensors(got) == _tensors(row)


@pytest.mark.torch
def test_recorded_cli_answers_are_todays():
    """Every recorded CLI answer (prediction or refusal) is what the CLI answers now for the recorded command:
    when calc changes, `measure_families.py --repredict --write` (and measure_loops.py's) record it again."""
    import calc_cli
    import measure_families
    import measure_loops

    for script, data in ((measure_families, FAMILIES), (measure_loops, LOOPS)):
        rows = [r for r in data["runs"] if "measured_peak" in r]
        fresh = [dict(r) for r in rows]
        calc_cli.repredict(fresh, script.recorded_args)
        for old, new in zip(rows, fresh, strict=True):
            assert (new["eager"], new["deck"]) == (old["eager"], old["deck"]), new["eager"]["command"]


def test_refusals_are_one_line_naming_a_field():
    """Every recorded answer is a prediction, or the CLI's one-line refusal naming the flag it refuses."""
    answers = [r[w] for r in FAMILIES["runs"] + LOOPS["runs"] for w in ("eager", "deck") if w in r]
    assert all(("peak" in a) != ("refused" in a) for a in answers)
    for message in [a["refused"] for a in answers if "refused" in a]:
        assert "\n" not in message and message.startswith("error: --"), message


def test_presets_counted_by_transformers_and_calc_agree_where_calc_reads_them():
    """Where calc reads a stored published config, its parameter count is transformers' own."""
    read = [p for p in FAMILIES["presets"] if "params" in p["calc"]]
    assert read, "calc reads some of the stored configs today (gemma2, phi3)"
    for p in read:
        assert p["calc"]["params"] == p["transformers_params"], p["preset"]


@pytest.mark.torch
def test_gpu_check_dry_run_runs_a_sample_and_writes_nothing():
    """`make gpu-check DRY_RUN=1` (here: its QLoRA step) runs the script's CPU sample to the end and leaves the
    recorded JSON as it was."""
    import gpu_check

    data = sorted((ROOT / "docs" / "data").glob("*.json"))
    before = {p: p.read_bytes() for p in data}
    assert gpu_check.main(["--dry-run", "--only", "qlora"]) == 0
    assert sorted((ROOT / "docs" / "data").glob("*.json")) == data
    assert all(p.read_bytes() == before[p] for p in data)


@pytest.mark.torch
def test_gpu_check_without_a_gpu_says_so_in_one_line(capsys):
    """On a machine without CUDA, `make gpu-check` exits 2 with one line saying so (and how to dry-run)."""
    import gpu_check
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: gpu-check would run")
    with pytest.raises(SystemExit) as e:
        gpu_check.main([])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no CUDA device" in err and "--dry-run" in err


def test_calc_cli_answers_as_the_cli_does():
    """calc_cli (in-process) gives the answer and the one-line refusal `python -m calc` gives a user."""
    import subprocess

    import calc_cli

    from conftest import cli_json

    args = ["--preset", "llama-3.2-1b", "--seq", "256", "--walk", "eager", "--device", "cpu", "--attention", "sdpa"]
    said, printed = calc_cli.answer(args), cli_json(args)
    assert said == {k: printed[k] for k in ("peak", "peak_event", "params", "trainable_params")}
    assert calc_cli.deck_args(args) == ["--preset", "llama-3.2-1b", "--seq", "256"]
    bad = ["--preset", "llama-3.2-1b", "--walk", "eager", "--tp", "2"]
    out = subprocess.run([sys.executable, "-m", "calc", *bad, "--json"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2
    assert calc_cli.answer(bad) == {"refused": out.stderr.strip()}
