"""The calculator's results as plain, JSON-ready data."""

from __future__ import annotations

from dataclasses import asdict, replace
from functools import lru_cache
from typing import NamedTuple

from . import eager, eager_step, finetune, loops, optim_step
from .counts import param_counts
from .engines import ddp, fsdp, pipeline, tensor
from .fields import ENGINES
from .parallel import SINGLE, Parallel, device_params, lone_problem, stage_layers
from .recipes import HOST_SOURCE, RECIPES, TABLE_ROWS
from .run import Run
from .shape import Shape
from .walk import (
    category_peaks,
    device_state,
    events,
    host_state,
    label_at,
    part_columns,
    peak,
    peak_forms,
    peaks_over,
    segments,
    seq_sizes,
    stage_kept,
    template,
    token_parts,
)


def sizes(
    shape: Shape,
    seq: int,
    micro_batch: int,
    recipe: str,
    recompute: str,
    activation_bytes: int = 2,
    par: Parallel = SINGLE,
    stage: int = 0,
    in_flight: int = 1,
) -> dict[str, int]:
    """The full size of each category on one device of `stage` holding `in_flight` micro-batches:
    what the deck's table shows. (The walk's high-water mark of a category can differ: it adds
    recomputed activations on top of the kept ones.)"""
    tokens = seq_sizes(shape, seq, micro_batch, recompute, activation_bytes, par)  # the walk's own sizes
    n = device_params(shape, par, stage)
    return {
        **device_state(n["total"], n["experts"], recipe, par),
        "activations": in_flight * stage_kept(shape, tokens, par.pp, stage),
        "logits": tokens["logits16"] + tokens["logits32"] if stage == par.pp - 1 else 0,
    }


def walks(par: Parallel, grad_accum: int | None = None, shape: Shape | None = None) -> list[tuple[int, int, bool]]:
    """The (stage, micro-batches in flight, accumulating) walks whose largest peak is the device's.

    The first pipeline stage holds the most micro-batches in flight (1F1B), the last the logits;
    stages in between hold no more than the first unless their layers are another sequence of dense and
    mixture-of-experts layers (`shape`'s: heavier_stages). A stage that runs more micro-batches than it holds at once
    starts some of them with the step's gradients already resident. `grad_accum` is the micro-batches
    per step of one data-parallel worker (default: pp, just enough to fill the pipeline; 1 on one device)."""
    m = par.pp if grad_accum is None else grad_accum
    out = []
    for stage in sorted({0, par.pp - 1, *(heavier_stages(shape, par.pp) if shape is not None else ())}):
        in_flight = pipeline.PipelineStage(par.pp, stage, "1f1b", m).in_flight
        out += [(stage, in_flight, False)] + ([(stage, in_flight, True)] if m > in_flight else [])
    return out


@lru_cache(maxsize=256)
def heavier_stages(shape: Shape, pp: int) -> tuple[int, ...]:
    """The stages in between the first and the last whose layers are another sequence of dense and mixture-of-experts
    layers than the first's (where Shape.moe_layer puts them: DeepSeek's dense first layers, Llama 4's interleaved
    ones), the first stage of each such sequence. Where a kind of layer lies matters as well as how many there are:
    under full recomputation a layer of experts recomputed later in backward, beside more of the stage's gradients,
    peaks higher. A stage in between with the first's sequence holds no more than the first: fewer micro-batches in
    flight (1F1B), no embedding, the same layers in the same order."""
    if pp < 3 or not shape.moe_layers:
        return ()

    def kinds(stage: int) -> tuple[bool, ...]:
        return tuple(map(shape.moe_layer, stage_layers(shape, pp, stage)))

    seen, out = {kinds(0)}, []
    for stage in range(1, pp - 1):
        if (mix := kinds(stage)) not in seen:
            seen.add(mix)
            out.append(stage)
    return tuple(out)


def worst_stage(
    shape: Shape,
    seq: int,
    micro_batch: int,
    recipe: str,
    recompute: str,
    activation_bytes: int = 2,
    par: Parallel = SINGLE,
    grad_accum: int | None = None,
) -> tuple[tuple[int, int, bool], list, tuple[int, int]]:
    """((stage, in flight, accumulating), segments, (peak, index)) of the walk that peaks highest."""
    best = None
    for walk in walks(par, grad_accum, shape):
        segs = segments(shape, seq, micro_batch, recipe, recompute, activation_bytes, par, *walk)
        top = peak(segs)
        if best is None or top[0] > best[2][0]:
            best = (walk, segs, top)
    return best


