"""A replay of what eager PyTorch allocates in one training step: tensors, their references, autograd's nodes.

A model's forward is written as calls on a Replay (calc.families), one per tensor-producing op of the
real code, each saying how large its output is and what the op saves for backward (after PyTorch's
tools/autograd/derivatives.yaml). The replay keeps a reference count per tensor: the Python variables of
the model's code (`keep`/`drop`) and the autograd nodes that saved it. A tensor is freed when nothing
references it, as PyTorch's allocator sees it. The backward pass then runs the nodes in reverse order of
creation (autograd's order for a chain of layers), each allocating the gradients of its inputs and its
working memory, and releasing its saved tensors and the gradient it consumed; gradients reaching a tensor
twice are summed. Every allocation and free becomes an Event; the peak is the largest running total.

Only tensors whose size grows with the tokens or the parameters are replayed; scalars are left out.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from dataclasses import dataclass, field

from .events import Event

_tuple = tuple.__new__
_PLACEHOLDER = re.compile(r"\{(layer|below|above)\}")  # a label's layers (calc.walk.Reps fills them in)
_OFFSETS = {"layer": 0, "below": -1, "above": 1}
_PLACES = {offset: "{" + name + "}" for name, offset in _OFFSETS.items()}


@dataclass(eq=False, slots=True)
class T:
    """A tensor: its size in bytes, what it is, and how many things reference it."""

    nbytes: int
    label: str
    category: str = "activations"
    unit: int = 0  # bytes a value (its dtype), where the code that made it knows
    requires_grad: bool = True  # False: a constant (a mask, rotary tables), which gets no gradient
    base: T | None = None  # a view: it allocates nothing and keeps its base alive
    refs: int = 1  # the variable that made it
    grad_of: T | None = None  # for a gradient: the tensor it is the gradient of
    heads_first: bool = False  # a (b, heads, s, d) tensor laid out in that order (torch.cat's output), where
    # the attention states are otherwise head-split views of (b, s, heads, d)
    sum_in_place: bool = False  # its gradients each come new and owned (slice_backward's): InputBuffer adds a
    # later one into the first in place
    layer: int = 0  # the layer that made it (0: outside the layers), which a "{layer}" in its label names


@dataclass(eq=False, slots=True)
class Node:
    """An autograd node: the op's name, its saved tensors, and what its backward does."""

    label: str
    saved: list[T]
    out: T | None  # the output whose gradient this node consumes
    inputs: list[tuple[T | str, int, str]]  # (input or parameter name, bytes of its gradient, how:
    # "new" (allocated), "pass" (the output's gradient passed on, e.g. an add or a view) or "param")
    work: list[int] = field(default_factory=list)  # backward temporaries, alive together, freed at the end
    layer: int = 0
    recompute: object = None  # a checkpointed region: a function that re-runs its forward on the input
    region: list = field(default_factory=list)  # a checkpointed region: the nodes its forward recorded
    outs: tuple[T, ...] = ()  # a node of several outputs (a split): it waits for all their gradients
    unpacks: bool = False  # its backward unpacks a saved parameter (a linear's weight), which saved lists not
    cast: bool = False  # its parameters' gradients come through autocast's cast of them: its `work` is their
    # 16-bit gradient, and ToCopyBackward0 makes the fp32 one after this node has run and released what it saved


