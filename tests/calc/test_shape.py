"""Parameter counts from a model's shape."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import calc
from strategies import modern_shapes, moe_shapes, shapes

# Published parameter counts (the released checkpoints' totals).
PUBLISHED = {
    "llama-7b": 6_738_415_616,  # Touvron et al. 2023; "6.7B" in Table 2
    "llama-2-13b": 13_015_864_320,  # Touvron et al. 2023 (Llama 2); "13B"
    "llama-2-70b": 68_976_648_192,  # Llama 2 70B with GQA (8 key/value heads); "70B"
    "gpt2": 124_439_808,  # Radford et al. 2019, the "117M"/124M model
    "decoder": 5_376,  # the course's Decoder (chapter 3)
    # The released checkpoints' totals (their safetensors files' parameter counts, rounded on the model cards).
    "llama-3.1-8b": 8_030_261_248,  # "8B"
    "llama-3.1-70b": 70_553_706_496,  # "70B"
    "llama-3.1-405b": 405_853_388_800,  # "405B"
    "llama-3.2-1b": 1_235_814_400,  # "1.24B"
    "llama-3.2-3b": 3_212_749_824,  # "3.21B"
    "mistral-7b": 7_241_732_096,  # Jiang et al. 2023, "7.3B"
    "mixtral-8x7b": 46_702_792_704,  # Jiang et al. 2024, "47B" (13B active)
    "qwen2.5-7b": 7_615_616_512,  # "7.61B"
    "qwen2.5-72b": 72_706_203_648,  # "72.7B"
    "gemma-2-9b": 9_241_705_984,  # "9.24B"
    "qwen3-8b": 8_190_735_360,  # Qwen3-8B's model card: "8.2B"
    "granite-3.3-8b": 8_170_864_640,  # Granite-3.3-8B-Instruct's safetensors: 8,170,864,640
    # transformers' own count of the published config.json on the meta device (docs/data/families.json)
    "qwen3-32b": 32_762_123_264,  # Qwen3-32B's model card: "32.8B"
    "gemma-2-27b": 27_227_128_320,  # Gemma 2 27B: "27.2B"
    # Gemma 3's language model (text_config, Gemma3ForCausalLM); the model cards' 12B and 27B add the vision tower
    "gemma-3-12b": 11_765_788_416,
    "gemma-3-27b": 27_009_002_240,
    "phi-4": 14_659_507_200,  # Abdin et al. 2024 (Phi-4): "14B"
    "olmo-2-13b": 13_716_198_400,  # OLMo-2-1124-13B's fp32 safetensors: 54,864,793,600 bytes / 4 ("13B")
    "smollm3-3b": 3_075_098_624,  # SmolLM3-3B: "3B"
    # DeepSeek-V3 technical report (2024): "671B total parameters"; the released 685B adds the multi-token
    # prediction module, which transformers' DeepseekV3ForCausalLM does not build
    "deepseek-v3": 671_026_404_352,
    "qwen3-30b-a3b": 30_532_122_624,  # Qwen3-30B-A3B's model card: "30.5B" (3.3B active)
    "qwen3-235b-a22b": 235_093_634_560,  # Qwen3-235B-A22B's model card: "235B" (22B active)
    "gpt-oss-20b": 20_914_757_184,  # OpenAI's gpt-oss model card: "21B" (transformers' count on the meta device)
    "gpt-3-175b": 174_604_259_328,  # Brown et al. 2020, Table 2.1: "175.0B" (no checkpoint released)
}


@pytest.mark.parametrize("name", sorted(calc.PRESETS))
def test_preset_matches_published_count(name):
    """Every preset's exact count equals the published one."""
    assert calc.param_counts(calc.PRESETS[name])["total"] == PUBLISHED[name]


def test_every_preset_has_a_published_count():
    """No preset goes unchecked."""
    assert set(calc.PRESETS) == set(PUBLISHED)


def test_llama_7b_breakdown():
    """LLaMA 7B: 32 layers of 202,383,360, an embedding and an untied head of 131,072,000."""
    counts = calc.param_counts(calc.PRESETS["llama-7b"])
    assert counts["per_layer"] == 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    assert counts["embedding"] == counts["head"] == 32000 * 4096
    assert counts["final_norm"] == 4096 and counts["positions"] == 0


def test_gqa_shrinks_key_and_value():
    """Fewer key/value heads remove 2h(h - kv_width) parameters per layer."""
    mha = calc.PRESETS["llama-2-70b"].replace(kv_heads=64)
    gqa = calc.PRESETS["llama-2-70b"]
    h = 8192
    assert calc.param_counts(mha)["per_layer"] - calc.param_counts(gqa)["per_layer"] == 2 * h * (h - 8 * 128)


@given(shapes())
def test_breakdown_adds_up(shape):
    """The total is the sum of its parts, and layers are L times one layer."""
    c = calc.param_counts(shape)
    assert c["layers"] == shape.layers * c["per_layer"]
    assert c["total"] == c["embedding"] + c["positions"] + c["layers"] + c["final_norm"] + c["head"]


