"""Activation and logit memory after Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", §4 (16-bit activations, 1-byte dropout masks).
Counts are per device: `par` splits them over tensor-parallel ranks."""

from __future__ import annotations

from .parallel import SINGLE, Parallel, split
from .shape import Shape


def layer_parts(shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE) -> tuple[int, int, int]:
    """One layer's saved bytes in Korthikanti et al.'s three groups, per device:

    outside  10 sbh: the two norms' inputs, the inputs of QKV and of the FFN, two dropout masks;
             replicated over tensor-parallel ranks unless sequence parallelism splits them (§4.2.2)
    inside   24 sbh / t: Q, K, V, the attention output, and the FFN's two inner activations; with
             grouped-query attention K and V are kv_heads/heads as large (Ainslie et al. 2023)
    scores   5 a s^2 b / t: attention's scores, softmax output and its dropout mask (§4.1);
             FlashAttention stores none of them (Dao et al. 2022)
    """
    t, sb, d = par.tp, seq * micro_batch, shape.head_dim
    sbh = sb * shape.hidden
    outside = 10 * sbh // t if par.sequence_parallel else 10 * sbh
    # 24 sbh = 4 sb d (6a); smaller K and V remove 4 sb d (a - g): 4 sb d (5a + g).
    inside = 4 * sb * d * (5 * shape.heads + shape.kv_heads) // t
    scores = 0 if par.flash else 5 * shape.heads * seq * sb // t
    return outside, inside, scores


def layer_bytes(shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE) -> int:
    """All a layer saves for backward: sbh(34 + 5as/h) on one device, Korthikanti et al. eq. (1)."""
    return sum(layer_parts(shape, seq, micro_batch, par))


def kept_bytes(shape: Shape, seq: int, micro_batch: int, recompute: str, par: Parallel = SINGLE) -> int:
    """What a layer keeps through the forward pass under each recomputation policy."""
    outside, inside, scores = layer_parts(shape, seq, micro_batch, par)
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


def logits_16bit_bytes(shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE) -> int:
    """The head's output: s x b x V logits in 16 bits."""
    return 2 * seq * micro_batch * _vocab(shape, par)


def logits_fp32_bytes(shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE) -> int:
    """The fp32 copy of the logits that softmax cross-entropy works on (and saves for backward)."""
    return 4 * seq * micro_batch * _vocab(shape, par)


def logits_bytes(shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE) -> int:
    """6sbV: 16-bit logits plus their fp32 copy for the loss."""
    return logits_16bit_bytes(shape, seq, micro_batch, par) + logits_fp32_bytes(shape, seq, micro_batch, par)
