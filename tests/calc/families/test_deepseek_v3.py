"""DeepSeek-V3 (calc.families.deepseek_v3): its config.json read as DeepseekV3Config reads it, its step replayed by
the eager walk as transformers 5.23 runs it (latent attention, the grouped router, the shared expert, the dense
first layers), each recorded CPU step (docs/data/families.json) predicted within 0.1%."""

import json
import sys
from pathlib import Path

import pytest

import calc
from calc import eager_step, finetune, walk
from calc.cli import main
from calc.hf import ConfigError, shape_from_config
from calc.presets import config_text

ROOT = Path(__file__).resolve().parents[3]
FAMILIES = json.loads((ROOT / "docs" / "data" / "families.json").read_text())
TINY = {"model_type": "deepseek_v3", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 512, "q_lora_rank": 32,
        "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 4,
        "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_group": 1, "topk_group": 1,
        "first_k_dense_replace": 1}  # fmt: skip


def test_reads_the_published_config():
    """DeepSeek-V3's config.json: 128 heads of 128 + 64 for Q and K, 128 for V, ranks 1,536 and 512, 256 experts
    of 2,048 in 8 groups (4 searched), 8 a token, one shared expert, the first 3 layers dense; 671B, 37.6B active."""
    shape = calc.PRESETS["deepseek-v3"]
    assert (shape.heads, shape.head_dim, shape.v_head_dim, shape.rotary_dim) == (128, 192, 128, 64)
    assert (shape.q_rank, shape.kv_rank, shape.rope_interleave) == (1536, 512, True)
    assert (shape.experts, shape.experts_per_token, shape.expert_ffn, shape.shared_expert_ffn) == (256, 8, 2048, 2048)
    assert (shape.expert_groups, shape.group_topk, shape.topk_norm, shape.dense_layers) == (8, 4, True, 3)
    counts = calc.param_counts(shape)
    assert (counts["total"], counts["active"]) == (671_026_404_352, 37_552_282_624)
    assert max(eager_step.stored_tensors(shape)) == 256 * 2 * 2048 * 7168  # mlp.experts.gate_up_proj, one tensor


@pytest.mark.parametrize(
    ("change", "key"),
    [({"num_key_value_heads": 2}, "num_key_value_heads"), ({"n_group": 3}, "n_group"),
     ({"topk_group": 2}, "topk_group"), ({"attention_bias": True}, "attention_bias"),
     ({"qk_rope_head_dim": 7}, "qk_rope_head_dim"), ({"num_experts_per_tok": 5}, "num_experts_per_tok")],
)  # fmt: skip
def test_a_config_transformers_cannot_run_names_its_key(change, key):
    """A config DeepseekV3Attention or its router cannot run (or calc does not count) names the key at fault."""
    with pytest.raises(ConfigError, match=key):
        shape_from_config({**TINY, **change})


def test_without_q_lora_rank_one_q_proj():
    """q_lora_rank null: one h -> heads x (nope + rope) q_proj, as DeepseekV3Attention builds."""
    shape = shape_from_config({**TINY, "q_lora_rank": None})
    names = [t.name for t in calc.counts.layer_tensors(shape)]
    assert "self_attn.q_proj.weight" in names and "self_attn.q_a_proj.weight" not in names


def _events(segs):
    return [(e["phase"], e["label"], e["bytes"]) for e in walk.events(segs)]


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_dense_first_layers_stretch_as_the_whole_model(recompute):
    """A deep model is replayed with its dense first layers and 4 more: stretched, its events are the whole
    model's replayed layer by layer."""
    shape = shape_from_config({**TINY, "num_hidden_layers": 9, "first_k_dense_replace": 3})
    args = (32, 2, "autocast", recompute, "eager", "cpu", finetune.DEFAULT)
    stretched = eager_step._replayed(shape, args)[2]
    whole = eager_step._compress(eager_step.replay(shape, *args)[0].events)
    assert _events(stretched) == _events(whole)
    assert any(seg.reps and len(seg.reps.layers) > 2 for seg in stretched)  # the middle layers were stretched


def test_cpu_sdpa_runs_the_math_kernel():
    """Q and K heads of 24 against V heads of 16: sdpa on the CPU keeps the s x s softmax (its math kernel);
    on CUDA the memory-efficient kernel keeps none."""
    labels = {}
    for device in ("cpu", "cuda"):
        step = calc.step(shape_from_config(TINY), 128, 2, "fp32-full", "none", walk="eager", device=device)
        labels[device] = {e["label"] for e in step["events"]}
    assert "layer 1: softmax (fp32)" in labels["cpu"] and "layer 1: log-sum-exp" not in labels["cpu"]
    assert "layer 1: log-sum-exp" in labels["cuda"] and "layer 1: softmax (fp32)" not in labels["cuda"]


def test_the_preset_walks_both_ways(capsys):
    """DeepSeek-V3 (671B) from its preset: the deck walk and the eager walk answer; fine-tuning by the eager
    walk is refused on the field."""
    for extra in ([], ["--walk", "eager"]):
        assert main(["--preset", "deepseek-v3", "--seq", "1024", "--json", *extra]) == 0
        assert json.loads(capsys.readouterr().out)["params"] == 671_026_404_352
    assert main(["--preset", "deepseek-v3", "--walk", "eager", "--finetune", "lora"]) == 2
    assert "by no walk otherwise" in capsys.readouterr().err  # its latent attention is not LoRA's q, k, v, o
    assert "DeepSeek" in calc.presets.PRESET_GROUPS and "deepseek-v3" in calc.presets.PRESET_GROUPS["DeepSeek"]
    assert json.loads(config_text("deepseek-v3"))["model_type"] == "deepseek_v3"


def test_the_family_needs_its_own_config(capsys):
    """--family deepseek_v3 on a shape without latent attention is refused on the field."""
    assert main(["--preset", "llama-7b", "--family", "deepseek_v3", "--walk", "eager"]) == 2
    assert "family" in capsys.readouterr().err


ROWS = [r for r in FAMILIES["runs"] if r["family"] == "deepseek_v3" and "measured_peak" in r]


def test_every_shape_precision_attention_and_checkpointing_is_recorded():
    """The 16 recorded CPU steps: two shapes x fp32 and autocast x eager and sdpa x checkpointing off and on."""
    grid = {(r["shape"], r["precision"], r["attention"], r["checkpointing"]) for r in ROWS}
    assert len(ROWS) == len(grid) == 16


@pytest.mark.torch
@pytest.mark.parametrize(
    "row", ROWS, ids=lambda r: f"{r['shape']}-{r['precision']}-{r['attention']}-{r['checkpointing']}"
)
def test_every_recorded_step_is_predicted_within_a_thousandth(row):
    """calc's eager walk, from the CLI as a user types it, within 0.1% of each measured step's peak."""
    sys.path.insert(0, str(ROOT / "scripts" / "training"))
    import calc_cli
    import measure_families

    got = calc_cli.answer(measure_families.recorded_args(row))
    assert 0.999 <= got["peak"] / row["measured_peak"] <= 1.001
