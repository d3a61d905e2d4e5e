"""The calculator's results as plain, JSON-ready data."""

from __future__ import annotations

from . import activations as act
from .recipes import RECIPES, TABLE_ROWS
from .shape import Shape, param_counts
from .walk import events, peak, segments


def sizes(
    shape: Shape, seq: int, micro_batch: int, recipe: str, recompute: str, activation_bytes: int = 2
) -> dict[str, int]:
    """The full size of each category: what the deck's table shows."""
    r, n = RECIPES[recipe], param_counts(shape)["total"]
    scale = activation_bytes // 2
    return {
        "weights": r.weights * n,
        "gradients": r.gradients * n,
        "optimizer": r.optimizer * n,
        "master": r.master * n,
        "activations": shape.layers * act.kept_bytes(shape, seq, micro_batch, recompute) * scale,
        "logits": act.logits_16bit_bytes(shape, seq, micro_batch) * scale
        + act.logits_fp32_bytes(shape, seq, micro_batch),
    }


def step(
    shape: Shape,
    seq: int = 4096,
    micro_batch: int = 1,
    recipe: str = "mixed",
    recompute: str = "none",
    activation_bytes: int = 2,
) -> dict:
    """One training step: sizes, the event walk and its peak (the CLI's --json object)."""
    segs = segments(shape, seq, micro_batch, recipe, recompute, activation_bytes)
    walk = events(segs)
    top, at = peak(segs)
    counts = param_counts(shape)
    return {
        "config": {
            "shape": shape.__dict__.copy(),
            "seq": seq,
            "micro_batch": micro_batch,
            "recipe": recipe,
            "recompute": recompute,
            "activation_bytes": activation_bytes,
        },
        "params": counts["total"],
        "param_counts": counts,
        "bytes": sizes(shape, seq, micro_batch, recipe, recompute, activation_bytes),
        "activations_per_layer": act.kept_bytes(shape, seq, micro_batch, recompute) * (activation_bytes // 2),
        "static": walk[len(segs[0].events) - 1]["total"],
        "peak": top,
        "peak_event": walk[at]["label"],
        "peak_index": at,
        "events": walk,
    }


def table(shape: Shape, seq: int = 4096, micro_batch: int = 1) -> list[dict]:
    """The deck's four recipes for one shape."""
    rows = []
    for recipe, recompute in TABLE_ROWS:
        s = step(shape, seq, micro_batch, recipe, recompute)
        label = f"{RECIPES[recipe].label}, {'no' if recompute == 'none' else recompute} recomputation"
        rows.append(
            {
                "id": f"{recipe}-{recompute}",
                "label": label,
                "recipe": recipe,
                "recompute": recompute,
                "bytes": s["bytes"],
                "peak": s["peak"],
                "peak_event": s["peak_event"],
            }
        )
    return rows


def sweep(
    shape: Shape, seqs: list[int], micro_batch: int = 1, recipe: str = "mixed", recompute: str = "none"
) -> list[int]:
    """Peak bytes for each sequence length (the same walk, without expanding its events)."""
    return [peak(segments(shape, s, micro_batch, recipe, recompute))[0] for s in seqs]
