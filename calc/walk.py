"""One training step, event by event. The peak is the largest running total."""

from __future__ import annotations

from typing import NamedTuple

from . import activations as act
from .recipes import RECIPES
from .shape import Shape, param_counts

CATEGORIES = ("weights", "gradients", "optimizer", "master", "activations", "logits")


class Event(NamedTuple):
    """One allocation (bytes > 0) or free (bytes < 0) in one category."""

    phase: str  # "start", "forward", "backward" or "optimizer"
    label: str  # may hold "{layer}", filled in with the 1-based layer number
    category: str
    bytes: int
    source: str  # where the size comes from


class Segment(NamedTuple):
    """Events that happen once, or once per layer (forward: 1..L; backward: L..1)."""

    events: tuple[Event, ...]
    layers: range | None = None

    @property
    def repeats(self) -> int:
        return 1 if self.layers is None else len(self.layers)


def segments(
    shape: Shape, seq: int, micro_batch: int, recipe: str, recompute: str, activation_bytes: int = 2
) -> list[Segment]:
    """The step as an ordered list of segments; each event names the source of its size."""
    r = RECIPES[recipe]
    n = param_counts(shape)
    scale = activation_bytes // 2  # Korthikanti's counts are for 16-bit activations
    full = act.layer_bytes(shape, seq, micro_batch) * scale
    kept = act.kept_bytes(shape, seq, micro_batch, recompute) * scale
    logits16 = act.logits_16bit_bytes(shape, seq, micro_batch) * scale
    logits32 = act.logits_fp32_bytes(shape, seq, micro_batch)
    grad = r.gradients
    korthikanti = "Korthikanti et al. 2022, eq. (1): sbh(34 + 5as/h) per layer"
    kept_source = {
        "none": korthikanti,
        "selective": "Korthikanti et al. 2022, §5: 34sbh per layer (attention scores dropped)",
        "full": "Chen et al. 2016: the layer's 16-bit input, 2sbh",
    }[recompute]
    grads_of = f"parameters x {grad} bytes ({r.source})"

    start = [Event("start", "weights resident", "weights", r.weights * n["total"], r.source)]
    if r.optimizer:
        start.append(Event("start", "Adam moments resident", "optimizer", r.optimizer * n["total"], r.source))
    if r.master:
        start.append(Event("start", "fp32 master weights resident", "master", r.master * n["total"], r.source))

    forward = Event("forward", "forward layer {layer}: keep activations for backward", "activations", kept, kept_source)
    logits = [
        Event("forward", "head: 16-bit logits", "logits", logits16, "s x b x V values, 2 bytes each"),
        Event(
            "forward",
            "loss: fp32 logits for softmax cross-entropy",
            "logits",
            logits32,
            "s x b x V values, 4 bytes each (the loss is computed in fp32)",
        ),
    ]
    # A tied head's gradient is the embedding's: one V x h buffer, first written at the head.
    head_params = n["embedding"] if shape.tied else n["head"]
    backward_head = [
        Event(
            "backward",
            "loss backward: write the head's gradient (logits still held)",
            "gradients",
            grad * head_params,
            f"head {grads_of}",
        ),
        Event(
            "backward", "free the fp32 logits (cross-entropy done)", "logits", -logits32, "the loss's saved fp32 logits"
        ),
    ]
    if n["final_norm"]:
        backward_head.append(
            Event(
                "backward",
                "final norm backward: write its gradient",
                "gradients",
                grad * n["final_norm"],
                f"final norm {grads_of}",
            )
        )
    backward_layer = []
    if recompute != "none":
        backward_layer.append(
            Event(
                "backward",
                "backward layer {layer}: recompute dropped activations",
                "activations",
                full - kept,
                f"{korthikanti}, less what was kept",
            )
        )
    backward_layer += [
        Event(
            "backward",
            "backward layer {layer}: free its activations",
            "activations",
            -full,
            "everything the layer held for backward",
        ),
        Event(
            "backward",
            "backward layer {layer}: write its weight gradients",
            "gradients",
            grad * n["per_layer"],
            f"layer {grads_of}",
        ),
    ]
    # Untied: the embedding's own gradient is new; tied: it accumulates into the head's buffer.
    embed_params = n["positions"] + (0 if shape.tied else n["embedding"])
    end = [
        Event(
            "backward",
            "embedding backward: write its gradient",
            "gradients",
            grad * embed_params,
            f"embedding {grads_of}",
        ),
        Event(
            "backward",
            "training loop drops the 16-bit logits",
            "logits",
            -logits16,
            "the model's output, referenced by the loop until backward ends",
        ),
        Event("optimizer", "Adam step (in place)", "optimizer", 0, "moments and weights updated in place"),
        Event(
            "optimizer",
            "zero_grad: free gradients",
            "gradients",
            -grad * n["total"],
            "optimizer.zero_grad(set_to_none=True)",
        ),
    ]
    return [
        Segment(tuple(start)),
        Segment((forward,), range(1, shape.layers + 1)),
        Segment(tuple(logits)),
        Segment(tuple(backward_head)),
        Segment(tuple(backward_layer), range(shape.layers, 0, -1)),
        Segment(tuple(end)),
    ]


def events(segs: list[Segment]) -> list[dict]:
    """Expand segments into the event list, with running totals per category."""
    totals = dict.fromkeys(CATEGORIES, 0)
    out = []
    for seg in segs:
        for layer in seg.layers or (None,):
            for e in seg.events:
                totals[e.category] += e.bytes
                out.append(
                    {
                        "phase": e.phase,
                        "label": e.label.format(layer=layer) if layer else e.label,
                        "category": e.category,
                        "bytes": e.bytes,
                        "source": e.source,
                        "totals": dict(totals),
                        "total": sum(totals.values()),
                    }
                )
    return out


def peak(segs: list[Segment]) -> tuple[int, int]:
    """(peak bytes, index of the first event where it occurs) without expanding the layers.

    A repeated segment shifts the running total by the same net amount each time, so its
    largest total is in its first repetition (net <= 0) or its last (net > 0)."""
    running, best, best_index, index = 0, -1, -1, 0
    for seg in segs:
        events, repeats = seg.events, seg.repeats
        local = local_best = events[0].bytes
        local_at = 0
        for j in range(1, len(events)):
            local += events[j].bytes
            if local > local_best:
                local_best, local_at = local, j
        k = repeats - 1 if local > 0 else 0
        candidate = running + k * local + local_best
        if candidate > best:
            best, best_index = candidate, index + k * len(events) + local_at
        running += repeats * local
        index += repeats * len(events)
    return best, best_index
