"""transformers' Qwen2ForCausalLM (Qwen2, Qwen2.5): Llama's code with biases on Q, K and V."""

from __future__ import annotations

from collections.abc import Mapping

from . import config as c
from .family import Family, ModelType


def read_qwen2(cfg: Mapping) -> dict:
    """Qwen2ForCausalLM (Qwen2, Qwen2.5): Llama's layer with biases on Q, K and V only."""
    out = c.llama_like(cfg, False, 32768, 32)
    out.update(ffn=c.whole(cfg, "intermediate_size"), qkv_bias=True, sliding_window=c.window(cfg, "use_sliding_window"))
    return out


MODEL_TYPES = (ModelType("qwen2", read_qwen2, "llama"),)
FAMILIES: tuple[Family, ...] = ()
ORDER = 40  # where the registry lists it (calc.families)
PRESETS = {"qwen2.5-7b": "Qwen", "qwen2.5-72b": "Qwen"}  # calc/configs/NAME.json -> its group in the list