class Walked(NamedTuple):
    """One walk of the step as step reports it: the stage (a pipeline's rank) walked (the one that peaks highest),
    its micro-batches in flight and whether they accumulate, its segments (step expands their events), its peak,
    each category's full size and one layer's activations."""

    stage: int
    in_flight: int
    accumulating: bool
    segs: list
    top: int  # the peak, bytes
    at: int  # the index of the event where it first occurs
    full_sizes: dict[str, int]
    per_layer: int
    ranks: tuple[int, ...] = ()  # the eager walk over data-parallel processes: each rank's peak (issue 31)


def eager_walk(shape: Shape, seq: int, micro_batch: int, recipe: str, recompute: str, activation_bytes: int,
               attention: str, device: str, tune: finetune.Tuning, loop: loops.Loop,
               par: Parallel = SINGLE) -> Walked:  # fmt: skip
    """The eager walk (calc.eager): what PyTorch's eager autograd allocates on one device, `loop` around it
    (with its micro-batches); each category's size is its high-water mark in the walk. Over `par.dp` processes
    (DDP, with ZeroRedundancyOptimizer under ZeRO 1: calc.engines.ddp) the rank that peaks highest is walked,
    and `ranks` has every rank's peak (up to RANKS_LISTED ranks)."""
    bare = None if loop == loops.BARE else loop
    args = (shape, seq, micro_batch, recipe, recompute, activation_bytes, attention, device, tune, bare)
    if par.pp > 1:
        return _pipeline_walk(args, par, loop)
    shares, walks = _dp_shares(shape, tune, par), {}  # walks: share -> (segments, (peak, at)), once a share
    for share in shares:
        if share not in walks:
            engine = _engine(par, share)
            segs = eager.segments(*args, engine=engine)
            walks[share] = (segs, peak(segs))
    segs, (top, at) = max(walks.values(), key=lambda got: got[1][0])
    full_sizes = category_peaks(segs)
    per_layer = next(
        sum(e.bytes for e in s.events if e.category == "activations")
        for s in segs
        if s.reps and s.events[0].phase == "forward"
    )
    listed = 1 < par.dp * par.tp <= RANKS_LISTED  # every process: tensor parallelism's ranks hold alike
    # (calc.engines.tensor), rank d x tp + t is data-parallel rank d's (torch's (dp, tp) mesh)
    rank_peaks = tuple(walks[share][1][0] for share in shares for _ in range(par.tp)) if listed else ()
    return Walked(0, 1, loop.grad_accum > 1, segs, top, at, full_sizes, per_layer, rank_peaks)


def _pipeline_walk(args: tuple, par: Parallel, loop: loops.Loop) -> Walked:
    """The eager walk of every rank of a pipeline (calc.engines.pipeline: a stage, or under interleaved 1F1B two),
    its micro-batches the loop's (--grad-accum, default pp): the rank that peaks highest, and every rank's peak
    (`ranks`)."""
    m, peaks, busiest = loop.grad_accum, [], None  # busiest: (stage, segments, (peak, at)), the first highest
    for s in range(par.pp):
        stage_peaks = [0] * par.dp  # each data-parallel rank's, walked once for the ranks alike
        for d, alike in _dp_ranks(args[0], par, s).items():
            rank = pipeline.PipelineStage(par.pp, s, par.pp_schedule, m, par.dp, par.tp, par.zero > 1, d,
                                          par.zero == 1, par.sequence_parallel, par.zero == 3)  # fmt: skip
            segs = eager.segments(*args[:-1], loops.BARE, engine=rank)
            top = peak(segs)
            if busiest is None or top[0] > busiest[2][0]:
                busiest = (s, segs, top)
            for i in alike:
                stage_peaks[i] = top[0]
        peaks += stage_peaks
    stage, segs, (top, at) = busiest
    rank = pipeline.PipelineStage(par.pp, stage, par.pp_schedule, m)
    per_layer = next(sum(e.bytes for e in s.events if e.category == "activations") for s in segs
                     if s.reps and s.events[0].phase == "forward")  # fmt: skip
    # every process, stage by stage (the pipeline's dimension outermost), a stage's tensor-parallel ranks alike
    ranks = tuple(p for p in peaks for _ in range(par.tp)) if par.devices <= RANKS_LISTED else ()
    return Walked(stage, rank.in_flight, rank.accumulating, segs, top, at, category_peaks(segs), per_layer, ranks)


