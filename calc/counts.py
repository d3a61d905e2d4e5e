"""A model's parameters counted from its family's tensors (calc.inventory, calc.families)."""

from __future__ import annotations

from functools import lru_cache, wraps

from .families import FAMILIES
from .inventory import Tensor, block, numel, outer_tensors
from .shape import Shape


def layer_tensors(shape: Shape, moe: bool = False) -> list[Tensor]:
    """One block of this shape's family (a mixture-of-experts block with `moe`). Listed once per shape: the
    fit list and the planner ask for the same block hundreds of times an answer."""
    return list(_block(shape, moe, FAMILIES[shape.family].tensors))


@lru_cache(maxsize=64)
def _block(shape: Shape, moe: bool, own) -> tuple[Tensor, ...]:
    """layer_tensors' list, as an immutable tuple of frozen tensors (`own`: the family's lister, or None)."""
    return tuple(own(shape, moe) if own else block(shape, moe))


def param_counts(shape: Shape) -> dict[str, int]:
    """Exact parameter count, broken down by where the parameters live (summed from calc.inventory's
    tensors). `per_layer` is a mixture-of-experts block when the model has experts (`per_dense_layer` the
    others); `experts` all routed experts' parameters; `active` those one token uses (k of the E routed
    experts in each MoE layer). Counted once per shape (a copy each call)."""
    return dict(_counts(shape, FAMILIES[shape.family].tensors))


@lru_cache(maxsize=64)
def _counts(shape: Shape, own) -> dict[str, int]:
    """param_counts' dict, counted (`own`: the family's lister, part of the key as in _block)."""
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


def per_shape(fn):
    """fn(shape, *args) computed once for the same arguments (frozen, hashable ones) and the same family code
    (a test may swap a family's tensor lister): for sizes the fit list and the planner ask for hundreds of
    times an answer that depend on neither the sequence nor the batch. fn must return an immutable value."""
    cached = lru_cache(maxsize=256)(lambda own, shape, *args: fn(shape, *args))

    @wraps(fn)
    def wrapper(shape: Shape, *args):
        return cached(FAMILIES[shape.family].tensors, shape, *args)

    return wrapper
