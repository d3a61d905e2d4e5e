"""The browser's entry point: JSON in, JSON out, never an exception."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Generator
from dataclasses import replace
from functools import lru_cache

from . import trainers
from .api import eager_peak, run_step, sweep, table
from .engines import pipeline
from .engines.pipeline import SCHEDULE_NAMES, layer_passes, stages_a_rank
from .fields import FIELD, page_unread
from .finetune import segments as finetune_segments
from .inputs import (
    BESIDE_FIELDS,
    DECK_SUGGESTED,
    MAX_BYTES,
    InputError,
    canonical_numbers,
    eager_problem,
    eager_tuning_problem,
    engine_problem,
    late_problem,
    parse_inputs,
    size_bound,
)
from .loops import BARE
from .optimizers import OPTIMIZERS
from .plan import fit_card_steps, fit_problem, plan_problem, plan_steps, run_to_end
from .recipes import RECIPES, TABLE_ROWS
from .run import Run
from .units import format_gb, format_gib, format_size, params_label
from .walk import peak

SWEEP_POINTS = 200


def _display(n: int) -> dict[str, str]:
    return {"gb": format_gb(n), "gib": format_gib(n), "text": format_size(n)}


def seq_grid(seq: int, points: int = SWEEP_POINTS) -> list[int]:
    """Sequence lengths from 1/8 to 2x the chosen one (and the chosen one), for the peak-versus-sequence chart."""
    lo, hi = max(1, seq // 8), seq * 2
    return sorted({seq} | {lo + (hi - lo) * i // (points - 1) for i in range(points)})


def eager_unavailable(inputs: Run) -> str | None:
    """Why these inputs have no eager figure beside the deck's (the eager walk cannot replay them), or None. Over
    several devices it is the busiest rank's of the engine the eager walk runs the layout on (calc.api.engine_name:
    DDP, FSDP2, the layers plan, torch's pipelining), where it does."""
    shape, tune, par = inputs.shape, inputs.tune, inputs.par
    problem = eager_problem(shape, inputs.recompute, par, inputs.grad_accum, inputs.attention, inputs.seq)
    problem = problem or (not tune.default and eager_tuning_problem(tune, shape))
    if not problem and inputs.walk == "deck" and par.devices > 1:  # the eager walk's engine for the layout
        problem = engine_problem(shape, par, inputs.recipe, inputs.device, tune, inputs.loop)
        passes = layer_passes(shape.layers, par.pp, inputs.grad_accum or par.pp)
        if not problem and (passes > PAGE_EAGER_LAYERS or par.dp * par.tp > BESIDE_RANKS):
            return (f"the eager figure beside the deck's walks at most {PAGE_EAGER_LAYERS:,} layers a stage (counted "
                    f"once a micro-batch) and {BESIDE_RANKS} data- and tensor-parallel ranks, at every change: the "
                    "CLI's --walk eager answers this layout")  # fmt: skip
    return _beside(problem[1]) if problem else None


BESIDE_RANKS = 64  # the figure beside the deck's walks each rank's share at every change: a bound on its time


def _beside(reason: str) -> str:
    """An eager refusal as said beside the deck walk's figure: without its pointer to the deck walk (", or the deck
    walk", "or the deck walk without --device")."""
    return DECK_SUGGESTED.sub("", re.sub(r",? or the deck walk without --device$", "", reason))


