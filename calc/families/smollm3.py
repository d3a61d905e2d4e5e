"""transformers' SmolLM3ForCausalLM (modeling_smollm3.py): Llama's layer, with no rotary positions in some
layers (no_rope_layers: 0 for a layer without; by default every no_rope_layer_interval-th, 4), and, with
use_sliding_window, a window on the layers layer_types says slide (by default those without rotary)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..parts.ops import Ops
from ..replay import T
from ..shape import Shape
from . import config as c
from .family import Family, ModelType
from .llama import decoder_layer
from .olmo2 import layer_mask, layer_types


def flags(cfg: Mapping, key: str, layers: int, default: list[int]) -> list[int]:
    """A list of 0 or 1 for each layer (no_rope_layers: 1 where the layer has rotary positions)."""
    value = c.get(cfg, key, default)
    ok = isinstance(value, list) and len(value) == layers and all(type(v) is int and v in (0, 1) for v in value)
    if not ok:
        raise c.ConfigError(f"{key} must list {layers} values of 0 or 1, got {json.dumps(value)[:80]}")
    return [int(v) for v in value]


def read_smollm3(cfg: Mapping) -> dict:
    """SmolLM3Config's defaults: 4 key/value heads, context 32,768, a tied head, no biases."""
    out = c.llama_like(cfg, True, 32768, 4)
    out.update(ffn=c.whole(cfg, "intermediate_size"), **c.attention_bias(cfg, c.flag(cfg, "mlp_bias", False)))
    n = out["layers"]
    every = c.whole(cfg, "no_rope_layer_interval", 4)
    rope = flags(cfg, "no_rope_layers", n, [int((i + 1) % every != 0) for i in range(n)])
    out["no_rope_layers"] = tuple(i + 1 for i, r in enumerate(rope) if not r)
    window = c.window(cfg, "use_sliding_window")
    types = layer_types(cfg, n, ["sliding_attention" if window and not r else "full_attention" for r in rope])
    full = tuple(i + 1 for i, t in enumerate(types) if t == "full_attention")
    if window and len(full) < n:  # some layer slides
        out.update(sliding_window=window, global_layers=full)
    return out


def layer(ops: Ops, x: T, cos: T | None, sin: T | None, mask: T | None) -> T:
    """SmolLM3DecoderLayer: LlamaDecoderLayer; a layer in no_rope_layers rotates neither query nor key
    (use_rope false), a full-attention layer gets no mask under sdpa."""
    if not ops.st.shape.rotary(ops.rp.layer):
        cos = sin = None
    return decoder_layer(ops, x, cos, sin, layer_mask(ops, mask))


def sdpa_mask(shape: Shape, seq: int) -> bool:
    """SmolLM3Model passes its sliding layers a sliding-window mask where the window is no longer than the
    sequence."""
    return bool(shape.sliding_window) and seq >= shape.sliding_window


def window_mask(shape: Shape) -> bool:
    """SmolLM3Model makes a sliding-window mask beside the causal one where a layer slides."""
    return bool(shape.sliding_window)


MODEL_TYPES = (ModelType("smollm3", read_smollm3, "smollm3"),)
FAMILIES = (Family("smollm3", ("SmolLM3",), layer, finetune=True, window_mask=window_mask, sdpa_mask=sdpa_mask),)
ORDER = 130  # where the registry lists it (calc.families)
# calc/configs/NAME.json -> its group in the list: HuggingFaceTB/SmolLM3-3B's config.json, as copied in
# github.com/fetchwiki/HuggingFaceTB-SmolLM3-3B (config.json)
PRESETS = {"smollm3-3b": "SmolLM3"}
