"""transformers' LlamaForCausalLM (modeling_llama.py): Llama 1 to 3.x. Mistral, Mixtral, Qwen2 and Qwen2-MoE
run the same code (their modules name it), and Qwen3 and Granite compose theirs from its parts."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..parts.experts import moe_tail
from ..parts.mlp import mlp
from ..parts.ops import Ops
from ..replay import T
from . import config as c
from .family import Family, ModelType


def read_llama(cfg: Mapping) -> dict:
    """LlamaForCausalLM (Llama 1 to 3.x)."""
    out = c.llama_like(cfg, False, 2048)
    out.update(ffn=c.whole(cfg, "intermediate_size"), **c.attention_bias(cfg, c.flag(cfg, "mlp_bias", False)))
    return out


def qkv(ops: Ops, normed: T, cos: T | None, sin: T | None, layer: str) -> tuple[T, T, T]:
    """LlamaAttention's query, key and value states: q_proj, k_proj, v_proj, rotary positions on Q and K."""
    sh = ops.st.shape
    h, bias = sh.hidden, sh.bias or sh.qkv_bias
    q = ops.linear(normed, h, sh.q_width, f"{layer} q_proj", bias, f"{layer}: Q")
    k = ops.linear(normed, h, sh.kv_width, f"{layer} k_proj", bias, f"{layer}: K")
    v = ops.linear(normed, h, sh.kv_width, f"{layer} v_proj", bias, f"{layer}: V")
    return (*rotate(ops, q, k, cos, sin, layer), v)


def rotate(ops: Ops, q: T, k: T, cos: T | None, sin: T | None, layer: str) -> tuple[T, T]:
    """apply_rotary_pos_emb on Q and K (learned positions: none); the states are rebound to the results."""
    if cos is None:
        return q, k
    qr, kr = ops.rotary(q, cos, sin, f"{layer}: Q"), ops.rotary(k, cos, sin, f"{layer}: K")
    ops.rp.drop(q, k)
    return qr, kr


def add(ops: Ops, residual: T, x: T, label: str) -> T:
    """hidden_states = residual + hidden_states."""
    return ops.add(residual, x, label)


def attend(ops: Ops, q: T, k: T, v: T, mask: T | None, layer: str, repeated: bool = False) -> tuple[T, T | None]:
    """The attention function the config's attn_implementation picks: eager_attention_forward, or sdpa
    (given a mask where the model passes one to sdpa: a sliding window no longer than the sequence, Llama 4's
    chunks; `repeated`: its states come with K and V repeated already, Ops.sdpa)."""
    if ops.st.attention != "sdpa":
        return ops.eager_attention(q, k, v, mask, layer)
    return ops.sdpa(q, k, v, layer, mask, repeated)


def feed_forward(ops: Ops, normed: T, layer: str) -> T:
    """LlamaMLP: down(act(gate(x)) * up(x)) (a plain feed-forward layer where the shape has no gate)."""
    sh = ops.st.shape
    return mlp(ops, normed, sh.ffn, f"{layer} ", f"{layer}: ", sh.bias, sh.gated_ffn)


def decoder_layer(ops: Ops, x: T, cos: T | None, sin: T | None, mask: T | None, states: Callable = qkv,
                  residual: Callable = add, ffn: Callable = feed_forward, moe: Callable = moe_tail,
                  attention: Callable = attend, holds_attention: bool = False) -> T:  # fmt: skip
    """LlamaDecoderLayer: norm, `attention` (its query, key and value `states`), the `residual`; norm, the MLP
    (`ffn`, or a mixture of experts where Shape.moe_layer says: `moe`, calc.parts.experts.moe_tail's
    arguments), the residual. A shape's other choices (LayerNorm, a plain feed-forward layer, learned
    positions) swap in the op transformers uses for them. `holds_attention`: the layer's forward keeps the
    attention's output to its end (Llama 4's names it attention_states rather than rebinding hidden_states)."""
    rp, sh = ops.rp, ops.st.shape
    norm = ops.rms_norm if sh.norm == "rms" else ops.layer_norm
    layer = "layer {layer}"
    normed = norm(x, f"{layer} input_layernorm")
    whole = ops.seq_gathered(normed, f"{layer} self_attn") if ops.st.sp else normed  # sequence parallelism
    q, k, v = states(ops, whole, cos, sin, layer)
    attn, weights = attention(ops, q, k, v, mask, layer)
    o = ops.linear(attn, sh.q_width, sh.hidden, f"{layer} o_proj", sh.bias, f"{layer}: attention projection")
    # LlamaAttention.forward's query_states, key_states, value_states and the layer's hidden_states (the
    # norm's output) live until the attention returns, after o_proj
    rp.drop(attn, q, k, v, normed, *(() if whole is normed else (whole,)))
    mid = residual(ops, x, o, f"{layer}: residual after attention")
    if not holds_attention:
        rp.drop(o)
    normed = norm(mid, f"{layer} post_attention_layernorm")
    if sh.moe_layer(rp.layer):
        out = moe(ops, mid, normed, weights, layer)
    else:
        whole = ops.seq_gathered(normed, f"{layer} mlp") if ops.st.sp else normed
        down = ffn(ops, whole, layer)
        rp.drop(normed, *(() if whole is normed else (whole,)))  # LlamaMLP.forward's x lives until it returns
        out = residual(ops, mid, down, f"{layer}: residual after the feed-forward layer")
        rp.drop(mid, down, weights)
    if holds_attention:
        rp.drop(o, why="the layer returns")
    return out


def window_mask(shape) -> bool:
    """Qwen2MoeModel.forward makes a sliding-window mask beside the causal one, used or not: its shared
    expert's gate is what marks Qwen2-MoE among the models that run this code."""
    return shape.shared_expert_gate


MODEL_TYPES = (ModelType("llama", read_llama, "llama"),)
FAMILIES = (
    Family("llama", ("Llama", "Mistral", "Qwen2"), decoder_layer, experts=True, finetune=True, window_mask=window_mask,
           dense_among_experts=True,  # Qwen2-MoE's decoder_sparse_step and mlp_only_layers
           expert_lora=("Mixtral", "Qwen2-MoE")),
)
ORDER = 10  # where the registry lists it (calc.families)
PRESETS = {"llama-3.1-8b": "Llama", "llama-3.1-70b": "Llama", "llama-3.1-405b": "Llama", "llama-3.2-1b": "Llama",
           "llama-3.2-3b": "Llama"}  # calc/configs/NAME.json -> its group in the list