def eager_beside(inputs: Run, step: dict | None = None) -> dict:
    """The step as PyTorch's eager autograd allocates it (calc.eager), for the page to show beside the
    deck's accounting: {"available": true, "peak", "peak_event", "display", "family", "band", "attention" (the
    one it ran, which may not be the deck walk's: each walk has its default), ...}, or {"available": false,
    "reason"}. Under the eager walk it is `step` itself (run_step's answer, walked once): over several
    processes the busiest rank's, whose band is its engine's (engine_band)."""
    shape, tune = inputs.shape, inputs.tune
    reason = eager_unavailable(inputs)
    if reason:
        return {"available": False, "reason": reason}
    loop, beside = inputs.loop, inputs.walk == "deck" and inputs.par.devices > 1  # beside: the layout's ranks
    if beside:  # (or stages) under their engine
        try:
            step = run_step(replace(inputs, walk="eager"))
        except ValueError as e:  # calc.api's own checks, should one be missed above
            return {"available": False, "reason": _beside(str(e))}
    if step is not None and step["config"]["walk"] == "eager":
        top, event = step["peak"], step["peak_event"]
        loop = replace(loop, grad_accum=step["config"]["grad_accum"])  # a pipeline's micro-batches: pp by default
    else:
        top, event = eager_peak(shape, inputs.seq, inputs.micro_batch, inputs.recipe, inputs.recompute,
                                inputs.attention, inputs.device, tune, None if inputs.loop == BARE else inputs.loop)
    how = eager_how(tune, loop, inputs.device) + (f"; {engine_text(step)}" if beside else "")
    return {
        "available": True,
        "peak": top,
        "peak_event": event,
        "display": _display(top),
        "family": shape.family,
        "band": engine_band(step, tune) if step and "engine" in step else eager_band(shape, tune),
        "attention": inputs.attention,
        "how": how,
        # what the measured steps a band quotes must have run for it to speak for this one (hooks/deck.py)
        "setting": f"{inputs.recipe} {tune.optimizer} {loop.name}{' accum' if loop.grad_accum > 1 else ''}"
        + f" {loop.loss_kind}",  # the band says the device its steps ran on
    }


ENGINE_WORDS = {"ddp": "DDP", "fsdp2": "FSDP2's fully_shard", "tensor-parallel": "tensor parallelism's",
                "pipeline": "torch's pipelining"}


BESIDE_STAGES = {0: "DDP", 1: "DDP with ZeroRedundancyOptimizer", 2: "FSDP2 (reshard_after_forward=False)",
                 3: "FSDP2 (reshard_after_forward=True)"}
# DDP beside the schedules calc.engines.pipeline.STATIC_GRAPH names
STATIC_GRAPH = " (static_graph=True, which runs where torch's defaults fail)"


def engine_text(step: dict) -> str:
    """The engine of an eager step over several processes (step's "engine") and its ranks' peaks, in words (the
    CLI's summary and the page's): its peak is the busiest rank's (a pipeline's ranks are named as its stages,
    but under interleaved 1F1B, where a rank runs several: pipeline.stages_a_rank)."""
    par, name = step["config"]["parallel"], step["engine"]
    stages = stages_a_rank(par["pp_schedule"])  # several a rank: interleaved 1F1B
    sp = " with sequence parallelism" if par["sequence_parallel"] else ""  # of the layers plan, wherever it runs
    words = ENGINE_WORDS[name] + {"ddp": " with ZeroRedundancyOptimizer" if par["zero"] == 1 else "",
                                  "fsdp2": f" with reshard_after_forward={par['zero'] == 3}" + (
                                      f" over {par['tp']} tensor-parallel ranks of the layers plan{sp}"
                                      if par["tp"] > 1 else ""),
                                  "pipeline": f" under {SCHEDULE_NAMES[par['pp_schedule']]}"
                                  + (f" with {stages} stages a rank" if stages > 1 else "")
                                  + (f", {BESIDE_STAGES.get(par['zero'])}"
                                     + (STATIC_GRAPH if par["pp_schedule"] in pipeline.STATIC_GRAPH and par["zero"] < 2
                                        else "")
                                     + f" over {par['dp']} processes a stage" if par["dp"] > 1 else "")
                                  + (f", the layers plan over {par['tp']} ranks a stage{sp}" if par["tp"] > 1 else ""),
                                  "tensor-parallel": f" {par['tp_plan']} plan{sp}",
                                  }.get(name, "")  # fmt: skip
    alone = name == "pipeline" and stages == 1 and par["dp"] * par["tp"] == 1  # a rank a stage: named as its stage
    ranks, rank = step.get("rank_peaks", []), "stage" if alone else "rank"
    if not ranks:
        return f"the busiest {rank} of {words}"
    busiest = ranks.index(max(ranks))
    low, high = format_gb(min(ranks)), format_gb(max(ranks))
    spread = f"{rank}s {low} to {high} GB" if low != high else f"every {rank} {high} GB" + (
        f", within {max(ranks) - min(ranks):,} bytes" if min(ranks) < max(ranks) else "")
    return f"the busiest of {len(ranks):,} {rank}s of {words} ({rank} {busiest}; {spread})"


