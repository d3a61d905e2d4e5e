#!/usr/bin/env python3
"""Benchmark the core: LLaMA 7B's full walk and a 200-point sweep, in CPython and in Pyodide (Node).

Not a test: prints medians over repeated runs. Usage: python scripts/bench_calc.py [--no-pyodide]"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The same timing code runs in both interpreters.
BENCH = """
import json, statistics, sys, time
import calc
shape = calc.PRESETS["llama-7b"]
seqs = calc.web.seq_grid(4096)[:200]

def median_ms(fn, repeat=30):
    times = []
    for _ in range(repeat):
        t = time.perf_counter(); fn(); times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)

RESULT = json.dumps({
    "python": sys.version.split()[0],
    "step_ms": median_ms(lambda: calc.step(shape, 4096, 1, "mixed", "full")),
    "sweep_200_ms": median_ms(lambda: calc.sweep(shape, seqs, 1, "mixed", "full")),
    "sweep_200_x4_ms": median_ms(lambda: [calc.sweep(shape, seqs, 1, r, c) for r, c in calc.TABLE_ROWS]),
    "web_handle_ms": median_ms(lambda: calc.web.handle("{}"), 10),
})
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--no-pyodide", action="store_true")
    args = p.parse_args()
    scope: dict = {}
    exec(BENCH, scope)  # our own benchmark code, the same text Pyodide runs
    results = {"cpython": json.loads(scope["RESULT"])}
    if not args.no_pyodide:
        out = subprocess.run(["node", str(ROOT / "tests" / "pyodide_calc.mjs"), str(ROOT), BENCH + "\nRESULT"],
                             capture_output=True, text=True, check=True)
        results["pyodide"] = json.loads(out.stdout)
    for name, r in results.items():
        print(f"{name:8} Python {r['python']}: step {r['step_ms']:.3f} ms, 200-point sweep {r['sweep_200_ms']:.3f} ms, "
              f"4 recipes x 200 points {r['sweep_200_x4_ms']:.3f} ms, web.handle {r['web_handle_ms']:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
