"""The calculator's results as plain, JSON-ready data."""

from __future__ import annotations

from dataclasses import asdict

from . import activations as act
from . import eager
from .parallel import SINGLE, Parallel, device_params, stage_layers
from .recipes import RECIPES, TABLE_ROWS, state_bytes
from .shape import Shape, param_counts
from .walk import CATEGORIES, events, peak, segments, seq_sizes, template


def sizes(
    shape: Shape,
    seq: int,
    micro_batch: int,
    recipe: str,
    recompute: str,
    activation_bytes: int = 2,
    par: Parallel = SINGLE,
    stage: int = 0,
) -> dict[str, int]:
    """The full size of each category on one device of `stage`: what the deck's table shows."""
    scale = activation_bytes // 2
    in_flight = par.pp - stage
    last = stage == par.pp - 1
    return {
        **state_bytes(device_params(shape, par, stage)["total"], recipe, par),
        "activations": in_flight
        * len(stage_layers(shape, par.pp, stage))
        * act.kept_bytes(shape, seq, micro_batch, recompute, par)
        * scale,
        "logits": (
            act.logits_16bit_bytes(shape, seq, micro_batch, par) * scale
            + act.logits_fp32_bytes(shape, seq, micro_batch, par)
        )
        if last
        else 0,
    }


def worst_stage(
    shape: Shape,
    seq: int,
    micro_batch: int,
    recipe: str,
    recompute: str,
    activation_bytes: int = 2,
    par: Parallel = SINGLE,
) -> tuple[int, list, tuple[int, int]]:
    """(stage, segments, (peak, index)) of the pipeline stage whose device peaks highest.

    The first stage holds the most micro-batches in flight, the last the logits; stages in
    between hold no more than the first."""
    best = None
    for stage in sorted({0, par.pp - 1}):
        segs = segments(shape, seq, micro_batch, recipe, recompute, activation_bytes, par, stage)
        top = peak(segs)
        if best is None or top[0] > best[2][0]:
            best = (stage, segs, top)
    return best


def step(
    shape: Shape,
    seq: int = 4096,
    micro_batch: int = 1,
    recipe: str = "mixed",
    recompute: str = "none",
    activation_bytes: int = 2,
    par: Parallel = SINGLE,
    walk: str = "deck",
) -> dict:
    """One training step on one device: sizes, the event walk and its peak (the CLI's --json object).

    walk="deck" (the default) is the deck's walk (calc.walk); walk="eager" counts what PyTorch's eager
    autograd allocates (calc.eager), on a single device only, and its `bytes` are each category's
    high-water mark in that walk."""
    if walk == "eager":
        if par != SINGLE:
            raise ValueError("the eager walk is for a single device: use the deck walk with parallelism")
        stage, segs = 0, eager.segments(shape, seq, micro_batch, recipe, recompute, activation_bytes)
        top, at = peak(segs)
        expanded = events(segs)
        full_sizes = {c: max(e["totals"][c] for e in expanded) for c in CATEGORIES}
        per_layer = eager.kept_bytes(shape, seq, micro_batch, recompute, activation_bytes)
    elif walk == "deck":
        stage, segs, (top, at) = worst_stage(shape, seq, micro_batch, recipe, recompute, activation_bytes, par)
        expanded = events(segs)
        full_sizes = sizes(shape, seq, micro_batch, recipe, recompute, activation_bytes, par, stage)
        per_layer = act.kept_bytes(shape, seq, micro_batch, recompute, par) * (activation_bytes // 2)
    else:
        raise ValueError(f"unknown walk {walk!r}: deck or eager")
    counts = param_counts(shape)
    return {
        "config": {
            "shape": asdict(shape),
            "seq": seq,
            "micro_batch": micro_batch,
            "recipe": recipe,
            "recompute": recompute,
            "activation_bytes": activation_bytes,
            "parallel": asdict(par),
            "walk": walk,
        },
        "params": counts["total"],
        "param_counts": counts,
        "device_params": device_params(shape, par, stage)["total"],
        "stage": stage,
        "devices": par.devices,
        "bytes": full_sizes,
        "activations_per_layer": per_layer,
        "static": expanded[len(segs[0].events) - 1]["total"],
        "peak": top,
        "peak_event": expanded[at]["label"],
        "peak_index": at,
        "events": expanded,
    }


def table(shape: Shape, seq: int = 4096, micro_batch: int = 1, par: Parallel = SINGLE) -> list[dict]:
    """The deck's four recipes for one shape (per device)."""
    rows = []
    for recipe, recompute in TABLE_ROWS:
        s = step(shape, seq, micro_batch, recipe, recompute, par=par)
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
    shape: Shape,
    seqs: list[int],
    micro_batch: int = 1,
    recipe: str = "mixed",
    recompute: str = "none",
    par: Parallel = SINGLE,
) -> list[int]:
    """Peak bytes per device for each sequence length (the same walk, without expanding its events)."""
    stages = [template(shape, recipe, recompute, par, stage) for stage in sorted({0, par.pp - 1})]
    return [max(peak(t, seq_sizes(shape, s, micro_batch, recompute, 2, par))[0] for t in stages) for s in seqs]
