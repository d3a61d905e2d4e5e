#!/usr/bin/env python3
"""Check the eager walk against transformers' own models: every class, precision, attention and checkpointing.

Each run builds a transformers model from a config with random weights (hf_models.py; nothing is
downloaded), trains it for two steps with the loop most people write, and measures the second step's peak
(profile_step.py: every allocation of PyTorch's CPU allocator; torch.cuda.max_memory_allocated on a GPU).
The prediction is the CLI's, from the flags a user would type (`cli_args`), run in-process through
calc.cli.main. Results go to docs/data/transformers.json, which scripts/make_results.py renders in
docs/results.md §10.7.

    python scripts/training/measure_transformers.py             # measure on the CPU, print a table
    python scripts/training/measure_transformers.py --write     # and write docs/data/transformers.json
    python scripts/training/measure_transformers.py --device cuda --write
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hf_models  # noqa: E402
import profile_step  # noqa: E402
import torch  # noqa: E402

from calc.cli import main as cli  # noqa: E402

RESULTS = ROOT / "docs" / "data" / "transformers.json"

GRANITE = (("embedding_multiplier", 12.0), ("attention_multiplier", 0.0078125), ("residual_multiplier", 0.22),
           ("logits_scaling", 16.0))  # fmt: skip
# Three shapes a class (grouped-query attention with one and with several key/value heads, where the class
# has it), each with the tokens of one micro-batch: logits, attention scores or the layers take the peak.
SHAPES = {
    "llama": [
        (hf_models.Model("llama", 4, 64, 4, 4, 176, 512), 128, 2),
        (hf_models.Model("llama", 4, 64, 4, 1, 176, 256), 256, 1),
        (hf_models.Model("llama", 3, 128, 8, 2, 344, 1000), 64, 2),
    ],
    "mistral": [
        (hf_models.Model("mistral", 4, 64, 4, 4, 176, 512), 128, 2),
        (hf_models.Model("mistral", 4, 64, 4, 1, 176, 256), 256, 1),
        (hf_models.Model("mistral", 3, 128, 8, 2, 344, 1000), 64, 2),
    ],
    "qwen2": [
        (hf_models.Model("qwen2", 4, 64, 4, 4, 176, 512), 128, 2),
        (hf_models.Model("qwen2", 4, 64, 4, 1, 176, 256), 256, 1),
        (hf_models.Model("qwen2", 3, 128, 8, 2, 344, 1000), 64, 2),
    ],
    "gpt2": [  # GPT-2 has every head's keys and values; its default dropout (0.1) is kept
        (hf_models.Model("gpt2", 4, 64, 4, 4, 256, 512), 128, 2),
        (hf_models.Model("gpt2", 4, 64, 4, 4, 256, 256), 256, 1),
        (hf_models.Model("gpt2", 3, 128, 8, 8, 512, 1000), 64, 2),
    ],
    # mixtures of experts (transformers' default grouped_mm experts), top-2 of 4 and top-4 of 8 (a small
    # vocabulary: the experts' k x tokens rows take the peak); Qwen2-MoE with its gated shared expert
    "mixtral": [
        (hf_models.mixtral(2, 64, 4, 2, 96, 256, 4, 2), 128, 2),
        (hf_models.mixtral(3, 64, 4, 1, 128, 128, 8, 4), 256, 2),
    ],
    "qwen2_moe": [
        (hf_models.qwen2_moe(2, 64, 4, 2, 96, 256, 4, 2, 160), 128, 2),
        (hf_models.qwen2_moe(3, 64, 4, 1, 64, 128, 8, 4, 256), 256, 2),
    ],
    # Qwen3: q_norm and k_norm on each head, head_dim given (here apart from width / heads in one shape)
    "qwen3": [
        (hf_models.Model("qwen3", 4, 64, 4, 4, 176, 512, (("head_dim", 16),)), 128, 2),
        (hf_models.Model("qwen3", 4, 64, 4, 1, 176, 256, (("head_dim", 32),)), 256, 1),
        (hf_models.Model("qwen3", 3, 128, 8, 2, 344, 1000, (("head_dim", 16),)), 64, 2),
    ],
    # Granite 3: Llama with embedding, attention, residual and logits multipliers (Granite-3.3-8B's values)
    "granite": [
        (hf_models.Model("granite", 4, 64, 4, 4, 176, 512, GRANITE), 128, 2),
        (hf_models.Model("granite", 4, 64, 4, 1, 176, 256, GRANITE), 256, 1),
        (hf_models.Model("granite", 3, 128, 8, 2, 344, 1000, GRANITE), 64, 2),
    ],
}
GRID = list(itertools.product(hf_models.PRECISIONS, hf_models.ATTENTIONS, hf_models.CHECKPOINTING))


def cli_args(m: hf_models.Model, seq: int, b: int, precision: str, attention: str, checkpointing: str, device: str):
    """The command a user types to predict this step."""
    shape = ["--layers", m.layers, "--hidden", m.hidden, "--heads", m.heads, "--kv-heads", m.kv_heads]
    if "expert-ffn" not in m.moe:  # every layer of these is experts: their width is --expert-ffn, not --ffn
        shape += ["--ffn", m.ffn]
    shape += ["--vocab", m.vocab]
    if m.model_type in ("qwen2", "qwen2_moe"):
        shape.append("--qkv-bias")
    for flag, value in m.moe.items():
        shape += [f"--{flag}", value]
    if m.model_type == "qwen2_moe":
        shape.append("--shared-expert-gate")
    if m.model_type == "gpt2":
        shape = ["--preset", "gpt2", *shape]
    if m.model_type in ("qwen3", "granite"):  # code of their own: the family says whose
        shape += ["--family", m.model_type]
    if "head_dim" in dict(m.extra):
        shape += ["--head-size", dict(m.extra)["head_dim"]]
    run = ["--seq", seq, "--micro-batch", b, "--walk", "eager", "--recipe", precision]
    run += ["--attention", attention, "--recompute", checkpointing, "--device", device]
    return [str(a) for a in shape + run]


def predict(args: list[str]) -> dict:
    """calc's CLI with these flags and --json, run in-process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli([*args, "--json"])
    if status:
        raise RuntimeError(f"the CLI refused {' '.join(args)}")
    return json.loads(out.getvalue())


