"""A transformers `config.json` read into a Shape, for the model types whose code calc follows.

Each reader takes the fields transformers' own model class reads (LlamaConfig, MistralConfig, ...,
GPT2Config in transformers 5), with the same defaults where a field is optional; the shape's size
fields are required. Every problem is an InputError on the field "hf-config" naming the config's key."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from .shape import Shape

# Largest accepted value of a config's size (as calc.inputs takes the flags); others up to 2^24.
MAX_SIZE = {
    "num_hidden_layers": 10_000,
    "n_layer": 10_000,
    "hidden_size": 1 << 20,
    "n_embd": 1 << 20,
    "num_attention_heads": 1 << 16,
    "n_head": 1 << 16,
    "num_key_value_heads": 1 << 16,
    "head_dim": 1 << 16,
    "num_local_experts": 1 << 16,
    "num_experts": 1 << 16,
    "num_experts_per_tok": 1 << 16,
}
MAX_CHARS = 1_000_000  # a real config.json is a few kB; refuse a paste that is not one
# transformers' activation names (ACT2FN) -> calc's; gelu_new, gelu_pytorch_tanh and gelu_fast are all
# GELU's tanh approximation (Hendrycks & Gimpel 2016).
ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
}


class ConfigError(ValueError):
    """A config that calc cannot read; calc.inputs turns it into an InputError on "hf-config"."""


def _get(cfg: Mapping, key: str, default: object = ...) -> object:
    value = cfg.get(key)
    if value is None:
        if default is ...:
            raise ConfigError(f"{key} is missing")
        return default
    return value


def _int(cfg: Mapping, key: str, default: object = ..., smallest: int = 1) -> int:
    value = _get(cfg, key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key} must be a whole number, got {json.dumps(value)}")
    if value < smallest:
        raise ConfigError(f"{key} must be at least {smallest}, got {value}")
    largest = MAX_SIZE.get(key, 1 << 24)
    if value > largest:
        raise ConfigError(f"{key} must be at most {largest:,}, got {value:,}")
    return value


def _bool(cfg: Mapping, key: str, default: bool) -> bool:
    value = _get(cfg, key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {json.dumps(value)}")
    return value


def _rate(cfg: Mapping, *keys: str) -> bool:
    """Whether any of these dropout probabilities is above zero."""
    for key in keys:
        value = _get(cfg, key, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ConfigError(f"{key} must be a probability from 0 to 1, got {json.dumps(value)}")
        if value > 0:
            return True
    return False


def _activation(cfg: Mapping, key: str, default: str) -> str:
    value = _get(cfg, key, default)
    if not isinstance(value, str) or value not in ACTIVATIONS:
        raise ConfigError(f"{key} {json.dumps(value)} is not supported; supported: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[value]


def _attention(cfg: Mapping, kv_default: int | None = None, head_default: int = 0, gpt2: bool = False) -> dict:
    """Width, heads, key/value heads and head size, checked as transformers' attention needs them.
    `kv_default` and `head_default` are the config class's defaults (None: as many as the heads; 0: width/heads)."""
    hidden_key, heads_key = ("n_embd", "n_head") if gpt2 else ("hidden_size", "num_attention_heads")
    hidden = _int(cfg, hidden_key)
    heads = _int(cfg, heads_key)
    kv_heads = heads if gpt2 else _int(cfg, "num_key_value_heads", heads if kv_default is None else kv_default)
    head_size = 0 if gpt2 else _int(cfg, "head_dim", head_default, smallest=0)
    if not head_size and hidden % heads:
        missing = "" if gpt2 else " and head_dim is not given"
        raise ConfigError(f"{heads_key} ({heads}) does not divide {hidden_key} ({hidden}){missing}")
    if heads % kv_heads:
        raise ConfigError(f"num_key_value_heads ({kv_heads}) does not divide {heads_key} ({heads})")
    return {
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_size": 0 if head_size * heads == hidden else head_size,
    }


def _llama_like(
    cfg: Mapping,
    tied: bool,
    context: int,
    kv_default: int | None = None,
    head_default: int = 0,
    activation: tuple[str, str] = ("hidden_act", "silu"),
) -> dict:
    """What the Llama family's decoders share: RMSNorm, rotary positions, a gated FFN, no linear biases.
    The arguments are the config class's defaults."""
    return {
        "layers": _int(cfg, "num_hidden_layers"),
        **_attention(cfg, kv_default, head_default),
        "vocab": _int(cfg, "vocab_size"),
        "gated_ffn": True,
        "tied": _bool(cfg, "tie_word_embeddings", tied),
        "norm": "rms",
        "bias": False,
        "head_bias": False,  # the lm_head of every Llama-family model has none
        "positions": "rope",
        "context": _int(cfg, "max_position_embeddings", context),
        "final_norm": True,
        "activation": _activation(cfg, *activation),
        "dropout": _rate(cfg, "attention_dropout"),
        "family": "llama",
    }


