"""transformers' Phi3ForCausalLM: fused QKV and gate-up matrices, counted by the deck walk only."""

from __future__ import annotations

from collections.abc import Mapping

from . import config as c
from .family import Family, ModelType


def read_phi3(cfg: Mapping) -> dict:
    """Phi3ForCausalLM: fused QKV and gate-up matrices with Llama's sizes, no biases."""
    out = c.llama_like(cfg, False, 4096)
    out.update(
        ffn=c.whole(cfg, "intermediate_size"),
        dropout=c.rate(cfg, "attention_dropout", "resid_pdrop", "embd_pdrop"),
        sliding_window=c.window(cfg),
    )
    return out


MODEL_TYPES = (ModelType("phi3", read_phi3, "phi3"),)
FAMILIES = (Family("phi3", ("Phi-3",)),)
ORDER = 70  # where the registry lists it (calc.families)
PRESETS = {"phi-4": "Phi"}  # calc/configs/NAME.json -> its group in the list