class Replay:
    """Allocation events of one step, with the phase and layer they belong to."""

    def __init__(self, phase: str = "forward", block: int = 1, trainable=None):
        self.block = block
        # trainable(layer, parameter name) -> bool: whether a parameter requires grad (None: every one does)
        self.trainable = trainable  # the allocator's granularity: CUDA's caching allocator hands out multiples of 512
        self.events: list[tuple[int, Event]] = []  # (layer, event)
        self.nodes: list[Node] = []
        self.phase, self.layer = phase, 0
        self.grads: dict[int, T] = {}  # id(tensor) -> its pending gradient
        self.param_grads: dict[tuple[int, str], int] = {}  # (layer, parameter) -> bytes of its .grad
        self.after: list[T] = []  # what the training step holds until it returns (after zero_grad)
        self.sent: T | None = None  # a pipeline stage's input gradient, which the schedule sends and frees
        # issue 19, gradient accumulation: a later micro-batch adds each parameter gradient into the resident
        # .grad (AccumulateGrad: variable.grad += new_grad) and frees it once its node has run
        self.accumulating = False
        self.accumulated: list[tuple[str, int]] = []
        self.discard_saved = False  # a checkpointed forward: its nodes keep nothing (the pack hook drops it)
        self.stop_at: int | None = None  # a checkpoint's re-run stops once it has made this many nodes
        self.touched: dict[int, tuple[T, int]] | None = None  # in a re-run: each tensor it made or kept, and
        # the references it had before
        self.rng = 0  # bytes of the generator state a checkpoint's recompute copies (fork_rng; calc.eager_step)
        self.order: dict[int, int] = {}  # each layer replayed: its place in the forward's order (enter, named)
        self.below = 0  # a pipeline stage's replay: the model's layers before its first (named)

    # --- the allocator -------------------------------------------------------------------------------
    def blocks(self, nbytes: int) -> int:
        """What the allocator hands out for `nbytes` (signed): whole blocks of its size."""
        block = self.block  # rounded away from zero: up for an allocation, down for a free
        return -(-nbytes // block) * block if nbytes > 0 else nbytes // block * block

    def _emit(self, label: str, category: str, nbytes: int, source: str) -> None:
        """An allocation (nbytes > 0) or a free, in blocks of the allocator's size (a block of 1 byte: as asked)."""
        if self.block != 1:
            nbytes = self.blocks(nbytes)
        if nbytes:  # tuple.__new__: the Event, without the named tuple's own __new__ on this hot path
            self.events.append((self.layer, _tuple(Event, (self.phase, label, category, nbytes, source))))

    def new(self, nbytes: int, label: str, source: str, category: str = "activations", unit: int = 0) -> T:
        t = T(nbytes, label, category, unit, layer=self.layer)
        self._emit(label, category, nbytes, source)
        if self.touched is not None:
            self._touch(t, 0)
        return t

    def view(self, base: T, values: int, label: str) -> T:
        """A view of part of `base` (a slice, a reshape): no allocation; the base lives while it does."""
        self.keep(base)
        t = T(values * base.unit, label, base.category, unit=base.unit, base=base, layer=self.layer)
        self._touch(t, 0)
        return t

    def keep(self, t: T) -> T:
        if self.touched is not None:
            self._touch(t, t.refs)
        t.refs += 1
        return t

    def enter(self, layer: int) -> None:
        """The forward enters `layer` (the replayed layers in their order, which `named` counts by)."""
        self.layer = layer
        self.order.setdefault(layer, len(self.order))

    def named(self, t: T) -> str:
        """What an event calls a tensor: its label, whose "{layer}" (and "{below}", "{above}") name layers
        counted from the one that made it, rewritten for the layer the event is in, which fills them in per
        repetition: the same layer "{layer}", the one replayed next below or above it "{below}" or "{above}"
        (the layers between, where the walk stretches the middle ones, are not replayed); outside the layers,
        their numbers."""
        if not t.layer or t.layer == self.layer or "{" not in t.label:
            return t.label
        order, made = self.order, self.order.get(t.layer, 0)

        def moved(m: re.Match) -> str:
            offset = _OFFSETS[m.group(1)]
            if not self.layer:  # the layer that made it is the last, or the first: numbered as in the model
                return str(t.layer + offset + self.below)
            return _PLACES.get(made + offset - order.get(self.layer, 0), str(t.layer + offset))

        return _PLACEHOLDER.sub(moved, t.label)

    def _touch(self, t: T, refs: int) -> None:
        if self.touched is not None and id(t) not in self.touched:
            self.touched[id(t)] = (t, refs)

    def drop(self, *tensors: T | None, why: str = "no longer referenced") -> None:
        for t in tensors:
            if t is None:
                continue
            t.refs -= 1
            if t.refs == 0:
                if t.base is not None:
                    self.drop(t.base, why=why)
                else:
                    self._emit(f"free {self.named(t)}", t.category, -t.nbytes, why)
            elif t.refs < 0:
                raise AssertionError(f"{t.label} freed twice")

    # --- autograd --------------------------------------------------------------------------------------
    def needs(self, x: T | str) -> bool:
        """Whether a tensor, or a parameter by name, requires grad."""
        if isinstance(x, T):
            return x.requires_grad
        return self.trainable is None or self.trainable(self.layer, x)

    def node(
        self,
        label: str,
        out: T | None,
        saved: list[T] = (),
        inputs: list[tuple[T | str, int, str]] = (),
        work: list[int] = (),
        outs: tuple[T, ...] = (),
        unpacks: bool = False,
        cast: bool = False,
    ) -> bool:
        """Record an op's autograd node; each saved tensor gains a reference until its backward has run.

        An op records a node only where an input requires grad (a tensor made from one, or a trainable
        parameter); otherwise its outputs require none and nothing is saved. Returns whether it recorded one.
        The caller passes only what the gradients that are needed save (derivatives.yaml)."""
        trainable, layer = self.trainable, self.layer  # self.needs(i[0]) for each input, inlined: a hot path
        inputs = [i for i in inputs if (i[0].requires_grad if isinstance(i[0], T) else trainable is None
                                        or trainable(layer, i[0]))]  # fmt: skip
        if not inputs:
            for t in (out, *outs):
                if t is not None:
                    t.requires_grad = False
            return False
        if not self.discard_saved:
            for t in saved:
                self.keep(t)
        self.nodes.append(Node(label, list(saved), out, inputs, list(work), layer, outs=outs, unpacks=unpacks,
                               cast=cast))  # fmt: skip
        if self.stop_at is not None and len(self.nodes) == self.stop_at:
            # the pack hook of the last saved tensor stops the re-run; an op's inputs are saved before its
            # kernel runs (VariableType), so an output it does not save is never made
            for t in (out, *outs):
                if t is not None and t not in saved:
                    self._unmake(t)
            raise _StopRecomputation
        return True

    def _unmake(self, t: T) -> None:
        """Take back the allocation of `t`, the last one made: the op that made it did not run."""
        _, last = self.events[-1]
        if last.label != t.label or last.bytes != self.blocks(t.nbytes):
            raise AssertionError(f"{t.label} is not the last allocation")
        self.events.pop()
        t.nbytes = 0

    def grad(self, t: T, g: T) -> None:
        """Deliver gradient g to tensor t, summing it into one already there (out of place, as autograd's
        InputBuffer does for a gradient it does not own alone)."""
        held = self.grads.get(id(t))
        if held is None:
            self.grads[id(t)] = g
            return
        if t.sum_in_place:  # InputBuffer::accumulate: old_var.add_(var) where it holds the only reference
            self.drop(g, why="added in place into the gradient already there")
            return
        total = self.new(held.nbytes, f"sum of the gradients of {self.named(t)}", "autograd InputBuffer::accumulate")
        self.drop(held, g, why="summed")
        self.grads[id(t)] = total

    def param_grad(self, name: str, nbytes: int, node: str) -> None:
        """AccumulateGrad: the first gradient of a parameter becomes its .grad; a later one (a tied weight)
        is added into it in place and freed."""
        label, key = f"gradient of {name}", (self.layer, name)
        self._emit(label, "gradients", nbytes, f"{node} backward; parameters x gradient bytes")
        if self.accumulating:
            self.accumulated.append((label, nbytes))
        elif key in self.param_grads:
            self._emit(f"{label}: added into .grad", "gradients", -nbytes, "AccumulateGrad adds in place")
        else:
            self.param_grads[key] = nbytes

    def backward(self) -> None:
        """Run every node in reverse order of creation (autograd's order for a chain of layers)."""
        self.phase = "backward"
        self._run(self.nodes)

    def _run(self, nodes: list[Node]) -> None:
        grads = self.grads
        for node in reversed(nodes):
            self.layer = node.layer
            g = grads.pop(id(node.out), None) if node.out is not None else None
            parts = [grads.pop(id(t), None) for t in node.outs] if node.outs else ()  # a split's outputs' gradients
            if node.recompute is not None:
                self._recompute(node, g)
                continue
            outs, cast = [], []  # cast: (parameter, bytes) whose gradient a later ToCopyBackward0 makes
            for t, nbytes, how in node.inputs:
                if isinstance(t, T) and not t.requires_grad:
                    continue
                if how == "pass" and g is not None:
                    outs.append((t, self.keep(g)))
                elif how == "param" and node.cast:
                    cast.append((t, nbytes))
                elif how == "param":
                    self.param_grad(t, nbytes, node.label)
                else:
                    outs.append((t, self.new(nbytes, f"gradient of {self.named(t)}", f"{node.label} backward")))
            temps = [self.new(n, f"{node.label} backward working memory", "derivatives.yaml") for n in node.work]
            if not node.cast:
                self.drop(*temps, why="end of the node")
            self.drop(g, *parts, why="consumed by its node")
            if node.saved:
                self.drop(*node.saved, why=f"{node.label}: saved values released after its backward")
            for t, nbytes in cast:  # the engine runs the weight's ToCopyBackward0 next (the cast came just before)
                self.param_grad(t, nbytes, f"{node.label}'s ToCopyBackward0")
            if node.cast:
                self.drop(*temps, why="ToCopyBackward0 consumed the 16-bit gradient")
            if self.accumulated:  # AccumulateGrad runs after the node that made the gradient
                for label, nbytes in self.accumulated:
                    self._emit(f"{label}: added into .grad", "gradients", -nbytes, "AccumulateGrad adds in place")
                self.accumulated.clear()
            for t, grad in outs:
                self.grad(t, grad)

    def _recompute(self, node: Node, g: T | None) -> None:
        """Non-reentrant checkpoint (torch/utils/checkpoint.py, _checkpoint_without_reentrant_generator):
        backward runs the region's graph as its forward made it. Its last nodes, which saved nothing, run
        first; the first node that unpacks a saved tensor re-runs the forward from the saved input, which
        stops once it has packed the last saved tensor (_StopRecomputationError), a parameter too (a frozen
        linear's weight: Node.unpacks); backward goes on through the re-made nodes, each releasing what it
        saved once it has run. The re-run runs under torch.random.fork_rng, whose copy of the CPU generator's
        state lives until it ends (`rng`: its bytes)."""
        region = node.region
        last = max((i for i, n in enumerate(region) if n.saved or n.unpacks), default=-1)
        if g is not None:
            self.grads[id(node.out)] = g
        self._run(region[last + 1 :])
        if last >= 0:
            outer, self.nodes = self.nodes, []
            state = self.new(self.rng, "RNG state (fork_rng)", "checkpoint's recompute: fork_rng") if self.rng else None
            self._rerun(node, last + 1)
            self.drop(state, why="fork_rng restores the state")
            inner, self.nodes = self.nodes, outer
            for old, new in zip(region[: last + 1], inner, strict=True):  # re-made: the gradients go to them
                for a, b in zip((old.out, *old.outs), (new.out, *new.outs), strict=True):
                    if a is not None and id(a) in self.grads:
                        self.grads[id(b)] = self.grads.pop(id(a))
            self._run(inner)
        self.drop(*node.saved, why="checkpoint: its input released after its backward")

    def _rerun(self, node: Node, count: int) -> None:
        """The region's forward again, up to its `count`-th node; then what its code held goes, as Python
        unwinds the stopped forward: every tensor it made or kept keeps only the references it had before,
        those of the re-made nodes' saved tensors, and those of its live views."""
        self.stop_at, self.touched = count, {}
        with contextlib.suppress(_StopRecomputation):
            node.recompute(node.saved[0])
        touched, self.stop_at, self.touched = self.touched, None, None
        saved = Counter(id(t) for n in self.nodes for t in n.saved)
        views_of: dict[int, list[T]] = {}  # id(base) -> the views of it the re-run touched
        for v, _ in touched.values():
            if v.base is not None:
                views_of.setdefault(id(v.base), []).append(v)
        for t, refs in reversed(touched.values()):  # a view before its base
            views = sum(1 for v in views_of.get(id(t), ()) if v.refs > 0)
            for _ in range(t.refs - refs - saved[id(t)] - views):
                self.drop(t, why="checkpoint: the re-run stops at the last saved tensor")


class _StopRecomputation(Exception):
    """torch.utils.checkpoint's _StopRecomputationError: the re-run has made every saved tensor."""
