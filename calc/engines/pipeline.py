"""One rank of torch's pipeline parallelism (torch.distributed.pipelining): one stage under GPipe or 1F1B, two
under interleaved 1F1B.

What people run on a transformers model: the model cut by hand into `pp` stages of consecutive decoder layers
(calc.parallel.stage_layers: the earlier stages take any remainder), the first with the embedding, the last with the
final norm and the head, each stage's module the model's own forward over its layers (torchtitan's way: what a stage
lacks is None; its hidden state rebound layer by layer, `h = layer(h)`, so the first stage lets go of the embeddings
once its first layer returns, where transformers' whole model keeps them to the end), wrapped in
`PipelineStage(module, stage, pp, device)` and stepped by `ScheduleGPipe` or `Schedule1F1B` with transformers'
ForCausalLMLoss as `loss_fn`, the step's micro-batches as `n_microbatches`, torch's defaults otherwise
(return_outputs=True, scale_grads=True), and AdamW over the stage's parameters. What a stage holds, from the installed
torch 2.13's source (distributed/pipelining/stage.py, schedules.py) and traced CPU steps:

- A stage after the first receives each micro-batch's activations into a buffer of its own, one a micro-batch,
  made at the first step and kept (_setup_forward_recv_info). Its forward takes the buffer as a leaf requiring
  grad; its backward writes that leaf's gradient, which the stage takes (val.grad = None) and sends to the stage
  before. The gradient lives until the send is let go: GPipe waits on every backward's send once its backward
  loop ends, 1F1B lets each go when it sends the next.
- A stage before the last receives each micro-batch's output gradient into a buffer of its own, kept too, and
  keeps each micro-batch's output (fwd_cache) from its forward to its backward.
- The last stage computes each micro-batch's loss as its forward ends and keeps its output, the logits, in
  output_chunks until the next step begins (clear_runtime_states), to return them merged at the step's end (a
  copy of every micro-batch's logits, dropped at once by the loop here).
- GPipe runs every forward, then every backward. 1F1B runs `pp - stage` forwards (warmup_chunks), then one
  backward and one forward in turn, then the backwards left.
- Interleaved 1F1B (ScheduleInterleaved1F1B, a _PipelineScheduleRuntime) cuts the model into LOCAL_STAGES x pp
  stages, rank r running stages r, r + pp, ... (each its own PipelineStage, with its own buffers), in the order
  torch computes for the rank (_interleaved). The runtime keeps every send's work in one list (send_ops) and
  waits on them only as the step ends: every output and input gradient a rank sent lives until then. One AdamW
  steps both stages' parameters (the harness's; torchtitan keeps one a stage, stepped one after the other).
- Under autocast the stage module's forward is the autocast region (the stage's own `torch.autocast`, as the
  model's forward is in a one-device loop); the loss runs outside it, on the logits the head made in 16 bits.
  Not modelled: an autocast region around the schedule's whole step, whose cache keeps each weight's cast from
  the first micro-batch's forward to the step's end and routes every later micro-batch's weight gradient through
  that one cast's node, which autograd runs after every newer one.

Beside the stages, as torchtitan composes them on a (pp, dp) or (pp, tp) mesh (the pipeline's dimension
outermost: rank stage x dp + d, or stage x tp + t):

- DDP (`dp`): each stage's module wrapped in DistributedDataParallel over its data-parallel group before its
  PipelineStage. The stage runs every forward, and every backward but the step's last, under no_sync
  (forward_maybe_with_nosync, backward_maybe_with_nosync), so gradients accumulate in .grad as without DDP;
  the last backward's hooks copy them into DDP's buckets and all-reduce those. What a rank adds is its
  stage's buckets (calc.engines.ddp), a second copy of the stage's gradients, held for the whole step.
  With ZeroRedundancyOptimizer over the same group (`zero1`, ZeRO 1) the parameters of the rank's stages (one
  optimizer over both under interleaved 1F1B, in the stages' order) are partitioned among its data-parallel ranks
  as calc.engines.ddp.partition cuts them, each rank's AdamW stepping its share (its moments and its step's
  temporaries) and broadcasting it in place; each stage's buckets stay whole. Under interleaved 1F1B and GPipe
  a rank's DDP modules must be made with static_graph=True: with torch's defaults the second step fails, the
  reducer's bucket rebuild counting each parameter twice (reducer.cpp's INTERNAL ASSERT, in torch 2.13 on gloo;
  1F1B runs with them). It holds the same buckets.
- FSDP2 (`dp`, `shard`): fully_shard on each of the stage's layers and on its module over its data-parallel
  group. With reshard_after_forward=False (ZeRO 2, torchtitan's default beside a pipeline) every group is
  gathered in the first micro-batch's forward and stays whole for the step. With True (`reshard`, ZeRO 3,
  torch's default and torchtitan's "always") every forward reshards each group as it returns; a backward finds
  them sharded after a forward and gathers them again, and leaves them whole (the stage's backwards run under
  set_reshard_after_backward(False)), so a forward after a backward gathers nothing and a backward after a
  backward nothing either (calc.engines.fsdp.in_stage). Either way the gradients accumulate unsharded, and the
  stage reduce-scatters them group by group once its backwards end (perform_reduce_grad,
  calc.engines.fsdp.staged). 1F1B and GPipe only: interleaved 1F1B's runtime reduces each stage at its own
  point of the order, not modelled.
- The layers plan (`tp`): every decoder layer's linears split over the stage's tensor-parallel group as one
  device's are (calc.engines.tensor); the embedding, the final norm and the head stay whole, so the activations
  a stage sends and receives are whole too. With its sequence parallelism (`sequence`, applied to the model
  before it is cut, as torchtitan does): the model's first layer cuts its input to the rank's s / tp positions
  (on the first stage only), every layer's output is the rank's positions, so a stage sends and receives s / tp
  positions (its receive buffers that size), and the last stage gathers the final norm's output for the head.

Each micro-batch through the stage is calc.eager_step's replay of the stage (Forward.stage_step); the first
backward writes each parameter's .grad, the later ones add into it (gradient accumulation's replay). Not
counted: gloo's scratch memory outside PyTorch's allocator, and scalars (each micro-batch's loss).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ..parallel import Parallel, split
from ..walk import Event, Segment
from .tensor import PLANS

SCHEDULES = ("1f1b", "gpipe", "interleaved-1f1b")  # --pp-schedule (the default first)
SCHEDULE_NAMES = {"1f1b": "Schedule1F1B", "gpipe": "ScheduleGPipe", "interleaved-1f1b": "ScheduleInterleaved1F1B"}
LOCAL_STAGES = 2  # the stages a rank runs under interleaved 1F1B (torchtitan's default for a looped schedule)
STATIC_GRAPH = ("gpipe", "interleaved-1f1b")  # the schedules beside which DDP runs only with static_graph=True
# (torch 2.13's reducer fails at the second step with its defaults; the harness makes DDP so, the summary says so)
FAMILIES = ("llama", "qwen3")  # the families whose stages have been measured
SOURCE = "torch 2.13: distributed/pipelining/stage.py, schedules.py"


def stages_a_rank(schedule: str) -> int:
    """The stages one rank runs under `schedule`: LOCAL_STAGES under interleaved 1F1B (a looped schedule), else 1."""
    return LOCAL_STAGES if schedule == "interleaved-1f1b" else 1


class Part(NamedTuple):
    """One stage's share of a rank's step: a micro-batch's `forward`, its `backward` (the first backward's, then
    the later ones'), its output (`output` bytes, stages before the last) and input gradient (`sent` bytes,
    stages after the first) sent on, and `after`: what a micro-batch's graph holds until its backward returns."""

    forward: list[Segment]
    backward: tuple[list[Segment], list[Segment]]
    output: int
    sent: int
    after: list[Event]
    gather: tuple[Event, ...] = ()  # FSDP2 beside the stage: before its first micro-batch
    reduce: tuple[Event, ...] = ()  # and once its backwards end (perform_reduce_grad)
    whole: tuple[list[Segment], list[Segment]] | None = None  # FSDP2 resharding after forward: a forward and a
    # later backward run where the stage's last op was a backward, its groups whole (calc.engines.fsdp.in_stage);
    # `forward` and `backward` are then the runs that gather them


