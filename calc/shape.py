"""A decoder-only transformer's shape and its exact parameter count."""

from __future__ import annotations

from dataclasses import dataclass, fields

NORMS = ("layer", "rms")
POSITIONS = ("learned", "rope")
# The feed-forward activation as transformers' `hidden_act` names it: gelu_tanh is gelu_pytorch_tanh (one
# fused op), gelu_new the same function written in Python (GPT-2's; six ops, four tensors saved).
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "gelu_new", "relu")
# Whose code the eager walk follows (calc.eager): the layer's ops, and so what autograd saves, differ.
#   llama    transformers' LlamaForCausalLM, and Mistral and Qwen2, which share its code
#   gpt2     transformers' GPT2LMHeadModel (fused QKV through Conv1D, dropout)
#   decoder  the course's reference Decoder (scripts/training/reference.py)
FAMILIES = ("llama", "gpt2", "decoder")


@dataclass(frozen=True)
class Shape:
    """Everything about a model that its memory depends on."""

    name: str = "custom"
    layers: int = 32  # L, transformer blocks
    hidden: int = 4096  # h, model width
    heads: int = 32  # a, attention (query) heads
    kv_heads: int = 32  # key/value heads; fewer than `heads` is grouped-query attention
    ffn: int = 11008  # feed-forward inner width
    vocab: int = 32000  # V
    gated_ffn: bool = True  # SwiGLU: three h x ffn matrices instead of two
    tied: bool = False  # output head shares the token embedding matrix
    norm: str = "rms"  # "layer" (weight + bias) or "rms" (weight only)
    bias: bool = False  # biases on every linear layer (and on an untied head)
    positions: str = "rope"  # "learned" (a context x h table) or "rope" (no parameters)
    context: int = 4096  # longest sequence; sizes the learned position table
    final_norm: bool = True  # a norm after the last block, before the head
    qkv_bias: bool = False  # biases on the query, key and value projections only (Qwen2)
    activation: str = "silu"  # the feed-forward activation (ACTIVATIONS); SwiGLU's is silu
    dropout: bool = False  # dropout in training: after the embedding, on attention's probabilities, after
    # each block's two output projections (GPT-2's 0.1); Llama-family models have none by default
    family: str = "llama"  # whose code the eager walk follows (FAMILIES)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def replace(self, **changes) -> Shape:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Shape(**values)


def _norm_params(shape: Shape) -> int:
    # LayerNorm has a gain and a bias per channel; RMSNorm only a gain (Zhang & Sennrich 2019).
    return (2 if shape.norm == "layer" else 1) * shape.hidden


def param_counts(shape: Shape) -> dict[str, int]:
    """Exact parameter count, broken down by where the parameters live."""
    h, kv_width = shape.hidden, shape.kv_heads * shape.head_dim
    # Attention: Q and O are h x h; K and V are h x (kv_heads * head_dim) (Ainslie et al. 2023, GQA).
    attention = 2 * h * h + 2 * h * kv_width
    # Feed-forward: up and down projections, plus SwiGLU's gate (Shazeer 2020).
    ffn_matrices = 3 if shape.gated_ffn else 2
    ffn = ffn_matrices * h * shape.ffn
    if shape.bias:
        attention += 2 * h + 2 * kv_width
        ffn += (ffn_matrices - 1) * shape.ffn + h
    elif shape.qkv_bias:
        attention += h + 2 * kv_width
    per_layer = attention + ffn + 2 * _norm_params(shape)  # a norm before attention and before the FFN
    counts = {
        "embedding": shape.vocab * h,
        "positions": shape.context * h if shape.positions == "learned" else 0,
        "per_layer": per_layer,
        "layers": shape.layers * per_layer,
        "final_norm": _norm_params(shape) if shape.final_norm else 0,
        "head": 0 if shape.tied else shape.vocab * h + (shape.vocab if shape.bias else 0),
    }
    counts["total"] = sum(v for k, v in counts.items() if k != "per_layer")
    return counts
