#!/usr/bin/env python3
"""Every CUDA measurement of the project on one GPU, in at most 8 minutes: `make gpu-check`.

Each measurement script runs in a process of its own (a fresh CUDA context and caching allocator), one after
another, each writing the JSON that scripts/make_results.py reads; every CUDA row records, beside its peak
(torch.cuda.max_memory_allocated), the caching allocator's max_memory_allocated and max_memory_reserved
(profile_step.on_cuda). What runs:

    dense     measure.py --device cuda --write                 the reference Decoder  -> measurements.json
    models    measure_transformers.py --device cuda --write    transformers' dense and MoE classes -> transformers.json
    lora      measure_lora.py --device cuda --write            peft's LoRA and freezing -> lora-cuda.json
    qlora     measure_qlora.py --device cuda --write           bitsandbytes' NF4 + LoRA -> qlora-cuda.json
    loops     measure_loops.py --device cuda --write           Trainer and TRL's SFTTrainer -> loops.json

`--dry-run` runs a small sample of each on the CPU and writes nothing: it checks that every script, flag and
import a GPU run needs is there, on a machine without one. The budget is shared: each script gets what the
earlier ones left of it, and one that runs out is stopped and reported.

    python scripts/training/gpu_check.py             # on a machine with a CUDA device
    python scripts/training/gpu_check.py --dry-run   # anywhere: a small CPU sample of each, nothing written
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUDGET_S = 8 * 60  # issue 19: every CUDA measurement on one GPU in at most 8 minutes
DRY_BUDGET_S = 20 * 60  # the CPU sample on a busy 2-core machine
# (name, script, arguments on the GPU, arguments of the dry run on the CPU: a small sample, nothing written)
STEPS = (
    ("dense", "measure.py", ["--device", "cuda", "--write"], ["--quick"]),
    ("models", "measure_transformers.py", ["--device", "cuda", "--write"], ["--class", "mixtral"]),
    ("lora", "measure_lora.py", ["--device", "cuda", "--write"], ["--only", "4"]),
    ("qlora", "measure_qlora.py", ["--device", "cuda", "--write"], ["--only", "0"]),
    ("loops", "measure_loops.py", ["--device", "cuda", "--write"], ["--dry-run"]),
)


def run(script: str, args: list[str], limit_s: float) -> tuple[int, float]:
    """The script's exit status (124 when it ran past `limit_s`) and its seconds; its output goes straight through."""
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        command = [sys.executable, str(HERE / script), *args]
        status = subprocess.run(command, cwd=ROOT, env=env, timeout=limit_s).returncode
    except subprocess.TimeoutExpired:
        status = 124
    return status, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="a small CPU sample of each measurement; nothing written")
    p.add_argument("--only", action="append", choices=[s[0] for s in STEPS], help="only these measurements")
    args = p.parse_args(argv)
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            p.exit(2, "gpu_check.py: error: no CUDA device here; --dry-run checks the scripts on the CPU\n")
        print(f"gpu-check on {torch.cuda.get_device_name()}, PyTorch {torch.__version__}", flush=True)
    budget = DRY_BUDGET_S if args.dry_run else BUDGET_S
    start, failed = time.monotonic(), []
    for name, script, gpu, dry in STEPS:
        if args.only and name not in args.only:
            continue
        left = budget - (time.monotonic() - start)
        if left <= 0:
            failed.append(f"{name} (not started: the {budget} s budget is spent)")
            continue
        print(f"== {name}: {script} {' '.join(dry if args.dry_run else gpu)}", flush=True)
        status, seconds = run(script, dry if args.dry_run else gpu, left)
        print(f"== {name}: exit {status} in {seconds:.0f} s", flush=True)
        if status:
            failed.append(f"{name} (exit {status})")
    total = time.monotonic() - start
    print(f"gpu-check: {total:.0f} s of {budget} s" + (f"; failed: {', '.join(failed)}" if failed else "; all ran"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
