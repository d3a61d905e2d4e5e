#!/usr/bin/env python3
"""The planner's and the fit list's answers over a grid, stored to prove a faster planner changed no byte.

`python -m calc --preset P --plan --json` for every preset at 24, 40, 80 and 141 GB and global batches of 1, 64
and 1,024, with other recipes, sequence parallelism, FlashAttention and other sequence lengths at two of those;
`--fit-card --json` for every preset at the same capacities, with FlashAttention, other recipes, optimizers, a
paged optimizer and other sequence lengths. Each answer is the CLI's stdout, stderr and exit status, stored
compressed in tests/data/plan_outputs.json.xz.

    python scripts/plan_outputs.py           # store the answers (from the tree as it is)
    python scripts/plan_outputs.py --check   # compare byte for byte; name each difference, exit 1
    python scripts/plan_outputs.py --check --only '--preset gpt2 '   # only the answers whose key matches
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import lzma
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STORE = ROOT / "tests" / "data" / "plan_outputs.json.xz"
CAPACITIES = ("24", "40", "80", "141")  # GB: an RTX 4090, an A100 40 GB, an H100, an H200
BATCHES = ("1", "64", "1024")
PLAN_VARIANTS = (  # tried at (80 GB, 1,024) and (40 GB, 64)
    ("--recipe", "fp32"),
    ("--recipe", "fp32-full"),
    ("--recipe", "megatron"),
    ("--recipe", "bf16"),
    ("--recipe", "autocast"),
    ("--sequence-parallel",),
    ("--flash",),
    ("--sequence-parallel", "--flash", "--recipe", "megatron"),
    ("--seq", "1024"),
    ("--seq", "16384"),
)
FIT_VARIANTS = (
    (),
    ("--flash",),
    ("--recipe", "fp32"),
    ("--recipe", "bf16"),
    ("--optimizer", "adamw-8bit"),
    ("--optimizer", "sgd", "--paged-optimizer"),
    ("--seq", "1024"),
    ("--seq", "16384", "--flash"),
)


def cli(argv: tuple[str, ...]) -> str:
    """What `python -m calc ARGV` prints (stdout, then stderr) and its exit status."""
    from calc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv), prog="calc")
    return f"rc {rc}\n{out.getvalue()}--- stderr\n{err.getvalue()}"


def cases() -> Iterator[tuple[str, ...]]:
    from calc import PRESETS

    for preset in PRESETS:
        for capacity in CAPACITIES:
            for batch in BATCHES:
                yield ("--preset", preset, "--plan", "--json", "--capacity-gb", capacity, "--global-batch", batch)
        for capacity, batch in (("80", "1024"), ("40", "64")):
            for variant in PLAN_VARIANTS:
                yield ("--preset", preset, "--plan", "--json", "--capacity-gb", capacity, "--global-batch", batch,
                       *variant)
        for capacity in CAPACITIES:
            for variant in FIT_VARIANTS:
                yield ("--preset", preset, "--fit-card", "--json", "--capacity-gb", capacity, *variant)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="compare with the stored answers; exit 1 on a difference")
    p.add_argument("--only", metavar="REGEX", help="with --check: only the answers whose key matches")
    args = p.parse_args()
    if args.only and not args.check:
        p.error("--only: only with --check (the store holds the whole grid)")
    keep = re.compile(args.only or "")
    started = time.perf_counter()
    got = {key: cli(argv) for argv in cases() if keep.search(key := " ".join(argv))}
    seconds = time.perf_counter() - started
    if not args.check:
        STORE.write_bytes(lzma.compress(json.dumps(got, indent=0, sort_keys=True).encode()))
        print(f"stored {len(got):,} answers in {STORE.relative_to(ROOT)} ({seconds:.1f} s)", file=sys.stderr)
        return 0
    want = {k: v for k, v in json.loads(lzma.decompress(STORE.read_bytes())).items() if keep.search(k)}
    differ = [key for key in want if got.get(key) != want[key]] + [key for key in got if key not in want]
    for key in differ:
        print(f"differs: {key}", file=sys.stderr)
    print(f"{len(want) - len(differ):,} of {len(want):,} answers equal the stored ones ({seconds:.1f} s)",
          file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
