"""transformers' Qwen3MoeForCausalLM (modeling_qwen3_moe.py; Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's attention
(an RMSNorm on each head of the queries and of the keys) with Qwen2-MoE's routed experts, no shared expert."""

from __future__ import annotations

from collections.abc import Mapping

from ..parts.experts import moe_block, moe_tail
from ..parts.ops import Ops
from ..replay import T
from . import config as c
from .family import Family, ModelType
from .llama import decoder_layer
from .qwen2_moe import sparse_layers
from .qwen3 import states, tensors

# Qwen3MoeConfig.attribute_map: transformers 5 saves num_local_experts, the Hub's files say num_experts
ALIASES = (("num_experts", "num_local_experts"),)


def read_qwen3_moe(cfg: Mapping) -> dict:
    """Qwen3MoeConfig's defaults: 4 key/value heads, head_dim width / heads, context 32,768, an untied head,
    128 experts of moe_intermediate_size 768, top 8, norm_topk_prob off; the layers in mlp_only_layers, or off
    the decoder_sparse_step, keep a dense MLP of intermediate_size; a sliding window only with
    use_sliding_window."""
    out = c.llama_like(cfg, False, 32768, 4)
    out.update(c.attention_bias(cfg))
    experts = c.whole(cfg, "num_experts", 128, smallest=0)
    k = c.whole(cfg, "num_experts_per_tok", 8)
    if experts and k > experts:
        raise c.ConfigError(f"num_experts_per_tok ({k}) is more than {c.written(cfg, 'num_experts')} ({experts})")
    sparse = sparse_layers(cfg, out["layers"], experts)
    out.update(ffn=c.whole(cfg, "intermediate_size", 6144), sliding_window=c.window(cfg, "use_sliding_window", 4096),
               family="qwen3_moe")  # fmt: skip
    if any(sparse):
        out.update(experts=experts, experts_per_token=k, expert_ffn=c.whole(cfg, "moe_intermediate_size", 768),
                   **c.dense_layers(sparse))  # fmt: skip
        out.update(norm_topk_prob=c.flag(cfg, "norm_topk_prob", False))
    return out


def sparse_block(ops: Ops, x: T, layer: str) -> T:
    """Qwen3MoeSparseMoeBlock: Qwen3MoeTopKRouter (softmax in fp32, top-k, renormalised where norm_topk_prob
    is on, cast to the logits' dtype), then the grouped_mm experts."""
    return moe_block(ops, x, layer, renorm=ops.st.shape.norm_topk_prob, cast=True)


def moe(ops: Ops, mid: T, normed: T, weights: T | None, layer: str) -> T:
    return moe_tail(ops, mid, normed, weights, layer, block=sparse_block)


def layer(ops: Ops, x: T, cos: T | None, sin: T | None, mask: T | None) -> T:
    """Qwen3MoeDecoderLayer: LlamaDecoderLayer with Qwen3's query and key states and Qwen3-MoE's sparse block."""
    return decoder_layer(ops, x, cos, sin, mask, states=states, moe=moe)


MODEL_TYPES = (ModelType("qwen3_moe", read_qwen3_moe, "qwen3_moe", ALIASES),)
# fine-tuning: peft's LoRA on the attention and the experts (measure_lora.py)
FAMILIES = (Family("qwen3_moe", ("Qwen3-MoE",), layer, experts=True, tensors=tensors, dense_among_experts=True,
                   expert_lora=("Qwen3-MoE",)),)
ORDER = 105  # where the registry lists it (calc.families)
PRESETS = {"qwen3-30b-a3b": "Qwen", "qwen3-235b-a22b": "Qwen"}  # calc/configs/NAME.json -> its group in the list