@given(shapes())
def test_tying_removes_exactly_the_head(shape):
    """An untied head adds V x h (plus V biases) and nothing else."""
    untied, tied = shape.replace(tied=False), shape.replace(tied=True)
    extra = shape.vocab * shape.hidden + (shape.vocab if shape.bias else 0)
    assert calc.param_counts(untied)["total"] - calc.param_counts(tied)["total"] == extra


@given(st.one_of(modern_shapes(), moe_shapes()))
def test_breakdown_adds_up_with_heads_norms_and_experts(shape):
    """With any head size, norms and experts: layers are the MoE and dense layers, a token uses k of E experts."""
    c = calc.param_counts(shape)
    assert c["layers"] == shape.moe_layers * c["per_layer"] + (shape.layers - shape.moe_layers) * c["per_dense_layer"]
    assert c["total"] == c["embedding"] + c["positions"] + c["layers"] + c["final_norm"] + c["head"]
    if shape.moe_layers:
        assert c["experts"] == shape.moe_layers * shape.experts * (c["experts"] // shape.moe_layers // shape.experts)
        assert c["total"] - c["active"] == c["experts"] // shape.experts * (shape.experts - shape.experts_per_token)
    else:
        assert c["experts"] == 0 and c["active"] == c["total"]


@given(modern_shapes())
def test_attention_is_sized_by_heads_and_head_size(shape):
    """Q and O are h x (heads x head size), K and V h x (kv_heads x head size), whatever the width."""
    wider = shape.replace(head_size=shape.head_dim + 1)
    grown = calc.param_counts(wider)["per_layer"] - calc.param_counts(shape)["per_layer"]
    biases = shape.heads + 2 * shape.kv_heads if shape.bias or shape.qkv_bias else 0
    assert grown == 2 * shape.hidden * (shape.heads + shape.kv_heads) + biases


def test_every_preset_is_in_one_group():
    """The grouped preset list holds each preset once, with its total and active counts."""
    rows = calc.presets.catalog()
    assert sorted(r["name"] for r in rows) == sorted(calc.PRESETS)
    mixtral = next(r for r in rows if r["name"] == "mixtral-8x7b")
    assert (mixtral["group"], mixtral["params"], mixtral["active"]) == ("Mistral", 46_702_792_704, 12_879_925_248)
    deepseek = next(r for r in rows if r["name"] == "deepseek-v3")  # its report: 671B total, 37B activated
    assert (deepseek["group"], deepseek["params"], deepseek["active"]) == ("DeepSeek", 671_026_404_352, 37_552_282_624)
    # Qwen3's model cards: 3.3B and 22B activated (8 of 128 experts in each of 48 and 94 layers)
    # gpt-oss-20b: 4 of 32 experts in each of 24 layers (OpenAI's 3.6B active leaves out the embedding and head)
    active = {"mixtral-8x7b": 12_879_925_248, "qwen3-30b-a3b": 3_353_032_704, "qwen3-235b-a22b": 22_190_763_520,
              "gpt-oss-20b": 4_187_440_704, "deepseek-v3": 37_552_282_624}  # fmt: skip
    assert all(r["active"] == active.get(r["name"], r["params"]) for r in rows)


def test_each_layers_window_and_rotary_positions_come_from_one_place():
    """Shape.slides and Shape.rotary answer for every spelling configs give: Gemma's layer_types letters (a
    pattern repeating over more layers), OLMo 3's global_layers, SmolLM3's no_rope_layers, Llama 4's interval."""
    gemma = calc.PRESETS["gemma-2-9b"]
    assert [gemma.slides(i) for i in (1, 2, 43, 44)] == [True, False, True, False]
    olmo = calc.Shape(layers=8, sliding_window=64, global_layers=(4, 8))
    assert [i for i in range(1, 9) if not olmo.slides(i)] == [4, 8]
    assert not any(calc.Shape(global_layers=(4,)).slides(i) for i in range(1, 33))  # no window, no layer slides
    smol = calc.PRESETS["smollm3-3b"]
    assert [i for i in range(1, smol.layers + 1) if not smol.rotary(i)] == list(smol.no_rope_layers)
    assert [i for i in range(1, 9) if not calc.Shape(layers=8, no_rope_interval=4).rotary(i)] == [4, 8]


def test_a_gemma_of_more_layers_than_its_layer_types_is_walked():
    """--layers beyond a Gemma preset's layer_types repeats its pattern, in the eager walk's layer kinds too."""
    from calc.cli import main

    assert main(["--preset", "gemma-2-9b", "--layers", "44", "--walk", "eager", "--attention", "eager",
                 "--seq", "64", "--json"]) == 0  # fmt: skip


@given(st.integers(1, 64).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.booleans(), min_size=n, max_size=n))))
def test_moe_layer_is_where_the_config_puts_the_experts(drawn):
    """Shape.moe_layer, from the layers a config makes sparse (calc.families.config.dense_layers): the sparse
    ones and only those, whether the dense ones come first (a count) or lie among them (dense_at)."""
    from calc.families.config import dense_layers

    n, sparse = drawn
    shape = calc.Shape(layers=n, experts=4, experts_per_token=1, **dense_layers(sparse))
    assert [shape.moe_layer(i) for i in range(1, n + 1)] == sparse
    assert shape.moe_layers == sum(sparse)
    assert calc.Shape(layers=n).moe_layer(1) is False  # no experts: every layer dense
