"""One rank of torch's FSDP2 (`fully_shard`) on each decoder layer and on the model, as torch 2.13 runs it with
gloo on the CPU (torch/distributed/fsdp/_fully_shard/: _fsdp_param_group.py, _fsdp_collectives.py).

Each `fully_shard` call makes a group: one a decoder layer, and the root (the model: the embedding, the final
norm and the head). A rank keeps its rows of every parameter (dim 0 cut in `dp` chunks, torch.chunk's, each
padded to the largest), and a group's parameters exist whole only between its all-gather and its reshard:

- All-gather (foreach_all_gather): one flat output of `dp` x the group's padded shard, into which the rank's
  own shard is copied; gloo's `_allgather_base_` makes a flat copy of it and gloo's all-gather a receive buffer,
  one after the other, each freed at once. The copy-out (foreach_all_gather_copy_out) then allocates each
  parameter's unsharded tensor. In forward the flat output is kept (the communication context's
  all_gather_state) until the next group's copy-out, and the last one until the root's forward returns; in
  backward it is freed at once.
- Forward: each group is gathered in its pre-forward hook and, with reshard_after_forward=True (ZeRO 3, torch's
  default), freed in its post-forward; with False (ZeRO 2) it stays whole until its backward ends.
- Backward: the root is gathered again at the loss's backward and, in each group's pre-backward, the group
  next in backward order is all-gathered ahead (backward prefetch, torch's default); its copy-out waits for its
  own pre-backward. After a group's backward (post_backward): its unsharded parameters are freed; the previous
  group's reduce-scatter input is freed (post_backward_rs_wait); its gradients are copied into a flat
  reduce-scatter input of `dp` x its padded shard and freed; the rank's reduced shard is a new flat tensor, the
  group's gradients as views, kept until zero_grad; gloo's `_reduce_scatter_base_` clones the input and frees
  the clone. The root's reduce-scatter input is freed when backward ends.
- The optimizer steps the rank's rows only: AdamW's moments and its step's temporaries are the rank's share.

Under MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) (`mixed`, the recipe fsdp-bf16) the shards stay
fp32 and the model computes in bf16: each all-gather first casts the rank's shards into one flat bf16 input
(_get_param_all_gather_inputs' foreach copy), freed when the all-gather returns, and gathers bf16; the
unsharded parameters and their gradients are bf16; the reduce-scatter's input and output are fp32, and its
copy-in (fsdp::chunk_cat, out of another dtype) makes a bf16 copy of each gradient's dp chunks in turn.

Measured on multi-process CPU steps (scripts/training/measure_engines.py, docs/data/engines.json). Not counted:
the few bytes of each reduce-scatter's scalar division (gloo's all_reduce), as calc leaves scalars out."""

from __future__ import annotations

from dataclasses import dataclass

from ..optim_step import Param
from ..walk import Event

SOURCE = "torch 2.13 FSDP2: _fsdp_collectives.py foreach_all_gather, foreach_reduce; gloo on the CPU"


