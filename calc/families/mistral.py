"""transformers' MistralForCausalLM: Llama's code with an optional sliding window."""

from __future__ import annotations

from collections.abc import Mapping

from . import config as c
from .family import Family, ModelType


def read_mistral(cfg: Mapping) -> dict:
    """MistralForCausalLM: Llama's layer, no biases, an optional sliding window."""
    out = c.llama_like(cfg, False, 4096 * 32, 8)
    out.update(ffn=c.whole(cfg, "intermediate_size"), sliding_window=c.window(cfg, None, 4096))
    return out


MODEL_TYPES = (ModelType("mistral", read_mistral, "llama"),)
FAMILIES: tuple[Family, ...] = ()
ORDER = 20  # where the registry lists it (calc.families)
PRESETS = {"mistral-7b": "Mistral"}  # calc/configs/NAME.json -> its group in the list