@dataclass(frozen=True)
class PipelineStage:
    """Rank `stage` of `pp`, stepping `micro_batches` micro-batches a step under `schedule`: one stage of `pp`,
    or under interleaved 1F1B LOCAL_STAGES of `pp` x LOCAL_STAGES (the rank's `stages`: stage, stage + pp, ...)."""

    pp: int
    stage: int
    schedule: str
    micro_batches: int
    dp: int = 1  # DDP over each stage's module, this many processes a stage (calc.engines.ddp)
    tp: int = 1  # the layers plan over each stage's layers, this many processes a stage (calc.engines.tensor)
    shard: bool = False  # FSDP2 over the dp processes instead of DDP (calc.engines.fsdp.staged)
    dp_rank: int = 0  # which of them: FSDP2's rows of a parameter may differ by rank, ZeRO-1's share
    zero1: bool = False  # ZeroRedundancyOptimizer beside DDP: the rank's share of the stage's AdamW (calc.engines.ddp)
    sequence: bool = False  # the layers plan's sequence parallelism: a stage sends and receives s / tp positions
    reshard: bool = False  # FSDP2's reshard_after_forward (shard): True (ZeRO 3) or False (ZeRO 2)

    @property
    def count(self) -> int:
        """The pipeline's stages: pp, or pp x LOCAL_STAGES under interleaved 1F1B."""
        return self.pp * stages_a_rank(self.schedule)

    @property
    def looped(self) -> bool:
        """Whether the rank runs several stages (interleaved 1F1B)."""
        return self.count > self.pp

    @property
    def stages(self) -> range:
        """The stages this rank runs (0 first), in order."""
        return range(self.stage, self.count, self.pp)

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.pp - 1

    @property
    def in_flight(self) -> int:
        """The most micro-batches the rank holds between their forward and backward: every one under GPipe,
        pp - stage under 1F1B (its warmup_chunks); under interleaved 1F1B, summed over its stages (a micro-batch
        through two of them counted twice)."""
        if self.schedule == "gpipe":
            return self.micro_batches
        if self.schedule == "1f1b":
            return min(self.micro_batches, self.pp - self.stage)
        held, most = 0, 0
        for _, kind, _ in self.order():
            held += 1 if kind == "F" else -1
            most = max(most, held)
        return most

    @property
    def accumulating(self) -> bool:
        """Whether the rank runs a forward after its first backward: a micro-batch that starts with gradients of
        the step already resident, which its backward adds into."""
        order = [kind for _, kind, _ in self.order()]
        return "F" in order[order.index("B") :]

    def order(self) -> list[tuple[int, str, int]]:
        """The rank's forwards ("F") and backwards ("B") as (stage, kind, micro-batch, 0 first), as the schedule
        runs them (ScheduleGPipe._step_microbatches, Schedule1F1B._step_microbatches, interleaved: _interleaved)."""
        m, s = self.micro_batches, self.stage
        if self.schedule == "interleaved-1f1b":
            return _interleaved(self.pp, s, m)
        if self.schedule == "gpipe":
            return [(s, "F", i) for i in range(m)] + [(s, "B", i) for i in range(m)]
        if self.schedule != "1f1b":
            raise ValueError(f"the pipeline's schedule is one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        warm = self.in_flight
        out = [(s, "F", i) for i in range(warm)]
        for i in range(m - warm):
            out += [(s, "B", i), (s, "F", warm + i)]
        return out + [(s, "B", i) for i in range(m - warm, m)]

    def buffers(self, stage: int, activations: int, logits: int) -> list[Event]:
        """What `stage` keeps from step to step beside its parameters: the receive buffers, each micro-batch's
        `activations` bytes, and on the last stage the logits of the step before (`logits` bytes each)."""
        m, out, at = self.micro_batches, [], f" (stage {stage})" if self.looped else ""
        if stage:
            out.append(Event("start", f"received activations: {m} buffers, one a micro-batch{at}", "activations",
                             m * activations, f"{SOURCE}: _setup_forward_recv_info"))  # fmt: skip
        if stage < self.count - 1:
            out.append(Event("start", f"received output gradients: {m} buffers, one a micro-batch{at}", "activations",
                             m * activations, f"{SOURCE}: _setup_backward_recv_info"))  # fmt: skip
        else:
            out.append(Event("start", f"the step before's logits: {m} micro-batches (output_chunks)", "logits",
                             m * logits, f"{SOURCE}: output_chunks, return_outputs=True"))  # fmt: skip
        return out

    def step(self, parts: dict[int, Part], logits: int) -> list[Segment]:
        """The schedule's micro-batches through the rank's stages (`parts`, by stage), labelled with each. A
        stage's output and its input gradient are let go as the schedule lets go of their sends (lets_go). On the
        last stage the step before's logits go first and the merged output is made and dropped last (`logits`
        bytes a micro-batch)."""
        m, segs, last = self.micro_batches, [], self.count - 1 in parts
        if last:
            segs.append(Segment((Event("forward", "free the step before's logits (clear_runtime_states)", "logits",
                                       -m * logits, SOURCE),)))  # fmt: skip
        frees: dict[tuple[int, int | None], list[Event]] = {}  # (stage, after the backward of; None: step's end)
        for s, part in parts.items():
            for what, nbytes in (("output", part.output), ("input gradient sent", part.sent)):
                for i, k in enumerate(self.lets_go(what) if nbytes else ()):
                    frees.setdefault((s, k), []).append(Event("backward", f"free the stage's {what} ({self._of(s, i)})",
                                                               "activations", -nbytes, f"{SOURCE}: its send let go"))
        done: dict[int, int] = {}  # backwards run, by stage
        after_b: set[int] = set()  # the stages whose last op was a backward (FSDP2's groups left whole)
        for s, kind, i in self.order():
            part, tag = parts[s], f" ({self._of(s, i)})"
            whole = part.whole if s in after_b else None
            (after_b.add if kind == "B" else after_b.discard)(s)
            if kind == "F":
                segs += [Segment(part.gather)] if part.gather and not i else []
                segs += _labelled(whole[0] if whole else part.forward, tag)
                continue
            segs += _labelled(part.backward[0] if not done.get(s) else whole[1] if whole else part.backward[1], tag)
            done[s] = done.get(s, 0) + 1
            tail = [e._replace(label=e.label + tag) for e in part.after] + frees.get((s, i), [])
            if tail:
                segs.append(Segment(tuple(tail)))
        if ends := [e for s in parts for e in frees.get((s, None), [])]:
            segs.append(Segment(tuple(ends)))
        segs += [Segment(part.reduce) for part in parts.values() if part.reduce]  # after the last send's wait
        if last:
            segs.append(Segment((
                Event("optimizer", f"the step's output: {m} micro-batches' logits merged (torch.cat)", "logits",
                      m * logits, f"{SOURCE}: _merge_outputs"),
                Event("optimizer", "free the merged output (the loop drops it)", "logits", -m * logits, SOURCE))))
        return segs

    def lets_go(self, what: str) -> list[int | None]:
        """For each micro-batch, the backward (by micro-batch; None: the step's end) after which the stage lets
        go of its "output" (fwd_cache pops it at its backward, but a send's work or op may still hold it) or its
        "input gradient sent". GPipe keeps every send's work until its backward loop ends; interleaved 1F1B
        (_PipelineScheduleRuntime: send_ops) every one until the step's end. 1F1B lets a gradient's send go as
        it sends the next (bwd_sends), the last as the step ends; an output goes at its backward, but for the
        last one its warmup sent through send_work (micro-batch pp - stage - 2), which send_work holds until
        the steady loop breaks, after backward m - warm."""
        m = self.micro_batches
        if self.schedule == "interleaved-1f1b":
            return [None] * m
        if self.schedule == "gpipe":
            return [m - 1] * m
        if what != "output":
            return [min(i + 1, m - 1) for i in range(m)]
        warm, out = self.in_flight, list(range(m))
        if warm >= 2:
            out[warm - 2] = max(warm - 2, m - warm)
        return out

    def _of(self, stage: int, i: int) -> str:
        """Micro-batch i (0 first) of `stage`, as an event's label names it (the stage as --json's, from 0; the
        micro-batch from 1)."""
        return f"stage {stage}, micro-batch {i + 1}" if self.looped else f"micro-batch {i + 1}"


def _interleaved(pp: int, rank: int, m: int) -> list[tuple[int, str, int]]:
    """Rank `rank`'s forwards and backwards under ScheduleInterleaved1F1B over LOCAL_STAGES stages a rank
    (schedules.py: _calculate_single_rank_operations, _get_warmup_ops, _get_1f1b_rank_ops without its idle
    steps): the micro-batches go in rounds of m // max(1, m // pp), a round through one local stage after
    another, backwards from the last local stage; the warmup's forwards are (LOCAL_STAGES - 1) rounds and 2 a
    rank before the last."""
    local = LOCAL_STAGES
    per_round = m // max(1, m // pp)
    warmup = min((local - 1) * per_round + 2 * (pp - 1 - rank), m * local)
    steady = m * local - warmup
    fwd, bwd, out = [0] * local, [0] * local, []
    for op in range(warmup + steady + warmup):
        if op < warmup + steady:
            k = (op // per_round) % local
            out.append((k * pp + rank, "F", fwd[k]))
            fwd[k] += 1
        if op >= warmup:
            k = local - 1 - ((op - warmup) // per_round) % local
            out.append((k * pp + rank, "B", bwd[k]))
            bwd[k] += 1
    return out


def beside_problem(par: Parallel) -> tuple[str, str] | None:
    """(field, message) where what runs beside a pipeline's stages is not what the eager walk replays (DDP, with
    ZeroRedundancyOptimizer or not, or FSDP2 over each stage's module, the layers plan over each stage's layers,
    or FSDP2 over it), or None: the one rule the CLI, the page (calc.inputs) and calc.step (calc.api) read."""
    if par.dp > 1 and par.tp > 1 and par.zero < 2:
        return "pp", ("the eager walk runs a pipeline beside DDP (--dp) or beside tensor parallelism (--tp), or beside "
                      "FSDP2 over tensor parallelism's ranks (--zero 2 or 3), not DDP and tensor parallelism together: "
                      "--dp 1, --tp 1 or --zero 2 or 3 (FSDP2's: --engine fsdp2 or unset), or the deck "
                      "walk")  # fmt: skip
    if par.zero > 1 and stages_a_rank(par.pp_schedule) > 1:
        return "pp-schedule", ("the eager walk's FSDP2 beside a pipeline runs one stage a rank (under interleaved "
                               "1F1B FSDP2 reduces each stage at its own point of the order, not modelled): "
                               "--pp-schedule 1f1b or gpipe, or --zero 0 or 1 (DDP's: --engine ddp or "
                               "unset)")  # fmt: skip
    if par.tp > 1 and par.tp_plan != PLANS[0]:
        return "tp-plan", ("the eager walk's pipeline runs beside the layers plan (transformers' plan splits the "
                           "embedding and head, which a stage cut by hand does not keep): --tp-plan layers, or the "
                           "deck walk")  # fmt: skip
    if par.sequence_parallel and par.dp > 1:
        return "sequence-parallel", ("the eager walk's pipeline runs sequence parallelism beside the layers plan "
                                     "alone, not beside FSDP2 over it: leave --sequence-parallel unset, --dp 1, or "
                                     "the deck walk")  # fmt: skip
    return None


def schedule_problem(pp: int, schedule: str, micro_batches: int | None, layers: int) -> tuple[str, str] | None:
    """(field, message) where torch's ScheduleInterleaved1F1B cannot run `pp` ranks of LOCAL_STAGES stages over
    `layers` layers and `micro_batches` a step (default pp), or None."""
    if stages_a_rank(schedule) == 1:
        return None
    name = f"torch's {SCHEDULE_NAMES[schedule]} with {LOCAL_STAGES} stages a rank"
    if LOCAL_STAGES * pp > layers:
        most = layers // LOCAL_STAGES
        fix = f"at most --pp {most}" if most > 1 else "--pp-schedule 1f1b or gpipe"
        return "pp", f"{name} cuts the {layers} layers into {LOCAL_STAGES * pp} stages: {fix}"
    m = pp if micro_batches is None else micro_batches
    if m % max(1, m // pp):  # schedules.py: the micro-batches go in rounds of equal size
        return "grad-accum", (f"{name} runs the {m} micro-batches in {m // pp} rounds of equal size (n_microbatches "
                              f"// pp), and {m // pp} does not divide {m}: --grad-accum {pp * (m // pp)}, or another "
                              "multiple of --pp")  # fmt: skip
    return None


def layer_passes(layers: int, pp: int, micro_batches: int) -> int:
    """The layers the busiest-to-walk stage (the first: calc.parallel.stage_layers gives it any remainder) runs
    in a step, counted once a micro-batch: what the eager walk's time grows with."""
    return micro_batches * split(layers, pp)


def _labelled(segs: list[Segment], tag: str) -> list[Segment]:
    """The segments of one micro-batch, their events' labels ending with `tag`."""
    return [Segment(tuple(e._replace(label=e.label + tag) for e in s.events), s.reps) for s in segs]
