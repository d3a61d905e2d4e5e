"""DeepSpeed's own model-state estimators beside calc's ZeRO accounting (issue 32), written to
docs/data/deepspeed_estimators.json for results.md §11.5.

DeepSpeed ships arithmetic estimators of what its ZeRO stages keep per GPU and on the host:
`estimate_zero2_model_states_mem_needs` (deepspeed/runtime/zero/stage_1_and_2.py) and
`estimate_zero3_model_states_mem_needs` (deepspeed/runtime/zero/stage3.py), the functions behind the
`..._all_cold` ones its docs show. This script calls them, as installed, for calc's presets' parameter counts
(and, for stage 3, the largest module's own parameters, as `..._all_live` finds it: the embedding or the head),
on one GPU and on eight, without offload and with it. DeepSpeed is not one of calc's dependencies; install it
beside the measurement tools to run this (it imports on the CPU):

    pip install --no-deps --no-build-isolation deepspeed==0.19.8 einops hjson msgpack   # DS_BUILD_OPS=0
    DS_ACCELERATOR=cpu python scripts/training/deepspeed_estimators.py --write
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import calc  # noqa: E402
from calc.counts import param_counts  # noqa: E402

OUT = ROOT / "docs" / "data" / "deepspeed_estimators.json"
MODELS = ("llama-3.1-8b", "qwen3-8b", "mistral-7b", "llama-3.1-70b")
GPUS = (1, 8)
# (stage, what is offloaded): none; the optimizer (offload_optimizer); the optimizer and the parameters (stage 3)
CASES = ((2, "none"), (2, "optimizer"), (3, "none"), (3, "optimizer"), (3, "optimizer+params"))


def largest_module(name: str) -> int:
    """The most parameters one module holds itself (DeepSpeed's largest_layer_params): the embedding, the head,
    or the widest linear."""
    shape = calc.PRESETS[name]
    n = param_counts(shape)
    linear = max(shape.hidden * shape.ffn, shape.hidden * shape.heads * shape.head_dim)
    return max(n["embedding"], n["head"], linear)


def rows() -> list[dict]:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    out = []
    for name in MODELS:
        total, largest = param_counts(calc.PRESETS[name])["total"], largest_module(name)
        for gpus in GPUS:
            for stage, offload in CASES:
                if stage == 2:
                    cpu, gpu = estimate_zero2_model_states_mem_needs(total, gpus, 1, cpu_offload=offload != "none")
                else:
                    cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
                        total, largest, gpus, 1, cpu_offload=offload != "none",
                        cpu_offload_params=offload == "optimizer+params", zero_init=True)  # fmt: skip
                out.append({"model": name, "params": total, "largest_module_params": largest, "gpus": gpus,
                            "stage": stage, "offload": offload, "deepspeed_gpu": int(gpu),
                            "deepspeed_host_per_node": int(cpu)})  # fmt: skip
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    args = p.parse_args()
    import deepspeed

    data = {"deepspeed": deepspeed.__version__, "additional_buffer_factor": 1.5, "zero_init": True, "rows": rows()}
    text = json.dumps(data, indent=1) + "\n"
    if args.write:
        OUT.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
