"""The planner: which layouts of a training job fit a device, fewest devices first."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from functools import lru_cache

from . import finetune
from .api import walks
from .counts import param_counts
from .parallel import Parallel, check, device_params
from .recipes import RECIPES, RECOMPUTE
from .shape import Shape
from .walk import label_at, peak, peak_of, resident_state, seq_sizes, stage_kept, template

TP_DEGREES = (1, 2, 4, 8)  # tensor parallelism stays inside one 8-device node (Narayanan et al. 2021, §3.3)
# calc.walk.template with a cache of its own: the planner's hundreds of templates would evict a sweep's few, and
# a template does not depend on the sequence, batch or capacity, so the page's next plan for the model reuses them.
_template = getattr(template, "__wrapped__", template)


@lru_cache(maxsize=1024)
def _peak_form(shape: Shape, recipe: str, recompute: str, par: Parallel, *walk) -> Callable[[dict[str, int]], int]:
    """calc.walk.peak_of the walk's template: its peak as a function of the sizes (the same integers as
    walking the template), made once per model, recipe, recomputation, layout and walk."""
    return peak_of(_template(shape, recipe, recompute, par, *walk))


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


class _Layouts:
    """What the planner's layouts share, each computed once per plan: the sizes of the tokens in flight (they
    depend on the micro-batch, recomputation and tp only), each stage's parameters (each walk's peak form,
    _peak_form, is kept across plans)."""

    def __init__(self, shape: Shape, seq: int, recipe: str, flash: bool):
        self.shape, self.seq, self.recipe, self.flash = shape, seq, recipe, flash
        self.sizes: dict[tuple, dict[str, int]] = {}
        self.params: dict[tuple, tuple[int, int]] = {}
        self.kept: dict[tuple, tuple[int, int]] = {}
        self.overheads: dict[str, float] = {}

    def states(self, par: Parallel) -> tuple[int, int]:
        """The bytes resident before the step (calc.walk.resident_state) on a device of the first and of the
        last pipeline stage: every walk of that stage starts with them."""
        out = []
        for stage in sorted({0, par.pp - 1}):
            key = (par.tp, par.pp, par.ep, stage)  # what a stage's parameters depend on (calc.parallel)
            if key not in self.params:
                n = device_params(self.shape, par, stage)
                self.params[key] = (n["total"], n["experts"])
            total, experts = self.params[key]
            out.append(sum(e.bytes for e in resident_state(total, self.recipe, par, experts)))
        return out[0], out[-1]

    def floor(self, par: Parallel, states: tuple[int, int], micro_batch: int, recompute: str, grad_accum: int) -> int:
        """A floor under the layout's peak: each end stage's walk reaches its resident `states` (first stage,
        last stage) plus the activations its micro-batches in flight keep at the end of their forward pass
        (calc.walk.stage_kept), and the last stage its 16-bit and fp32 logits on top: every one of these
        events adds bytes, and ZeRO-3's gathers are released as they are made."""
        sizes = self.sized(par, micro_batch, recompute)
        key = (micro_batch, recompute, par.tp, par.pp)
        kept = self.kept.get(key)
        if kept is None:
            kept = self.kept[key] = tuple(stage_kept(self.shape, sizes, par.pp, s) for s in (0, par.pp - 1))
        first = states[0] + min(par.pp, grad_accum) * kept[0]
        last = states[1] + kept[1] + sizes["logits16"] + sizes["logits32"]  # one micro-batch in flight
        return max(first, last)

    def sized(self, par: Parallel, micro_batch: int, recompute: str) -> dict[str, int]:
        """calc.walk.seq_sizes, which depend on the micro-batch, recomputation and tp only."""
        key = (micro_batch, recompute, par.tp)  # par.sequence_parallel follows tp; flash is the plan's
        sizes = self.sizes.get(key)
        if sizes is None:
            sizes = self.sizes[key] = seq_sizes(self.shape, self.seq, micro_batch, recompute, 2, par)
        return sizes

    def peak(self, par: Parallel, micro_batch: int, recompute: str, grad_accum: int, capacity: float) -> int:
        """The peak of the layout's worst walk (calc.api.worst_stage), from templates and sizes computed once;
        or, as soon as one walk's peak exceeds `capacity`, that walk's (the others need not be built). Walks
        that start with the step's gradients resident go first: they tend to peak highest."""
        sizes = self.sized(par, micro_batch, recompute)
        top = -1
        for walk in sorted(walks(par, grad_accum, self.shape), key=lambda w: not w[2]):
            top = max(top, _peak_form(self.shape, self.recipe, recompute, par, *walk)(sizes))
            if top > capacity:
                break
        return top

    def overhead(self, recompute: str) -> float:
        if recompute not in self.overheads:
            self.overheads[recompute] = recompute_overhead(self.shape, self.seq, recompute, self.flash)
        return self.overheads[recompute]


