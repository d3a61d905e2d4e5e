"""Gemma, Gemma 2 and Gemma 3 (calc.families.gemma): their configs read as transformers reads them, their
counts transformers' own, and the eager walk within 0.1% of every recorded CPU step (docs/data/families.json)."""

import json
from pathlib import Path

import pytest

import calc
from calc import activations, families
from calc.cli import main
from calc.hf import shape_from_config
from calc.presets import PRESET_GROUPS, config_text

ROOT = Path(__file__).resolve().parents[3]
RUNS = json.loads((ROOT / "docs" / "data" / "families.json").read_text())
GEMMA = ("gemma", "gemma2", "gemma3_text")
BAND = (0.999, 1.001)  # the eager walk's ratio, predicted / measured, on every recorded Gemma step
MEASURED = [r for r in RUNS["runs"] if r["family"] in GEMMA and "measured_peak" in r]


def _id(row: dict) -> str:
    return "-".join(row[k] for k in ("family", "shape", "precision", "attention", "checkpointing"))


def test_every_gemma_family_is_recorded_on_the_whole_grid():
    """Two shapes x fp32/autocast x eager/sdpa x checkpointing off/on, sdpa not run for Gemma 2 (refused)."""
    for family in GEMMA:
        rows = [r for r in RUNS["runs"] if r["family"] == family]
        assert len(rows) == 16, family
        for r in rows:
            assert ("measured_peak" in r) == (family != "gemma2" or r["attention"] == "eager"), _id(r)


@pytest.mark.parametrize("row", MEASURED, ids=_id)
def test_the_eager_walk_is_within_the_band_of_each_recorded_step(row):
    """The CLI's eager peak over the measured peak: 0.999 to 1.001, checkpointing on and off, fp32 and autocast
    (the recorded answer is today's: test_families_loops_measure.test_recorded_cli_answers_are_todays)."""
    assert BAND[0] <= row["eager"]["ratio"] <= BAND[1], row["eager"]["command"]
    # what the walk leaves out: the step's scalars (the loss, autograd's 0-dim tensors), under 256 bytes
    assert 0 <= row["measured_peak"] - row["eager"]["peak"] < 256


def test_the_counts_recorded_beside_the_steps_are_transformers():
    """The tiny configs and the published Gemma 2 and Gemma 3 configs: calc's count is transformers'."""
    for family in GEMMA:
        row = RUNS["families"][family]
        assert row["calc"]["params"] == row["transformers_params"], family
    presets = {p["preset"]: p for p in RUNS["presets"] if p["preset"].startswith("gemma")}
    assert set(presets) == {"gemma-2-27b", "gemma-3-12b", "gemma-3-27b"}
    for name, p in presets.items():
        assert p["calc"]["params"] == p["transformers_params"] == calc.param_counts(calc.PRESETS[name])["total"]


def test_the_gemma_presets_are_listed_together():
    """Gemma 2 9B and 27B and Gemma 3 12B and 27B, in the Gemma group."""
    assert list(PRESET_GROUPS["Gemma"]) == ["gemma-2-9b", "gemma-2-27b", "gemma-3-12b", "gemma-3-27b"]
    assert calc.PRESETS["gemma-3-27b"].family == "gemma3_text"


def test_gemma3_reads_its_text_config():
    """Gemma-3-27B's multimodal config: the text model's 62 layers, five sliding of each six, 16 key/value heads
    of 128, four norms a block, no soft-caps (attn_logit_softcapping is null, and Gemma 3 ignores it)."""
    shape = calc.PRESETS["gemma-3-27b"]
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.norms_per_layer) == (62, 16, 128, 4)
    assert shape.layer_types == "sssssf" * 10 + "ss" and shape.sliding_window == 1024
    assert not shape.attn_softcap and not shape.logit_softcap
    text = json.loads(config_text("gemma-3-27b"))["text_config"]
    assert shape_from_config({**text, "attn_logit_softcapping": 50.0}).attn_softcap is False
    with pytest.raises(ValueError, match="text_config is missing"):
        shape_from_config({"model_type": "gemma3"})


def test_gemma2_reads_its_soft_caps_and_layer_types():
    """Gemma2Config: soft-caps on by default (50 on the scores, 30 on the logits), null turns each off; every
    other layer slides, the first among them; an explicit layer_types is kept."""
    cfg = json.loads(config_text("gemma-2-9b"))
    shape = shape_from_config(cfg)
    assert shape.attn_softcap and shape.logit_softcap and shape.layer_types == "sf" * 21
    off = shape_from_config({**cfg, "attn_logit_softcapping": None, "final_logit_softcapping": None})
    assert not off.attn_softcap and not off.logit_softcap
    given = shape_from_config({**cfg, "layer_types": ["full_attention"] * 42})
    assert given.layer_types == "f" * 42
    with pytest.raises(ValueError, match="layer_types must list"):
        shape_from_config({**cfg, "layer_types": ["sliding_attention"]})
    with pytest.raises(ValueError, match="attn_logit_softcapping must be"):
        shape_from_config({**cfg, "attn_logit_softcapping": "yes"})