@dataclass(frozen=True)
class FullyShard:
    """A rank of `dp` FSDP2 processes, `reshard` its reshard_after_forward; `share`: its rows of each trainable
    parameter (what its optimizer steps), in model.parameters() order; None until calc.api sets it."""

    dp: int
    reshard: bool = True
    share: tuple[Param, ...] | None = None
    mixed: bool = False  # MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) over fp32 shards
    tp: int = 1  # FSDP2 x TP: the dp dimension of a (dp, tp) mesh over the layers plan's ranks (calc.engines.tensor),
    # sharding each rank's local tensors (torchtitan's 2D)
    sequence: bool = False  # and the tp dimension's sequence parallelism (calc.engines.tensor, torchtitan's default)

    def padded(self, params: list[Param]) -> int:
        """Values of the rank's padded shards of `params`: ceil(rows / dp) rows of each."""
        return sum(-(-p.rows // self.dp) * (p.cols or 1) for p in params)


def resident(start: list[Event], params: list[Param], trained: list[Param], engine: FullyShard,
             unit: int) -> list[Event]:  # fmt: skip
    """The one-device step's `start` on this rank: its padded shard of every weight (each parameter's
    _sharded_param_data, frozen or not) for the weights, AdamW's moments of its rows of the `trained` parameters
    (proportional to the values: 2 moments a value); the rest (the token ids) as they are."""
    total, mine = sum(p.numel for p in trained), sum(p.numel for p in engine.share or ())
    shards = Event("start", "this rank's shards of the weights (FSDP2: ceil(rows / dp) rows of each)", "weights",
                   engine.padded(params) * unit, SOURCE)  # fmt: skip
    out = []
    for e in start:
        if e.category == "weights":
            e = shards
        elif e.category == "optimizer":
            e = e._replace(bytes=e.bytes * mine // total, label=f"{e.label} (FSDP2: this rank's rows)")
        out.append(e)
    return out


def local(p: Param, dp: int, rank: int) -> Param:
    """Rank `rank`'s rows of `p` (torch.chunk's cut of dim 0: the last ranks may have fewer, or none)."""
    rows = -(-p.rows // dp)
    return Param(max(0, min(rows, p.rows - rank * rows)), p.cols, p.decay, p.embedding)


def shares(params: list[Param], dp: int) -> list[tuple[Param, ...]]:
    """Each rank's rows of every parameter."""
    return [tuple(local(p, dp, r) for p in params) for r in range(dp)]


STAGE_ROOT = "the stage's root (the embedding, final norm and head it holds)"  # a pipeline stage's module
ROOT = "the root (embedding, final norm, head)"  # a layer's events name layers as the replay's do, by "{layer}"
# and relative to it, so that alike layers' chunks stay equal (calc.eager_step._stretch, _merge)


class _Groups:
    """FSDP2's events for one step's groups: `grouped`, `unit` and `blocks` as `around` takes them; `root`: how
    the events name the root group."""

    def __init__(self, engine: FullyShard, grouped: list[tuple[list[Param], list[Param]]], unit: int, blocks,
                 root: str = ROOT):  # fmt: skip
        self.root = root
        groups, self.trains = [g for g, _ in grouped], [t for _, t in grouped]
        self.mixed, dp, self.last = engine.mixed, engine.dp, len(groups) - 1
        cast = 2 if engine.mixed else unit  # bytes of a gathered parameter's value and of its unsharded gradient
        self.whole = [blocks(dp * engine.padded(g) * cast) for g in groups]  # a group's all-gather: its flat output
        self.flat = [blocks(dp * engine.padded(t) * unit) for t in self.trains]  # its reduce-scatter's flat input
        self.mine = [blocks(engine.padded(t) * unit) for t in self.trains]  # its reduce-scatter output: the shard
        self.cast_in = [blocks(engine.padded(g) * cast) for g in groups]  # bf16 policy: the shards cast, flat
        self.chunked = [[blocks(dp * engine.padded([p]) * cast) for p in t] for t in self.trains]  # chunk_cat's

    def name(self, g: int, at: int) -> str:
        """How the events of layer `at`'s chunk (0: the root's) name group `g`."""
        if not g:
            return self.root
        if not at:  # the root's chunks name the first layer (reduced just before it) and the last (prefetched)
            return "layer 1" if g == 1 else "the last layer"
        return {at: "layer {layer}", at - 1: "the layer below", at + 1: "the layer above"}.get(g, "layer {layer}")

    def gather(self, phase: str, g: int, at: int, ahead: bool = False) -> list[Event]:
        what = f"all-gather {self.name(g, at)}" + (" (backward prefetch)" if ahead else "")
        whole, cast_in = self.whole[g], self.cast_in[g]
        cast = [_ev(phase, f"{what}: the rank's shards cast to bf16 (one flat input)", "weights", cast_in)]
        out = [*(cast if self.mixed else []), _ev(phase, f"{what}: flat output", "weights", whole),
               _ev(phase, f"{what}: gloo's copy and receive buffer", "weights", whole),
               _ev(phase, f"{what}: gloo's buffers freed", "weights", -whole)]  # fmt: skip
        return out + ([_ev(phase, f"{what}: the bf16 input freed", "weights", -cast_in)] if self.mixed else [])

    def copy_out(self, phase: str, g: int) -> list[Event]:
        return [_ev(phase, f"{self.name(g, g)}: unsharded parameters (copy-out)", "weights", self.whole[g])]

    def drop_gathered(self, phase: str, g: int, at: int) -> list[Event]:
        return [_ev(phase, f"free the all-gather output of {self.name(g, at)}", "weights", -self.whole[g])]

    def reshard(self, phase: str, g: int) -> list[Event]:
        return [_ev(phase, f"reshard {self.name(g, g)}: free its unsharded parameters", "weights", -self.whole[g])]

    def reduce(self, g: int, grads: int) -> list[Event]:
        out = self.reshard("backward", g)
        up = g + 1 if g else 1  # the group reduced just before it: the layer above (the root's: layer 1)
        if g != self.last and self.trains[up]:
            out.append(_ev("backward", f"free the reduce-scatter input of {self.name(up, g)}", "gradients",
                           -self.flat[up]))  # fmt: skip
        if not self.trains[g]:  # nothing of it trains: no reduce-scatter (post_backward returns)
            return out
        it, flat = self.name(g, g), self.flat[g]
        copy = f"reduce-scatter {it}: chunk_cat's bf16 copy of a gradient"
        copies = [e for n in self.chunked[g] for e in (_ev("backward", copy, "gradients", n),
                                                       _ev("backward", "chunk_cat's copy freed", "gradients", -n))]
        return [
            *out,
            _ev("backward", f"reduce-scatter {it}: flat input (its gradients copied in)", "gradients", flat),
            *(copies if self.mixed else []),
            _ev("backward", f"free the unsharded gradients of {it}", "gradients", -grads),
            _ev("backward", f"reduce-scatter {it}: this rank's shard (its gradients from here)", "gradients",
                self.mine[g]),
            _ev("backward", f"reduce-scatter {it}: gloo's clone of the input", "gradients", flat),
            _ev("backward", f"reduce-scatter {it}: gloo's clone freed", "gradients", -flat),
        ]


def _ev(phase: str, label: str, category: str, nbytes: int) -> Event:
    return Event(phase, label, category, nbytes, SOURCE)


def around(chunks: list[tuple[int, list[Event]]], engine: FullyShard, grouped: list[tuple[list[Param], list[Param]]],
           unit: int, blocks) -> list[tuple[int, list[Event]]]:  # fmt: skip
    """The replayed step's chunks (calc.eager_step._chunks: runs of one layer's events, 0 outside the layers)
    with FSDP2's events put around them. `grouped`: (the root's parameters, those that train), then each layer's
    (layer 1 first; calc.optim_step.model_groups): a group reduces only the gradients it has, and one with none
    (the frozen root under LoRA) reduces nothing;
    `unit`: bytes of a shard's value (and of a reduced gradient's); `blocks`: bytes -> the allocator's
    (calc.replay.Replay.blocks). Under the bf16 policy (engine.mixed) a gathered value is bf16's 2 bytes."""
    gs, last, reshard = _Groups(engine, grouped, unit, blocks), len(grouped) - 1, engine.reshard
    out: list[tuple[int, list[Event]]] = []
    backward = [i for i, (_, evs) in enumerate(chunks) if evs[0].phase != "forward"]
    seen: set[int] = set()  # the layers whose forward has run (autocast's cache is freed in later chunks of them)
    returned = False  # whether the root's forward has returned (its chunk after the layers: the head, the loss)
    for i, (layer, evs) in enumerate(chunks):
        before, after = [], []
        if evs[0].phase == "forward":
            if i == 0:  # the root's pre-forward
                before = gs.gather("forward", 0, 0) + gs.copy_out("forward", 0)
            elif layer and layer not in seen:
                before = gs.gather("forward", layer, layer) + gs.copy_out("forward", layer)
                before += gs.drop_gathered("forward", layer - 1, layer)
                after = gs.reshard("forward", layer) if reshard else []
            elif not layer and seen and not returned:  # the first chunk outside the layers after them
                after = (gs.reshard("forward", 0) if reshard else []) + gs.drop_gathered("forward", last, 0)
                returned = True
            seen |= {layer} - {0}
        elif layer:
            if reshard:
                before = gs.copy_out("backward", layer) + gs.drop_gathered("backward", layer, layer)
                before += gs.gather("backward", layer - 1, layer, True) if layer > 1 else []
            after = gs.reduce(layer, sum(e.bytes for e in evs if e.category == "gradients"))
        else:
            if i == backward[0] and reshard:  # the root's pre-backward, at the loss's backward
                before = gs.gather("backward", 0, 0) + gs.copy_out("backward", 0) + gs.drop_gathered("backward", 0, 0)
                before += gs.gather("backward", last, 0, True) if last else []
            if i == backward[-1]:  # the root's post-backward, when backward ends
                grads = sum(e.bytes for j in backward if not chunks[j][0] for e in chunks[j][1]
                            if e.category == "gradients")  # fmt: skip
                after = gs.reduce(0, grads)
                freed = _ev("backward", f"free the reduce-scatter input of {ROOT}", "gradients", -gs.flat[0])
                after += [freed] if gs.trains[0] else []
        out.append((layer, before + evs + after))
    return out


def in_stage(chunks: list[tuple[int, list[Event]]], engine: FullyShard, grouped: list[tuple[list[Param], list[Param]]],
             unit: int, blocks, gathering: bool) -> list[tuple[int, list[Event]]]:  # fmt: skip
    """One micro-batch's chunks through a pipeline stage (calc.engines.pipeline) under FSDP2 with
    reshard_after_forward=True, with its events put around them: `grouped` the stage's groups (its root, maybe
    nothing, then its layers: optim_step.stage_groups), `unit` and `blocks` as `around` takes them; `gathering`:
    whether the stage's groups are sharded when the micro-batch's forward begins, and again when its backward
    does (the stage ran a forward just before it), or whole (it ran a backward just before).

    - Forward: sharded, each group is gathered in its pre-forward hook as `around` gathers it (the root before
      the stage's first op); whole, none is. Either way each layer reshards in its post-forward, and the root
      (with the last all-gather output, where one was made) once the stage's forward returns: on the last stage
      as its output, the logits, is made (the schedule's loss_fn runs outside the module), on the others after
      its last op.
    - Backward, sharded: the root's pre-backward hook (on the stage's output) gathers it and prefetches the last
      layer, as `around`'s does, when the logits' gradient is made on the last stage; on the others the last
      layer's hook, registered on the same output first, gathers that layer and prefetches the one below, then
      the root's gathers the root. Each layer's pre-backward then copies out what was prefetched and prefetches
      the layer below. Whole: nothing is gathered. No group reshards or reduces: PipelineStage runs every
      backward under set_reshard_after_backward(False) and set_requires_gradient_sync(False), and `staged`'s
      reductions follow the step's last one."""
    gs, root, last = _Groups(engine, grouped, unit, blocks, STAGE_ROOT), bool(grouped[0][0]), len(grouped) - 1

    def whole(g: int, at: int, phase: str = "forward") -> list[Event]:  # group g gathered and copied out
        out = gs.gather(phase, g, at) + gs.copy_out(phase, g)
        return out + (gs.drop_gathered(phase, g, at) if phase == "backward" else [])

    def ahead(layer: int) -> list[Event]:  # the layer below `layer` prefetched in its pre-backward
        return gs.gather("backward", layer - 1, layer, True) if layer > 1 else []

    fwd = [i for i, (_, evs) in enumerate(chunks) if evs[0].phase == "forward"]
    logits = next((i for i in reversed(fwd) if not chunks[i][0]), fwd[-1])  # the head's, on the last stage: under
    # checkpointed autocast the layers' cached casts are freed in chunks of theirs after it, at the region's end
    returned = _after(chunks[logits][1], lambda e: e.category == "logits" and e.bytes > 0)  # the stage's output
    out: list[tuple[int, list[Event]]] = []
    seen: set[int] = set()  # the layers whose forward has run (autocast's cache is freed in later chunks of them)
    for i, (layer, evs) in enumerate(chunks):
        before, after = [], []
        if i in fwd:
            before = whole(0, 0) if gathering and root and i == 0 else []
            if layer and layer not in seen:
                seen.add(layer)
                below = gs.drop_gathered("forward", layer - 1, layer) if layer > 1 or root else []
                before += whole(layer, layer) + below if gathering else []
                after = gs.reshard("forward", layer)
            if i == (logits if returned else fwd[-1]):  # the stage's forward returns: after its output (the loss
                ends = (gs.reshard("forward", 0) if root else []) + (  # outside it), or after its last op
                    gs.drop_gathered("forward", last, 0) if gathering else [])  # fmt: skip
                evs, after = (evs[:returned] + ends + evs[returned:], after) if returned else (evs, after + ends)
        elif gathering and layer:
            held = i == len(fwd)  # the stage's backward begins with this layer: its hook runs first
            before = whole(layer, layer, "backward") if held else gs.copy_out("backward", layer) + gs.drop_gathered(
                "backward", layer, layer)  # fmt: skip
            before += ahead(layer) + (whole(0, layer, "backward") if held and root else [])
        elif gathering and i == len(fwd):  # the head's backward: the root's hook at the logits' gradient
            hook = whole(0, 0, "backward") + gs.gather("backward", last, 0, True)
            at = _after(evs, lambda e: e.label == "gradient of logits") or 0
            evs = evs[:at] + hook + evs[at:]
        out.append((layer, before + evs + after))
    return out


def _after(evs: list[Event], made) -> int | None:
    """Where in `evs` the op has returned that made the first event `made` accepts: after that event and the frees
    that follow it (the op's inputs let go); None where no event is such."""
    at = next((i for i, e in enumerate(evs) if made(e)), None)
    if at is None:
        return None
    at += 1
    while at < len(evs) and evs[at].bytes < 0:
        at += 1
    return at


def staged(engine: FullyShard, grouped: list[tuple[list[Param], list[Param]]], unit: int, blocks,
           below: int = 0) -> tuple[list[Event], list[Event]]:  # fmt: skip
    """FSDP2 on one pipeline stage's layers and module (calc.engines.pipeline), reshard_after_forward=False as
    torchtitan runs it beside a pipeline: `grouped` the stage's groups (its root: what of the embedding, final
    norm and head it holds, maybe nothing; then its layers, the model's layers `below` + 1 on), `unit` and
    `blocks` as `around` takes them. Two lists of events (with reshard_after_forward=True the second only, the
    groups gathered in the micro-batches instead: in_stage):

    - Before the stage's first micro-batch: each group all-gathered and copied out in forward order (root first),
      each all-gather's output freed at the next copy-out (the last one at once, where torch keeps it until the
      first micro-batch's forward returns). The groups stay unsharded for the whole step: PipelineStage's every
      backward runs under set_reshard_after_backward(False) and set_requires_gradient_sync(False), so each
      micro-batch's gradients accumulate into the unsharded parameters' .grad, as without FSDP2.
    - After the stage's last backward (PipelineStage.perform_reduce_grad): each group's post_backward in turn,
      root first: its unsharded parameters freed (reshard), the previous group's reduce-scatter input freed, its
      gradients copied into a flat input and freed, the rank's reduced shard made (kept until zero_grad), gloo's
      clone of the input made and freed; the last input freed by the final callback."""
    names = [STAGE_ROOT] + [
        f"layer {below + i}" for i in range(1, len(grouped))]  # fmt: skip
    kept = [(name, g, t) for name, (g, t) in zip(names, grouped, strict=True) if g]  # a stage without the outer
    # tensors has no root group
    gs = _Groups(engine, [(g, t) for _, g, t in kept], unit, blocks)
    gathers: list[Event] = []
    for g, (name, _, _) in enumerate(kept):
        whole = gs.whole[g]
        gathers += [_ev("forward", f"all-gather {name}: flat output", "weights", whole),
                    _ev("forward", f"all-gather {name}: gloo's copy and receive buffer", "weights", whole),
                    _ev("forward", f"all-gather {name}: gloo's buffers freed", "weights", -whole),
                    _ev("forward", f"{name}: unsharded parameters (copy-out), kept all step", "weights", whole)]
        gathers += [_ev("forward", "free the all-gather output before", "weights", -gs.whole[g - 1])] if g else []
    gathers += [_ev("forward", "free the last all-gather output", "weights", -gs.whole[-1])] if kept else []
    reduces, before = [], None  # before: the group whose reduce-scatter input is still held
    for g, (name, _, trains) in enumerate(kept):
        reduces.append(_ev("backward", f"reshard {name}: free its unsharded parameters", "weights", -gs.whole[g]))
        if before is not None:
            reduces.append(_ev("backward", "free the reduce-scatter input before", "gradients", -gs.flat[before]))
            before = None
        if not trains:
            continue
        flat, grads = gs.flat[g], sum(blocks(p.numel * unit) for p in trains)
        reduces += [_ev("backward", f"reduce-scatter {name}: flat input (its gradients copied in)", "gradients", flat),
                    _ev("backward", f"free the unsharded gradients of {name}", "gradients", -grads),
                    _ev("backward", f"reduce-scatter {name}: this rank's shard (its gradients from here)",
                        "gradients", gs.mine[g]),
                    _ev("backward", f"reduce-scatter {name}: gloo's clone of the input", "gradients", flat),
                    _ev("backward", f"reduce-scatter {name}: gloo's clone freed", "gradients", -flat)]  # fmt: skip
        before = g
    if before is not None:
        reduces.append(_ev("backward", "free the last reduce-scatter input (the final callback)", "gradients",
                           -gs.flat[before]))  # fmt: skip
    return gathers, reduces
