"""One training step on one device, event by event. The peak is the largest running total."""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from . import activations as act
from .parallel import SINGLE, Parallel, device_params, split, stage_layers
from .recipes import RECIPES, state_bytes
from .shape import Shape

CATEGORIES = ("weights", "gradients", "optimizer", "master", "activations", "logits")


class Event(NamedTuple):
    """One allocation (bytes > 0) or free (bytes < 0) in one category."""

    phase: str  # "start", "forward", "backward" or "optimizer"
    label: str  # may hold "{layer}" and "{mb}" (micro-batch), filled in per repetition
    category: str
    bytes: int | str  # signed bytes, or (in a template) the name of a size from seq_sizes
    source: str  # where the size comes from


class Reps:
    """Repetitions of a segment: every layer in `layers` for every micro-batch in `micro_batches`."""

    __slots__ = ("layers", "micro_batches")

    def __init__(self, layers: range, micro_batches: range = range(1, 2)):
        self.layers, self.micro_batches = layers, micro_batches

    def __len__(self) -> int:
        return len(self.layers) * len(self.micro_batches)

    def __iter__(self):
        return ({"layer": layer, "mb": mb} for mb in self.micro_batches for layer in self.layers)


class Segment(NamedTuple):
    """Events that happen once, or once per repetition (forward: layers up; backward: layers down)."""

    events: tuple[Event, ...]
    reps: Reps | None = None

    @property
    def repeats(self) -> int:
        return 1 if self.reps is None else len(self.reps)


def seq_sizes(
    shape: Shape, seq: int, micro_batch: int, recompute: str, activation_bytes: int = 2, par: Parallel = SINGLE
) -> dict[str, int]:
    """The sizes that depend on the tokens in flight, by the names a template's events use."""
    scale = activation_bytes // 2  # Korthikanti's counts are for 16-bit activations
    full = act.layer_bytes(shape, seq, micro_batch, par) * scale
    kept = act.kept_bytes(shape, seq, micro_batch, recompute, par) * scale
    logits16 = act.logits_16bit_bytes(shape, seq, micro_batch, par) * scale
    logits32 = act.logits_fp32_bytes(shape, seq, micro_batch, par)
    return {
        "kept": kept,
        "recomputed": full - kept,
        "-full": -full,
        "logits16": logits16,
        "-logits16": -logits16,
        "logits32": logits32,
        "-logits32": -logits32,
    }


def segments(
    shape: Shape,
    seq: int,
    micro_batch: int,
    recipe: str,
    recompute: str,
    activation_bytes: int = 2,
    par: Parallel = SINGLE,
    stage: int = 0,
) -> list[Segment]:
    """The step on one device of pipeline stage `stage`, every size in bytes."""
    sizes = seq_sizes(shape, seq, micro_batch, recompute, activation_bytes, par)
    return [
        seg._replace(
            events=tuple(e if isinstance(e.bytes, int) else e._replace(bytes=sizes[e.bytes]) for e in seg.events)
        )
        for seg in template(shape, recipe, recompute, par, stage)
    ]


