"""transformers' Qwen2MoeForCausalLM (Qwen1.5-MoE): Llama's attention, routed experts and a gated shared expert."""

from __future__ import annotations

import json
from collections.abc import Mapping

from . import config as c
from .family import Family, ModelType


def read_qwen2_moe(cfg: Mapping) -> dict:
    """Qwen2MoeForCausalLM (Qwen1.5-MoE): E experts of moe_intermediate_size and a gated shared expert;
    the layers in mlp_only_layers, or off the decoder_sparse_step, keep a dense FFN of intermediate_size."""
    out = c.llama_like(cfg, False, 32768, 16)
    experts = c.whole(cfg, "num_experts", 60, smallest=0)
    k = c.whole(cfg, "num_experts_per_tok", 4)
    if experts and k > experts:
        raise c.ConfigError(f"num_experts_per_tok ({k}) is more than num_experts ({experts})")
    sparse = sparse_layers(cfg, out["layers"], experts)
    out.update(
        ffn=c.whole(cfg, "intermediate_size"),
        qkv_bias=c.flag(cfg, "qkv_bias", True),
        sliding_window=c.window(cfg, "use_sliding_window"),
    )
    if any(sparse):
        out.update(
            experts=experts,
            experts_per_token=k,
            expert_ffn=c.whole(cfg, "moe_intermediate_size"),
            shared_expert_ffn=c.whole(cfg, "shared_expert_intermediate_size", 5632, smallest=0),
            shared_expert_gate=True,  # always built, h -> 1 (Qwen2MoeSparseMoeBlock)
            **c.dense_layers(sparse),
        )
    return out


def sparse_layers(cfg: Mapping, layers: int, experts: int) -> list[bool]:
    """The layers whose MLP is the sparse block (Qwen2MoeDecoderLayer, Qwen3MoeDecoderLayer): those not in
    mlp_only_layers whose number (from 1) decoder_sparse_step divides, where there are experts."""
    step = c.whole(cfg, "decoder_sparse_step", 1)
    only = c.get(cfg, "mlp_only_layers", [])
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise c.ConfigError(f"mlp_only_layers must be a list of layer numbers, got {json.dumps(only)}")
    return [i not in only and bool(experts) and (i + 1) % step == 0 for i in range(layers)]


MODEL_TYPES = (ModelType("qwen2_moe", read_qwen2_moe, "llama"),)
FAMILIES: tuple[Family, ...] = ()
ORDER = 50  # where the registry lists it (calc.families)
