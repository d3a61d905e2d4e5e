"""Peak bytes of PyTorch's CPU allocator over one training step of a transformers model, every allocation seen.

The profiler (profile_memory=True) records every allocation and free from an empty start; the running sum
of their sizes is what is allocated, and its largest value during the second step (after AdamW has made
its state) is the peak: the CPU counterpart of torch.cuda.max_memory_allocated.
"""

from __future__ import annotations

import gc

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


def measure_cpu(model: hf_models.Model, precision: str, attention: str, checkpointing: str, seq: int, b: int) -> dict:
    """{"measured_peak", "measured_start", "measured_end"} in bytes for the second step."""
    batches = [hf_models.tokens(model.vocab, seq, b, seed) for seed in (0, 1)]
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        net = hf_models.build(model, attention, checkpointing)
        optimizer = hf_models.make_optimizer(net)
        hf_models.train_step(net, optimizer, batches[0].clone(), precision)
        x = batches[1].clone()
        with record_function(STEP_MARK):
            hf_models.train_step(net, optimizer, x, precision)
    return step_peak(prof)


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


def measure_cuda(model: hf_models.Model, precision: str, attention: str, checkpointing: str, seq: int, b: int) -> dict:
    """The same step on a GPU: torch.cuda.max_memory_allocated after a warm-up step."""
    net = hf_models.build(model, attention, checkpointing).cuda()
    optimizer = hf_models.make_optimizer(net)
    hf_models.train_step(net, optimizer, hf_models.tokens(model.vocab, seq, b, 0).cuda(), precision)
    x = hf_models.tokens(model.vocab, seq, b, 1).cuda()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    hf_models.train_step(net, optimizer, x, precision)
    torch.cuda.synchronize()
    return {
        "measured_peak": torch.cuda.max_memory_allocated(),
        "measured_start": start,
        "measured_end": torch.cuda.memory_allocated(),
    }