def _rows(shared: _Layouts, par: Parallel, groups: list[list[int]], per_worker: int, capacity: int) -> list[dict]:
    """The plan's rows for one layout: for each recomputation and group, its micro-batches from the smallest
    up to the first whose peak exceeds `capacity`."""
    states = shared.states(par)
    if max(states) > capacity:
        return []  # no micro-batch of this layout fits
    found = []
    for recompute in RECOMPUTE:
        for group in groups:
            for micro_batch in group:
                grad_accum = per_worker // micro_batch
                if shared.floor(par, states, micro_batch, recompute, grad_accum) > capacity:
                    break  # so is its peak
                top = shared.peak(par, micro_batch, recompute, grad_accum, capacity)
                if top > capacity:
                    break
                found.append(
                    {
                        "dp": par.dp,
                        "tp": par.tp,
                        "pp": par.pp,
                        "ep": par.ep,
                        "zero": par.zero,
                        "recompute": recompute,
                        "micro_batch": micro_batch,
                        "devices": par.devices,
                        "peak": top,
                        "sequence_parallel": par.sequence_parallel,
                        "flash": par.flash,
                        "pp_schedule": par.pp_schedule,  # the planner's pipelines are 1F1B's (Load sets it)
                        "grad_accum": grad_accum,
                        "extra_compute": shared.overhead(recompute),
                    }
                )
    return found


def run_to_end(steps: Generator[None, None, list[dict]]) -> list[dict]:
    """What a generator of slices (plan_steps, fit_card_steps) returns, every slice run at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


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
    """plan_steps' layouts, worked out at once."""
    return run_to_end(plan_steps(shape, seq, global_batch, capacity, recipe, sequence_parallel, flash, max_devices,
                                 limit))  # fmt: skip


def plan_steps(
    shape: Shape,
    seq: int,
    global_batch: int,
    capacity: int,
    recipe: str = "mixed",
    sequence_parallel: bool = False,
    flash: bool = False,
    max_devices: int = 4096,
    limit: int = 50,
) -> Generator[None, None, list[dict]]:
    """Layouts (dp, tp, pp, ZeRO stage, recomputation, micro-batch) whose per-device peak fits in
    `capacity` bytes: fewest devices first, then the least extra compute, then the largest
    micro-batch (fewest accumulation steps), the lowest ZeRO stage (least communication) and the
    lowest peak; at most `limit` of them. A mixture of experts also tries every expert parallelism ep that
    divides both its experts and dp.

    Every dp worker takes global_batch / dp sequences per step, as micro-batches; a pipeline needs
    at least pp micro-batches per step to keep its stages busy (1F1B). ZeRO stages 2 and 3 are not
    combined with pipeline parallelism, which DeepSpeed's pipeline engine does not support.

    The layouts share their sizes and walk templates (_Layouts), and a layout or micro-batch whose floor
    already exceeds `capacity` is not walked: the list is the one walking every layout gives.

    A generator that yields after each layout and ZeRO stage it walks (a slice of bounded work) and returns
    the list: the page's worker answers a reader's change between slices (calc.web.Sliced, issue 21)."""
    layouts = []
    for tp in TP_DEGREES:
        for pp in _divisors(shape.layers):
            for dp in _divisors(global_batch):
                if dp * tp * pp <= max_devices:
                    layouts.append((dp * tp * pp, dp, tp, pp))
    layouts.sort()
    shared = _Layouts(shape, seq, recipe, flash)
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
            found += _rows(shared, par, groups, per_worker, capacity)
            yield
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