HOST_WORDS = {"master": "the fp32 weights", "optimizer": "Adam's moments", "gradients": "the fp32 gradients",
              "buffer": "DeepSpeed's buffer in the model's dtype", "accumulated": "the gradients accumulated",
              "weights": "the offloaded weights"}  # step's "host" bytes, as the summaries name them


def host_text(step: dict) -> str:
    """What an offloading step keeps in the host's memory (step's "host", calc.api.host), in words: the CLI's
    summary and the page's say the same."""
    h = step["host"]
    parts = ", ".join(f"{HOST_WORDS[c]} {format_gb(n)}" for c, n in h["bytes"].items())
    node = h["processes_per_node"]
    text = (f"the host's memory keeps {format_gb(h['per_process'])} GB ({format_gib(h['per_process'])} GiB) a process "
            f"({parts} GB of its partition)")  # fmt: skip
    node_text = f"{format_gb(h['per_node'])} GB for a node of {node} processes holding as much"
    return text if node == 1 else f"{text}, {node_text}"


def beside_refusal(field: str, reason: str) -> tuple[str, str]:
    """(field, message) for a field only the eager figure beside the deck's reads, given where these inputs
    have no such figure (reason: eager_unavailable's): the CLI's and the page's."""
    return field, f"applies to the eager walk's figure beside the deck's, which these inputs lack: {reason}"


def beside_problem(inputs: Run, raw: dict) -> tuple[str, str] | None:
    """The page's refusal of a field only the eager figure beside the deck's reads (the loop, AdamW's
    implementation, the loss, the device...) set to other than its default where no eager figure is shown, as
    the CLI refuses it given (calc.cli.eager_figure): the page sends each field's default (loop "bare", device
    "cuda") whatever the step, so a default is no choice made; or None."""
    field = inputs.walk == "deck" and next((f for f in BESIDE_FIELDS if not _is_default(f, raw.get(f))), None)
    reason = field and eager_unavailable(inputs)  # the checks alone: the figure itself is compute's
    return beside_refusal(field, reason) if reason else None


def _is_default(field: str, value: object) -> bool:
    """Whether a raw value is the field's default as calc reads it (a choice trimmed, in lower case), or none."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return True
    default = FIELD[field].default
    return default is not None and str(value).strip().lower() == str(default).lower()


LOOP_WORDS = {"trainer": "transformers' Trainer", "sft": "TRL's SFTTrainer"}


def eager_how(tune, loop, device: str) -> str:
    """The eager figure's step in words: its optimizer (AdamW's implementation as the device or the loop picks
    it), the loop around it and a loss other than the loop's own."""
    words = OPTIMIZERS[tune.optimizer].label
    if tune.optimizer == "adamw":
        words += f" ({loop.impl(device)}) as PyTorch runs it"
    if loop.name in LOOP_WORDS:
        words += f" in {LOOP_WORDS[loop.name]}"
    if loop.grad_accum > 1:
        words += f", {loop.grad_accum} micro-batches a step"
    if loop.loss:
        words += f", {loop.loss} loss"
    return f"{words} on a {'GPU' if device == 'cuda' else 'CPU'}"


def eager_band(shape, tune) -> str:
    """Which measured steps speak for this one (the keys of hooks/deck.py's eager_bands): its fine-tuning
    (peft's LoRA and frozen layers, or QLoRA), else Mixtral's or Qwen2-MoE's mixture of experts (Llama's code
    with a sparse block), else its family's code."""
    if tune.mode in ("lora", "freeze"):
        return "lora"
    if tune.mode == "qlora":
        return "qlora"
    return "moe" if shape.moe_layers and shape.family == "llama" else shape.family


