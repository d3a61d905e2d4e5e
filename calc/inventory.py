"""A model's parameter tensors, listed once. The parameter counts (calc.counts.param_counts), the trainable
tensors and LoRA's targets (calc.finetune), the tensor-parallel split (calc.parallel), AdamW's per-tensor
step counters and its largest tensor (calc.eager_step) all derive from this list; a family (calc.families)
that has tensors of its own adds them to its block."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .shape import Shape


@dataclass(frozen=True)
class Tensor:
    """One parameter tensor (or `count` alike) of a block or of the model around the blocks."""

    name: str  # its module's name in transformers' Llama code ("q_proj.weight")
    rows: int
    cols: int = 0  # 0: a vector of `rows`
    count: int = 1  # how many alike (a LayerNorm's gain and bias)
    tp: str = "replicated"  # Megatron-LM's tensor parallelism: "column" and "row" split it over the tp ranks,
    # "replicated" keeps it whole on each, "experts" are the routed experts (over ep ranks, then over tp)
    attention: bool = False  # part of the attention half of a block (with its norm), as the Decoder's walk writes
    # its gradients
    target: str = ""  # LoRA's name of the linear (q, k, v, o, gate, up, down); "": no adapter goes there
    fused: str = ""  # the one tensor it is stored in, where several are (GPT-2's c_attn holds Q, K and V)

    @property
    def numel(self) -> int:
        return self.count * self.rows * (self.cols or 1)


def norm(shape: Shape, name: str, attention: bool = False) -> list[Tensor]:
    """A norm's gain, and LayerNorm's bias (RMSNorm has only the gain: Zhang & Sennrich 2019)."""
    return [Tensor(f"{name}.weight", shape.hidden, count=2 if shape.norm == "layer" else 1, attention=attention)]


def attention(shape: Shape) -> list[Tensor]:
    """Q is h x (heads x d), O the reverse, K and V h x (kv_heads x d) (Ainslie et al. 2023, GQA); biases on
    Q, K and V with `qkv_bias` (Qwen2), on every linear with `bias`."""
    h, q, kv = shape.hidden, shape.q_width, shape.kv_width
    out = [
        Tensor("q_proj.weight", h, q, tp="column", attention=True, target="q"),
        Tensor("k_proj.weight", h, kv, tp="column", attention=True, target="k"),
        Tensor("v_proj.weight", h, kv, tp="column", attention=True, target="v"),
        Tensor("o_proj.weight", q, h, tp="row", attention=True, target="o"),
    ]
    if shape.bias or shape.qkv_bias:
        out += [Tensor(f"{n}_proj.bias", w, tp="column", attention=True) for n, w in (("q", q), ("k", kv), ("v", kv))]
    if shape.bias:  # after a row-parallel matrix: replicated
        out.append(Tensor("o_proj.bias", h, attention=True))
    return out


def mlp(shape: Shape, width: int, prefix: str = "mlp.", targets: bool = True) -> list[Tensor]:
    """A feed-forward network of inner width `width`: up and down projections, plus SwiGLU's gate
    (Shazeer 2020); with `bias` a bias on each (the down projection's replicated under tensor parallelism)."""
    h, t = shape.hidden, targets
    names = ("gate", "up") if shape.gated_ffn else ("up",)
    out = [Tensor(f"{prefix}{n}_proj.weight", h, width, tp="column", target=n if t else "") for n in names]
    out.append(Tensor(f"{prefix}down_proj.weight", width, h, tp="row", target="down" if t else ""))
    if shape.bias:
        out += [Tensor(f"{prefix}{n}_proj.bias", width, tp="column") for n in names]
        out.append(Tensor(f"{prefix}down_proj.bias", h))
    return out


def experts(shape: Shape) -> list[Tensor]:
    """A mixture of experts' FFN: E routed experts (transformers stores their gate and up projections as one
    E x 2f x h tensor and their down projections as another), the router (E x h, no bias in Mixtral or
    Qwen2-MoE), a shared expert and its h -> 1 gate (Qwen2-MoE)."""
    routed = [
        Tensor(t.name.replace("mlp.", "mlp.experts."), t.rows, t.cols, shape.experts, "experts", fused=_expert_store(t))
        for t in mlp(shape, shape.expert_width, targets=False)
    ]
    out = [*routed, Tensor("mlp.gate.weight", shape.hidden, shape.experts)]
    if shape.shared_expert_ffn:
        out += mlp(shape, shape.shared_expert_ffn, "mlp.shared_expert.", targets=False)
    if shape.shared_expert_gate:
        out.append(Tensor("mlp.shared_expert_gate.weight", shape.hidden))
    return out


def _expert_store(t: Tensor) -> str:
    """Which of transformers' expert tensors holds this one of every expert: gate_up_proj or down_proj."""
    kind = "down_proj" if t.name.startswith("mlp.down") else "gate_up_proj"
    return f"mlp.experts.{kind}" + ("" if t.cols else "_bias")


def block(shape: Shape, moe: bool = False) -> list[Tensor]:
    """One decoder block as Llama's code has it: attention and its norm, the FFN (dense, or a mixture of
    experts) and its norm, and any further norms (Gemma 2's four a block)."""
    out = [*attention(shape), *norm(shape, "input_layernorm", attention=True)]
    out += experts(shape) if moe else mlp(shape, shape.ffn)
    out += norm(shape, "post_attention_layernorm")
    for i in range(2, shape.norms_per_layer):
        out += norm(shape, f"norm_{i + 1}")
    return out


def outer_tensors(shape: Shape) -> dict[str, list[Tensor]]:
    """The tensors around the blocks: embedding (and learned positions), final norm, an untied head."""
    h = shape.hidden
    head_bias = [Tensor("lm_head.bias", shape.vocab)] if shape.bias and shape.head_bias else []
    return {
        "embedding": [Tensor("embed_tokens.weight", shape.vocab, h)],
        "positions": [Tensor("wpe.weight", shape.context, h)] if shape.positions == "learned" else [],
        "final_norm": norm(shape, "norm") if shape.final_norm else [],
        "head": [] if shape.tied else [Tensor("lm_head.weight", shape.vocab, h), *head_bias],
    }


def numel(tensors: list[Tensor]) -> int:
    return sum(t.numel for t in tensors)


def stored(tensors: list[Tensor]) -> list[int]:
    """The values of each tensor as stored (fused ones as one), for what counts tensors: AdamW's step
    counters, its largest temporaries."""
    sizes: dict[str, int] = {}
    for i, t in enumerate(tensors):
        for j in range(t.count if not t.fused else 1):
            key = t.fused or f"{i}.{j}"
            sizes[key] = sizes.get(key, 0) + (t.numel if t.fused else t.numel // t.count)
    return list(sizes.values())
