"""The step's events that every teller of it tells alike, written once.

The deck's walk (calc.walk), fine-tuning (calc.finetune) and the replayed eager step (calc.eager_step,
calc.eager) each build a step from a policy of their own (ZeRO, frozen parameters, the ops replayed), but the
head's logits, a layer's kept and freed activations, a module's weight gradients, the optimizer's step and
zero_grad are the same events in each: their labels and sources live here, their sizes come from the caller
(a signed number of bytes, or in a template the name of a size from calc.walk.seq_sizes)."""

from __future__ import annotations

from collections.abc import Iterable

from .events import Event
from .recipes import Recipe

Size = int | str  # signed bytes, or (in a template) the name of a size


def logits(logits16: Size, logits32: Size) -> list[Event]:
    """The head's 16-bit logits and the loss's fp32 copy of them: softmax cross-entropy is computed in fp32."""
    return [
        Event("forward", "head: 16-bit logits", "logits", logits16, "s x b x V values, 2 bytes each"),
        Event(
            "forward",
            "loss: fp32 logits for softmax cross-entropy",
            "logits",
            logits32,
            "s x b x V values, 4 bytes each (the loss is computed in fp32)",
        ),
    ]


def loss_done(freed32: Size) -> Event:
    """Cross-entropy's backward has run: the fp32 logits it saved go (`freed32`: minus their size)."""
    return Event("backward", "free the fp32 logits (cross-entropy done)", "logits", freed32,
                 "the loss's saved fp32 logits")  # fmt: skip


def logits_dropped(freed16: Size) -> Event:
    """The loop lets go of the model's output, the 16-bit logits, once backward ends (`freed16`: minus their size)."""
    return Event(
        "backward",
        "training loop drops the 16-bit logits",
        "logits",
        freed16,
        "the model's output, referenced by the loop until backward ends",
    )


def kept(layer: str, size: Size, source: str, what: str = "") -> Event:
    """A layer's forward keeps its activations for backward (`layer`: "layer {layer}", filled in per repetition;
    `what`: how the layer trains, said before what it keeps)."""
    return Event("forward", f"forward {layer}: {what}keep activations for backward", "activations", size, source)


def recomputed(layer: str, size: Size, source: str) -> Event:
    """A layer's backward first re-runs its forward for what the forward pass did not keep."""
    return Event("backward", f"backward {layer}: recompute dropped activations", "activations", size, source)


def freed(layer: str, size: Size) -> Event:
    """A layer's backward has run: everything it held for backward goes (`size`: minus the layer's full size)."""
    return Event("backward", f"backward {layer}: free its activations", "activations", size,
                 "everything the layer held for backward")  # fmt: skip


def weight_grads(label: str, nbytes: int, source: str) -> Event:
    """A module's backward writes its weight gradients in full: its parameters x the gradients' bytes."""
    return Event("backward", f"{label}: write its weight gradients", "gradients", nbytes, source)


def grad_buffer(nbytes: int, source: str) -> Event:
    """Megatron-LM allocates its fp32 main-gradient buffer once, before the step; backward accumulates into it."""
    return Event("start", "fp32 main-gradient buffer resident", "gradients", nbytes, source)


def optimizer_step(name: str, source: str) -> Event:
    """The optimizer updates its state and the weights in place: no byte comes or goes."""
    return Event("optimizer", f"{name} step (in place)", "optimizer", 0, source)


def gradients_held(segs: Iterable) -> int:
    """The gradient bytes the segments leave resident: every repetition of every gradient event."""
    return sum(seg.repeats * e.bytes for seg in segs for e in seg.events if e.category == "gradients")


def zero_grad(held: int) -> Event:
    """optimizer.zero_grad() frees every gradient (`held` bytes): set_to_none=True, PyTorch's default."""
    return Event("optimizer", "zero_grad: free gradients", "gradients", -held, "optimizer.zero_grad(set_to_none=True)")


def zeroed(segs: Iterable, r: Recipe) -> Event:
    """The step's last event: zero_grad frees what the segments hold, or Megatron-LM zeroes its main-gradient
    buffer in place (a recipe with grad_buffer)."""
    if r.grad_buffer:
        return Event("optimizer", "zero the main-gradient buffer in place", "gradients", 0, r.source)
    return zero_grad(gradients_held(segs))


def end(segs: Iterable, r: Recipe, optimizer: str, source: str, freed16: Size | None = None) -> list[Event]:
    """The step's end: the loop drops the 16-bit logits (where this device made them: `freed16`, minus their
    size), the optimizer steps in place, zero_grad frees the gradients the segments hold (zeroed)."""
    out = [] if freed16 is None else [logits_dropped(freed16)]
    return [*out, optimizer_step(optimizer, source), zeroed(segs, r)]
