"""The planner: which layouts of a training job fit a device, fewest devices first."""

from __future__ import annotations

from .api import worst_stage
from .parallel import Parallel, check
from .recipes import RECOMPUTE
from .shape import Shape, param_counts

TP_DEGREES = (1, 2, 4, 8)  # tensor parallelism stays inside one 8-device node (Narayanan et al. 2021, §3.3)


def recompute_overhead(shape: Shape, seq: int, recompute: str, flash: bool = False) -> float:
    """Extra compute per step from recomputation, as a fraction of the step's compute.

    Matmuls cost 2 FLOPs per parameter per token and attention's QK^T and PV 4 s^2 h per sequence
    (Korthikanti et al. 2022, §6); backward costs twice forward, so a step is three forwards. Full
    recomputation repeats each layer's forward; selective repeats only QK^T and PV, which FlashAttention
    recomputes anyway."""
    n = param_counts(shape)
    attention = 4 * seq * seq * shape.hidden
    layer = 2 * seq * n["per_layer"] + attention  # per sequence, forward
    step = 3 * (shape.layers * layer + 2 * seq * shape.vocab * shape.hidden)
    extra = {"none": 0, "selective": 0 if flash else attention, "full": layer}[recompute]
    return shape.layers * extra / step


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def plan(
    shape: Shape,
    seq: int,
    global_batch: int,
    capacity: int,
    recipe: str = "mixed",
    sequence_parallel: bool = False,
    flash: bool = False,
    max_devices: int = 4096,
    limit: int = 50,
) -> list[dict]:
    """Layouts (dp, tp, pp, ZeRO stage, recomputation, micro-batch) whose per-device peak fits in
    `capacity` bytes, sorted by devices, then extra compute, then peak; at most `limit` of them.

    Every dp worker takes global_batch / dp sequences per step, as micro-batches; a pipeline needs
    at least pp micro-batches per step to keep its stages busy (1F1B)."""
    layouts = []
    for tp in TP_DEGREES:
        for pp in _divisors(shape.layers):
            for dp in _divisors(global_batch):
                if dp * tp * pp <= max_devices:
                    layouts.append((dp * tp * pp, dp, tp, pp))
    layouts.sort()
    found: list[dict] = []
    for devices, dp, tp, pp in layouts:
        if len(found) >= limit and devices > found[limit - 1]["devices"]:
            break
        for zero in range(4) if dp > 1 else (0,):
            par = Parallel(dp, tp, pp, zero, sequence_parallel and tp > 1, flash)
            if check(shape, par):
                break
            per_worker = global_batch // dp
            for recompute in RECOMPUTE:
                for micro_batch in _divisors(per_worker):
                    if per_worker // micro_batch < pp:
                        break
                    top = worst_stage(shape, seq, micro_batch, recipe, recompute, 2, par)[2][0]
                    if top > capacity:
                        break  # a larger micro-batch needs more still
                    found.append(
                        {
                            "dp": dp,
                            "tp": tp,
                            "pp": pp,
                            "zero": zero,
                            "recompute": recompute,
                            "micro_batch": micro_batch,
                            "devices": devices,
                            "peak": top,
                            "sequence_parallel": par.sequence_parallel,
                            "flash": flash,
                            "grad_accum": per_worker // micro_batch,
                            "extra_compute": recompute_overhead(shape, seq, recompute, flash),
                        }
                    )
        found.sort(key=lambda f: (f["devices"], f["extra_compute"], f["peak"]))
    return found[:limit]
