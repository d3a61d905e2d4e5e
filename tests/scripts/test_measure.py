"""The reference trainer and measure.py against calc: values saved for backward and peak memory, measured here."""

import json
import sys
from dataclasses import replace

import pytest
import torch

import calc
from conftest import ROOT, assert_predicts_tensors

sys.path.insert(0, str(ROOT / "scripts" / "training"))

import measure
import profile_step
import reference

pytestmark = pytest.mark.torch  # real steps of PyTorch and transformers

# Predicted / measured peak for the Decoder at 16 sequences of 8, FP32 Adam, on CPU, with calc's deck walk:
# 1.072 (no recomputation), 1.014 (selective), 1.090 (full); see docs/data/measurements.json. The deck walk's
# activations follow Korthikanti et al. (dropout, a 4h feed-forward layer) and it has no loss or backward
# working memory; the two partly cancel for the Decoder, not for the 12-layer models (up to 1.236 among the
# quick runs, 1.437 for 12-layer-wide).
PEAK_BOUND = 0.10  # the deck walk, the Decoder's runs
DECK_QUICK_BOUND = 0.25  # the deck walk, every quick run
# The eager walk (calc/eager.py) counts what PyTorch's eager autograd allocates: within 0.6% of every quick
# run and 0.8% of every run in measurements.json, below the measured peak by what it leaves out (the token
# batch, causal masks, Adam's step counters). 2% leaves room for other shapes (1.6% the worst seen).
EAGER_BOUND = 0.02