def deck_layout(inputs: Run):
    """The layout the recipes' table, its bars and the sequence chart walk (the deck's accounting, calc.api.table
    and sweep), with the attention the page's form shows: the deck walk's own (its flash), and under the eager
    walk the eager walk's attention, so that ?walk=eager&attention=sdpa draws the CLI's --attention sdpa --table
    (issue 33: it drew eager attention's scores whatever the field said)."""
    if inputs.walk == "deck":
        return inputs.par
    return replace(inputs.par, flash=inputs.attention == "sdpa")


def engine_band(step: dict, tune) -> str:
    """Which measured steps speak for an eager step over several processes (results §14): its engine as
    scripts/training/measure_engines.py names the ones it ran (ddp, ddp-zero1, fsdp2, fsdp2-zero2, tp, tp-hf, tp-sp,
    tp-eager: the layers plan under eager attention; FSDP2's over tensor parallelism, fsdp2-tp and fsdp2-zero2-tp,
    and fsdp2-tp-sp with sequence parallelism; FSDP2's with peft's LoRA; a pipeline's schedule, pp-1f1b, with -ddp
    -fsdp2 or -tp where DDP, FSDP2 or the layers plan runs beside its stages, -ddp-zero1 where DDP does with
    ZeroRedundancyOptimizer, -fsdp2-zero3 where FSDP2 does resharding after forward, -fsdp2-tp where FSDP2 over the
    layers plan does, -tp-sp where the layers plan does with its sequence parallelism)."""
    par, name = step["config"]["parallel"], step["engine"]
    two = ("-tp" + "-sp" * par["sequence_parallel"]) if par["tp"] > 1 else ""  # FSDP2 x TP
    band = {"ddp": "ddp-zero1" if par["zero"] == 1 else "ddp",
            "fsdp2": ("fsdp2-zero2" if par["zero"] == 2 else "fsdp2") + two,
            "tensor-parallel": "tp-hf" if par["tp_plan"] == "transformers" else
                               "tp-sp" if par["sequence_parallel"] else
                               "tp-eager" if step["config"]["attention"] == "eager" else "tp",
            "pipeline": f"pp-{par['pp_schedule']}" + ("-fsdp2" if par["zero"] > 1 else "-ddp" if par["dp"] > 1 else
                                                      "") + ("-tp" if par["tp"] > 1 else "")
                        + {1: "-zero1", 3: "-zero3"}.get(par["zero"], "") + ("-sp" if par["sequence_parallel"] else "")
            }[name]  # fmt: skip
    return band if tune.mode == "full" else f"{band}-{tune.mode}"  # fsdp2-lora measured; ddp-freeze... not


PAGE_EAGER_LAYERS = 256  # the eager walk's event list (some 70 kB a layer in JSON) on the page: at most this deep