def _attention_bias(cfg: Mapping, mlp_bias: bool = False) -> dict:
    """Llama's and Gemma's attention_bias puts biases on Q, K, V and O; calc has that only together with
    the FFN's (bias) or without O's (qkv_bias)."""
    attention = _bool(cfg, "attention_bias", False)
    if attention != mlp_bias:
        raise ConfigError("attention_bias and mlp_bias must be equal: calc counts biases on all linear layers or none")
    return {"bias": attention}


def _window(cfg: Mapping, use_key: str | None = None, default: int = 0) -> int:
    if use_key and not _bool(cfg, use_key, False):
        return 0
    if "sliding_window" in cfg and cfg.get("sliding_window") is None:
        return 0  # null: no window (Mistral 7B v0.2 on); a missing key takes the class's default
    return _int(cfg, "sliding_window", default, smallest=0)


def llama(cfg: Mapping) -> dict:
    """LlamaForCausalLM (Llama 1 to 3.x)."""
    out = _llama_like(cfg, False, 2048)
    out.update(ffn=_int(cfg, "intermediate_size"), **_attention_bias(cfg, _bool(cfg, "mlp_bias", False)))
    return out


def mistral(cfg: Mapping) -> dict:
    """MistralForCausalLM: Llama's layer, no biases, an optional sliding window."""
    out = _llama_like(cfg, False, 4096 * 32, 8)
    out.update(ffn=_int(cfg, "intermediate_size"), sliding_window=_window(cfg, None, 4096))
    return out


def qwen2(cfg: Mapping) -> dict:
    """Qwen2ForCausalLM (Qwen2, Qwen2.5): Llama's layer with biases on Q, K and V only."""
    out = _llama_like(cfg, False, 32768, 32)
    out.update(ffn=_int(cfg, "intermediate_size"), qkv_bias=True, sliding_window=_window(cfg, "use_sliding_window"))
    return out


def gemma(cfg: Mapping) -> dict:
    """GemmaForCausalLM: head size 256 whatever the width, tied head, GELU (tanh) gate."""
    out = _llama_like(cfg, True, 8192, 16, 256, ("hidden_act", "gelu_pytorch_tanh"))
    out.update(ffn=_int(cfg, "intermediate_size"), **_attention_bias(cfg))
    return out


def gemma2(cfg: Mapping) -> dict:
    """Gemma2ForCausalLM: Gemma's layer with a norm after attention and after the FFN too (four a block)."""
    out = _llama_like(cfg, True, 8192, 4, 256, ("hidden_activation", "gelu_pytorch_tanh"))
    out.update(ffn=_int(cfg, "intermediate_size"), norms_per_layer=4, sliding_window=_window(cfg, None, 4096))
    out.update(_attention_bias(cfg))
    return out


def phi3(cfg: Mapping) -> dict:
    """Phi3ForCausalLM: fused QKV and gate-up matrices with Llama's sizes, no biases."""
    out = _llama_like(cfg, False, 4096)
    out.update(
        ffn=_int(cfg, "intermediate_size"),
        dropout=_rate(cfg, "attention_dropout", "resid_pdrop", "embd_pdrop"),
        sliding_window=_window(cfg),
    )
    return out


def mixtral(cfg: Mapping) -> dict:
    """MixtralForCausalLM: Mistral's attention; every FFN is E experts of intermediate_size, top-k routed."""
    experts = _int(cfg, "num_local_experts", 8)
    ffn = _int(cfg, "intermediate_size")
    k = _int(cfg, "num_experts_per_tok", 2)
    if k > experts:
        raise ConfigError(f"num_experts_per_tok ({k}) is more than num_local_experts ({experts})")
    out = _llama_like(cfg, False, 4096 * 32, 8)
    out.update(ffn=ffn, experts=experts, experts_per_token=k, expert_ffn=ffn, sliding_window=_window(cfg))
    return out


