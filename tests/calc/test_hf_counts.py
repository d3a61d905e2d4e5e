"""Parameter counts of transformers configs: every one equals transformers' own model on the meta device."""

import json
import tempfile
from pathlib import Path

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st

import calc
from calc.families import MODEL_TYPES
from calc.hf import READERS, shape_from_config, shape_from_text
from calc.presets import CONFIG_PRESETS, config_text

pytestmark = pytest.mark.torch

CONFIGS = Path(__file__).parents[1] / "hf_configs"  # published config.json files of model types no preset uses


def transformers_count(cfg: dict) -> int:
    """Parameters of transformers' own model for this config, built on the meta device (no weights); of a
    multimodal config (Gemma 3), its language model's: text_config, as Gemma3ForCausalLM builds it."""
    cfg = cfg.get("text_config") or cfg
    cfg = {k: v for k, v in cfg.items() if k != "quantization_config"}  # DeepSeek-V3's fp8 storage, not the model
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())  # tied matrices are counted once


@pytest.mark.parametrize("name", CONFIG_PRESETS)
def test_preset_count_equals_transformers(name):
    """Each preset stored as a config.json has exactly the parameters transformers builds from that file."""
    assert calc.param_counts(calc.PRESETS[name])["total"] == transformers_count(json.loads(config_text(name)))


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_published_config_count_equals_transformers(path):
    """Gemma 7B, Phi-3-mini, Qwen1.5-MoE-A2.7B, GPT-2 and Llama 2 7B: the count transformers builds."""
    text = path.read_text()
    assert calc.param_counts(shape_from_text(text))["total"] == transformers_count(json.loads(text))


# Model types no published config.json of which was found to store: the small random configs below check them.
UNPUBLISHED = {"olmo3", "ministral", "ministral3", "mistral3", "llama4_text"}


def test_every_model_type_is_checked():
    """The presets and the test configs cover every model type calc reads (a multimodal config's text model
    among them: Gemma 3's gemma3_text) but the UNPUBLISHED ones."""
    texts = [config_text(n) for n in CONFIG_PRESETS] + [p.read_text() for p in CONFIGS.glob("*.json")]
    files = [json.loads(t) for t in texts]
    types = {cfg["model_type"] for cfg in files}
    types |= {cfg["text_config"]["model_type"] for cfg in files if "text_config" in cfg}
    assert types == set(READERS) - UNPUBLISHED


# The classes' default token ids lie outside a tiny vocabulary (Phi-3's padding row would not exist).
NO_TOKENS = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}


