"""One training step on one device, event by event. The peak is the largest running total."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import NamedTuple

from . import activations as act
from . import phases
from .events import Event
from .parallel import SINGLE, Parallel, device_params, split, stage_kinds
from .recipes import HOST_SOURCE, RECIPES, host_bytes, state_bytes
from .shape import Shape

CATEGORIES = ("weights", "gradients", "optimizer", "master", "activations", "logits")
# How the page, the figures and the CLI name each category.
CATEGORY_LABELS = {
    "weights": "weights",
    "gradients": "gradients",
    "optimizer": "Adam state",
    "master": "master copy",
    "activations": "activations",
    "logits": "logits",
}


class Reps:
    """Repetitions of a segment: every layer in `layers` for every micro-batch in `micro_batches`."""

    __slots__ = ("layers", "micro_batches")

    def __init__(self, layers: range, micro_batches: range = range(1, 2)):
        self.layers, self.micro_batches = layers, micro_batches

    def __len__(self) -> int:
        return len(self.layers) * len(self.micro_batches)

    def __iter__(self):  # a label's "{below}" and "{above}": the layers either side (calc.replay.Replay.named)
        return ({"layer": layer, "mb": mb, "below": layer - 1, "above": layer + 1} for mb in self.micro_batches
                for layer in self.layers)


class Segment(NamedTuple):
    """Events that happen once, or once per repetition (forward: layers up; backward: layers down)."""

    events: tuple[Event, ...]
    reps: Reps | None = None

    @property
    def repeats(self) -> int:
        return 1 if self.reps is None else len(self.reps)


def expert_group(par: Parallel) -> Parallel:
    """The workers ZeRO shards a device's routed experts over: the dp / ep that hold the same experts."""
    return Parallel(dp=par.dp // par.ep, zero=par.zero, offload=par.offload)


def device_state(params: int, experts: int, recipe: str, par: Parallel = SINGLE, rank: int = 0) -> dict[str, int]:
    """Weights, gradients, Adam moments and master copy of a device holding `params` parameters, `experts` of
    them routed experts' (ZeRO shards those over dp / ep workers, the rest over dp), as data-parallel worker
    `rank`."""
    dense = state_bytes(params - experts, recipe, par, rank)
    routed = state_bytes(experts, recipe, expert_group(par), rank // par.ep)
    return {c: dense[c] + routed[c] for c in dense}


def host_state(params: int, experts: int, recipe: str, par: Parallel, accumulating: bool = False) -> dict[str, int]:
    """What a device's process keeps in the host's memory under par.offload (calc.recipes.host_bytes), as
    device_state splits the routed experts from the rest; empty without offload."""
    dense = host_bytes(params - experts, recipe, par, accumulating=accumulating)
    routed = host_bytes(experts, recipe, expert_group(par), accumulating=accumulating)
    return {c: dense[c] + routed[c] for c in dense}


def zero_kept(params: int, experts: int, par: Parallel) -> int:
    """What ZeRO-2 and 3 keep of a module's fresh gradients after the reduce-scatter (§5.2)."""
    return split(params - experts, par.dp) + split(experts, par.dp // par.ep)


def resident_state(params: int, recipe: str, par: Parallel = SINGLE, experts: int = 0) -> list[Event]:
    """The state resident before a step: weights, Adam's moments and the master copy (ZeRO-sharded)."""
    r, state = RECIPES[recipe], device_state(params, experts, recipe, par)
    home = "resident" if state["weights"] or not params else "on the host (offloaded), gathered module by module"
    out = [Event("start", f"weights {home}", "weights", state["weights"], r.source)]
    if par.offload != "none":  # Adam's state and the master copy are the host's (calc.recipes.host_bytes)
        return out
    if r.optimizer:
        out.append(Event("start", "Adam moments resident", "optimizer", state["optimizer"], r.source))
    if r.master:
        out.append(Event("start", "fp32 master weights resident", "master", state["master"], r.source))
    return out


def seq_sizes(
    shape: Shape, seq: int, micro_batch: int, recompute: str, activation_bytes: int = 2, par: Parallel = SINGLE
) -> dict[str, int]:
    """The sizes that depend on the tokens in flight, by the names a template's events use."""
    return sizes_of(token_parts(shape, seq, micro_batch, par), shape, seq, micro_batch, recompute, activation_bytes,
                    par)  # fmt: skip


def token_parts(shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE) -> tuple:
    """What seq_sizes derives every recomputation's and activation width's sizes from: (the 16-bit logits, the
    fp32 logits, one layer's three groups (calc.activations.layer_parts) for a dense layer and, where the model
    has them, a mixture-of-experts one). A chart's sweep works them out once for the table's four rows."""
    kinds = (False, True) if shape.moe_layers else (False,)
    return (act.logits_16bit_bytes(shape, seq, micro_batch, par), act.logits_fp32_bytes(shape, seq, micro_batch, par),
            tuple(act.layer_parts(shape, seq, micro_batch, par, moe) for moe in kinds))  # fmt: skip


# sizes_of's negated sizes as the sizes they negate: a layer's "-full" is its "kept" and "recomputed" freed.
PARTS_OF = {f"{prefix}-full": ((f"{prefix}kept", -1), (f"{prefix}recomputed", -1)) for prefix in ("", "moe:")} | {
    f"-{name}": ((name, -1),) for name in ("logits16", "logits32")}  # fmt: skip


def part_sizes(parts: tuple, shape: Shape, seq: int, micro_batch: int, recompute: str, activation_bytes: int = 2,
               par: Parallel = SINGLE) -> dict[str, int]:  # fmt: skip
    """sizes_of without the negated sizes (PARTS_OF): the logits, and what a layer keeps and recomputes."""
    logits16, logits32, layers = parts
    out = {"logits16": act.at_width(logits16, activation_bytes), "logits32": logits32}
    # A dense layer's sizes as "kept", "recomputed"; a mixture-of-experts layer's as "moe:kept", ...
    for prefix, layer in zip(("", "moe:"), layers, strict=False):  # a dense layer, then a sparse one if any
        out[prefix + "kept"], out[prefix + "recomputed"] = _kept_recomputed(layer, shape, seq, micro_batch, recompute,
                                                                            activation_bytes, par)  # fmt: skip
    return out


def part_columns(parts_at: Sequence[tuple], shape: Shape, seqs: Sequence[int], micro_batch: int, recompute: str,
                 activation_bytes: int = 2, par: Parallel = SINGLE) -> dict[str, list[int]]:  # fmt: skip
    """part_sizes at each sequence length of a sweep (parts_at: their token_parts, at least one), a list a size,
    as peaks_over reads them (no dict a length)."""
    out = {"logits16": [act.at_width(parts[0], activation_bytes) for parts in parts_at],
           "logits32": [parts[1] for parts in parts_at]}  # fmt: skip
    for i, prefix in enumerate(("", "moe:")[: len(parts_at[0][2])]):
        pairs = [_kept_recomputed(parts[2][i], shape, seq, micro_batch, recompute, activation_bytes, par)
                 for parts, seq in zip(parts_at, seqs, strict=True)]  # fmt: skip
        out[prefix + "kept"], out[prefix + "recomputed"] = [k for k, _ in pairs], [r for _, r in pairs]
    return out


def _kept_recomputed(layer: tuple, shape: Shape, seq: int, micro_batch: int, recompute: str, activation_bytes: int,
                     par: Parallel) -> tuple[int, int]:  # fmt: skip
    """What a layer of these three groups (calc.activations.layer_parts) keeps, and what it recomputes."""
    full = act.at_width(sum(layer), activation_bytes)
    kept = act.at_width(act.kept_of_parts(layer, shape, seq, micro_batch, recompute, par), activation_bytes)
    return kept, full - kept


def sizes_of(parts: tuple, shape: Shape, seq: int, micro_batch: int, recompute: str, activation_bytes: int = 2,
             par: Parallel = SINGLE) -> dict[str, int]:  # fmt: skip
    """seq_sizes from its token_parts: part_sizes and their negations (a layer's "-full": its activations freed)."""
    out = part_sizes(parts, shape, seq, micro_batch, recompute, activation_bytes, par)
    for name, terms in PARTS_OF.items():
        if all(part in out for part, _ in terms):
            out[name] = sum(sign * out[part] for part, sign in terms)
    return out


def stage_kept(shape: Shape, sizes: dict[str, int], pp: int, stage: int) -> int:
    """What the layers of pipeline stage `stage` keep through the forward pass of one micro-batch."""
    return sum(len(layers) * sizes["moe:kept" if moe else "kept"] for layers, moe in stage_kinds(shape, pp, stage))


def segments(
    shape: Shape,
    seq: int,
    micro_batch: int,
    recipe: str,
    recompute: str,
    activation_bytes: int = 2,
    par: Parallel = SINGLE,
    stage: int = 0,
    in_flight: int = 1,
    accumulating: bool = False,
) -> list[Segment]:
    """The step on one device of pipeline stage `stage`, every size in bytes (see template)."""
    sizes = seq_sizes(shape, seq, micro_batch, recompute, activation_bytes, par)
    return [
        seg._replace(
            events=tuple(e if isinstance(e.bytes, int) else e._replace(bytes=sizes[e.bytes]) for e in seg.events)
        )
        for seg in template(shape, recipe, recompute, par, stage, in_flight, accumulating)
    ]


KORTHIKANTI = "Korthikanti et al. 2022, eq. (1): sbh(34 + 5as/h) per layer"
KEPT_SOURCE = {  # what a layer keeps through the forward pass, by recomputation
    "none": KORTHIKANTI,
    "selective": "Korthikanti et al. 2022, §5: 34sbh per layer (attention scores dropped)",
    "full": "Chen et al. 2016: the layer's 16-bit input, 2sbh",
}
ZERO = "Rajbhandari et al. 2020 (ZeRO)"


class DeckStep:
    """The builders of template's phases for one device of pipeline stage `stage`: what each needs of the
    recipe, the parallelism and the device's parameters (calc.parallel.device_params), worked out once."""

    def __init__(self, shape: Shape, recipe: str, recompute: str, par: Parallel, stage: int):
        self.r, self.recipe, self.recompute, self.par = RECIPES[recipe], recipe, recompute, par
        self.n = n = device_params(shape, par, stage)
        self.layer = ("micro-batch {mb}, " if par.pp > 1 else "") + "layer {layer}"
        self.grads_of = f"parameters x {self.r.gradients} bytes ({self.r.source})"
        self.offloading = par.offload != "none"  # ZeRO-Offload: the reduced gradients go to the host
        self.sharding_grads = par.zero >= 2 and (par.dp > 1 or self.offloading)
        # One layer's parameters (and routed experts' among them) on this device, dense and mixture of experts.
        self.layer_params = {False: (n["per_dense_layer"], 0), True: (n["per_layer"], n["experts_per_layer"])}
        self.runs = stage_kinds(shape, par.pp, stage)  # the stage's layers in runs of one kind, bottom up
        # A tied head on one device is the embedding matrix: ZeRO-3 gathers it, its gradient is the embedding's.
        self.head_params = n["head"] or n["embedding"]

    def start(self, accumulating: bool) -> list[Event]:
        """The state resident before the step, and the gradients the step's earlier micro-batches wrote."""
        n, r = self.n, self.r
        state = device_state(n["total"], n["experts"], self.recipe, self.par)
        out = resident_state(n["total"], self.recipe, self.par, n["experts"])
        if r.grad_buffer:  # Megatron-LM allocates its main-gradient buffer once; backward accumulates into it
            out.append(phases.grad_buffer(state["gradients"], r.source))
        elif accumulating:
            out.append(Event("start", "gradients of the step's earlier micro-batches resident", "gradients",
                             state["gradients"], f"{self.grads_of}; ZeRO-2 and 3 keep 1/dp"))  # fmt: skip
        return out

    def gathered(self, label: str, params: int, body: list[Event]) -> list[Event]:
        """ZeRO-3 all-gathers a module's weights before it runs and drops them after (§5.3)."""
        if self.par.zero < 3 or not params:
            return body
        phase, w = body[0].phase, self.r.weights
        return [
            Event(phase, f"{label}: all-gather its weights", "weights", w * params, ZERO),
            *body,
            Event(phase, f"{label}: release the gathered weights", "weights", -w * params, ZERO),
        ]

    def write_grads(self, label: str, params: int, fresh: bool, experts: int = 0) -> list[Event]:
        """A module's gradients land in full. The first micro-batch's stay (ZeRO-2 and 3 reduce-scatter
        them at once and keep 1/dp, §5.2); a later one's are added into the resident ones and freed."""
        g, par = self.r.gradients, self.par
        if self.r.grad_buffer:
            return [Event("backward", f"{label}: add into the main-gradient buffer", "gradients", 0, ZERO)]
        out = [phases.weight_grads(label, g * params, self.grads_of)]
        if fresh and self.sharding_grads and self.offloading:
            share = f"this rank's 1/{par.dp}" if par.dp > 1 else "them"
            out.append(Event("backward", f"{label}: reduce its gradients, copy {share} to the host (fp32) and free "
                             "them", "gradients", -g * params, HOST_SOURCE))  # fmt: skip
        elif fresh and self.sharding_grads:
            of_experts = f" (of its experts' 1/{par.dp // par.ep})" if experts and par.ep > 1 else ""
            out.append(Event("backward", f"{label}: reduce-scatter its gradients, keep 1/{par.dp}{of_experts}",
                             "gradients", -g * (params - zero_kept(params, experts, par)), ZERO))  # fmt: skip
        elif not fresh:
            out.append(Event("backward", f"{label}: add them into the resident gradients", "gradients", -g * params,
                             ZERO if self.sharding_grads else "autograd's AccumulateGrad"))  # fmt: skip
        return out

    def embedding(self) -> Segment:
        """ZeRO-3 gathers the embedding for its lookup, whose output Korthikanti et al. do not count."""
        n = self.n
        lookup = Event("forward", "embedding lookup", "activations", 0, "Korthikanti et al. count no embedding output")
        return Segment(tuple(self.gathered("embedding", n["embedding"] + n["positions"], [lookup])))

    def forward_layers(self, micro_batches: range) -> list[Segment]:
        """Each run of layers keeps its activations; one segment when every layer is alike."""
        if len(self.runs) == 1:
            return [self.forward_run(*self.runs[0], micro_batches)]
        return [self.forward_run(layers, moe, range(mb, mb + 1)) for mb in micro_batches for layers, moe in self.runs]

    def forward_run(self, layers: range, moe: bool, micro_batches: range) -> Segment:
        """A run of layers of one kind (dense or mixture of experts), each keeping its activations."""
        size, source = "kept", KEPT_SOURCE[self.recompute]
        if moe:
            size = "moe:kept"
            if self.recompute != "full":  # the FFN is a mixture of experts (calc.activations.moe_parts)
                source += "; FFN: router logits and probabilities, the k sb token copies through their experts"
        forward = phases.kept(self.layer, size, source)
        body = self.gathered(f"forward {self.layer}", self.layer_params[moe][0], [forward])
        return Segment(tuple(body), Reps(layers, micro_batches))

    def head(self, fresh: bool) -> list[Segment]:
        """The head's logits and the loss, their backward, and the final norm's."""
        head_params = self.head_params
        segs = [Segment(tuple(self.gathered("head", head_params, phases.logits("logits16", "logits32"))))]
        head = [*self.write_grads("loss and head backward", head_params, fresh), phases.loss_done("-logits32")]
        segs.append(Segment(tuple(self.gathered("head backward", head_params, head))))
        if self.n["final_norm"]:
            segs.append(Segment(tuple(self.write_grads("final norm backward", self.n["final_norm"], fresh))))
        return segs

    def backward_layers(self, fresh: bool, micro_batches: range) -> list[Segment]:
        """Each run of layers from the top down frees its activations and writes its gradients."""
        runs = self.runs
        if len(runs) == 1:
            return [self.backward_run(*runs[0], fresh, micro_batches)]
        return [self.backward_run(layers, moe, fresh, range(mb, mb + 1))
                for mb in micro_batches for layers, moe in reversed(runs)]  # fmt: skip

    def backward_run(self, layers: range, moe: bool, fresh: bool, micro_batches: range) -> Segment:
        """A run of layers of one kind, from its top layer down."""
        down = range(layers.stop - 1, layers.start - 1, -1)
        return Segment(tuple(self.backward_layer(fresh, moe)), Reps(down, micro_batches))

    def backward_layer(self, fresh: bool, moe: bool) -> list[Event]:
        """One layer's backward: recompute what was dropped, free its activations, write its gradients."""
        params, experts = self.layer_params[moe]
        size, layer = "moe:" if moe else "", self.layer
        body = []
        if self.recompute != "none":
            body.append(phases.recomputed(layer, size + "recomputed", f"{KORTHIKANTI}, less what was kept"))
        body.append(phases.freed(layer, size + "-full"))
        body += self.write_grads(f"backward {layer}", params, fresh, experts)
        return self.gathered(f"backward {layer}", params, body)

    def embedding_backward(self, fresh: bool, tied_here: bool) -> list[Segment]:
        """Untied: the embedding's own gradient; tied on one device (`tied_here`): it accumulates into the
        head's, and only learned positions write one."""
        n = self.n
        embed = n["positions"] + (0 if tied_here else n["embedding"])
        if not embed:
            return []
        grads = self.write_grads("embedding backward", embed, fresh)
        return [Segment(tuple(self.gathered("embedding backward", n["embedding"] + n["positions"], grads)))]

    def end(self, segs: list[Segment], last: bool) -> list[Event]:
        """The loop drops the logits (last stage), Adam steps in place, zero_grad frees the gradients held."""
        if self.offloading:  # the CPU's Adam: the device receives the updated 16-bit weights in place
            return phases.end(segs, self.r, "the host's Adam (offloaded: the device's 16-bit weights updated)",
                              HOST_SOURCE, "-logits16" if last else None)  # fmt: skip
        return phases.end(segs, self.r, "Adam", "moments and weights updated in place", "-logits16" if last else None)


@lru_cache(maxsize=64)  # a chart's sweep walks the same step at hundreds of sequence lengths
def template(
    shape: Shape,
    recipe: str,
    recompute: str,
    par: Parallel = SINGLE,
    stage: int = 0,
    in_flight: int = 1,
    accumulating: bool = False,
) -> tuple[Segment, ...]:
    """The step's events on one device of pipeline stage `stage`, holding `in_flight` micro-batches
    at once (1F1B: the first of pp stages holds pp; Narayanan et al. 2021). `accumulating` walks a
    micro-batch after the first of a step, whose gradients are added to those already resident.
    Sizes that depend on the sequence are named (see seq_sizes), the others are bytes; every event
    names the source of its size (the builders of DeckStep, and calc.phases)."""
    step = DeckStep(shape, recipe, recompute, par, stage)
    first, last = stage == 0, stage == par.pp - 1
    segs = [Segment(tuple(step.start(accumulating)))]
    if first and par.zero >= 3:
        segs.append(step.embedding())
    segs += step.forward_layers(range(1, in_flight + 1))
    if last:
        segs += step.head(not accumulating)
    segs += step.backward_layers(not accumulating, range(1, 2))
    if first:
        segs += step.embedding_backward(not accumulating, tied_here=shape.tied and last)
    if in_flight > 1:  # this stage's other micro-batches in flight: their gradients are added in place
        segs += step.backward_layers(False, range(2, in_flight + 1))
    segs.append(Segment(tuple(step.end(segs, last))))
    return tuple(s for s in segs if s.events)


def events(segs: list[Segment]) -> list[dict]:
    """Expand segments into the event list, with running totals per category (the total kept as it runs:
    the same integer as summing the categories, without summing them at every event)."""
    totals = dict.fromkeys(CATEGORIES, 0)
    total, out = 0, []
    append = out.append
    for seg in segs:
        # a label without braces is its own format (the eager walk's are)
        rows = [(e.phase, e.label, "{" in e.label or "}" in e.label, e.category, e.bytes, e.source) for e in seg.events]
        for args in (None,) if seg.reps is None else seg.reps:
            for phase, label, braces, category, size, source in rows:
                totals[category] += size
                total += size
                append(
                    {
                        "phase": phase,
                        "label": label.format_map(args) if args and braces else label,
                        "category": category,
                        "bytes": size,
                        "source": source,
                        "totals": totals.copy(),
                        "total": total,
                    }
                )
    return out


def category_peaks(segs: list[Segment]) -> dict[str, int]:
    """Each category's largest running total over the expanded walk, `{c: max(e["totals"][c] for e in
    events(segs))}`, without expanding it. As in `peak`: a repeated segment shifts a category by the same net
    amount each time, so its largest is in the first repetition (net <= 0) or the last (net > 0). A category
    the first event does not touch is seen at 0 there."""
    running = dict.fromkeys(CATEGORIES, 0)
    best: dict[str, int] | None = None
    for seg in segs:
        if not seg.events or not seg.repeats:
            continue
        if best is None:
            best = {c: 0 for c in CATEGORIES if c != seg.events[0].category}
        local, top = dict.fromkeys(CATEGORIES, 0), {}
        for e in seg.events:
            local[e.category] += e.bytes
            top[e.category] = max(top.get(e.category, local[e.category]), local[e.category])
        for c, most in top.items():
            reached = running[c] + most + (seg.repeats - 1) * max(local[c], 0)
            best[c] = max(best.get(c, reached), reached)
        for c in CATEGORIES:
            running[c] += seg.repeats * local[c]
    if best is None:
        raise ValueError("a walk without events has no peak")
    return {c: best[c] for c in CATEGORIES}


def label_at(segs: list[Segment], index: int) -> str:
    """The label of event `index` of the expanded walk, without expanding it."""
    for seg in segs:
        n = len(seg.events) * seg.repeats
        if index < n:
            rep, i = divmod(index, len(seg.events))
            label = seg.events[i].label
            return label if seg.reps is None else label.format(**list(seg.reps)[rep])
        index -= n
    raise IndexError("no such event")


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
            else [e.bytes if isinstance(e.bytes, int) else sizes[e.bytes] for e in events]
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


def peak_forms(*templates) -> tuple[tuple[int, tuple[tuple[str, int], ...]], ...]:
    """The sums peak_of evaluates: (fixed bytes, ((name, multiple), ...)) for each, the largest of which is
    `max(peak(t, sizes)[0] for t in templates)` whatever the sizes.

    A segment's largest total is the running total before it, plus the largest of its own running
    totals, plus (repeats - 1) times its net when that is positive: the larger of two sums, each a
    fixed number of bytes plus whole multiples of named sizes. So the peak is the largest of such sums
    over all segments; of those with the same multiples only the one with the most fixed bytes can be
    the largest. Evaluating what is left gives the same integers, the same peak, far faster."""
    sums: dict[tuple[tuple[str, int], ...], int] = {}

    def keep(total: dict[str, int]) -> None:
        names = tuple(sorted((k, v) for k, v in total.items() if k and v))
        const = total.get("", 0)
        if names not in sums or const > sums[names]:
            sums[names] = const

    def plus(a: dict[str, int], b: dict[str, int], times: int = 1) -> dict[str, int]:
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + times * v
        return out

    for segs in templates:
        running: dict[str, int] = {}
        for seg in segs:
            local: dict[str, int] = {}
            totals = []
            for e in seg.events:
                key = "" if isinstance(e.bytes, int) else e.bytes
                local[key] = local.get(key, 0) + (e.bytes if key == "" else 1)
                totals.append(dict(local))
            for total in totals:
                keep(plus(running, total))
                if seg.repeats > 1:
                    keep(plus(plus(running, total), local, seg.repeats - 1))
            running = plus(running, local, seg.repeats)
    return tuple((const, names) for names, const in sums.items())


def peak_of(*templates) -> Callable[[dict[str, int]], int]:
    """`max(peak(t, sizes)[0] for t in templates)` as a function of `sizes`, for many sizes (the planner's
    layouts): the largest of peak_forms' sums."""
    forms = peak_forms(*templates)

    def top(sizes: dict[str, int]) -> int:
        best = -1
        for const, names in forms:
            for name, count in names:
                const += count * sizes[name]
            if const > best:
                best = const
        return best

    return top


@lru_cache(maxsize=16)  # a sweep's forms (calc.api.sweep_forms), again at every sequence and micro-batch
def _in_parts(forms: tuple) -> tuple:
    """peak_forms' sums with each negated size (sizes_of's "-full", "-logits16", ...) written as the sizes it
    negates (sizes_of's PARTS_OF), the same sums merged and those another sum is never below dropped: with every
    size left at least 0, a sum with no more fixed bytes and no more of any size than another is never the
    larger. (The sums left, every sum): peaks_over takes every sum where some size is negative."""
    expanded: dict[tuple[tuple[str, int], ...], int] = {}
    for const, names in forms:
        coefs: dict[str, int] = {}
        for name, count in names:
            for part, sign in PARTS_OF.get(name, ((name, 1),)):
                coefs[part] = coefs.get(part, 0) + sign * count
        key = tuple(sorted((k, v) for k, v in coefs.items() if v))
        expanded[key] = max(const, expanded.get(key, const))
    sums = [(const, dict(key)) for key, const in expanded.items()]

    def below(a: tuple, b: tuple) -> bool:  # a is never above b, and is not b
        return a is not b and a[0] <= b[0] and all(v <= b[1].get(k, 0) for k, v in a[1].items()) and all(
            v >= 0 for k, v in b[1].items() if k not in a[1])
    kept = [a for a in sums if not any(below(a, b) for b in sums)]
    return tuple((c, tuple(n.items())) for c, n in kept), tuple((c, tuple(n.items())) for c, n in sums)


def peaks_over(forms: tuple, columns: dict[str, list[int]]) -> list[int]:
    """peak_of(...)(s) for each point s of a chart's sweep, its sizes given a list a size (part_columns: the
    part sizes suffice), from the templates' peak_forms: the same integers, a sum at a time over every
    sequence length rather than a length at a time over every sum."""
    pruned, every = _in_parts(forms)
    names = {name for _, ns in every for name, _ in ns}
    if any(min(columns[name], default=0) < 0 for name in names):
        pruned = every
    best = [-1] * len(next(iter(columns.values()), ()))
    for const, ns in pruned:
        totals = [const] * len(best)
        for name, count in ns:
            totals = [t + count * v for t, v in zip(totals, columns[name], strict=True)]
        best = list(map(max, best, totals))
    return best
