"""`--finetune qlora` against bitsandbytes' 4-bit layers and peft's LoRA on transformers' Llama, measured on the
CPU as scripts/training/measure_qlora.py does it: the NF4 base calc counts is what the loaded model holds (less
the code books), what QLoRA saves over a bf16 base is predicted within a few per cent, and `--walk eager`, which
replays bitsandbytes' Linear4bit and peft's wrapper of it, predicts the peak of the step's tensors within 3% (the
measured peak less the CPU matrix library's workspace, which calc does not model: conftest.assert_predicts_tensors).
bitsandbytes is in the `measure` extra (`make setup` installs it); a few seconds a run."""

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from calc import finetune
from conftest import PARTS, assert_cli_predicts, assert_predicts_tensors, part_of

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "training"))

CODE_BOOKS = 4 * (16 + 256)  # fp32: the 16 NF4 values and the 256 of the absmax's 8-bit code, in every linear
BOUND = 0.03  # the bound: within 3% of the measured peak
ALL = ("q", "k", "v", "o", "gate", "up", "down")
CASES = [  # (model, seq, micro-batch, (rank, alpha, targets), attention, checkpointing, recipe): none is recorded
    (("llama", 4, 128, 4, 4, 384, 512), 128, 2, (8, 16, ("q", "v")), "eager", "none", "bf16"),
    (("llama", 3, 128, 4, 2, 384, 512), 64, 2, (4, 8, ("q", "k", "v", "o", "gate")), "sdpa", "none", "bf16"),
    (("llama", 3, 128, 4, 2, 384, 512), 96, 2, (16, 32, ALL), "eager", "full", "bf16"),
    # an fp32 model (fp32 adapters) under torch.autocast; its 4-bit layers compute in bf16 all the same
    (("llama", 3, 128, 4, 2, 384, 512), 64, 2, (8, 16, ("q", "v", "down")), "eager", "full", "autocast"),
]


@pytest.fixture(scope="module")
def measured():
    """One run of measure_qlora's first shape, QLoRA and the same step on a bf16 base."""
    import measure_qlora

    m, seq, b, tune = measure_qlora.RUNS[0]
    folder = measure_qlora.saved(m)
    return {
        mode: measure_qlora.measure(folder, m, seq, b, replace(tune, mode=mode), "sdpa", "full", "cpu")
        for mode in ("qlora", "lora")
    }


@pytest.mark.torch
def test_nf4_base_is_what_bitsandbytes_holds(measured):
    """The loaded model's bytes are calc's weights plus the code books of every 4-bit linear and RoPE's two
    inverse-frequency buffers (fp32, head size / 2 each)."""
    import measure_qlora

    m = measure_qlora.RUNS[0][0]
    row = measured["qlora"]
    rope = 2 * 4 * (m.hidden // m.heads // 2)
    linears = m.layers * 7
    assert row["model_bytes"] == row["predicted_weights"] + linears * CODE_BOOKS + rope
    assert row["trainable_params"] == row["measured_trainable"]


@pytest.mark.torch
def test_qlora_saving_is_predicted(measured):
    """The bf16 step's peak less the QLoRA step's, predicted, is within 10% of the measured one."""
    saved = measured["lora"]["measured_peak"] - measured["qlora"]["measured_peak"]
    predicted = measured["lora"]["predicted_peak"] - measured["qlora"]["predicted_peak"]
    assert saved > 0 and abs(predicted / saved - 1) <= 0.10, f"{predicted:,} / {saved:,}"


@pytest.mark.parametrize("part", PARTS)
def test_recorded_qlora_commands_still_predict_their_peaks(part, capsys):
    """Every row of docs/data/qlora.json, run again through the CLI, predicts the bytes recorded beside it (the
    core: the first row of each model, fine-tuning and checkpointing; every row: `slow`)."""
    from calc.cli import main

    rows = json.loads((ROOT / "docs" / "data" / "qlora.json").read_text())["runs"]
    for row in part_of(rows, part, lambda r: (r["model_type"], str(r["tune"]), r["checkpointing"])):
        for r in (row, row["lora"]):
            for command, peak in ((r["command"], r["predicted_peak"]), (r["eager_command"], r["eager_predicted_peak"])):
                assert main([*command.split()[3:], "--json"]) == 0
                assert json.loads(capsys.readouterr().out)["peak"] == peak, command


def test_nf4_bytes_match_bitsandbytes_layout():
    """calc's NF4 count: half a byte a weight, one absmax byte per 64, one fp32 per 256 absmax values."""
    n = 4096 * 11008
    assert finetune.nf4_bytes(n) == n // 2 + n // 64 + 4 * (n // 64 // 256)


@pytest.mark.torch
def test_eager_walk_predicts_the_measured_qlora_step(measured):
    """The recorded eager walk's peak (`--walk eager --recipe bf16 --finetune qlora`) is within 3% of the measured
    step's tensors (its peak less the matrix library's workspace), and so is its peak for the same step on a bf16
    base (`--finetune lora`)."""
    for mode, row in measured.items():
        assert row["eager_trainable_params"] == row["measured_trainable"], mode
        assert_predicts_tensors(row["eager_predicted_peak"], row, BOUND)


@pytest.mark.torch
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"r{c[3][0]}-{len(c[3][2])}-targets-{'-'.join(c[4:])}")
def test_eager_walk_predicts_qlora_step(case):
    """The CLI's --walk eager peak for a QLoRA step, from the flags a user types, is within 3% of the tensors of
    the step measured on bitsandbytes' NF4 layers under peft's LoRA."""
    import hf_models
    import measure_lora
    import measure_qlora

    model, seq, b, (rank, alpha, targets), attention, checkpointing, recipe = case
    m, tune = hf_models.Model(*model), measure_lora.Tune("qlora", rank, alpha, targets)
    got = measure_qlora.measure_step(measure_qlora.saved(m), attention, checkpointing, seq, b, tune, "cpu", recipe)
    assert_cli_predicts(measure_qlora.eager_args(m, seq, b, checkpointing, attention, tune, "cpu", recipe), got, BOUND)


