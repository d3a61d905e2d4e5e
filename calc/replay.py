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

from dataclasses import dataclass, field

from .events import Event


@dataclass(eq=False)
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
    at: int = -1  # the replay's events before it was allocated (-1: a view, or not made by Replay.new)


@dataclass(eq=False)
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
    outs: tuple[T, ...] = ()  # a node of several outputs (a split): it waits for all their gradients
    at: int = 0  # the replay's events when it was recorded (where a checkpoint's re-run stops)


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
        # issue 19, gradient accumulation: a later micro-batch adds each parameter gradient into the resident
        # .grad (AccumulateGrad: variable.grad += new_grad) and frees it once its node has run
        self.accumulating = False
        self.accumulated: list[tuple[str, int]] = []

    # --- the allocator -------------------------------------------------------------------------------
    def blocks(self, nbytes: int) -> int:
        """What the allocator hands out for `nbytes` (signed): whole blocks of its size."""
        return (1 if nbytes > 0 else -1) * -(-abs(nbytes) // self.block) * self.block

    def _emit(self, label: str, category: str, nbytes: int, source: str) -> None:
        """An allocation (nbytes > 0) or a free, in blocks of the allocator's size."""
        nbytes = self.blocks(nbytes)
        if nbytes:
            self.events.append((self.layer, Event(self.phase, label, category, nbytes, source)))

    def new(self, nbytes: int, label: str, source: str, category: str = "activations", unit: int = 0) -> T:
        t = T(nbytes, label, category, unit=unit, at=len(self.events))
        self._emit(label, category, nbytes, source)
        return t

    def view(self, base: T, values: int, label: str) -> T:
        """A view of part of `base` (a slice, a reshape): no allocation; the base lives while it does."""
        self.keep(base)
        return T(values * base.unit, label, base.category, unit=base.unit, base=base)

    def keep(self, t: T) -> T:
        t.refs += 1
        return t

    def drop(self, *tensors: T | None, why: str = "no longer referenced") -> None:
        for t in tensors:
            if t is None:
                continue
            t.refs -= 1
            if t.refs == 0 and t.base is not None:
                self.drop(t.base, why=why)
            elif t.refs == 0:
                self._emit(f"free {t.label}", t.category, -t.nbytes, why)
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
    ) -> bool:
        """Record an op's autograd node; each saved tensor gains a reference until its backward has run.

        An op records a node only where an input requires grad (a tensor made from one, or a trainable
        parameter); otherwise its outputs require none and nothing is saved. Returns whether it recorded one.
        The caller passes only what the gradients that are needed save (derivatives.yaml)."""
        inputs = [i for i in inputs if self.needs(i[0])]
        if not inputs:
            for t in (out, *outs):
                if t is not None:
                    t.requires_grad = False
            return False
        for t in saved:
            self.keep(t)
        # autograd packs what an op saves of its inputs before the op runs, and its output after
        at = out.at if out is not None and out.at >= 0 and all(t is not out for t in saved) else len(self.events)
        self.nodes.append(Node(label, list(saved), out, list(inputs), list(work), self.layer, outs=outs, at=at))
        return True

    def grad(self, t: T, g: T) -> None:
        """Deliver gradient g to tensor t, summing it into one already there (out of place, as autograd's
        InputBuffer does for a gradient it does not own alone)."""
        held = self.grads.get(id(t))
        if held is None:
            self.grads[id(t)] = g
            return
        total = self.new(held.nbytes, f"sum of the gradients of {t.label}", "autograd InputBuffer::accumulate")
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
        for node in reversed(nodes):
            self.layer = node.layer
            g = self.grads.pop(id(node.out), None) if node.out is not None else None
            parts = [self.grads.pop(id(t), None) for t in node.outs]  # a split's outputs' gradients
            if node.recompute is not None:
                self._recompute(node, g)
                continue
            outs = []
            for t, nbytes, how in node.inputs:
                if isinstance(t, T) and not t.requires_grad:
                    continue
                if how == "pass" and g is not None:
                    outs.append((t, self.keep(g)))
                elif how == "param":
                    self.param_grad(t, nbytes, node.label)
                else:
                    outs.append((t, self.new(nbytes, f"gradient of {t.label}", f"{node.label} backward")))
            temps = [self.new(n, f"{node.label} backward working memory", "derivatives.yaml") for n in node.work]
            self.drop(*temps, why="end of the node")
            self.drop(g, *parts, why="consumed by its node")
            self.drop(*node.saved, why=f"{node.label}: saved values released after its backward")
            for label, nbytes in self.accumulated:  # AccumulateGrad runs after the node that made the gradient
                self._emit(f"{label}: added into .grad", "gradients", -nbytes, "AccumulateGrad adds in place")
            self.accumulated.clear()
            for t, grad in outs:
                self.grad(t, grad)

    def _recompute(self, node: Node, g: T | None) -> None:
        """Non-reentrant checkpoint: re-run the region's forward from its saved input, then its backward.

        The region's last nodes that save nothing run first, before anything is unpacked (a gradient they make,
        such as a reshape's copy, lives through the re-run). The re-run stops once the last tensor the region
        saves is made again (torch.utils.checkpoint's early stop): the ops after it allocate nothing."""
        outer, self.nodes, mark = self.nodes, [], len(self.events)
        y = node.recompute(node.saved[0])
        inner, self.nodes = self.nodes, outer
        if g is not None:
            self.grads[id(y)] = g
        self.drop(y, why="checkpoint: the re-created output is not needed")
        lead = len(inner)
        while lead and not inner[lead - 1].saved and inner[lead - 1].recompute is None:
            lead -= 1
        rerun, self.events[mark:] = self.events[mark:], []
        cut = inner[lead - 1].at - mark if lead else 0
        self._run(inner[lead:])
        self.events += rerun[:cut] + _unmade(rerun[cut:])
        self._run(inner[:lead])
        self.drop(*node.saved, why="checkpoint: its input released after its backward")


def _unmade(events: list) -> list:
    """A re-run's events after its early stop, less what the stopped ops would have made: each allocation
    there and its free. What is left frees what the re-run made before it stopped."""
    out, made = [], {}
    for layer, e in events:
        if e.bytes > 0:
            made[e.label] = made.get(e.label, 0) + 1
        elif e.bytes < 0 and made.get(e.label.removeprefix("free ")):
            made[e.label.removeprefix("free ")] -= 1
        else:
            out.append((layer, e))
    return out