@st.composite
def small_configs(draw) -> dict:
    """A small config of any supported type, with the features that change the count drawn at random."""
    model_type = draw(st.sampled_from(sorted(READERS)))
    kv_heads = draw(st.sampled_from([1, 2, 4]))
    heads = kv_heads * draw(st.sampled_from([1, 2, 3]))
    head_dim = draw(st.sampled_from([4, 8, 12]))
    # A head size apart from width / heads half the time (LlamaConfig and Gemma2Config insist that the heads
    # divide the width all the same).
    hidden = heads * (head_dim if draw(st.booleans()) else draw(st.sampled_from([2, 6, 10])))
    layers = draw(st.integers(1, 4))
    if model_type == "gpt2":
        hidden = heads * head_dim
        return {
            "model_type": "gpt2",
            "n_layer": layers,
            "n_embd": hidden,
            "n_head": heads,
            "n_inner": draw(st.sampled_from([None, 8, 20])),
            "n_positions": draw(st.integers(1, 64)),
            "vocab_size": draw(st.integers(1, 300)),
            "tie_word_embeddings": draw(st.booleans()),
            **NO_TOKENS,
        }
    cfg = {
        "model_type": model_type,
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": draw(st.integers(1, 48)),
        "vocab_size": draw(st.integers(1, 300)),
        "tie_word_embeddings": draw(st.booleans()),
        **NO_TOKENS,
    }
    if model_type == "llama":
        cfg["attention_bias"] = cfg["mlp_bias"] = draw(st.booleans())
    if model_type == "mixtral":
        cfg["num_local_experts"] = draw(st.integers(1, 6))
        cfg["num_experts_per_tok"] = draw(st.integers(1, cfg["num_local_experts"]))
    if model_type in ("olmo3", "ministral"):  # a window, and which layers slide
        cfg["sliding_window"] = draw(st.sampled_from([None, 4, 4096])) if model_type == "olmo3" else 4
        cfg["layer_types"] = draw(st.lists(st.sampled_from(["sliding_attention", "full_attention"]),
                                           min_size=layers, max_size=layers))  # fmt: skip
    if model_type == "smollm3":
        cfg["no_rope_layer_interval"] = draw(st.integers(1, 4))
        cfg["attention_bias"] = cfg["mlp_bias"] = draw(st.booleans())
    if model_type == "mistral3":  # Mistral 3: the language model in text_config (calc counts it alone)
        return {"model_type": "mistral3", "text_config": {**cfg, "model_type": "ministral3"}}
    if model_type == "qwen2_moe":
        cfg["num_experts"] = draw(st.integers(0, 6))
        cfg["num_experts_per_tok"] = draw(st.integers(1, max(1, cfg["num_experts"])))
        cfg["moe_intermediate_size"] = draw(st.integers(1, 24))
        cfg["shared_expert_intermediate_size"] = draw(st.integers(1, 24))
        cfg["decoder_sparse_step"] = draw(st.integers(1, 3))
        cfg["mlp_only_layers"] = draw(st.lists(st.integers(0, layers - 1), unique=True))
        cfg["qkv_bias"] = draw(st.booleans())
    if model_type in ("gemma2", "gemma3_text", "gemma3"):  # layer types: which layers slide
        cfg["sliding_window_pattern" if model_type != "gemma2" else "sliding_window"] = draw(st.integers(1, 4))
    if model_type == "gemma3":  # the multimodal config: its language model is text_config
        return {"model_type": "gemma3", "text_config": {**cfg, "model_type": "gemma3_text"}}
    if model_type == "deepseek_v3":
        cfg.update(deepseek_v3_fields(draw, heads, layers))
    if model_type == "qwen3_moe":
        cfg["num_experts"] = draw(st.integers(0, 6))
        cfg["num_experts_per_tok"] = draw(st.integers(1, max(1, cfg["num_experts"])))
        cfg["moe_intermediate_size"] = draw(st.integers(1, 24))
        cfg["decoder_sparse_step"] = draw(st.integers(1, 3))
        cfg["mlp_only_layers"] = draw(st.lists(st.integers(0, layers - 1), unique=True))
        cfg["norm_topk_prob"] = draw(st.booleans())
    if model_type == "gpt_oss":
        cfg["num_local_experts"] = draw(st.integers(1, 6))
        cfg["num_experts_per_tok"] = draw(st.integers(1, cfg["num_local_experts"]))
        cfg["attention_bias"] = draw(st.booleans())
        cfg["sliding_window"] = draw(st.sampled_from([None, 4, 128]))
    if model_type == "llama4_text":
        cfg["num_local_experts"] = draw(st.integers(1, 6))
        cfg["num_experts_per_tok"] = draw(st.integers(1, cfg["num_local_experts"]))
        cfg["intermediate_size_mlp"] = draw(st.integers(1, 48))
        cfg["interleave_moe_layer_step"] = draw(st.integers(1, 3))
        cfg["no_rope_layer_interval"] = draw(st.integers(1, 4))
        cfg["use_qk_norm"] = draw(st.booleans())
    return cfg


