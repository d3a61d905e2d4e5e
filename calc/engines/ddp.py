"""One rank of torch's DistributedDataParallel (DDP), alone or with ZeroRedundancyOptimizer (ZeRO-1).

What a rank holds beyond the one-device step, from the installed torch 2.13's source:

- DDP's gradient buckets. The Reducer (torch/csrc/distributed/c10d/reducer.cpp, initialize_buckets) allocates,
  when DDP wraps the model, one flat tensor a bucket, `bucket.gradients`, as many values as the bucket's
  parameters, in the gradients' dtype, and keeps it for the life of the model. As each gradient is ready
  autograd's hook copies it into its view of the bucket (mark_variable_ready_dense), the bucket is all-reduced
  in place, and its values are copied back into `.grad` (finalize_bucket_dense, copy_bucket_to_grad). With
  torch's default `gradient_as_bucket_view=False` `.grad` and the buckets are two copies; every trainable
  parameter is in a bucket (DDP skips those that need no gradient), so the buckets are a second set of
  gradients, on every rank, for the whole step. Buckets are filled in reverse parameter order up to
  `bucket_cap_mb` (25 MiB), the first after DDP rebuilds them (the second iteration) up to 1 MiB
  (dist._DEFAULT_FIRST_BUCKET_BYTES); each is one allocation, rounded to the allocator's block.
- ZeroRedundancyOptimizer (torch/distributed/optim/zero_redundancy_optimizer.py, _partition_parameters):
  the parameters, sorted by size (largest first; a stable sort), go one by one to the rank whose share is the
  smallest so far (the lowest such rank), and each rank's own torch optimizer steps only its share, in that
  order, then broadcasts it (in place). So a rank keeps AdamW's moments and step counters of its share only,
  and its step's temporaries are its share's; DDP's buckets stay whole.

Not counted: DDP's broadcast of the module's buffers from rank 0 before each forward (broadcast_buffers=True:
a flat copy of the buffers, the rotary tables' inverse frequencies, tens of bytes, freed on gloo's worker
thread, where torch 2.13's profiler does not see it freed) and the collectives' own scratch memory, which gloo
takes outside PyTorch's allocator.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from ..optim_step import Param
from ..walk import Event

FIRST_BUCKET = 1024 * 1024  # dist._DEFAULT_FIRST_BUCKET_BYTES: the first bucket once DDP rebuilds them
BUCKET_CAP = 25 * 1024 * 1024  # DistributedDataParallel(bucket_cap_mb=25): every later bucket
SOURCE = "torch 2.13: reducer.cpp initialize_buckets (bucket.gradients), gradient_as_bucket_view=False"


@dataclass(frozen=True)
class DataParallel:
    """A rank of `dp` DDP processes; `share`: with ZeroRedundancyOptimizer(optimizer_class=AdamW), the parameters
    its optimizer steps (partition), in its order; None: DDP alone, its optimizer stepping every parameter."""

    dp: int
    share: tuple[Param, ...] | None = None

    def buckets(self, params: list[Param], unit: int, block: int) -> Event:
        """DDP's gradient buckets of the trainable `params`, `unit` bytes a gradient value, each bucket one
        allocation rounded up to `block` bytes (the allocator's)."""
        total = sum(-(-unit * n // block) * block for n in bucket_sizes(params, unit))
        return Event("start", "DDP's gradient buckets (a flat copy of every gradient)", "gradients", total, SOURCE)


def bucket_sizes(params: list[Param], unit: int) -> list[int]:
    """The values of each bucket: the parameters in reverse order, a bucket closed once it holds its cap
    (reducer.cpp compute_bucket_assignment_by_size: the first FIRST_BUCKET, the rest BUCKET_CAP bytes)."""
    out, held = [], 0
    for p in reversed(params):
        held += p.numel
        if unit * held >= (FIRST_BUCKET if not out else BUCKET_CAP):
            out.append(held)
            held = 0
    return [*out, held] if held else out


def partition(params: list[Param], dp: int) -> list[list[Param]]:
    """ZeroRedundancyOptimizer's shares of one parameter group: largest first, each to the smallest share."""
    shares: list[list[Param]] = [[] for _ in range(dp)]
    smallest = [(0, rank) for rank in range(dp)]  # a heap of (share's size, rank): the lowest rank of equals first
    for p in sorted(params, key=lambda p: p.numel, reverse=True):
        size, rank = heapq.heappop(smallest)
        shares[rank].append(p)
        heapq.heappush(smallest, (size + p.numel, rank))
    return shares


def sharded(start: list[Event], params: list[Param], share: list[Param]) -> list[Event]:
    """The resident state with AdamW's moments (proportional to the values: 2 moments a value) cut to `share`."""
    total, mine = sum(p.numel for p in params), sum(p.numel for p in share)
    return [e._replace(bytes=e.bytes * mine // total, label=f"{e.label} (ZeRO-1: this rank's share)")
            if e.category == "optimizer" else e for e in start]  # fmt: skip
