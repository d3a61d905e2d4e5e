"""The one harness that measures a training step's peak, for every measurement script.

A measurement is a `body(mark)`: it builds the model and optimizer, runs a warm-up step (so that the
optimizer's state exists), and runs the measured step inside `with mark():`. The harness runs it on a device:

- CPU (`on_cpu`): the profiler (profile_memory=True) records every allocation and free of PyTorch's CPU
  allocator from an empty start; the running sum of their sizes is what is allocated, and its largest value
  inside the marked step is the peak: the CPU counterpart of torch.cuda.max_memory_allocated.
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
    """({"measured_peak", "measured_start", "measured_end"} in bytes, what body returned), on the CPU."""
    prof, out = profiled(body)
    return step_peak(prof), out


def step_peak(prof) -> dict:
    """Replay the allocator over the profile: the running sum of every allocation's size; at the step marked
    STEP_MARK, the total it starts with, its largest value and the total it ends with."""
    recorded = events(prof)
    step = next(e for e in recorded if e.name == STEP_MARK)
    allocations = sorted((e for e in recorded if e.tag == _EventType.Allocation), key=lambda e: (e.start_time_ns, e.id))
    running, start, end, peak = 0, None, None, -1
    for e in allocations:
        if start is None and e.start_time_ns >= step.start_time_ns:
            start = running
        running += e.extra_fields.alloc_size
        if start is not None and e.start_time_ns <= step.end_time_ns:
            end, peak = running, max(peak, running)
    return {"measured_peak": peak, "measured_start": start, "measured_end": end}


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
    """{"measured_peak", "measured_start", "measured_end"} in bytes for the second step."""
    batches = [hf_models.tokens(model.vocab, seq, b, seed) for seed in (0, 1)]
    return on_cpu(two_steps(*_plain(model, attention, checkpointing, precision), batches))[0]


def measure_cuda(model: hf_models.Model, precision: str, attention: str, checkpointing: str, seq: int, b: int) -> dict:
    """The same step on a GPU: torch.cuda.max_memory_allocated (and max_memory_reserved) after a warm-up step."""
    batches = [hf_models.tokens(model.vocab, seq, b, seed).cuda() for seed in (0, 1)]
    return on_cuda(two_steps(*_plain(model, attention, checkpointing, precision, "cuda"), batches))[0]
