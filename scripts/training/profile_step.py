"""The one harness that measures a training step's peak, for every measurement script.

A measurement is a `body(mark)`: it builds the model and optimizer, runs a warm-up step (so that the
optimizer's state exists), and runs the measured step inside `with mark():`. The harness runs it on a device:

- CPU (`on_cpu`): the profiler (profile_memory=True) records every allocation and free of PyTorch's CPU
  allocator from an empty start; the running sum of their sizes is what is allocated, and its largest value
  inside the marked step is the peak (`measured_peak`): the CPU counterpart of torch.cuda.max_memory_allocated.
  Beside it, the matrix library's workspace: a block a matmul-family op (MATMUL_OPS) allocates itself (the op is
  the innermost one whose time range holds the allocation) and frees before it returns, so that it is neither
  the op's output nor outlives it; oneDNN takes one inside every bf16 matmul, its size set by its per-thread
  blocking for this CPU. `workspace_peak` is the largest such block live in the step, `workspace_at` the op
  that took it, `workspace_at_peak` the workspace live at the measured peak, and `measured_peak_tensors` the
  step's peak with every workspace block left out: what its tensors hold.
- CUDA (`on_cuda`): the caching allocator's own counters, reset as the marked step begins:
  torch.cuda.max_memory_allocated (the peak) and, beside it, max_memory_reserved (what the cache holds).

`two_steps(make, step, batches)` is the body of the usual loop: `make()` inside the measurement, then
`step(state, batch)` for a warm-up batch and for the marked one. `measure_cpu` and `measure_cuda` measure
hf_models' plain loop on a transformers model (measure_transformers.py calls them).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence

import hf_models
import torch
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile, record_function

STEP_MARK = "measure: training step"
# The matmul family: ops whose kernels (oneDNN, MKL, PyTorch's CPU flash attention) may take a workspace
# from the allocator inside the op; profiler names, forward and backward.
MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::linear",
                        "aten::matmul", "aten::mv", "aten::addmv", "aten::dot", "aten::_addmm_activation",
                        "aten::_grouped_mm", "aten::scaled_dot_product_attention"})  # fmt: skip
MATMUL_PREFIXES = ("aten::_scaled_dot_product",)  # its flash, efficient and math kernels and their backwards


def events(prof) -> list:
    """Every event the profiler recorded, nested ones included."""
    out, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        out.append(e)
        stack.extend(e.children)
    return out


def profiled(body: Callable) -> tuple:
    """(profile, what body returned): body(mark) run under the CPU profiler, `mark()` naming the measured step."""
    gc.collect()  # a tensor allocated before the profile and freed inside it would upset the running sum
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = body(lambda: record_function(STEP_MARK))
    return prof, out


def on_cpu(body: Callable) -> tuple[dict, object]:
    """({"measured_peak", "measured_start", "measured_end", "workspace_peak", "workspace_at", "workspace_at_peak",
    "measured_peak_tensors"} in bytes (workspace_at: an op's path), what body returned), on the CPU."""
    prof, out = profiled(body)
    return step_peak(prof), out


def is_matmul(name: str) -> bool:
    return name in MATMUL_OPS or name.startswith(MATMUL_PREFIXES)


def workspace(allocations: list) -> set[int]:
    """The indices, in `allocations` (in time order), of the allocation and the free of every workspace block:
    allocated with a matmul-family op as the innermost op around it, and freed inside that op's time range."""
    made: dict[int, int] = {}  # address -> index of the allocation that holds it
    found: set[int] = set()
    for i, e in enumerate(allocations):
        f = e.extra_fields
        if f.alloc_size > 0:
            made[f.ptr] = i
            continue
        j = made.pop(f.ptr, None)
        op = None if j is None else allocations[j].parent
        if op is not None and is_matmul(op.name) and op.start_time_ns <= e.start_time_ns <= op.end_time_ns:
            found.update((i, j))
    return found


def step_peak(prof) -> dict:
    """Replay the allocator over the profile: the running sum of every allocation's size; at the step marked
    STEP_MARK, the total it starts with, its largest value and the total it ends with; and the same running
    sum without the workspace blocks (`workspace`): its largest value in the step, and the largest block.
    A block freed unseen (on another thread) counts freed where `unseen_frees` and `collective_frees` find it."""
    recorded = events(prof)
    step = next(e for e in recorded if e.name == STEP_MARK)
    allocations = sorted((e for e in recorded if e.tag == _EventType.Allocation), key=lambda e: (e.start_time_ns, e.id))
    scratch = workspace(allocations)
    late, reuses = collective_frees(allocations)
    unseen = {i: n for i, n in unseen_frees(allocations).items() if i not in reuses}
    # (time, order, bytes, index of the allocation record; None: a free counted when a collective returned)
    stream = [(e.start_time_ns, k, e.extra_fields.alloc_size - unseen.get(k, 0), k) for k, e in enumerate(allocations)]
    stream += [(t, len(allocations) + k, -n, None) for k, (t, n) in enumerate(late)]
    stream.sort(key=lambda x: (x[0], x[1]))
    running, tensors, start, end, peak, peak_tensors, largest, at, at_peak = 0, 0, None, None, -1, -1, 0, None, 0
    for t, _, size, i in stream:
        if start is None and t >= step.start_time_ns:
            start = running
        running += size
        tensors += 0 if i in scratch else size
        if start is not None and t <= step.end_time_ns:
            end, peak_tensors = running, max(peak_tensors, tensors)
            if running > peak:
                peak, at_peak = running, running - tensors
            if i in scratch and size > largest:
                largest, at = size, op_path(allocations[i].parent)
    return {"measured_peak": peak, "measured_start": start, "measured_end": end, "workspace_peak": largest,
            "workspace_at": at, "workspace_at_peak": at_peak, "measured_peak_tensors": peak_tensors}  # fmt: skip


def unseen_frees(allocations: list) -> dict[int, int]:
    """{index of an allocation: the bytes of a block found freed unseen just before it}. The profiler records the
    allocator's events of the threads it profiles; a block freed on another thread (gloo runs each collective on
    a worker thread of its own, which drops its tensors there) is never seen freed. The allocator hands out no
    address that is still in use, so an allocation at the address of a block still live means that block was
    freed, unseen, before it: counted freed there (at the latest moment it can have been). In a profile of one
    thread there is none."""
    reused, _ = _never_seen_freed(allocations)
    return {i: allocations[j].extra_fields.alloc_size for j, i in reused.items()}


def _never_seen_freed(allocations: list) -> tuple[dict[int, int], list[int]]:
    """The blocks never seen freed: ({index of one: index of the allocation handed its address while it was
    live}, [indices of those still live when the profile ends])."""
    live: dict[int, int] = {}  # address -> index of the allocation that holds it
    reused: dict[int, int] = {}
    for i, e in enumerate(allocations):
        f = e.extra_fields
        if f.alloc_size > 0:
            if f.ptr in live:
                reused[live[f.ptr]] = i
            live[f.ptr] = i
        else:
            live.pop(f.ptr, None)
    return reused, list(live.values())


COLLECTIVES = ("c10d::", "gloo:")  # the profiler's names of a collective's ops (c10d's dispatch, gloo's own)


def collective_frees(allocations: list) -> tuple[list[tuple[int, int]], set[int]]:
    """([(when, bytes)], reuses) for the blocks a collective op allocates for itself (gloo's flat copy in
    `_allgather_base_`, its receive buffer, the clone in `_reduce_scatter_base_`) that are not seen freed: each
    counted freed when its collective returns. In a quiet run each is seen freed inside its collective; under
    load gloo's worker thread drops the last reference itself, once the op has waited for it, and the profiler
    does not see that free. `reuses`: the allocations at whose address such a block was still live, where
    `unseen_frees` would count it freed (it is freed earlier here)."""
    unseen, live = _never_seen_freed(allocations)
    frees, reuses = [], set()
    for j in [*unseen, *live]:
        op = allocations[j].parent
        while op is not None and not op.name.startswith(COLLECTIVES):
            op = op.parent
        if op is not None:
            frees.append((op.end_time_ns, allocations[j].extra_fields.alloc_size))
            if j in unseen:
                reuses.add(unseen[j])
    return frees, reuses


def op_path(op) -> str:
    """Where an op ran, in words: its name, and the nearest enclosing label that is not an aten op (an autograd
    node, a record_function label such as bitsandbytes' ops, or the step's phase)."""
    outer = op.parent
    while outer is not None and outer.name.startswith("aten::"):
        outer = outer.parent
    return op.name if outer is None else f"{op.name} in {outer.name}"


class _CudaMark:
    """The measured step on a GPU: the caching allocator's counters from its start to its end."""

    def __init__(self):
        self.got: dict = {}

    def __call__(self):
        return self

    def __enter__(self):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self.got["measured_start"] = torch.cuda.memory_allocated()

    def __exit__(self, *exc):
        torch.cuda.synchronize()
        self.got["measured_peak"] = self.got["max_memory_allocated"] = torch.cuda.max_memory_allocated()
        self.got["max_memory_reserved"] = torch.cuda.max_memory_reserved()
        self.got["measured_end"] = torch.cuda.memory_allocated()


def on_cuda(body: Callable) -> tuple[dict, object]:
    """({"measured_peak", "measured_start", "measured_end", "max_memory_allocated", "max_memory_reserved"},
    what body returned), on the current CUDA device."""
    mark = _CudaMark()
    out = body(mark)
    return mark.got, out


def on(device: str, body: Callable) -> tuple[dict, object]:
    """on_cpu or on_cuda, by calc's device name."""
    return on_cpu(body) if device == "cpu" else on_cuda(body)


def two_steps(make: Callable, step: Callable, batches: Sequence[torch.Tensor]) -> Callable:
    """The body of the usual loop: state = make(), a warm-up step(state, batch) and the marked one; the body
    returns the state. Each batch is copied inside the measurement, as a loop's data loader would."""

    def body(mark):
        state = make()
        *warm, last = batches
        for b in warm:
            step(state, _copy(b))
        x = _copy(last)
        with mark():
            step(state, x)
        return state

    return body


def _copy(batch):
    return tuple(t.clone() for t in batch) if isinstance(batch, tuple) else batch.clone()


def _plain(model: hf_models.Model, attention: str, checkpointing: str, precision: str, device: str = "cpu"):
    """make and step for hf_models' loop: the model, PyTorch's AdamW, loss.backward, step, zero_grad."""

    def make():
        net = hf_models.build(model, attention, checkpointing).to(device)
        return net, hf_models.make_optimizer(net)

    def step(state, x):
        hf_models.train_step(*state, x, precision)

    return make, step


def measure_cpu(model: hf_models.Model, precision: str, attention: str, checkpointing: str, seq: int, b: int) -> dict:
    """on_cpu's measurements (bytes) of the second step."""
    batches = [hf_models.tokens(model.vocab, seq, b, seed) for seed in (0, 1)]
    return on_cpu(two_steps(*_plain(model, attention, checkpointing, precision), batches))[0]


def measure_cuda(model: hf_models.Model, precision: str, attention: str, checkpointing: str, seq: int, b: int) -> dict:
    """The same step on a GPU: torch.cuda.max_memory_allocated (and max_memory_reserved) after a warm-up step."""
    batches = [hf_models.tokens(model.vocab, seq, b, seed).cuda() for seed in (0, 1)]
    return on_cuda(two_steps(*_plain(model, attention, checkpointing, precision, "cuda"), batches))[0]