def _staged_problem(par: Parallel, recipe: str, tune: finetune.Tuning) -> str | None:
    """calc.step's refusal of what the eager walk does not run beside a pipeline's stages (calc.engines.pipeline's
    rule, which calc.inputs reads too, naming the field), or None."""
    if problem := lone_problem(par) or pipeline.beside_problem(par):  # calc.inputs reads both too
        return problem[1]
    if RECIPES[recipe].computes or not tune.default:
        return "the eager walk's pipeline trains every fp32 parameter (fp32-full or autocast) with AdamW"
    return None


def _dp_ranks(shape: Shape, par: Parallel, stage: int) -> dict[int, list[int]]:
    """A pipeline stage's data-parallel ranks, grouped by what they hold, in rank order: {the first of a group: its
    ranks}. Beside DDP every rank holds alike; beside FSDP2 (ZeRO 2) a rank holds its rows of each tensor, which
    differ where dp does not divide a tensor's rows (calc.engines.fsdp.local); beside ZeroRedundancyOptimizer
    (ZeRO 1) each rank its share of the parameters of the pipeline rank's stages (calc.engines.ddp.partition)."""
    if not par.zero:
        return {0: list(range(par.dp))}
    if par.zero == 1:  # one ZeroRedundancyOptimizer over the rank's stages (two under interleaved 1F1B), in order
        count = par.pp * pipeline.stages_a_rank(par.pp_schedule)
        params = [p for s in range(stage, count, par.pp) for p in optim_step.stage_params(
            replace(shape, layers=len(stage_layers(shape, count, s))), finetune.DEFAULT, s == 0, s == count - 1)]
        held = [tuple(s) for s in ddp.partition(params, par.dp)]
    else:
        sub = replace(shape, layers=len(stage_layers(shape, par.pp, stage)))
        first, last = stage == 0, stage == par.pp - 1
        sub = tensor.TensorParallel(par.tp).local(sub) if par.tp > 1 else sub  # FSDP2 shards a tp rank's tensors
        stored = optim_step.stage_params(sub, finetune.DEFAULT, first, last, stored=True)
        held = [tuple(fsdp.local(p, par.dp, d) for p in stored) for d in range(par.dp)]
    groups: dict[tuple, list[int]] = {}
    for d, mine in enumerate(held):
        groups.setdefault(mine, []).append(d)
    return {ranks[0]: ranks for ranks in groups.values()}


RANKS_LISTED = 1024  # step's "rank_peaks" lists every rank's peak up to this many processes


def _engine(par: Parallel, share: tuple | None) -> ddp.DataParallel | fsdp.FullyShard | tensor.TensorParallel | None:
    """One rank's engine: DDP (with ZeroRedundancyOptimizer under ZeRO 1), FSDP2 under ZeRO 2 and 3
    (reshard_after_forward False and True), tensor parallelism's layers plan, or None on one device."""
    if par.tp > 1 and par.dp > 1:  # FSDP2 x TP (calc.inputs lets through ZeRO 2 and 3 only)
        return fsdp.FullyShard(par.dp, par.zero == 3, share, tp=par.tp, sequence=par.sequence_parallel)
    if par.tp > 1:
        return tensor.TensorParallel(par.tp, par.tp_plan, par.sequence_parallel)
    if par.dp == 1:
        return None
    if par.zero > 1:
        return fsdp.FullyShard(par.dp, par.zero == 3, share)
    return ddp.DataParallel(par.dp, share)


def engine_name(par: Parallel) -> str:
    """The engine the eager walk runs this layout on, as --engine names it (step's "engine"): ddp (with
    ZeroRedundancyOptimizer under ZeRO 1), fsdp2 (over tensor parallelism's ranks too), or tensor-parallel; "" on
    one device."""
    if par.pp > 1:  # beside DDP or tensor parallelism too
        return "pipeline"
    if par.tp > 1 and par.dp == 1:
        return "tensor-parallel"
    return "" if par.dp == 1 else next(e for e, stages in ENGINES.items() if str(par.zero) in stages)