def compute(inputs: Run, want_sweep: bool = True, want_plan: bool = False, want_fit: bool = False) -> dict:
    """Everything the page draws for one set of validated inputs. With fine-tuning inputs (finetune, optimizer,
    lora-rank, lora-targets, freeze-layers, paged-optimizer) `step` is the fine-tuning step, `trainable_params`
    its trainable parameters and the sweep gains a "finetune" row; `fit` lists what fits one card."""
    shape, seq, b, par = inputs.shape, inputs.seq, inputs.micro_batch, inputs.par
    if inputs.walk == "eager" and shape.layers > PAGE_EAGER_LAYERS:
        raise InputError("layers", f"the page walks the eager step event by event for at most {PAGE_EAGER_LAYERS:,} "
                         "layers (the list would not fit the browser): choose the deck's accounting under --walk, "
                         "or run the CLI's --walk eager")  # fmt: skip
    passes = layer_passes(shape.layers, par.pp, inputs.grad_accum or par.pp)
    if inputs.walk == "eager" and par.pp > 1 and passes > PAGE_EAGER_LAYERS:
        raise InputError("grad-accum", f"the page walks a pipeline stage's step event by event for at most "
                         f"{PAGE_EAGER_LAYERS:,} layers, counted once a micro-batch (here {passes:,}): fewer "
                         "micro-batches or more stages, the deck's accounting under --walk, or the CLI's --walk "
                         "eager")  # fmt: skip
    rows = table(shape, seq, b, deck_layout(inputs), inputs.grad_accum)
    for row in rows:
        row["display"] = {part: _display(v) for part, v in {**row["bytes"], "peak": row["peak"]}.items()}
    result = {
        "ok": True,
        "step": run_step(inputs),
        "table": rows,
        "capacity": inputs.capacity,
        "global_batch": inputs.global_batch,
    }
    result["peak_display"] = _display(result["step"]["peak"])
    result["fits"] = result["step"]["peak"] <= inputs.capacity
    result["trainable_params"] = result["step"]["trainable_params"]
    result["eager"] = eager_beside(inputs, result["step"])
    if "engine" in result["step"]:
        result["engine_text"] = engine_text(result["step"])
    if "host" in result["step"]:  # --offload: the host's figure beside the device's
        result["host_text"] = host_text(result["step"])
        result["table_refused"] = TABLE_UNOFFLOADED  # the CLI refuses --table beside --offload
    result["unread"] = page_unread(shape)  # the form hides these fields (calc.fields.page_unread)
    if inputs.hf_config:
        result["hf_config"] = inputs.hf_config  # the config in short form, for the address
        counts = result["step"]["param_counts"]
        result["params_label"] = params_label(counts["total"], counts["active"])  # as the presets are listed
    result.update(planned(inputs, want_plan, want_fit))
    if want_sweep:
        result["sweep"] = sweep_for(inputs)
    return result


def planned(inputs: Run, want_plan: bool, want_fit: bool) -> dict:
    """planned_steps' answer, worked out at once."""
    return run_to_end(planned_steps(inputs, want_plan, want_fit))


TABLE_UNOFFLOADED = ("the table as CSV is the CLI's --table, which lays out devices without offload to the host "
                     "(the rows on show have the device's bytes only): choose none to export it")


def offload_unplanned(par) -> tuple[str, str] | None:
    """The planner's and the fit list's refusal of an offloading step, as the CLI refuses --offload beside --plan
    and --fit-card (calc.fields: they lay out devices without it), or None."""
    if par.offload == "none":
        return None
    return "offload", ("the planner and the fit list lay out devices without offload to the host: choose none to "
                       "see them")  # fmt: skip


def planned_steps(inputs: Run, want_plan: bool, want_fit: bool) -> Generator[None, None, dict]:
    """The planner's layouts ("plan", or "plan_refused" with no rows) and the fit list ("fit", or "fit_refused"
    with no rows), each where asked:
    a generator of calc.plan's slices that returns them."""
    shape, seq, par = inputs.shape, inputs.seq, inputs.par
    result = {}
    problem = want_plan and (plan_problem(inputs.walk, inputs.tune) or offload_unplanned(par))
    if problem:  # the CLI's --plan refuses these inputs: the planner says why, with no rows
        result["plan"] = []
        result["plan_refused"] = {"field": problem[0], "message": problem[1]}
    elif want_plan:
        result["plan"] = yield from plan_steps(
            shape, seq, inputs.global_batch, inputs.capacity, inputs.recipe, par.sequence_parallel, par.flash
        )
        for row in result["plan"]:
            row["display"] = {"peak": format_gb(row["peak"]), "extra_compute": f"{row['extra_compute']:.1%}"}
    tune = inputs.tune
    problem = want_fit and (fit_problem(shape, inputs.walk) or offload_unplanned(par))
    if problem:  # the CLI's --fit-card refuses this model: the fit list says why, with no rows
        result["fit"] = []
        result["fit_refused"] = {"field": problem[0], "message": problem[1]}
    elif want_fit:
        capacity, recipe = inputs.capacity, inputs.recipe
        result["fit"] = yield from fit_card_steps(shape, seq, capacity, recipe, tune.optimizer, tune.paged,
                                                  par.flash, adapter_dtype=tune.adapter_dtype)
        for row in result["fit"]:
            row["display"] = {"peak": format_gb(row["peak"]), "extra_compute": f"{row['extra_compute']:.1%}"}
    return result