@lru_cache(maxsize=64)  # a chart's sweep walks the same step at hundreds of sequence lengths
def template(shape: Shape, recipe: str, recompute: str, par: Parallel = SINGLE, stage: int = 0) -> tuple[Segment, ...]:
    """The step's events; sizes that depend on the sequence are named (see seq_sizes), others in bytes.
    Each event names the source of its size."""
    r = RECIPES[recipe]
    n = device_params(shape, par, stage)
    first, last = stage == 0, stage == par.pp - 1
    g, w = r.gradients, r.weights

    mb = "micro-batch {mb}, " if par.pp > 1 else ""
    korthikanti = "Korthikanti et al. 2022, eq. (1): sbh(34 + 5as/h) per layer"
    kept_source = {
        "none": korthikanti,
        "selective": "Korthikanti et al. 2022, §5: 34sbh per layer (attention scores dropped)",
        "full": "Chen et al. 2016: the layer's 16-bit input, 2sbh",
    }[recompute]
    grads_of = f"parameters x {g} bytes ({r.source})"
    zero = "Rajbhandari et al. 2020 (ZeRO)"

    state = state_bytes(n["total"], recipe, par)
    start = [Event("start", "weights resident", "weights", state["weights"], r.source)]
    if r.optimizer:
        start.append(Event("start", "Adam moments resident", "optimizer", state["optimizer"], r.source))
    if r.master:
        start.append(Event("start", "fp32 master weights resident", "master", state["master"], r.source))

    def gathered(label: str, params: int, body: list[Event]) -> list[Event]:
        """ZeRO-3 all-gathers a module's weights before it runs and drops them after (§5.3)."""
        if par.zero < 3 or not params:
            return body
        return [
            Event(body[0].phase, f"{label}: all-gather its weights", "weights", w * params, zero),
            *body,
            Event(body[0].phase, f"{label}: release the gathered weights", "weights", -w * params, zero),
        ]

    def write_grads(label: str, params: int, phase: str = "backward") -> list[Event]:
        """Gradients land in full; ZeRO-2 and 3 reduce-scatter them at once, keeping 1/dp (§5.2)."""
        out = [Event(phase, f"{label}: write its weight gradients", "gradients", g * params, grads_of)]
        if par.zero >= 2 and par.dp > 1:
            out.append(
                Event(
                    phase,
                    f"{label}: reduce-scatter its gradients, keep 1/{par.dp}",
                    "gradients",
                    -g * (params - split(params, par.dp)),
                    zero,
                )
            )
        return out

    layers = stage_layers(shape, par.pp, stage)
    in_flight = par.pp - stage  # 1F1B: stage i holds pp - i micro-batches (Narayanan et al. 2021)
    layer = mb + "layer {layer}"
    segs = [Segment(tuple(start))]
    if first and par.zero >= 3:
        segs.append(
            Segment(
                tuple(
                    gathered(
                        "embedding",
                        n["embedding"] + n["positions"],
                        [
                            Event(
                                "forward",
                                "embedding lookup",
                                "activations",
                                0,
                                "Korthikanti et al. count no embedding output",
                            )
                        ],
                    )
                )
            )
        )
    forward = gathered(
        f"forward {layer}",
        n["per_layer"],
        [Event("forward", f"forward {layer}: keep activations for backward", "activations", "kept", kept_source)],
    )
    segs.append(Segment(tuple(forward), Reps(layers, range(1, in_flight + 1))))

    def backward_layer(grads_new: bool) -> list[Event]:
        body = []
        if recompute != "none":
            body.append(
                Event(
                    "backward",
                    f"backward {layer}: recompute dropped activations",
                    "activations",
                    "recomputed",
                    f"{korthikanti}, less what was kept",
                )
            )
        body.append(
            Event(
                "backward",
                f"backward {layer}: free its activations",
                "activations",
                "-full",
                "everything the layer held for backward",
            )
        )
        if grads_new:
            body += write_grads(f"backward {layer}", n["per_layer"])
        elif par.zero >= 2 and par.dp > 1:  # a later micro-batch's full gradient, reduce-scattered at once
            body += [
                Event(
                    "backward",
                    f"backward {layer}: write its weight gradients",
                    "gradients",
                    g * n["per_layer"],
                    grads_of,
                ),
                Event(
                    "backward",
                    f"backward {layer}: reduce-scatter and accumulate them",
                    "gradients",
                    -g * n["per_layer"],
                    zero,
                ),
            ]
        return gathered(f"backward {layer}", n["per_layer"], body)

    if last:
        head_params = n["head"] or n["embedding"]  # a tied head on one device writes the embedding's gradient
        logits = [
            Event("forward", "head: 16-bit logits", "logits", "logits16", "s x b x V values, 2 bytes each"),
            Event(
                "forward",
                "loss: fp32 logits for softmax cross-entropy",
                "logits",
                "logits32",
                "s x b x V values, 4 bytes each (the loss is computed in fp32)",
            ),
        ]
        segs.append(Segment(tuple(gathered("head", n["head"], logits))))
        head = [
            *write_grads("loss and head backward", head_params),
            Event(
                "backward",
                "free the fp32 logits (cross-entropy done)",
                "logits",
                "-logits32",
                "the loss's saved fp32 logits",
            ),
        ]
        segs.append(Segment(tuple(gathered("head backward", n["head"], head))))
        if n["final_norm"]:
            segs.append(Segment(tuple(write_grads("final norm backward", n["final_norm"]))))
    down = range(layers.stop - 1, layers.start - 1, -1)
    segs.append(Segment(tuple(backward_layer(True)), Reps(down)))
    end = []
    if first:
        # Untied: the embedding's own gradient is new; tied on one device: it accumulates into the head's.
        embed = n["positions"] + (0 if shape.tied and last else n["embedding"])
        end += gathered("embedding backward", n["embedding"] + n["positions"], write_grads("embedding backward", embed))
    segs.append(Segment(tuple(end)))
    if in_flight > 1:  # the first stage's other micro-batches; their gradients accumulate in place
        segs.append(Segment(tuple(backward_layer(False)), Reps(down, range(2, in_flight + 1))))
    end = []
    if last:
        end.append(
            Event(
                "backward",
                "training loop drops the 16-bit logits",
                "logits",
                "-logits16",
                "the model's output, referenced by the loop until backward ends",
            )
        )
    end.append(Event("optimizer", "Adam step (in place)", "optimizer", 0, "moments and weights updated in place"))
    written = sum(seg.repeats * e.bytes for seg in segs for e in seg.events if e.category == "gradients")
    end.append(
        Event("optimizer", "zero_grad: free gradients", "gradients", -written, "optimizer.zero_grad(set_to_none=True)")
    )
    segs.append(Segment(tuple(end)))
    return tuple(s for s in segs if s.events)


def events(segs: list[Segment]) -> list[dict]:
    """Expand segments into the event list, with running totals per category."""
    totals = dict.fromkeys(CATEGORIES, 0)
    out = []
    for seg in segs:
        for args in seg.reps or (None,):
            for e in seg.events:
                totals[e.category] += e.bytes
                out.append(
                    {
                        "phase": e.phase,
                        "label": e.label.format(**args) if args else e.label,
                        "category": e.category,
                        "bytes": e.bytes,
                        "source": e.source,
                        "totals": dict(totals),
                        "total": sum(totals.values()),
                    }
                )
    return out


def peak(segs, sizes: dict[str, int] | None = None) -> tuple[int, int]:
    """(peak bytes, index of the first event where it occurs) without expanding the repetitions.

    A repeated segment shifts the running total by the same net amount each time, so its
    largest total is in its first repetition (net <= 0) or its last (net > 0). With `sizes`,
    `segs` may be a template."""
    running, best, best_index, index = 0, -1, -1, 0
    for seg in segs:
        events, repeats = seg.events, seg.repeats
        deltas = (
            [e.bytes for e in events]
            if sizes is None
            else [e.bytes if e.bytes.__class__ is int else sizes[e.bytes] for e in events]
        )
        local = local_best = deltas[0]
        local_at = 0
        for j in range(1, len(deltas)):
            local += deltas[j]
            if local > local_best:
                local_best, local_at = local, j
        k = repeats - 1 if local > 0 else 0
        candidate = running + k * local + local_best
        if candidate > best:
            best, best_index = candidate, index + k * len(events) + local_at
        running += repeats * local
        index += repeats * len(events)
    return best, best_index