def _dp_shares(shape: Shape, tune: finetune.Tuning, par: Parallel) -> list[tuple | None]:
    """Each data-parallel process's share, rank by rank: the parameters ZeroRedundancyOptimizer gives its optimizer
    under ZeRO 1 (calc.engines.ddp.partition; a rank may have none), FSDP2's rows of each parameter under ZeRO 2
    and 3 (calc.engines.fsdp.shares), or None for DDP alone, whose ranks are alike."""
    if not par.zero:
        return [None] * par.dp
    if par.tp > 1:  # FSDP2 x TP: the rows of the tensors one tensor-parallel rank holds
        shape = tensor.TensorParallel(par.tp).local(shape)
    if par.zero > 1:  # the parameters that train: every one, or peft's adapters
        return fsdp.shares(optim_step.trainable(shape, tune) if tune.adapters else optim_step.model_params(shape),
                           par.dp)  # fmt: skip
    return [tuple(share) for share in ddp.partition(optim_step.trainable(shape, tune), par.dp)]


def tuned_walk(shape: Shape, seq: int, micro_batch: int, recipe: str, recompute: str, activation_bytes: int,
               flash: bool, tune: finetune.Tuning, grad_accum: int | None = None) -> Walked:  # fmt: skip
    """The fine-tuning walk (calc.finetune) on one device: frozen parameters, LoRA, QLoRA, another optimizer. With
    more than one micro-batch a step, the higher of the first micro-batch's walk and a later one's (whose
    trainable gradients are resident from its start), as the deck's walk takes them."""
    walks = []
    for accumulating in (False, True)[: 2 if (grad_accum or 1) > 1 else 1]:
        segs = finetune.segments(shape, seq, micro_batch, recipe, recompute, activation_bytes, tune, flash,
                                 accumulating)  # fmt: skip
        walks.append((peak(segs), accumulating, segs))
    (top, at), accumulating, segs = max(walks, key=lambda w: w[0][0])
    full_sizes = finetune.sizes(shape, seq, micro_batch, recipe, recompute, activation_bytes, tune, flash)
    frozen = tune if tune.adapters else None
    per_layer = finetune.layer_bytes(shape, seq, micro_batch, recompute, activation_bytes, frozen, flash,
                                     finetune.widened(recipe, tune))[0]  # fmt: skip
    return Walked(0, 1, accumulating, segs, top, at, full_sizes, per_layer)


def deck_walk(shape: Shape, seq: int, micro_batch: int, recipe: str, recompute: str, activation_bytes: int,
              par: Parallel, grad_accum: int | None) -> Walked:  # fmt: skip
    """The deck's walk (calc.walk) of the stage that peaks highest (worst_stage), with the deck's table's sizes."""
    (stage, in_flight, accumulating), segs, (top, at) = worst_stage(
        shape, seq, micro_batch, recipe, recompute, activation_bytes, par, grad_accum
    )
    full_sizes = sizes(shape, seq, micro_batch, recipe, recompute, activation_bytes, par, stage, in_flight)
    per_layer = seq_sizes(shape, seq, micro_batch, recompute, activation_bytes, par)[
        "moe:kept" if shape.moe_layers else "kept"
    ]
    return Walked(stage, in_flight, accumulating, segs, top, at, full_sizes, per_layer)