def fit_variants(shape: Shape, optimizer: str = "adamw", paged: bool = False, adapter_dtype: str = "fp32"
                 ) -> list[finetune.Tuning]:  # fmt: skip
    """The fine-tunings fit_card tries: full, then LoRA and QLoRA on q and v (on a model whose LoRA adapts a fused
    store whole, the stores that hold them: Phi-3's qkv_proj, named q, k and v) and on every linear at each
    rank, their adapters in `adapter_dtype` (calc.finetune.ADAPTER_DTYPES)."""
    out = []
    for mode in FIT_MODES:
        if mode == "full":
            out.append(finetune.Tuning(mode, optimizer, paged=paged))
            continue
        for targets in FIT_TARGETS:
            chosen = tuple(finetune.linears(shape)) if targets == "all-linear" else finetune.whole(shape, targets)
            out += [finetune.Tuning(mode, optimizer, rank, targets=chosen, paged=paged, adapter_dtype=adapter_dtype)
                    for rank in FIT_RANKS]  # fmt: skip
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
    adapter_dtype: str = "fp32",
) -> list[dict]:
    """fit_card_steps' fine-tunings, worked out at once."""
    return run_to_end(fit_card_steps(shape, seq, capacity, recipe, optimizer, paged, flash, limit, adapter_dtype))


def fit_card_steps(
    shape: Shape,
    seq: int,
    capacity: int,
    recipe: str = "mixed",
    optimizer: str = "adamw",
    paged: bool = False,
    flash: bool = False,
    limit: int = 60,
    adapter_dtype: str = "fp32",
) -> Generator[None, None, list[dict]]:
    """Fine-tunings that fit one card of `capacity` bytes: for each mode, rank, targets and recomputation,
    the largest micro-batch whose peak fits, LoRA's adapters in `adapter_dtype`. Cheapest first: least extra
    compute (recomputation), then the largest micro-batch, then the lowest peak. `flash`: attention keeps no
    s x s scores. A mixture of experts is not modelled (returns []). A generator, as plan_steps is: it yields
    after each fine-tuning it tries, and returns the list."""
    if shape.moe_layers:
        return []
    activation_bytes = RECIPES[recipe].activations
    overheads = {recompute: recompute_overhead(shape, seq, recompute, flash) for recompute in RECOMPUTE}
    found = []
    for tune in fit_variants(shape, optimizer, paged, adapter_dtype):
        if finetune.check(shape, tune):
            continue
        yield
        trainable = None
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
                if sum(e.bytes for e in segs[0].events) > capacity:
                    break  # the state resident before the step, the same with any recomputation, does not fit
                continue
            if trainable is None:
                trainable = finetune.trainable_params(shape, tune)
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
                    "trainable_params": trainable,
                    "flash": flash,
                    "extra_compute": overheads[recompute],
                }
            )
    found.sort(key=lambda f: (f["extra_compute"], -f["micro_batch"], f["peak"]))
    return found[:limit]


def plan_problem(walk: str, tune) -> tuple[str, str] | None:
    """Why --table and --plan (and the page's planner) refuse these inputs, as (field, message), or None:
    they walk the deck's step, training every parameter with AdamW on the device. The field is the one that
    leaves that step (a fine-tuning, else another optimizer, else a paged one), so the page names its own."""
    if walk != "deck":
        return "walk", f"{walk} walks one step; --table and --plan use the deck walk"
    if tune.mode != "full":
        return "finetune", "--table and --plan train every parameter with AdamW; use --fit-card"
    if tune.optimizer != "adamw":
        return "optimizer", f"--table and --plan train every parameter with AdamW, not {tune.optimizer}; use --fit-card"
    if tune.paged:
        return "paged-optimizer", "--table and --plan keep AdamW's state on the device, not paged; use --fit-card"
    return None


def fit_problem(shape: Shape, walk: str = "deck") -> tuple[str, str] | None:
    """Why --fit-card (and the page's fit list) lists nothing for this model, as (field, message), or None: the
    fine-tunings of a mixture of experts are not modelled (calc.finetune.check), and its rows are the deck
    walk's peaks, so a run on another walk would load a row whose peak is not the one it shows (as plan_problem)."""
    if walk != "deck":
        return "walk", f"{walk} walks one step; --fit-card uses the deck walk"
    if shape.moe_layers:
        return "fit-card", ("the fit list (the deck walk's) does not fine-tune a mixture of experts: --walk eager "
                            "replays peft's LoRA on one, a step at a time")
    return None
