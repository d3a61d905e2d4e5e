"""Activation and logit memory after Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", §4 (16-bit activations, 1-byte dropout masks).
Counts are per device: `par` splits them over tensor-parallel ranks."""

from __future__ import annotations

import math
from fractions import Fraction

from .families import FAMILIES
from .parallel import SINGLE, Parallel, split
from .shape import Shape


def layer_parts(
    shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE, moe: bool = False
) -> tuple[int, int, int]:
    """One layer's saved bytes in Korthikanti et al.'s three groups, per device:

    outside  10 sbh: the two norms' inputs, the inputs of QKV and of the FFN, two dropout masks (a further
             2 sbh for each norm past two: Gemma 2's and Gemma 3's norm after attention and after the
             FFN, norms_per_layer 4); replicated over tensor-parallel ranks unless sequence parallelism
             splits them (§4.2.2)
    inside   24 sbh / t: Q, K, V, the attention output, and the FFN's two inner activations; with
             grouped-query attention K and V are kv_heads/heads as large (Ainslie et al. 2023), and
             attention's four are heads x head_dim wide, which need not be h (Gemma); where the family
             normalises each head of Q and K (Gemma 3's q_norm and k_norm), each norm's input too, as
             the deck counts a norm's (qk_norm_bytes)
    scores   5 a s^2 b / t: attention's scores, softmax output and its dropout mask (§4.1), and 2 a s^2 b
             more where the scores are soft-capped (Gemma 2: tanh saves its 16-bit output);
             FlashAttention stores none of them (Dao et al. 2022). A sliding window changes nothing
             here: eager and SDPA attention build the full s x s scores and mask them (the masks
             themselves are no term of the deck's; the eager walk counts them)

    With `moe`, the FFN is a mixture of experts (moe_parts) in place of the dense FFN's 16 sbh."""
    t, sb = par.tp, seq * micro_batch
    ffn_outside, ffn_inside = moe_parts(shape, sb) if moe else (0, ffn_bytes(shape, sb))
    outside_values = (2 * shape.norms_per_layer + 6) * sb * shape.hidden + ffn_outside
    outside = outside_values // t if par.sequence_parallel else outside_values
    inside = (attention_bytes(shape, sb) + qk_norm_bytes(shape, sb) + ffn_inside) // t
    scores = 0 if par.flash else (5 + (2 if shape.attn_softcap else 0)) * shape.heads * seq * sb // t
    return outside, inside, scores


def qk_norm_bytes(shape: Shape, sb: int) -> int:
    """The inputs of the per-head query and key norms, 2 bytes a value (heads x head_dim and kv_heads x
    head_dim wide), where the family's attention has them (calc.families: Family.qk_norms); else 0."""
    return 2 * sb * (shape.q_width + shape.kv_width) if FAMILIES[shape.family].qk_norms else 0


def attention_bytes(shape: Shape, sb: int) -> int:
    """Q and attention's output (heads x head_dim wide), K and V (kv_heads x head_dim), 2 bytes each:
    8 sbh for multi-head attention of width h. V and the output are v_head_dim a head where a value head is
    not a query head's size (DeepSeek-V3's latent attention, calc.families.deepseek_v3)."""
    v = shape.v_head_dim
    return 2 * sb * (shape.q_width + shape.kv_width + shape.kv_heads * v + shape.heads * v)


def ffn_bytes(shape: Shape, sb: int) -> int:
    """A dense FFN's two inner activations, Korthikanti et al.'s 16 sbh (GPT's FFN, 4h wide, whatever `ffn`
    is: the deck's formula)."""
    return 16 * sb * shape.hidden


def routed_tokens(shape: Shape, sb: int) -> int:
    """Token copies the routed experts process, per device: top-k sends each token to k experts, k sb in all
    (dropless: each expert takes what it is routed; Gale et al. 2023, MegaBlocks). With a capacity factor c each
    of the E experts takes ceil(c k sb / E) tokens, padded to that (Fedus et al. 2022, Switch Transformer, §2.1).
    With expert parallelism a device's experts receive, under balanced routing, as many copies as its own
    tokens send out, so the count is per device whatever --ep is."""
    k, e = shape.experts_per_token, shape.experts
    if not shape.capacity_factor:
        return k * sb
    per_expert = Fraction(str(shape.capacity_factor)) * k * sb / e
    return e * math.ceil(per_expert)