def test_gemma2_refuses_sdpa_naming_the_attention(capsys):
    """Gemma2PreTrainedModel does not support sdpa: the eager walk says so on --attention, and runs eager."""
    assert main(["--preset", "gemma-2-9b", "--seq", "512", "--walk", "eager", "--attention", "sdpa"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --attention: transformers' Gemma 2 code runs eager attention only: --attention eager\n"
    assert main(["--preset", "gemma-2-9b", "--seq", "512", "--walk", "eager", "--attention", "eager"]) == 0


TINY = {"hidden": 256, "heads": 4, "kv_heads": 2, "head_size": 64, "ffn": 512}  # activations take the peak


def _step(shape, seq: int, attention: str) -> int:
    return calc.step(shape, seq, 1, "autocast", "none", walk="eager", attention=attention, device="cpu")["peak"]


def test_a_window_shorter_than_the_sequence_costs_memory_under_sdpa():
    """Gemma 3 under sdpa: once the window is no longer than the sequence, each sliding layer repeats K and V and
    saves a float mask, so the peak grows; a window longer than the sequence costs nothing."""
    small = calc.PRESETS["gemma-3-12b"].replace(layers=6, layer_types="sssssf", vocab=1024, **TINY)
    wide, narrow = small.replace(sliding_window=4096), small.replace(sliding_window=256)
    assert _step(narrow, 512, "sdpa") > _step(wide, 512, "sdpa")
    assert _step(wide, 512, "sdpa") == _step(small.replace(sliding_window=8192), 512, "sdpa")


def test_the_attention_soft_cap_saves_the_scores_tanh():
    """Gemma 2's eager attention keeps tanh's s x s output in each layer: the walk's peak and the deck's scores
    term (2 a s^2 b more) both grow with the soft-cap."""
    gemma = calc.PRESETS["gemma-2-9b"].replace(layers=4, layer_types="sfsf", vocab=1024, **TINY)
    off = gemma.replace(attn_softcap=False)
    assert _step(gemma, 512, "eager") > _step(off, 512, "eager")
    scores = activations.layer_parts(gemma, 512, 1)[2] - activations.layer_parts(off, 512, 1)[2]
    assert scores == 2 * gemma.heads * 512 * 512


def test_gemma3_counts_its_head_norms_in_the_deck():
    """The deck counts each q/k norm's 16-bit input where the family has them (Gemma 3), not elsewhere."""
    gemma3 = calc.PRESETS["gemma-3-12b"]
    inside = (
        activations.layer_parts(gemma3, 1024, 1)[1]
        - activations.layer_parts(gemma3.replace(family="gemma2"), 1024, 1)[1]
    )
    assert inside == 2 * 1024 * (gemma3.q_width + gemma3.kv_width)
    assert families.FAMILIES["gemma3_text"].qk_norms and not families.FAMILIES["gemma2"].qk_norms


@pytest.mark.torch
@pytest.mark.parametrize("name", ["gemma-2-9b", "gemma-2-27b", "gemma-3-12b", "gemma-3-27b"])
def test_preset_counts_are_transformers_on_the_meta_device(name):
    """Each Gemma preset's published config, built by transformers on the meta device (Gemma 3: its
    text_config, Gemma3ForCausalLM), has calc's count."""
    import torch
    import transformers

    cfg = json.loads(config_text(name))
    cfg = cfg.get("text_config") or cfg
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert calc.param_counts(calc.PRESETS[name])["total"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("preset", "attention", "seq", "recompute"),
    [
        ("gemma-3-27b", "eager", 512, "none"),
        ("gemma-3-27b", "eager", 512, "full"),
        ("gemma-2-27b", "eager", 512, "none"),
        ("gemma-3-12b", "sdpa", 512, "none"),
        ("gemma-3-12b", "sdpa", 2048, "none"),
    ],
)
def test_a_deep_gemma_is_stretched_from_few_layers_exactly(monkeypatch, preset, attention, seq, recompute):
    """Sliding and full layers replayed as a few layers and stretched (or whole, where sdpa masks the sliding
    ones): every event as the whole model's replay gives it, the rotary tables each layer type keeps included."""
    from calc import eager_step

    shape = calc.PRESETS[preset].replace(layers=14, layer_types=calc.PRESETS[preset].layer_types[:14], **TINY)
    shape = shape.replace(vocab=1024)
    stretched = calc.step(shape, seq, 1, "autocast", recompute, walk="eager", attention=attention, device="cpu")
    monkeypatch.setattr(eager_step, "layer_spans", lambda shape, tune: [(i, i) for i in range(1, shape.layers + 1)])
    whole = calc.step(shape, seq, 1, "autocast", recompute, walk="eager", attention=attention, device="cpu")
    assert stretched["events"] == whole["events"]
