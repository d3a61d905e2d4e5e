"""transformers' MinistralForCausalLM (modeling_ministral.py): Mistral's layer, each layer sliding or attending
to the whole sequence as layer_types says (by default all slide where the config has a window); the model
makes both masks, and passes sdpa the sliding one, to the sliding layers."""

from __future__ import annotations

from collections.abc import Mapping

from ..parts.ops import Ops
from ..replay import T
from . import config as c
from .family import Family, ModelType
from .llama import decoder_layer
from .olmo2 import layer_mask, layer_types, sdpa_mask, window_layer, window_mask, windowed


def read_ministral(cfg: Mapping) -> dict:
    """MinistralConfig's defaults: 8 key/value heads, context 131,072, a window of 4,096, an untied head."""
    out = c.llama_like(cfg, False, 4096 * 32, 8)
    out.update(ffn=c.whole(cfg, "intermediate_size"))
    n = out["layers"]
    slides = bool(c.window(cfg, None, 4096))
    out.update(windowed(cfg, n, layer_types(cfg, n, ["sliding_attention" if slides else "full_attention"] * n)))
    return out


def layer(ops: Ops, x: T, cos: T | None, sin: T | None, mask: T | None) -> T:
    """MinistralDecoderLayer: LlamaDecoderLayer; a full-attention layer gets no mask under sdpa."""
    return decoder_layer(ops, x, cos, sin, layer_mask(ops, mask))


MODEL_TYPES = (ModelType("ministral", read_ministral, "ministral"),)
FAMILIES = (
    Family("ministral", ("Ministral",), layer, finetune=True, window_mask=window_mask, sdpa_mask=sdpa_mask,
           window_layer=window_layer),
)
ORDER = 140  # where the registry lists it (calc.families)
