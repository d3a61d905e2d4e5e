"""One stage of torch's pipeline parallelism (torch.distributed.pipelining), scheduled by GPipe or 1F1B.

What people run on a transformers model: the model cut by hand into `pp` stages of consecutive decoder layers
(calc.parallel.stage_layers: the earlier stages take any remainder), the first with the embedding, the last with
the final norm and the head, each stage's module the model's own forward over its layers (torchtitan's way: what
a stage lacks is None), wrapped in `PipelineStage(module, stage, pp, device)` and stepped by `ScheduleGPipe` or
`Schedule1F1B` with transformers' ForCausalLMLoss as `loss_fn`, the step's micro-batches as `n_microbatches`,
torch's defaults otherwise (return_outputs=True, scale_grads=True), and AdamW over the stage's parameters. What
a stage holds, from the installed torch 2.13's source (distributed/pipelining/stage.py, schedules.py) and traced
CPU steps:

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
- Under autocast the stage module's forward is the autocast region (the stage's own `torch.autocast`, as the
  model's forward is in a one-device loop); the loss runs outside it, on the logits the head made in 16 bits.
  Not modelled: an autocast region around the schedule's whole step, whose cache keeps each weight's cast from
  the first micro-batch's forward to the step's end and routes every later micro-batch's weight gradient through
  that one cast's node, which autograd runs after every newer one.

Each micro-batch through the stage is calc.eager_step's replay of the stage (Forward.stage_step); the first
backward writes each parameter's .grad, the later ones add into it (gradient accumulation's replay). Not
counted: gloo's scratch memory outside PyTorch's allocator, and scalars (each micro-batch's loss).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..parallel import split
from ..walk import Event, Segment

SCHEDULES = ("1f1b", "gpipe")  # --pp-schedule (the default first): Schedule1F1B, ScheduleGPipe
SCHEDULE_NAMES = {"1f1b": "Schedule1F1B", "gpipe": "ScheduleGPipe"}
FAMILIES = ("llama", "qwen3")  # the families whose stages have been measured
SOURCE = "torch 2.13: distributed/pipelining/stage.py, schedules.py"


@dataclass(frozen=True)
class PipelineStage:
    """Stage `stage` of `pp`, stepping `micro_batches` micro-batches a step under `schedule`."""

    pp: int
    stage: int
    schedule: str
    micro_batches: int

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.pp - 1

    @property
    def in_flight(self) -> int:
        """The most micro-batches the stage holds between their forward and backward: every one under GPipe,
        pp - stage under 1F1B (its warmup_chunks)."""
        return self.micro_batches if self.schedule == "gpipe" else min(self.micro_batches, self.pp - self.stage)

    def order(self) -> list[tuple[str, int]]:
        """The stage's forwards ("F") and backwards ("B") of each micro-batch (0 first), as the schedule runs
        them (ScheduleGPipe._step_microbatches, Schedule1F1B._step_microbatches)."""
        m = self.micro_batches
        if self.schedule == "gpipe":
            return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
        warm = self.in_flight
        out = [("F", i) for i in range(warm)]
        for i in range(m - warm):
            out += [("B", i), ("F", warm + i)]
        return out + [("B", i) for i in range(m - warm, m)]

    def buffers(self, activations: int, logits: int) -> list[Event]:
        """What the stage keeps from step to step beside its parameters: the receive buffers, each micro-batch's
        `activations` bytes, and on the last stage the logits of the step before (`logits` bytes each)."""
        m, out = self.micro_batches, []
        if not self.first:
            out.append(Event("start", f"received activations: {m} buffers, one a micro-batch", "activations",
                             m * activations, f"{SOURCE}: _setup_forward_recv_info"))  # fmt: skip
        if not self.last:
            out.append(Event("start", f"received output gradients: {m} buffers, one a micro-batch", "activations",
                             m * activations, f"{SOURCE}: _setup_backward_recv_info"))  # fmt: skip
        if self.last:
            out.append(Event("start", f"the step before's logits: {m} micro-batches (output_chunks)", "logits",
                             m * logits, f"{SOURCE}: output_chunks, return_outputs=True"))  # fmt: skip
        return out

    def step(self, forward: list[Segment], backward: tuple[list[Segment], list[Segment]], output: int, sent: int,
             after: list[Event], logits: int) -> list[Segment]:  # fmt: skip
        """The schedule's micro-batches through the stage: `forward` and `backward` (the first backward's, then
        the later ones') each micro-batch, labelled with it; `after`: what a micro-batch's graph holds until
        its backward returns (enable_input_require_grads' leaf). The stage's output (`output` bytes, stages before
        the last) and its input gradient (`sent` bytes, stages after the first) are let go as the schedule lets
        go of their sends (lets_go). On the last stage the step before's logits go first and the merged output
        is made and dropped last (`logits` bytes a micro-batch)."""
        m, segs = self.micro_batches, []
        if self.last:
            segs.append(Segment((Event("forward", "free the step before's logits (clear_runtime_states)", "logits",
                                       -m * logits, SOURCE),)))  # fmt: skip
        frees: dict[int, list[Event]] = {}
        for what, nbytes in (("output", output), ("input gradient sent", sent)):
            for i, k in enumerate(self.lets_go(what) if nbytes else ()):
                frees.setdefault(k, []).append(Event("backward", f"free the stage's {what} (micro-batch {i + 1})",
                                                     "activations", -nbytes, f"{SOURCE}: its send let go"))
        done = 0  # backwards run
        for kind, i in self.order():
            if kind == "F":
                segs += _labelled(forward, i)
                continue
            segs += _labelled(backward[0] if done == 0 else backward[1], i)
            done += 1
            tail = [e._replace(label=f"{e.label} (micro-batch {i + 1})") for e in after] + frees.get(i, [])
            if tail:
                segs.append(Segment(tuple(tail)))
        if self.last:
            segs.append(Segment((
                Event("optimizer", f"the step's output: {m} micro-batches' logits merged (torch.cat)", "logits",
                      m * logits, f"{SOURCE}: _merge_outputs"),
                Event("optimizer", "free the merged output (the loop drops it)", "logits", -m * logits, SOURCE))))
        return segs

    def lets_go(self, what: str) -> list[int]:
        """For each micro-batch, the backward (by micro-batch) after which the stage lets go of its "output"
        (fwd_cache pops it at its backward, but a send's work or op may still hold it) or its "input gradient
        sent". GPipe keeps every send's work until its backward loop ends. 1F1B lets a gradient's send go as it
        sends the next (bwd_sends), the last as the step ends; an output goes at its backward, but for the
        last one its warmup sent through send_work (micro-batch pp - stage - 2), which send_work holds until
        the steady loop breaks, after backward m - warm."""
        m = self.micro_batches
        if self.schedule == "gpipe":
            return [m - 1] * m
        if what != "output":
            return [min(i + 1, m - 1) for i in range(m)]
        warm, out = self.in_flight, list(range(m))
        if warm >= 2:
            out[warm - 2] = max(warm - 2, m - warm)
        return out


def layer_passes(layers: int, pp: int, micro_batches: int) -> int:
    """The layers the busiest-to-walk stage (the first: calc.parallel.stage_layers gives it any remainder) runs
    in a step, counted once a micro-batch: what the eager walk's time grows with."""
    return micro_batches * split(layers, pp)


def _labelled(segs: list[Segment], i: int) -> list[Segment]:
    """The segments of micro-batch i (0 first), their events labelled with it."""
    tag = f" (micro-batch {i + 1})"
    return [Segment(tuple(e._replace(label=e.label + tag) for e in s.events), s.reps) for s in segs]