def plan_only(inputs: Run, want_plan: bool, want_fit: bool) -> Generator[None, None, dict]:
    """What the page's planner draws, without the step's numbers (the change before it drew them): the
    layouts, the fit list, and the run they are for (its shape and sequence, the capacity, the global batch).
    A generator of the planner's slices (planned_steps) that returns it."""
    run = {"shape": inputs.shape.as_dict(), "seq": inputs.seq}
    ask = {"capacity": inputs.capacity, "global_batch": inputs.global_batch}
    return {"ok": True, "config": run, **ask, **(yield from planned_steps(inputs, want_plan, want_fit))}


def sweep_for(inputs: Run) -> dict:
    """Peak against sequence length for the table's recipes (and a fine-tuning step), for the chart."""
    shape, seq, b, par = inputs.shape, inputs.seq, inputs.micro_batch, deck_layout(inputs)
    seqs = seq_grid(seq)
    if shape.positions == "learned":
        seqs = [s for s in seqs if s <= shape.context]
    # Up to 2x the chosen sequence, where every byte count stays exact in a browser (< 2^53). The bound grows
    # with the sequence: when the longest one is within it, every one is.
    if seqs and size_bound(shape, seqs[-1], b, par) > MAX_BYTES:
        seqs = [s for s in seqs if s <= seq or size_bound(shape, s, b, par) <= MAX_BYTES]
    out = {
        "seq": seqs,
        "peaks": {
            f"{recipe}-{recompute}": sweep(shape, seqs, b, recipe, recompute, par, inputs.grad_accum)
            for recipe, recompute in TABLE_ROWS
        },
    }
    tune = inputs.tune
    # the deck's accounting of it; none for a step the deck walk refuses (the embedding under frozen blocks, any
    # fine-tuning of a mixture of experts: calc.inputs.DECK_MOE)
    if not tune.default and not tune.embedding_under_frozen and not shape.moe_layers:
        recipe, recompute = inputs.recipe, inputs.recompute
        p = RECIPES[recipe].activations
        out["peaks"]["finetune"] = [
            peak(finetune_segments(shape, s, b, recipe, recompute, p, tune, par.flash))[0] for s in seqs
        ]
    return out


def accepted(raw: dict, planning: bool = False) -> Run:
    """The inputs of a request read and checked (calc.inputs.parse_inputs, and beside_problem): a Run, or
    InputError; `planning`: for the planner's rows alone, as the CLI's --plan checks them. The sweep's request
    repeats the numbers' inputs (the page asks for both at each change), so the last inputs accepted are not
    read again (a Run is frozen)."""
    return _accepted(json.dumps(raw), planning)


@lru_cache(maxsize=1)
def _accepted(sent: str, planning: bool) -> Run:
    raw = json.loads(sent)
    inputs = parse_inputs(raw, eager_beside=True)  # the loop's fields change the eager figure beside
    problem = beside_problem(inputs, raw) or late_problem(inputs, planning)  # the CLI's order (calc.cli.validated)
    if problem:
        raise InputError(*problem)
    return inputs


def _plans(raw: dict) -> bool:
    """Whether the planner's own question accepts these inputs (accepted with `planning`)."""
    try:
        accepted(raw, planning=True)
    except Exception:
        return False
    return True


def handle(request: str) -> str:
    """answer_steps' answer, worked out at once."""
    return run_to_end(answer_steps(request))


class Sliced:
    """handle(request)'s answer, worked out a slice at a time: the page's worker runs a slice of a plan, answers a
    reader's change that came meanwhile, then goes on (issue 21). The answer is handle's, byte for byte."""

    def __init__(self, request: str):
        self._steps = answer_steps(request)

    def step(self, seconds: float) -> str | None:
        """Work for about `seconds` (at least one slice: one layout, one fine-tuning); the answer once done."""
        end = time.perf_counter() + seconds
        while True:
            try:
                next(self._steps)
            except StopIteration as done:
                return done.value
            if time.perf_counter() >= end:
                return None