def walked(shape: Shape, seq: int, micro_batch: int, recipe: str, recompute: str, activation_bytes: int,
           par: Parallel, walk: str, grad_accum: int | None, attention: str, device: str, tune: finetune.Tuning,
           loop: loops.Loop) -> Walked:  # fmt: skip
    """The walk step reports: the eager one, the fine-tuning one or the deck's, each where it applies."""
    sized = (shape, seq, micro_batch, recipe, recompute, activation_bytes)
    if walk == "eager":
        alone = replace(par, dp=1, zero=0, flash=False, tp=1, pp=1, pp_schedule=SINGLE.pp_schedule,
                        tp_plan=SINGLE.tp_plan, sequence_parallel=False) == SINGLE
        two = par.dp > 1 and par.tp > 1 and par.pp == 1 and par.zero > 1  # FSDP2 x TP
        staged = par.pp > 1 and (par.dp == 1 or par.tp == 1 or par.zero > 1)  # beside DDP, FSDP2, TP or FSDP2 x TP
        if not alone or (sum(n > 1 for n in (par.dp, par.tp, par.pp)) > 1 and not (two or staged)):
            raise ValueError("the eager walk runs data parallelism (DDP, ZeRO 1, FSDP2), tensor parallelism or a "
                             "pipeline alone, FSDP2 over tensor parallelism's ranks, or a pipeline beside DDP, FSDP2, "
                             "tensor parallelism or FSDP2 over it: use the deck walk")  # fmt: skip
        if par.pp > 1 and (problem := _staged_problem(par, recipe, tune)):
            raise ValueError(problem)
        if two and (par.tp_plan != SINGLE.tp_plan or RECIPES[recipe].computes):
            raise ValueError("the eager walk's FSDP2 x TP runs the layers plan (with or without sequence "
                             "parallelism) over fp32 parameters (fp32-full or autocast)")  # fmt: skip
        if RECIPES[recipe].computes and (par.dp == 1 or par.zero < 2):
            raise ValueError(f"{recipe} is FSDP2's bf16 policy: the eager walk runs it over dp > 1, ZeRO 2 or 3")
        if par.pp > 1 and (shape.family not in pipeline.FAMILIES or shape.experts or shape.tied):
            raise ValueError(f"the eager walk's pipeline is measured on {' and '.join(pipeline.FAMILIES)}'s dense, "
                             "untied layers only: use the deck walk")  # fmt: skip
        if par.tp > 1 and (shape.family not in tensor.FAMILIES or shape.experts):
            raise ValueError(f"the eager walk's tensor parallelism is measured on {' and '.join(tensor.FAMILIES)}'s "
                             "dense layers only: use the deck walk")  # fmt: skip
        if par.pp_schedule not in pipeline.SCHEDULES:
            raise ValueError(f"the pipeline's schedule is one of {', '.join(pipeline.SCHEDULES)}")
        if par.pp > 1 and (problem := pipeline.schedule_problem(par.pp, par.pp_schedule, grad_accum, shape.layers)):
            raise ValueError(f"--{problem[0]}: {problem[1]}")
        if par.tp_plan not in tensor.PLANS or (par.tp_plan != SINGLE.tp_plan and par.tp == 1):
            raise ValueError(f"the tensor-parallel plan is one of {', '.join(tensor.PLANS)}, over tp 2 or more")
        if par.tp > 1 and (problem := tensor.plan_problem(shape, par.tp, par.tp_plan)):
            raise ValueError(f"transformers' tensor-parallel plan {problem[1]}")
        if par.sequence_parallel and (problem := tensor.sequence_problem(seq, par.tp, par.tp_plan)):
            raise ValueError(f"sequence parallelism {problem[1]}")
        return eager_walk(*sized, attention, device, tune, loop, par)
    if walk == "deck" and par.tp_plan != SINGLE.tp_plan:
        raise ValueError("the deck walk's tensor parallelism is Megatron-LM's accounting: the eager walk replays "
                         f"the {par.tp_plan} plan")  # fmt: skip
    if walk == "deck" and par.pp_schedule != SINGLE.pp_schedule:
        raise ValueError(f"the deck walk's pipeline is the papers' {SINGLE.pp_schedule}: the eager walk replays "
                         f"{par.pp_schedule}")  # fmt: skip
    if walk == "deck" and not tune.default:
        if par.tp > 1 or par.pp > 1 or (par.zero and par.dp > 1):
            raise ValueError("fine-tuning is walked on one device (or plain data parallelism, no ZeRO)")
        return tuned_walk(*sized, par.flash, tune, grad_accum)
    if walk == "deck":
        return deck_walk(*sized, par, grad_accum)
    raise ValueError(f"unknown walk {walk!r}: deck or eager")