def deepseek_v3_fields(draw, heads: int, layers: int) -> dict:
    """DeepSeek-V3's own keys: the latent attention's ranks and head sizes (one q_proj without q_lora_rank),
    routed experts in groups, the shared experts, the dense first layers."""
    groups = draw(st.sampled_from([1, 2]))
    experts = groups * draw(st.integers(2, 4))
    best = draw(st.integers(1, groups))
    return {
        "num_key_value_heads": heads,
        "q_lora_rank": draw(st.sampled_from([None, 4, 12])),
        "kv_lora_rank": draw(st.integers(1, 16)),
        "qk_nope_head_dim": draw(st.integers(1, 12)),
        "qk_rope_head_dim": draw(st.sampled_from([2, 4, 8])),
        "v_head_dim": draw(st.integers(1, 12)),
        "n_routed_experts": experts,
        "n_group": groups,
        "topk_group": best,
        "num_experts_per_tok": draw(st.integers(1, experts // groups * best)),
        "moe_intermediate_size": draw(st.integers(1, 24)),
        "n_shared_experts": draw(st.integers(1, 2)),
        "first_k_dense_replace": draw(st.integers(0, layers)),
    }


@settings(max_examples=60, deadline=None)
@given(small_configs())
def test_any_small_config_count_equals_transformers(cfg):
    """Head sizes apart from width/heads, GQA, biases, tying, experts, shared experts and dense layers: exact."""
    counted = cfg.get("text_config", cfg)  # a Mistral 3 config: transformers' count of its language model
    assert calc.param_counts(shape_from_config(cfg))["total"] == transformers_count(counted)



def saved(config: transformers.PretrainedConfig, tmp: Path) -> tuple[str, int]:
    """The config.json that `save_pretrained` writes for this config, and the parameters of the model
    transformers builds from that file (of a multimodal one, its language model's)."""
    config.save_pretrained(tmp)
    loaded = transformers.AutoConfig.from_pretrained(tmp)
    loaded = getattr(loaded, "text_config", None) or loaded
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(loaded)
    return (tmp / "config.json").read_text(), sum(p.numel() for p in model.parameters())


# MinistralConfig() leaves head_dim None, with which transformers' own MinistralAttention cannot be built (5.23:
# None ** -0.5); its default model is built with the head size its layers would take, width / heads.
UNBUILDABLE_DEFAULTS = {"ministral": {"head_dim": 4096 // 32}}


@pytest.mark.parametrize("model_type", sorted(READERS))
def test_every_model_types_default_config_as_transformers_saves_it(model_type, tmp_path):
    """Each model type's config class with its defaults, saved as transformers writes it (each key under the
    name its class stores: Qwen3-MoE's num_local_experts), is counted as the model transformers builds."""
    config = transformers.CONFIG_MAPPING[model_type](**UNBUILDABLE_DEFAULTS.get(model_type, {}))
    text, count = saved(config, tmp_path)
    assert calc.param_counts(shape_from_text(text))["total"] == count


@settings(max_examples=40, deadline=None)
@given(small_configs())
def test_any_small_config_as_transformers_saves_it(cfg):
    """A small config built with transformers' own config class and saved by it: the count of its model."""
    with tempfile.TemporaryDirectory() as tmp:
        config = transformers.AutoConfig.for_model(**cfg)
        text, count = saved(config, Path(tmp))
    assert calc.param_counts(shape_from_text(text))["total"] == count


def expert_layers(config: transformers.PretrainedConfig) -> list[bool]:
    """For each decoder layer of the model transformers builds from this config (on the meta device), whether it
    holds routed experts (a parameter under an `experts` module: Llama 4's, Qwen-MoE's, Mixtral's, DeepSeek's)."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return [any(".experts." in f".{name}" for name, _ in layer.named_parameters()) for layer in model.model.layers]


@settings(max_examples=40, deadline=None)
@given(small_configs().filter(lambda cfg: cfg["model_type"] in ("llama4_text", "qwen2_moe", "qwen3_moe",
                                                                "deepseek_v3", "mixtral")))
def test_the_expert_layers_are_transformers_as_it_saves_the_config(cfg):
    """Which layers are a mixture of experts (Shape.moe_layer): Llama 4's interleave_moe_layer_step (saved as
    its moe_layers list), Qwen-MoE's decoder_sparse_step and mlp_only_layers, DeepSeek's first_k_dense_replace,
    read from the config.json that save_pretrained writes, layer for layer as transformers builds the model."""
    with tempfile.TemporaryDirectory() as tmp:
        config = transformers.AutoConfig.for_model(**cfg)
        config.save_pretrained(tmp)
        shape = shape_from_text((Path(tmp) / "config.json").read_text())
        built = expert_layers(transformers.AutoConfig.from_pretrained(tmp))
    assert [shape.moe_layer(i) for i in range(1, shape.layers + 1)] == built


class Asked(dict):
    """A config that records the keys a reader asks for."""

    asked: set

    def get(self, key, default=None):
        self.asked.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.asked.add(key)
        return super().__contains__(key)


@pytest.mark.parametrize("model_type", sorted(READERS))
def test_aliases_are_the_config_classes(model_type):
    """Each model type reads under both names every attribute_map pair of its config class one of whose names
    its reader reads: a new alias in a later transformers fails here, not silently in a user's file."""
    cfg = Asked(transformers.CONFIG_MAPPING[model_type]().to_dict())
    cfg.asked = set()
    MODEL_TYPES[model_type].read(cfg)
    pairs = transformers.CONFIG_MAPPING[model_type].attribute_map.items()
    assert set(MODEL_TYPES[model_type].aliases) == {(a, s) for a, s in pairs if {a, s} & cfg.asked}


# The mixtures of experts whose experts' stored shape is checked below (the others' FSDP2 walk is refused)
EXPERTS = {"qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
                         "decoder_sparse_step": 1, "mlp_only_layers": []},
           "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2}}
# Not these: FSDP2's walk refuses their experts (calc.inputs.FSDP2_EXPERTS); Qwen2-MoE's shared-expert gate, a
# (1, width) matrix, is listed as a vector of the width
STORED_TYPES = sorted(t for t in MODEL_TYPES if t not in {"gpt_oss", "deepseek_v3", "llama4_text", "qwen2_moe"})


@pytest.mark.parametrize("model_type", STORED_TYPES)
def test_fsdp2_groups_are_transformers_modules_rows_by_rows(model_type, tmp_path):
    """FSDP2 cuts each parameter's dim 0 (calc.engines.fsdp): calc's groups, the root's and each decoder layer's,
    hold exactly the (dim 0, the rest) of the parameters of transformers' own modules, small configs each (the
    experts' fused weights by expert)."""
    from calc.optim_step import model_groups

    cfg = {"num_hidden_layers": 2, "hidden_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 12, "intermediate_size": 40, "vocab_size": 96, "tie_word_embeddings": False, **NO_TOKENS,
           **EXPERTS.get(model_type, {})}
    if model_type == "gpt2":
        cfg = {"n_layer": 2, "n_embd": 48, "n_head": 4, "vocab_size": 96, **NO_TOKENS}
    if model_type == "mistral3":
        cfg = {"text_config": {**cfg, "model_type": "ministral3"}}
    if model_type == "gemma3":
        cfg = {"text_config": {**cfg, "model_type": "gemma3_text"}}
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    text, _ = saved(config, tmp_path)
    loaded = transformers.AutoConfig.from_pretrained(tmp_path)
    loaded = getattr(loaded, "text_config", None) or loaded
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(loaded)
    layers = model.model.layers if hasattr(model, "model") else model.transformer.h
    in_layers = {id(p) for layer in layers for p in layer.parameters()}

    def rows(params) -> list:
        return sorted((p.shape[0], p.numel() // p.shape[0]) for p in params)

    theirs = [rows(p for p in model.parameters() if id(p) not in in_layers)] + [rows(x.parameters()) for x in layers]
    ours = [sorted((p.rows, p.numel // p.rows) for p in g) for g, _ in model_groups(shape_from_text(text))]
    assert ours == theirs