def saved_values(layers: int, micro_batch: int = 3, seq: int = 8) -> int:
    """Values (not parameters or buffers) autograd keeps for the whole model's backward, each storage once."""
    torch.manual_seed(0)
    model = reference.Decoder(reference.Config(layers=layers))
    fixed = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    storages: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in fixed:
            storages[s.data_ptr()] = s.nbytes() // t.element_size()
        return t

    tokens = torch.randint(64, (micro_batch, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(tokens)
        torch.nn.functional.cross_entropy(logits.view(-1, 64), tokens.view(-1))
    return sum(storages.values())


def test_reference_decoder_is_the_preset():
    """The reference Decoder has exactly the decoder preset's 5,376 parameters."""
    model = reference.Decoder(reference.Config())
    assert reference.param_count(model) == calc.param_counts(calc.PRESETS["decoder"])["total"] == 5376


@pytest.mark.parametrize("config", [measure.TWELVE, measure.TWELVE_WIDE])
def test_reference_models_match_calc_shapes(config):
    """Every measured model has the parameter count calc gives its shape."""
    model = reference.Decoder(config)
    assert reference.param_count(model) == calc.param_counts(measure.shape_of(config))["total"]


def test_saved_values_per_block_measured():
    """A block keeps 1,696 values per sequence at seq 8 (3 blocks less 2, counted here); the script agrees."""
    per_block, remainder = divmod(saved_values(3) - saved_values(2), 3)
    assert remainder == 0
    script = measure.count_saved()
    assert per_block == script["per_sequence_per_block"] == 1696
    assert script["formula"] == 2496  # Korthikanti et al.'s sbh(34 + 5as/h) / 2 bytes per value
    assert sum(t["measured"] for t in script["terms"]) == per_block
    assert sum(t["formula"] for t in script["terms"]) == script["formula"]
    assert "unnamed" not in {t["term"] for t in script["terms"]}


def test_saved_values_match_the_written_file():
    """docs/data/measurements.json reports the same saved-values count as a fresh measurement."""
    written = json.loads(measure.MEASUREMENTS.read_text())["saved_values"]
    assert written == measure.count_saved()


@pytest.fixture(scope="module")
def decoder_rows():
    return {
        rc: measure.measure(measure.Run("decoder", replace(measure.DECODER, recompute=rc), 8, 16))
        for rc in reference.RECOMPUTE
    }


@pytest.mark.parametrize("recompute", reference.RECOMPUTE)
def test_decoder_peak_within_bound(decoder_rows, recompute):
    """Measured (CPU allocator) and predicted (calc.step) peaks of one Decoder step agree within PEAK_BOUND."""
    row = decoder_rows[recompute]
    run = measure.Run("decoder", replace(measure.DECODER, recompute=recompute), 8, 16)
    assert row["predicted_peak"] == measure.predict(run)["peak"]
    assert abs(row["predicted_peak"] / row["measured_peak"] - 1) <= PEAK_BOUND


@pytest.fixture(scope="module")
def quick_rows(decoder_rows):
    rows = {("decoder", rc): row for rc, row in decoder_rows.items()}
    others = [r for r in measure.RUNS if r.quick and r.name != "decoder"]
    rows.update({(r.name, r.config.recompute): measure.measure(r) for r in others})
    return rows


QUICK = [(r.name, r.config.recompute) for r in measure.RUNS if r.quick]


@pytest.mark.parametrize("key", QUICK, ids="-".join)
def test_quick_runs_within_bounds(quick_rows, key):
    """Every quick run, measured now: the eager walk within EAGER_BOUND of the step's tensors, the deck walk within
    DECK_QUICK_BOUND of the measured peak, and the eager walk never farther from the measured peak than the deck
    walk."""
    row = quick_rows[key]
    run = next(r for r in measure.RUNS if (r.name, r.config.recompute) == key)
    assert row["predicted_peak_eager"] == measure.predict(run, "eager")["peak"]
    assert_predicts_tensors(row["predicted_peak_eager"], row, EAGER_BOUND)  # the step's tensors, workspace apart
    eager, deck = row["predicted_peak_eager"] / row["measured_peak"], row["predicted_peak"] / row["measured_peak"]
    assert abs(deck - 1) <= DECK_QUICK_BOUND
    assert abs(eager - 1) <= abs(deck - 1)


def test_written_runs_within_the_eager_bound():
    """Every measured row in docs/data/measurements.json, the slow ones too, is within EAGER_BOUND."""
    rows = [r for r in json.loads(measure.MEASUREMENTS.read_text())["runs"] if r["measured_peak"] is not None]
    assert rows
    for r in rows:
        assert abs(r["predicted_peak_eager"] / r["measured_peak"] - 1) <= EAGER_BOUND, r["name"]


@pytest.mark.parametrize("recompute", reference.RECOMPUTE)
def test_allocator_trace_is_complete(decoder_rows, recompute):
    """The trace starts at exactly the state's tensors and the step gives back all it takes."""
    row = decoder_rows[recompute]
    assert row["measured_start"] == row["state_from_tensors"]
    assert row["measured_end"] == row["measured_start"]
    assert sum(row["measured_at_peak"].values()) == row["measured_peak"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_workspace_is_what_a_matmul_takes_and_gives_back(dtype):
    """One F.linear, measured by profile_step: the step's tensors are what it starts with and its output, to the
    byte; whatever else its peak held is workspace, made and freed inside the matmul (oneDNN's scratch pad for
    bf16 on this CPU; none where the library takes none), as large as the largest such block."""

    def body(mark):
        x, w = torch.ones(192, 384, dtype=dtype), torch.ones(128, 384, dtype=dtype)
        with mark():
            y = torch.nn.functional.linear(x, w)
        return x, w, y

    got, (x, w, y) = profile_step.on_cpu(body)
    assert got["measured_start"] == x.nbytes + w.nbytes and got["measured_end"] == got["measured_start"] + y.nbytes
    assert got["measured_peak_tensors"] == got["measured_end"]
    assert got["measured_peak"] - got["measured_peak_tensors"] == got["workspace_at_peak"] == got["workspace_peak"]
    assert (got["workspace_at"] is None) == (got["workspace_peak"] == 0)


def test_recomputation_lowers_the_measured_peak(decoder_rows):
    """No recomputation > selective > full, measured."""
    peaks = [decoder_rows[rc]["measured_peak"] for rc in ("none", "selective", "full")]
    assert peaks == sorted(peaks, reverse=True) and len(set(peaks)) == 3


def test_peak_of_no_recomputation_is_in_the_loss_backward(decoder_rows):
    """Without recomputation the real peak is in cross-entropy's backward, holding two s x b x V fp32 gradients."""
    row = decoder_rows["none"]
    assert row["peak_at"] == "backward: LogSoftmaxBackward0"
    assert row["measured_at_peak"]["backward working"] == 2 * 4 * 8 * 16 * 64


def test_reference_trainer_learns():
    """80 Adam steps on the synthetic stream bring the loss well below uniform guessing (ln 64 = 4.16)."""
    torch.manual_seed(0)
    model = reference.Decoder(reference.Config())
    optimizer = reference.make_optimizer(model)
    stream = reference.synthetic_stream(64, 4096)
    gen = torch.Generator().manual_seed(0)
    losses = [reference.train_step(model, optimizer, *reference.batch(stream, 8, 16, gen)) for _ in range(80)]
    assert sum(losses[-10:]) / 10 < 0.9 * losses[0]


def test_json_quick(capsys, monkeypatch):
    """--json --quick prints one object with the saved values and a measured row for each quick run."""
    monkeypatch.setattr(measure, "RUNS", tuple(r for r in measure.RUNS if r.name == "decoder"))  # CI time
    assert measure.main(["--json", "--quick"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["saved_values"]["per_sequence_per_block"] == 1696
    measured = [r for r in data["runs"] if r["device"] == "cpu" and r["measured_peak"] is not None]
    assert {(r["name"], r["recompute"]) for r in measured} >= {
        (r.name, r.config.recompute) for r in measure.RUNS if r.quick
    }
    assert all(r["command"] == measure.command("cuda") for r in data["runs"] if r["device"] == "cuda")


@pytest.mark.parametrize(
    "argv", [["--device", "tpu"], ["--device", "cuda"], ["--frobnicate"]], ids=["device", "no-cuda", "flag"]
)
def test_bad_input_exits_2_with_one_line(argv, capsys):
    """Bad input: exit status 2 and one line on stderr."""
    if argv == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit) as exit_info:
        measure.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("measure.py: error:")


def test_reference_bad_input_exits_2(capsys):
    """The trainer's own CLI rejects a width its heads do not divide, in one line."""
    assert reference.main(["--width", "15", "--heads", "2", "--steps", "1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