def qwen2_moe(cfg: Mapping) -> dict:
    """Qwen2MoeForCausalLM (Qwen1.5-MoE): E experts of moe_intermediate_size and a gated shared expert;
    the layers in mlp_only_layers, or off the decoder_sparse_step, keep a dense FFN of intermediate_size."""
    out = _llama_like(cfg, False, 32768, 16)
    experts = _int(cfg, "num_experts", 60, smallest=0)
    k = _int(cfg, "num_experts_per_tok", 4)
    if experts and k > experts:
        raise ConfigError(f"num_experts_per_tok ({k}) is more than num_experts ({experts})")
    step = _int(cfg, "decoder_sparse_step", 1)
    only = _get(cfg, "mlp_only_layers", [])
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise ConfigError(f"mlp_only_layers must be a list of layer numbers, got {json.dumps(only)}")
    sparse = sum(1 for i in range(out["layers"]) if i not in only and experts and (i + 1) % step == 0)
    out.update(
        ffn=_int(cfg, "intermediate_size"),
        qkv_bias=_bool(cfg, "qkv_bias", True),
        sliding_window=_window(cfg, "use_sliding_window"),
    )
    if sparse:
        out.update(
            experts=experts,
            experts_per_token=k,
            expert_ffn=_int(cfg, "moe_intermediate_size"),
            shared_expert_ffn=_int(cfg, "shared_expert_intermediate_size", 5632, smallest=0),
            shared_expert_gate=True,  # always built, h -> 1 (Qwen2MoeSparseMoeBlock)
            dense_layers=out["layers"] - sparse,
        )
    return out


def gpt2(cfg: Mapping) -> dict:
    """GPT2LMHeadModel: LayerNorm, learned positions, biases everywhere but the tied head."""
    attention = _attention(cfg, gpt2=True)
    hidden = attention["hidden"]
    return {
        "layers": _int(cfg, "n_layer"),
        **attention,
        "ffn": _int(cfg, "n_inner", 4 * hidden),
        "vocab": _int(cfg, "vocab_size"),
        "gated_ffn": False,
        "tied": _bool(cfg, "tie_word_embeddings", True),
        "norm": "layer",
        "bias": True,
        "head_bias": False,
        "positions": "learned",
        "context": _int(cfg, "n_positions", 1024),
        "final_norm": True,
        "activation": _activation(cfg, "activation_function", "gelu_new"),
        "dropout": _rate(cfg, "embd_pdrop", "attn_pdrop", "resid_pdrop"),
        "family": "gpt2",
    }


READERS: dict[str, Callable[[Mapping], dict]] = {
    "llama": llama,
    "mistral": mistral,
    "qwen2": qwen2,
    "qwen2_moe": qwen2_moe,
    "mixtral": mixtral,
    "gemma": gemma,
    "gemma2": gemma2,
    "phi3": phi3,
    "gpt2": gpt2,
}


def parse(text: str) -> dict:
    """The JSON object of a config.json's text."""
    if not isinstance(text, str):
        raise ConfigError("not the text of a config.json")
    if len(text) > MAX_CHARS:
        raise ConfigError(f"too long: {len(text):,} characters, where a config.json has at most {MAX_CHARS:,}")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"not JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    except (ValueError, RecursionError) as e:  # a number of over 4,300 digits, or nesting past the stack
        reason = "a number too long" if isinstance(e, ValueError) else "nested too deeply"
        raise ConfigError(f"not JSON: {reason}") from None
    if not isinstance(cfg, dict):
        raise ConfigError("not a JSON object, as a transformers config.json is")
    return cfg


# Model types whose modeling code differs from Llama's where memory is concerned: Gemma scales its
# embeddings and adds norms, Phi-3 fuses Q, K, V and the gate and up projections into one matrix each.
OWN_CODE = ("gemma", "gemma2", "phi3")


def shape_from_config(cfg: Mapping, name: str | None = None) -> Shape:
    """The Shape of a transformers config (a dict), or ConfigError naming the key at fault; its name, unless
    given, says where it came from: "config.json (llama)"."""
    model_type = cfg.get("model_type")
    if model_type is None:
        raise ConfigError(f"model_type is missing; supported: {', '.join(READERS)}")
    if not isinstance(model_type, str) or model_type not in READERS:
        raise ConfigError(f"model_type {json.dumps(model_type)} is not supported; supported: {', '.join(READERS)}")
    fields = READERS[model_type](cfg)
    if model_type in OWN_CODE:  # code of its own, which the eager walk does not replay (calc.families)
        fields["family"] = model_type
    return Shape(name=name or f"config.json ({model_type})", **fields)


def shape_from_text(text: str, name: str | None = None) -> Shape:
    """The Shape of a config.json's text."""
    return shape_from_config(parse(text), name)


class _Reads(dict):
    """A config that remembers which keys the reader asked for."""

    def __init__(self, cfg: Mapping):
        super().__init__(cfg)
        self.asked: set[str] = set()

    def get(self, key, default=None):
        self.asked.add(key)
        return super().get(key, default)


def compact(cfg: Mapping) -> str:
    """The config reduced to the keys calc reads, as short canonical JSON (sorted keys, no spaces), for a
    link: shape_from_text(compact(cfg)) equals shape_from_config(cfg)."""
    reads = _Reads(cfg)
    shape_from_config(reads)  # only a config calc reads is worth a link
    kept = {k: cfg[k] for k in sorted(reads.asked) if cfg.get(k) is not None}
    return json.dumps(kept, separators=(",", ":"))