def step(
    shape: Shape,
    seq: int = 4096,
    micro_batch: int = 1,
    recipe: str = "mixed",
    recompute: str = "none",
    activation_bytes: int | None = None,
    par: Parallel = SINGLE,
    walk: str = "deck",
    grad_accum: int | None = None,
    attention: str = "sdpa",
    device: str = "cuda",
    tune: finetune.Tuning = finetune.DEFAULT,
    loop: loops.Loop = loops.BARE,
) -> dict:
    """One training step on one device: sizes, the event walk and its peak (the CLI's --json object).
    `grad_accum`: micro-batches per step of each data-parallel worker (default: pp; see walks).

    walk="deck" (the default) is the deck's walk (calc.walk); walk="eager" counts what PyTorch's eager
    autograd allocates (calc.eager), on one device or on each rank of DDP (`par.dp`, ZeRO 0 or 1:
    calc.engines.ddp; "rank_peaks" has every rank's peak), and its `bytes` are each category's high-water
    mark in that walk. `attention` (transformers' attn_implementation, "eager" or "sdpa") and
    `device` ("cuda" or "cpu": which AdamW PyTorch picks) shape the eager walk only. `activation_bytes`:
    the recipe's unless given. `tune` (calc.finetune.Tuning) fine-tunes: frozen parameters, LoRA, QLoRA, another
    optimizer; anything but the default walks calc.finetune's step (deck walk, one device or plain dp)."""
    if activation_bytes is None:
        activation_bytes = RECIPES[recipe].activations
    sized = (shape, seq, micro_batch, recipe, recompute, activation_bytes)
    if walk == "eager":  # issue 19: the loop's fields (calc.loops); a pipeline's micro-batches (default: pp)
        loop = replace(loop, grad_accum=grad_accum or par.pp)
    w = walked(*sized, par, walk, grad_accum, attention, device, tune, loop)
    expanded = events(w.segs)
    counts = param_counts(shape)
    trainable = finetune.trainable_params(shape, tune)
    if walk == "eager" and not tune.default:  # the parameters the replay writes gradients for
        trainable = eager_step.trainable_params(shape, recipe, recompute, attention, tune)
    return {
        "config": step_config(*sized, par, walk, grad_accum, attention, device, tune, loop),
        "params": counts["total"],
        "trainable_params": trainable,
        "param_counts": counts,
        "device_params": _device_total(shape, par, walk, w.stage),
        "stage": w.stage,
        "in_flight": w.in_flight,
        "accumulating": w.accumulating,
        "devices": par.devices,
        "bytes": w.full_sizes,
        "activations_per_layer": w.per_layer,
        "static": expanded[len(w.segs[0].events) - 1]["total"],
        "peak": w.top,
        "peak_event": expanded[w.at]["label"],
        "peak_index": w.at,
        **({"engine": engine} if walk == "eager" and (engine := engine_name(par)) else {}),
        **({"rank_peaks": list(w.ranks)} if w.ranks else {}),
        **({"host": host(shape, recipe, par, w.stage, (grad_accum or par.pp) > 1)} if par.offload != "none" else {}),
        "events": expanded,
    }


NODE = 8  # devices a node: the processes whose offloaded state shares one host (DeepSpeed's estimators' default)


def host(shape: Shape, recipe: str, par: Parallel, stage: int, accumulating: bool) -> dict:
    """step's "host" under --offload: what the walked device's process keeps in the host's memory, by category
    (calc.walk.host_state; `accumulating`: more than one micro-batch a step), in all, and for a node of NODE
    processes (fewer where the job has fewer) each holding as much (at most: a pipeline's other stages hold
    less or more)."""
    n = device_params(shape, par, stage)
    held = host_state(n["total"], n["experts"], recipe, par, accumulating)
    processes, each = min(par.devices, NODE), sum(held.values())
    return {"bytes": held, "per_process": each, "processes_per_node": processes, "per_node": processes * each,
            "source": HOST_SOURCE}  # fmt: skip


def _device_total(shape: Shape, par: Parallel, walk: str, stage: int) -> int:
    """The parameters one device holds before ZeRO: under the eager walk's tensor parallelism the local model's
    (calc.engines.tensor, its embedding and head whole, or split by vocabulary under transformers' plan); under
    interleaved 1F1B its stages' (calc.engines.pipeline); else the deck's split (calc.parallel.device_params)."""
    if walk == "eager" and par.tp > 1:  # a pipeline's stage of the local model (calc.engines.pipeline)
        local = tensor.TensorParallel(par.tp, par.tp_plan).stored(shape)
        if par.pp == 1:
            return param_counts(local)["total"]
        shape, par = local, replace(par, tp=1)
    rank = pipeline.PipelineStage(par.pp, stage, par.pp_schedule, 1)
    if walk == "eager" and rank.looped:  # interleaved 1F1B: the rank's stages of rank.count
        return sum(device_params(shape, replace(par, pp=rank.count), s)["total"] for s in rank.stages)
    return device_params(shape, par, stage)["total"]


def run_step(run: Run) -> dict:
    """step() for one validated run (calc.inputs.parse_inputs' answer): the CLI's and the page's step."""
    return step(run.shape, run.seq, run.micro_batch, run.recipe, run.recompute, par=run.par, walk=run.walk,
                grad_accum=run.grad_accum, attention=run.attention, device=run.device, tune=run.tune, loop=run.loop)


