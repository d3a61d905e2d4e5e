"""The planner: which layouts of a training job fit a device, fewest devices first."""

from __future__ import annotations

import math
from functools import lru_cache

from . import finetune
from .api import worst_stage
from .counts import param_counts
from .parallel import Parallel, check
from .recipes import RECIPES, RECOMPUTE
from .shape import Shape
from .walk import label_at, peak

TP_DEGREES = (1, 2, 4, 8)  # tensor parallelism stays inside one 8-device node (Narayanan et al. 2021, §3.3)


def recompute_overhead(shape: Shape, seq: int, recompute: str, flash: bool = False) -> float:
    """Extra compute per step from recomputation, as a fraction of the step's compute.

    Matmuls cost 2 FLOPs per parameter per token and attention's QK^T and PV 4 s^2 h per sequence
    (Korthikanti et al. 2022, §6); backward costs twice forward, so a step is three forwards. Full
    recomputation repeats each layer's forward; selective repeats only QK^T and PV, which FlashAttention
    recomputes anyway. A mixture of experts computes with the parameters a token uses: k of its E experts."""
    n = param_counts(shape)
    attention = 4 * seq * seq * shape.q_width
    active_per_layer = (n["active"] - n["embedding"] - n["positions"] - n["final_norm"] - n["head"]) // shape.layers
    layer = 2 * seq * active_per_layer + attention  # per sequence, forward
    step = 3 * (shape.layers * layer + 2 * seq * shape.vocab * shape.hidden)
    extra = {"none": 0, "selective": 0 if flash else attention, "full": layer}[recompute]
    return shape.layers * extra / step


@lru_cache(maxsize=256)
def _divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted({*small, *(n // d for d in small)}))


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
    `capacity` bytes: fewest devices first, then the least extra compute, then the largest
    micro-batch (fewest accumulation steps), the lowest ZeRO stage (least communication) and the
    lowest peak; at most `limit` of them. A mixture of experts also tries every expert parallelism ep that
    divides both its experts and dp.

    Every dp worker takes global_batch / dp sequences per step, as micro-batches; a pipeline needs
    at least pp micro-batches per step to keep its stages busy (1F1B). ZeRO stages 2 and 3 are not
    combined with pipeline parallelism, which DeepSpeed's pipeline engine does not support."""
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
        per_worker = global_batch // dp
        # A step's micro-batches outnumber the pipeline's stages (and later ones start with the
        # gradients resident), or just fill it; within each group a larger micro-batch needs more.
        groups = [
            [b for b in _divisors(per_worker) if per_worker // b > pp],
            [b for b in _divisors(per_worker) if per_worker // b == pp],
        ]
        eps = [e for e in _divisors(shape.experts) if dp % e == 0] if shape.moe_layers else [1]
        for zero, ep in ((z, e) for z in (range(4 if pp == 1 else 2) if dp > 1 else (0,)) for e in eps):
            par = Parallel(dp, tp, pp, zero, sequence_parallel and tp > 1, flash, ep)
            if check(shape, par):
                break
            for recompute in RECOMPUTE:
                for group in groups:
                    for micro_batch in group:
                        grad_accum = per_worker // micro_batch
                        top = worst_stage(shape, seq, micro_batch, recipe, recompute, 2, par, grad_accum)[2][0]
                        if top > capacity:
                            break
                        found.append(
                            {
                                "dp": dp,
                                "tp": tp,
                                "pp": pp,
                                "ep": ep,
                                "zero": zero,
                                "recompute": recompute,
                                "micro_batch": micro_batch,
                                "devices": devices,
                                "peak": top,
                                "sequence_parallel": par.sequence_parallel,
                                "flash": flash,
                                "grad_accum": grad_accum,
                                "extra_compute": recompute_overhead(shape, seq, recompute, flash),
                            }
                        )
        found.sort(
            key=lambda f: (f["devices"], f["extra_compute"], -f["micro_batch"], f["zero"], f["peak"], f["ep"])
        )
    return found[:limit]


# "What fits on one card": the fine-tuning modes, LoRA ranks and targets the planner tries, and the
# micro-batches (powers of two) it grows each one to.
FIT_MODES = ("full", "lora", "qlora")
FIT_RANKS = (8, 16, 64)
FIT_TARGETS = (("q", "v"), "all-linear")
FIT_MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64)


def fit_variants(shape: Shape, optimizer: str = "adamw", paged: bool = False) -> list[finetune.Tuning]:
    """The fine-tunings fit_card tries: full, then LoRA and QLoRA on q and v and on every linear at each rank."""
    out = []
    for mode in FIT_MODES:
        if mode == "full":
            out.append(finetune.Tuning(mode, optimizer, paged=paged))
            continue
        for targets in FIT_TARGETS:
            chosen = tuple(finetune.linears(shape)) if targets == "all-linear" else targets
            out += [finetune.Tuning(mode, optimizer, rank, targets=chosen, paged=paged) for rank in FIT_RANKS]
    return out


def fit_card(
    shape: Shape,
    seq: int,
    capacity: int,
    recipe: str = "mixed",
    optimizer: str = "adamw",
    paged: bool = False,
    flash: bool = False,
    limit: int = 60,
) -> list[dict]:
    """Fine-tunings that fit one card of `capacity` bytes: for each mode, rank, targets and recomputation,
    the largest micro-batch whose peak fits. Cheapest first: least extra compute (recomputation), then the
    largest micro-batch, then the lowest peak. `flash`: attention keeps no s x s scores. A mixture of experts
    is not modelled (returns [])."""
    if shape.moe_layers:
        return []
    activation_bytes = RECIPES[recipe].activations
    found = []
    for tune in fit_variants(shape, optimizer, paged):
        if finetune.check(shape, tune):
            continue
        for recompute in RECOMPUTE:
            if flash and recompute == "selective":
                continue  # with no scores stored, selective recomputation keeps what none keeps
            best = None
            for micro_batch in FIT_MICRO_BATCHES:
                segs = finetune.segments(shape, seq, micro_batch, recipe, recompute, activation_bytes, tune, flash)
                top, at = peak(segs)
                if top > capacity:
                    break
                best = (micro_batch, top, label_at(segs, at))
            if best is None:
                continue
            found.append(
                {
                    "finetune": tune.mode,
                    "optimizer": tune.optimizer,
                    "rank": tune.rank if tune.adapters else 0,
                    "targets": list(tune.targets) if tune.adapters else [],
                    "recompute": recompute,
                    "micro_batch": best[0],
                    "peak": best[1],
                    "peak_event": best[2],
                    "trainable_params": finetune.trainable_params(shape, tune),
                    "flash": flash,
                    "extra_compute": recompute_overhead(shape, seq, recompute, flash),
                }
            )
    found.sort(key=lambda f: (f["extra_compute"], -f["micro_batch"], f["peak"]))
    return found[:limit]


def plan_problem(walk: str, tune) -> tuple[str, str] | None:
    """Why --table and --plan (and the page's planner) refuse these inputs, as (field, message), or None:
    they walk the deck's step, training every parameter with AdamW."""
    if walk != "deck":
        return "walk", f"{walk} walks one step; --table and --plan use the deck walk"
    if not tune.default:
        return "finetune", "--table and --plan train every parameter with AdamW; use --fit-card"
    return None