# (family, attention, checkpointing, calc's --adapter-dtype): each family that fine-tunes in the eager walk but Llama's
FAMILY_CASES = [("gemma3_text", "eager", "full", "model"), ("granite", "sdpa", "none", ""),
                ("olmo3", "sdpa", "full", "model"), ("smollm3", "eager", "none", ""),
                ("phi3", "eager", "full", "model"), ("phi3", "sdpa", "none", "")]  # fmt: skip (Phi-3: fused stores)
TENTH = 0.001  # the eager walk's band on these steps' tensors


@pytest.mark.torch
@pytest.mark.parametrize("case", FAMILY_CASES, ids=lambda c: "-".join(filter(None, c)))
def test_eager_walk_predicts_qlora_on_other_families(case):
    """QLoRA on every block linear of a family's tiny model (measure_families' config, its own features: Gemma 3's
    sliding layers, Granite's multipliers, OLMo 3's window, SmolLM3's layers without RoPE; widths of whole NF4
    blocks), predicted from its config.json within 0.1% of the step's tensors: the eager walk's Linear4bit and
    peft's wrapper are the family's linears as they are Llama's."""
    import measure_families
    import measure_lora
    import measure_qlora

    name, attention, checkpointing, adapter = case
    m = measure_families.FAMILIES[name]
    m = replace(m, hidden=128, ffn=384, extra=tuple((k, 32 if k == "head_dim" else v) for k, v in m.extra))
    tune = measure_lora.Tune("qlora", 8, 16, ALL, adapter_dtype=adapter)
    got = measure_qlora.measure_step(measure_qlora.saved(m), attention, checkpointing, 128, 2, tune, "cpu", m=m)
    assert_cli_predicts(measure_lora.cli_args(m, 128, 2, "bf16", attention, checkpointing, tune), got, TENTH)


# Issue 34: QLoRA on mixtures of experts (measure_qlora.CONFIG_RUNS): the attention in NF4, the experts and router bf16
MOE_CASES = [(2, "sdpa", "full", "model"), (1, "eager", "full", "")]  # Mixtral's fp32 routing; dense layers in NF4


@pytest.mark.torch
@pytest.mark.parametrize("case", MOE_CASES, ids=lambda c: "-".join(map(str, filter(None, c))))
def test_eager_walk_predicts_qlora_on_a_mixture_of_experts(case):
    """A QLoRA step of Mixtral (its routing weights fp32 beside bf16 experts) and of Qwen3-MoE with dense layers
    among its experts, measured, is predicted by `--walk eager --finetune qlora` from its config.json within
    0.1% of the step's tensors, and the model held is calc's weights (the code books included) and RoPE's two
    inverse-frequency buffers: bitsandbytes left the experts and the router in bf16, as calc counts them."""
    import measure_qlora

    i, attention, checkpointing, adapter = case
    m, seq, b, tune = measure_qlora.CONFIG_RUNS[i]
    tune = replace(tune, adapter_dtype=adapter)
    row = measure_qlora.measure_config(measure_qlora.saved(m), m, seq, b, tune, attention, checkpointing, "cpu")
    assert row["eager_trainable_params"] == row["measured_trainable"]
    assert_predicts_tensors(row["eager_predicted_peak"], row, TENTH)
    head = dict(m.extra).get("head_dim", m.hidden // m.heads)
    assert row["model_bytes"] == row["predicted_weights"] + 2 * 4 * (head // 2)


@pytest.mark.parametrize("part", PARTS)
def test_recorded_moe_qlora_commands_still_predict_their_peaks(part):
    """Every MoE row of docs/data/qlora.json (and its bf16 base), run again from its command and config.json,
    predicts the bytes recorded beside it (the core: the first row of each model, targets and checkpointing)."""
    import measure_qlora

    rows = json.loads((ROOT / "docs" / "data" / "qlora.json").read_text())["config_runs"]
    for row in part_of(rows, part, lambda r: (r["model_type"], str(r["model"]), r["tune"], r["checkpointing"])):
        for r in (row, row["lora"]):
            again = measure_qlora.config_predictions(r)
            assert (again["eager_predicted_peak"], again["predicted_weights"]) == (
                r["eager_predicted_peak"], r["predicted_weights"]), r["eager_command"]
