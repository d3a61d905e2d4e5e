"""A model's parameters counted from its family's tensors (calc.inventory, calc.families)."""

from __future__ import annotations

from .families import FAMILIES
from .inventory import Tensor, block, numel, outer_tensors
from .shape import Shape


def layer_tensors(shape: Shape, moe: bool = False) -> list[Tensor]:
    """One block of this shape's family (a mixture-of-experts block with `moe`)."""
    own = FAMILIES[shape.family].tensors
    return own(shape, moe) if own else block(shape, moe)


def param_counts(shape: Shape) -> dict[str, int]:
    """Exact parameter count, broken down by where the parameters live (summed from calc.inventory's
    tensors). `per_layer` is a mixture-of-experts block when the model has experts (`per_dense_layer` the
    others); `experts` all routed experts' parameters; `active` those one token uses (k of the E routed
    experts in each MoE layer)."""
    moe = shape.moe_layers
    dense = numel(layer_tensors(shape, False))
    moe_block = layer_tensors(shape, True) if moe else []
    per_layer = numel(moe_block) if moe else dense
    outer = {part: numel(tensors) for part, tensors in outer_tensors(shape).items()}
    counts = {
        "embedding": outer["embedding"],
        "positions": outer["positions"],
        "per_layer": per_layer,
        "per_dense_layer": dense,
        "layers": moe * per_layer + (shape.layers - moe) * dense,
        "final_norm": outer["final_norm"],
        "head": outer["head"],
    }
    counts["total"] = sum(counts[k] for k in ("embedding", "positions", "layers", "final_norm", "head"))
    routed = moe * sum(t.numel for t in moe_block if t.tp == "experts")
    counts["experts"] = routed
    counts["active"] = counts["total"] - routed + (routed // shape.experts * shape.experts_per_token if moe else 0)
    return counts
