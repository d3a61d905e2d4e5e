"""transformers' GemmaForCausalLM and Gemma2ForCausalLM: code of their own (scaled embeddings, wide
heads, Gemma 2's four norms a block), counted by the deck walk only."""

from __future__ import annotations

from collections.abc import Mapping

from . import config as c
from .family import Family, ModelType


def read_gemma(cfg: Mapping) -> dict:
    """GemmaForCausalLM: head size 256 whatever the width, tied head, GELU (tanh) gate."""
    out = c.llama_like(cfg, True, 8192, 16, 256, ("hidden_act", "gelu_pytorch_tanh"))
    out.update(ffn=c.whole(cfg, "intermediate_size"), **c.attention_bias(cfg))
    return out


def read_gemma2(cfg: Mapping) -> dict:
    """Gemma2ForCausalLM: Gemma's layer with a norm after attention and after the FFN too (four a block)."""
    out = c.llama_like(cfg, True, 8192, 4, 256, ("hidden_activation", "gelu_pytorch_tanh"))
    out.update(ffn=c.whole(cfg, "intermediate_size"), norms_per_layer=4, sliding_window=c.window(cfg, None, 4096))
    out.update(c.attention_bias(cfg))
    return out


MODEL_TYPES = (ModelType("gemma", read_gemma, "gemma"), ModelType("gemma2", read_gemma2, "gemma2"))
FAMILIES = (Family("gemma", ("Gemma",)), Family("gemma2", ("Gemma 2",)))
ORDER = 60  # where the registry lists it (calc.families)
PRESETS = {"gemma-2-9b": "Gemma", "gemma-2-27b": "Gemma"}  # calc/configs/NAME.json -> its group in the list