def router_bytes(shape: Shape, sb: int) -> int:
    """The router's logits, s b x E in 16 bits, and their softmax in fp32 (transformers' Mixtral and Qwen2-MoE
    take softmax(dtype=float) before top-k)."""
    return (2 + 4) * sb * shape.experts


def moe_parts(shape: Shape, sb: int) -> tuple[int, int]:
    """A mixture-of-experts FFN's saved bytes as (outside, inside), beside Korthikanti et al.'s groups:

    outside  the router (router_bytes); each routed token copy's input to its expert and the expert's
             output, kept to weight it by its routing probability (2 h bytes each); the shared expert's
             output and its gate's logit, kept for the gate's product
    inside   the two inner activations of each routed token copy at the expert's width, as the dense FFN's
             (4 bytes a unit of width), and the shared expert's for every token"""
    n, h = routed_tokens(shape, sb), shape.hidden
    outside = router_bytes(shape, sb) + 2 * 2 * n * h
    inside = 4 * n * shape.expert_width
    if shape.shared_expert_ffn:
        outside += 2 * sb * h + (2 * sb if shape.shared_expert_gate else 0)
        inside += 4 * sb * shape.shared_expert_ffn
    return outside, inside


def layer_bytes(shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE, moe: bool = False) -> int:
    """All a layer saves for backward: sbh(34 + 5as/h) on one device, Korthikanti et al. eq. (1)."""
    return sum(layer_parts(shape, seq, micro_batch, par, moe))


def kept_bytes(
    shape: Shape, seq: int, micro_batch: int, recompute: str, par: Parallel = SINGLE, moe: bool = False
) -> int:
    """What a layer keeps through the forward pass under each recomputation policy."""
    return kept_of_parts(layer_parts(shape, seq, micro_batch, par, moe), shape, seq, micro_batch, recompute, par)


def kept_of_parts(
    parts: tuple[int, int, int], shape: Shape, seq: int, micro_batch: int, recompute: str, par: Parallel = SINGLE
) -> int:
    """kept_bytes from the layer's three groups (layer_parts), for callers that need both them and their sum."""
    outside, inside, scores = parts
    if recompute == "none":
        return outside + inside + scores
    if recompute == "selective":
        return outside + inside  # Korthikanti et al. §5: drop only the attention scores (34 sbh)
    if recompute == "full":
        sbh = seq * micro_batch * shape.hidden  # Chen et al. 2016: keep only the layer's 16-bit input
        return 2 * sbh // par.tp if par.sequence_parallel else 2 * sbh
    raise ValueError(f"unknown recomputation {recompute!r}")


def _vocab(shape: Shape, par: Parallel) -> int:
    return split(shape.vocab, par.tp)  # vocabulary-parallel head and cross-entropy (Megatron-LM)


def at_width(nbytes16: int, activation_bytes: int) -> int:
    """A byte count of 16-bit values (Korthikanti et al. count 16-bit activations) at `activation_bytes` a
    value: 4 (fp32), 2, or 1 (FP8), which `nbytes16 * (activation_bytes // 2)` would make 0."""
    return nbytes16 * activation_bytes // 2


def logits_16bit_bytes(shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE) -> int:
    """The head's output: s x b x V logits in 16 bits."""
    return 2 * seq * micro_batch * _vocab(shape, par)


def logits_fp32_bytes(shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE) -> int:
    """The fp32 copy of the logits that softmax cross-entropy works on (and saves for backward)."""
    return 4 * seq * micro_batch * _vocab(shape, par)


def logits_bytes(shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE) -> int:
    """6sbV: 16-bit logits plus their fp32 copy for the loss."""
    return logits_16bit_bytes(shape, seq, micro_batch, par) + logits_fp32_bytes(shape, seq, micro_batch, par)