def measure(m, seq, b, precision, attention, checkpointing, device: str) -> dict:
    t0 = time.perf_counter()
    how = profile_step.measure_cpu if device == "cpu" else profile_step.measure_cuda
    got = how(m, precision, attention, checkpointing, seq, b)
    args = cli_args(m, seq, b, precision, attention, checkpointing, device)
    eager = predict(args)
    return {
        "model_type": m.model_type,
        "model": asdict(m),
        "params": eager["params"],
        "seq": seq,
        "micro_batch": b,
        "precision": precision,
        "attention": attention,
        "checkpointing": checkpointing,
        "device": device,
        **got,
        **predicted(args, got["measured_peak"]),
        "command": "python -m calc " + " ".join(args),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def predicted(args: list[str], measured: int) -> dict:
    """The CLI's answers for a measured step: the eager walk's and the deck's, with their ratios to it."""
    eager, deck = predict(args), predict(_deck_args(args))
    return {
        "predicted_peak": eager["peak"],
        "predicted_peak_event": eager["peak_event"],
        "ratio": round(eager["peak"] / measured, 4),
        "deck_peak": deck["peak"],
        "deck_ratio": round(deck["peak"] / measured, 4),
    }


def repredict(rows: list[dict]) -> None:
    """Ask the CLI again for each recorded step (calc changed), from the command recorded beside it."""
    for row in rows:
        row.update(predicted(row["command"].split()[3:], row["measured_peak"]))


def _deck_args(args: list[str]) -> list[str]:
    """The same model and step through the deck's accounting (its walk, with none of the eager flags)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("--walk", "--attention", "--device"):
            skip = True
            continue
        out.append(a)
    return out


def runs(classes=None):
    for model_type, shapes in SHAPES.items():
        if classes and model_type not in classes:
            continue
        for (m, seq, b), (precision, attention, checkpointing) in itertools.product(shapes, GRID):
            yield m, seq, b, precision, attention, checkpointing


def environment(device: str) -> str:
    import transformers

    cpu = f"{platform.machine()}, {torch.get_num_threads()} threads"
    where = torch.cuda.get_device_name() if device == "cuda" else cpu
    return f"PyTorch {torch.__version__}, transformers {transformers.__version__}, {where}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="measure_transformers.py", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    p.add_argument("--class", dest="classes", action="append", choices=list(SHAPES), help="only these classes")
    p.add_argument("--repredict", action="store_true", help="ask the CLI again for the recorded steps; measure none")
    args = p.parse_args(argv)
    if args.repredict:
        data = json.loads(RESULTS.read_text())
        repredict(data["runs"])
        if args.write:
            RESULTS.write_text(json.dumps(data, indent=1) + "\n")
        return 0
    if args.device not in ("cpu", "cuda"):
        p.error(f"--device: must be cpu or cuda, got {args.device!r}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this machine has no CUDA device")
    rows = []
    for run in runs(args.classes):
        row = measure(*run, args.device)
        rows.append(row)
        print(
            f"{row['model_type']:8} kv{row['model']['kv_heads']} {row['precision']:9} {row['attention']:5} "
            f"{row['checkpointing']:4} {row['measured_peak']:>13,} {row['predicted_peak']:>13,} {row['ratio']:.4f}"
            f"  deck {row['deck_ratio']:.3f}",
            flush=True,
        )
    if args.write:
        old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"environment": {}, "runs": []}
        classes = {r["model_type"] for r in rows}  # the rows of the classes measured now replace theirs
        kept = [r for r in old["runs"] if r["device"] != args.device or r["model_type"] not in classes]
        data = {"environment": {**old["environment"], args.device: environment(args.device)}, "runs": kept + rows}
        RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