TRAINER_KEEPS = ("walk", "device", "hf-config")  # the page's fields a trainer config is read beside, as flags


def trainer_answer(texts: object, raw: dict) -> dict:
    """The page's trainer box: the trainer configs `texts` (one text, or a list of them: an axolotl YAML and the
    DeepSpeed JSON it names) read as the CLI's --trainer-config reads them (calc.trainers.checked), beside the
    page's walk, device and config.json in `raw` as if given by flag; {"ok": true, "trainer": {"fields": the
    fields to set (the rest at their defaults, as the CLI leaves them), "reading": what each key gave}}."""
    texts = [texts] if isinstance(texts, str) else texts
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise InputError("trainer-config", "the request must give the trainer config's text")
    if not any(t.strip() for t in texts):
        raise InputError("trainer-config", "empty: paste a trainer's config")
    flags = {k: raw[k] for k in TRAINER_KEEPS if raw.get(k) not in (None, "")}
    given, reading, (inputs,) = trainers.checked(flags, texts, lambda given: (accepted(given),))
    if inputs.hf_config:  # the config in short form, as the address holds it
        given["hf-config"] = inputs.hf_config
    return {"ok": True, "trainer": {"fields": given, "reading": reading.as_dict()}}


def answer_steps(request: str) -> Generator[None, None, str]:
    """{"inputs": {field: value}, "sweep": bool, "plan": bool, "fit": bool, "numbers": bool} -> {"ok": true, ...}
    or {"ok": false, "field", "message"}. With "numbers": false (and "sweep": true) the answer is
    {"ok": true, "sweep": ...} alone: the page asks for the numbers first, then for their sweep. With
    "numbers": false, "sweep": false and "plan" or "fit", it is plan_only's: the planner's rows alone. With
    "trainer" (a trainer config's text), it is trainer_answer's: the fields the config gives. A refusal of the
    step whose inputs the planner's own question accepts (the sequence-parallel switch at one tensor-parallel
    rank: the planner reads it for the layouts it picks) says so with "plans": true, and the page still plans. A
    generator that returns the answer: it yields between the planner's slices (Sliced runs them)."""
    try:
        payload = json.loads(request)
        if not isinstance(payload, dict) or not isinstance(payload.get("inputs", {}), dict):
            return json.dumps({"ok": False, "field": None, "message": "the request must be a JSON object of inputs"})
        raw = payload.get("inputs", {})
        if "trainer" in payload:
            return json.dumps(trainer_answer(payload["trainer"], raw))
        rows_only = payload.get("numbers", True) is False and not payload.get("sweep", True)  # plan_only's
        planning = rows_only and payload.get("plan", False)
        try:
            inputs = accepted(raw, planning)
        except InputError as e:
            if planning or not _plans(raw):
                raise
            return json.dumps({"ok": False, "field": e.field, "message": e.message, "plans": True})
        if payload.get("numbers", True) is False and payload.get("sweep", True):
            return json.dumps({"ok": True, "sweep": sweep_for(inputs)})
        if rows_only and (payload.get("plan", False) or payload.get("fit", False)):
            return json.dumps((yield from plan_only(inputs, payload.get("plan", False), payload.get("fit", False))))
        result = compute(inputs, payload.get("sweep", True), payload.get("plan", False), payload.get("fit", False))
        if canonical_numbers(raw):  # the numbers typed in another form ("1,000"), as the address writes them
            result["canonical"] = canonical_numbers(raw)
        return json.dumps(result)
    except InputError as e:
        return json.dumps({"ok": False, "field": e.field, "message": e.message})
    except Exception as e:  # the page must keep working whatever arrives
        return json.dumps({"ok": False, "field": None, "message": f"{type(e).__name__}: {e}"})
