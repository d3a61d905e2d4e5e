"""Activation and logit memory after Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", §4 (16-bit activations, 1-byte dropout masks)."""

from __future__ import annotations

from .shape import Shape


def layer_bytes(shape: Shape, seq: int, micro_batch: int) -> int:
    """All a layer saves for backward: sbh(34 + 5as/h), Korthikanti et al. eq. (1)."""
    sbh = seq * micro_batch * shape.hidden
    # 34 sbh: inputs of the linear layers, norms, GELU and dropout masks;
    # 5 a s^2 b: attention's scores, softmax output and its dropout mask (one s x s per head).
    return 34 * sbh + 5 * shape.heads * seq * seq * micro_batch


def kept_bytes(shape: Shape, seq: int, micro_batch: int, recompute: str) -> int:
    """What a layer keeps through the forward pass under each recomputation policy."""
    sbh = seq * micro_batch * shape.hidden
    if recompute == "none":
        return layer_bytes(shape, seq, micro_batch)
    if recompute == "selective":
        return 34 * sbh  # Korthikanti et al. §5: drop only the 5as/h attention term
    if recompute == "full":
        return 2 * sbh  # Chen et al. 2016: keep only the layer's 16-bit input
    raise ValueError(f"unknown recomputation {recompute!r}")


def logits_16bit_bytes(shape: Shape, seq: int, micro_batch: int) -> int:
    """The head's output: s x b x V logits in 16 bits."""
    return 2 * seq * micro_batch * shape.vocab


def logits_fp32_bytes(shape: Shape, seq: int, micro_batch: int) -> int:
    """The fp32 copy of the logits that softmax cross-entropy works on (and saves for backward)."""
    return 4 * seq * micro_batch * shape.vocab


def logits_bytes(shape: Shape, seq: int, micro_batch: int) -> int:
    """6sbV: 16-bit logits plus their fp32 copy for the loss."""
    return logits_16bit_bytes(shape, seq, micro_batch) + logits_fp32_bytes(shape, seq, micro_batch)
