"""transformers' MixtralForCausalLM: Mistral's attention, every FFN E experts routed top-k."""

from __future__ import annotations

from collections.abc import Mapping

from . import config as c
from .family import Family, ModelType


def read_mixtral(cfg: Mapping) -> dict:
    """MixtralForCausalLM: Mistral's attention; every FFN is E experts of intermediate_size, top-k routed."""
    experts = c.whole(cfg, "num_local_experts", 8)
    ffn = c.whole(cfg, "intermediate_size")
    k = c.whole(cfg, "num_experts_per_tok", 2)
    if k > experts:
        raise c.ConfigError(f"num_experts_per_tok ({k}) is more than {c.written(cfg, 'num_local_experts')} ({experts})")
    out = c.llama_like(cfg, False, 4096 * 32, 8)
    out.update(ffn=ffn, experts=experts, experts_per_token=k, expert_ffn=ffn, sliding_window=c.window(cfg))
    return out


MODEL_TYPES = (ModelType("mixtral", read_mixtral, "llama", (("num_experts", "num_local_experts"),)),)  # attribute_map
FAMILIES: tuple[Family, ...] = ()
ORDER = 30  # where the registry lists it (calc.families)
PRESETS = {"mixtral-8x7b": "Mistral"}  # calc/configs/NAME.json -> its group in the list