def step_config(shape: Shape, seq: int, micro_batch: int, recipe: str, recompute: str, activation_bytes: int,
                par: Parallel, walk: str, grad_accum: int | None, attention: str, device: str,
                tune: finetune.Tuning, loop: loops.Loop) -> dict:  # fmt: skip
    """step's "config": the inputs it walked, with the fine-tuning and the loop where they are not the default."""
    config = {
        "shape": shape.as_dict(),
        "seq": seq,
        "micro_batch": micro_batch,
        "recipe": recipe,
        "recompute": recompute,
        "activation_bytes": activation_bytes,
        "parallel": asdict(par),
        "walk": walk,
        "grad_accum": grad_accum or par.pp,
        # the attention the walk used: the deck walk (and its fine-tuning) keeps the s x s scores unless
        # par.flash (calc.inputs.attention_fields), whatever `attention`, which the eager walk runs
        "attention": attention if walk == "eager" else "sdpa" if par.flash else "eager",
        "device": device,
    }
    if not tune.default:
        config["finetune"] = {**asdict(tune), "targets": list(tune.targets)}
    if walk == "eager" and (loop.name != "bare" or loop.adamw_impl or loop.loss):  # issue 19 (calc.loops)
        config["loop"] = {"name": loop.name, "adamw_impl": loop.impl(device), "loss": loop.loss_kind}
    return config


def eager_peak(
    shape: Shape,
    seq: int,
    micro_batch: int,
    recipe: str,
    recompute: str,
    attention: str = "sdpa",
    device: str = "cuda",
    tune: finetune.Tuning = finetune.DEFAULT,
    loop: loops.Loop | None = None,
) -> tuple[int, str]:
    """(peak bytes, the event that sets it) of the eager walk on one device, without expanding its events."""
    segs = eager.segments(shape, seq, micro_batch, recipe, recompute, None, attention, device, tune, loop)
    top, at = peak(segs)
    return top, label_at(segs, at)


def table(
    shape: Shape, seq: int = 4096, micro_batch: int = 1, par: Parallel = SINGLE, grad_accum: int | None = None
) -> list[dict]:
    """The deck's four recipes for one shape (per device)."""
    rows = []
    for recipe, recompute in TABLE_ROWS:  # step()'s bytes, peak and peak_event, its events not expanded
        w = deck_walk(shape, seq, micro_batch, recipe, recompute, RECIPES[recipe].activations, par, grad_accum)
        label = f"{RECIPES[recipe].label}, {'no' if recompute == 'none' else recompute} recomputation"
        rows.append(
            {
                "id": f"{recipe}-{recompute}",
                "label": label,
                "recipe": recipe,
                "recompute": recompute,
                "bytes": w.full_sizes,
                "peak": w.top,
                "peak_event": label_at(w.segs, w.at),
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
    grad_accum: int | None = None,
) -> list[int]:
    """Peak bytes per device for each sequence length (the same walks, without expanding their events)."""
    forms = sweep_forms(shape, recipe, recompute, par, grad_accum)
    p = RECIPES[recipe].activations
    if not seqs:  # no sizes to sweep over (part_columns takes at least one length)
        return []
    parts = swept_parts(shape, tuple(seqs), micro_batch, par)
    return peaks_over(forms, part_columns(parts, shape, seqs, micro_batch, recompute, p, par))


@lru_cache(maxsize=16)  # the page's sweep asks for the table's four rows again at every sequence and micro-batch
def sweep_forms(shape: Shape, recipe: str, recompute: str, par: Parallel, grad_accum: int | None) -> tuple:
    """The sums (calc.walk.peak_forms) whose largest is a sweep's peak at each sequence length: its walks'
    templates', which do not depend on the tokens in flight."""
    return peak_forms(*(template(shape, recipe, recompute, par, *walk) for walk in walks(par, grad_accum, shape)))


@lru_cache(maxsize=4)  # the page's sweep asks for the same sequence lengths once for each of the table's rows
def swept_parts(shape: Shape, seqs: tuple[int, ...], micro_batch: int, par: Parallel) -> tuple:
    """calc.walk.token_parts at each sequence length of a sweep, which every recipe and recomputation shares."""
    return tuple(token_parts(shape, s, micro_batch, par) for s in seqs)
