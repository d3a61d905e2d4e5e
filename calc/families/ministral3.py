"""transformers' Ministral3ForCausalLM (modeling_ministral3.py), Mistral 3's language model: Mistral's layer,
the rotated queries scaled by Llama 4's position-dependent attention scale (get_llama_4_attn_scale); and
Mistral3ForConditionalGeneration's config (mistral3), whose text_config is read as its own model type."""

from __future__ import annotations

from collections.abc import Mapping

from ..parts.ops import Ops
from ..replay import T
from ..shape import Shape
from . import config as c
from .family import Family, ModelType
from .llama import decoder_layer, qkv


def read_ministral3(cfg: Mapping) -> dict:
    """Ministral3Config's defaults: 8 key/value heads, head_dim 128, context 262,144, an untied head, no
    window (Mistral's one mask function: a sliding one where sliding_window is set)."""
    out = c.llama_like(cfg, False, 262144, 8, 128)
    out.update(ffn=c.whole(cfg, "intermediate_size"), sliding_window=c.window(cfg))
    return out


def read_mistral3(cfg: Mapping) -> dict:
    """Mistral3Config: the language model of text_config, read by its own model type's reader (the
    vision tower and its projector are not counted: transformers' causal LM of the text is what trains)."""
    from . import MODEL_TYPES  # the registry, complete once every family module is imported

    text = c.get(cfg, "text_config")
    if not isinstance(text, Mapping):
        raise c.ConfigError("text_config must be an object: the language model's config")
    kind = text.get("model_type", "mistral")
    if kind not in ("ministral3", "mistral", "ministral"):
        raise c.ConfigError(f'text_config.model_type "{kind}" is not supported; supported: ministral3, mistral')
    out = MODEL_TYPES[kind].fields(text)
    out["family"] = MODEL_TYPES[kind].family
    return out


def states(ops: Ops, normed: T, cos: T | None, sin: T | None, layer: str) -> tuple[T, T, T]:
    """Ministral3Attention: Llama's states, then query_states * get_llama_4_attn_scale(...): a new query (the
    product saves the scale, s values, for the query's gradient)."""
    q, k, v = qkv(ops, normed, cos, sin, layer)
    # 1 + beta * log(1 + floor(position / original_max_position_embeddings)): (1, 1, s, 1), in q's dtype
    scale = ops.new(ops.st.seq, q.unit, f"{layer}: Llama 4's attention scale", "get_llama_4_attn_scale: s values")
    scale.requires_grad = False
    scaled = ops.unary(f"{layer}: Q x Llama 4's attention scale", q, [scale])
    ops.rp.drop(q, scale)
    return scaled, k, v


def layer(ops: Ops, x: T, cos: T | None, sin: T | None, mask: T | None) -> T:
    """Ministral3DecoderLayer: LlamaDecoderLayer with Ministral 3's scaled queries."""
    return decoder_layer(ops, x, cos, sin, mask, states=states)


def sdpa_mask(shape: Shape, seq: int) -> bool:
    """Ministral3Model passes sdpa a sliding-window mask where it has a window no longer than the sequence."""
    return bool(shape.sliding_window) and seq >= shape.sliding_window


MODEL_TYPES = (
    ModelType("ministral3", read_ministral3, "ministral3"),
    ModelType("mistral3", read_mistral3, "ministral3"),
)
FAMILIES = (Family("ministral3", ("Ministral 3",), layer, finetune=True, sdpa_mask=sdpa_mask),)
ORDER = 150  # where the registry lists it (calc.families)
