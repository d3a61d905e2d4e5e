#!/usr/bin/env python3
"""Write docs/results.md from `calc` (and docs/data/measurements.json). `--check`: fail if it differs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import calc  # noqa: E402

RESULTS = ROOT / "docs" / "results.md"
MEASUREMENTS = ROOT / "docs" / "data" / "measurements.json"
TRANSFORMERS = ROOT / "docs" / "data" / "transformers.json"  # scripts/training/measure_transformers.py
LORA = ROOT / "docs" / "data" / "lora.json"  # scripts/training/measure_lora.py
SEQ, MICRO_BATCH = 4096, 1
DECODER_SEQ, DECODER_BATCH = 8, 16
DECK_SAVED_VALUES = 2_320  # the deck's measured count per sequence per block for the Decoder
# The deck's published peaks (GB, one decimal), shown beside ours.
DECK_PEAKS = {"mixed-none": "199.5", "mixed-selective": "116.1", "mixed-full": "110.7", "fp32-none": "186.3"}
WHY_DIFFERENT = {
    "mixed-selective": (
        "the deck re-creates a layer's whole $sbh(34 + 5as/h)$ on top of its $34\\,sbh$ checkpoint, so the kept "
        "$34\\,sbh$ is counted twice; a real backward pass recomputes only the dropped attention term "
        "($5as^2b$), while the training loop still holds the 16-bit logits"
    ),
}


def gb(n: int) -> str:
    return f"{calc.format_gb(n)} GB"


def recipe_table(rows: list[dict]) -> list[str]:
    head = "| Recipe | Weights | Gradients | Optimiser | Master | Activations | Logits | Peak | Peak (GiB) | Deck |"
    out = [head, "|---|" + "---:|" * 9]
    for row in rows:
        cells = [gb(row["bytes"][c]) for c in calc.CATEGORIES]
        ours, deck = calc.format_gb(row["peak"]), DECK_PEAKS[row["id"]]
        mark = "same" if ours == deck else f"{deck} GB (see below)"
        out.append(
            f"| {row['label']} | "
            + " | ".join(cells)
            + f" | **{gb(row['peak'])}** | {calc.format_gib(row['peak'])} GiB | {mark} |"
        )
    return out


def exact_table(rows: list[dict]) -> list[str]:
    out = ["| Recipe | Peak (bytes) | Set by the event |", "|---|---:|---|"]
    out += [f"| `{row['id']}` | {row['peak']:,} | {row['peak_event']} |" for row in rows]
    return out


def measured_section() -> list[str]:
    out = ["### 10.6 Checked against a real training step", ""]
    if not MEASUREMENTS.exists():
        return [*out, "Pending: run `python scripts/training/measure.py --write`.", ""]
    data = json.loads(MEASUREMENTS.read_text())
    env = data.get("environment", {})
    if env:
        out += ["Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()) + ".", ""]
    sv = data.get("saved_values")
    if sv:
        out += [
            f"Values saved for backward by one Decoder block, per sequence: **{sv['per_sequence_per_block']:,}** "
            f"measured in a real backward pass; Korthikanti et al.'s formula gives {sv['formula']:,}. The deck "
            f"reports {DECK_SAVED_VALUES:,} measured; we could not reproduce that figure (the term-by-term account "
            "is below).",
            "",
        ]
    out += [
        "Predicted by both of calc's walks: the deck's (the default) and the eager one (`--walk eager`, what "
        "PyTorch's eager autograd allocates); each ratio is predicted / measured.",
        "",
        "| Run | Configuration | Device | Recomputation | Measured peak (bytes) | Deck walk (bytes) | Deck / measured "
        "| Eager walk (bytes) | Eager / measured |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    runs = data.get("runs", [])
    pending = [run for run in runs if run.get("measured_peak") is None]
    for run in runs:
        if run.get("measured_peak") is None:
            continue
        c = run["configuration"]
        config = (
            f"{c['layers']} layers, h {c['width']}, {c['heads']} heads, f {c['ffn']}, V {c['vocab']}; "
            f"{c['micro_batch']} x {c['seq']} tokens"
        )
        cells = [run["name"], config, run["device"], run["recompute"]]
        eager, m = run.get("predicted_peak_eager"), run["measured_peak"]
        cells += [f"{m:,}", f"{run['predicted_peak']:,}", f"{run['predicted_peak'] / m:.3f}"]
        cells += [f"{eager:,}", f"{eager / m:.3f}"] if eager is not None else ["", ""]
        out.append("| " + " | ".join(cells) + " |")
    if pending:
        names = sorted({f"`{run['name']}` ({run['device']})" for run in pending})
        commands = sorted({f"`{run['command']}`" for run in pending if run.get("command")})
        out += ["", f"Pending, {len(pending)} runs: {', '.join(names)}; produced by {', '.join(commands)}."]
    for note in data.get("notes", []):
        out += ["", note]
    return [*out, ""]


def recipes_section() -> list[str]:
    """§10.7: every precision recipe's bytes per parameter, with its source."""
    out = [
        "### 10.7 Precision recipes",
        "",
        "`--recipe` (and the page's Recipe): bytes per parameter of each kind of state, and the bytes of an "
        "activation value the deck's accounting uses. `mixed` and `fp32` are the deck's.",
        "",
        "| `--recipe` | What it is | Weights | Gradients | Adam moments | Master | Per parameter | Activations "
        "| Source |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in calc.RECIPES.values():
        act = "16-bit matmuls, fp32 rest" if r.autocast else f"{r.activations} bytes"
        out.append(
            f"| `{r.name}` | {r.label} | {r.weights} | {r.gradients} | {r.optimizer} | {r.master} | "
            f"**{r.per_param()}** | {act} | {r.source} |"
        )
    return [*out, ""]


def transformers_section() -> list[str]:
    """§10.8: the eager walk against transformers' own models (docs/data/transformers.json)."""
    out = ["### 10.8 Checked against transformers' own models", ""]
    command = "python scripts/training/measure_transformers.py --write"
    if not TRANSFORMERS.exists():
        return [*out, f"Pending: run `{command}`.", ""]
    data = json.loads(TRANSFORMERS.read_text())
    runs = data["runs"]
    env = data.get("environment", {})
    out += [
        "Models this project did not write: transformers' `LlamaForCausalLM`, `MistralForCausalLM`, "
        "`Qwen2ForCausalLM` (q/k/v biases), `GPT2LMHeadModel` (its default dropout of 0.1) and two mixtures of "
        "experts, `MixtralForCausalLM` and `Qwen2MoeForCausalLM` (every layer sparse, with its gated shared "
        "expert; transformers' default `grouped_mm` experts, no router loss), each built from "
        "a config with random weights, in fp32 (`fp32-full`) and under `torch.autocast` in bfloat16 "
        "(`autocast`), with `attn_implementation` eager and sdpa, without and with transformers' gradient "
        "checkpointing. The step is the usual loop: `loss = model(input_ids=x, labels=x).loss`, "
        "`loss.backward()`, `torch.optim.AdamW` `step()`, `zero_grad()`; the second step is measured, its "
        "peak the largest running total of PyTorch's allocator (every allocation recorded by the profiler on "
        "the CPU; `torch.cuda.max_memory_allocated` on a GPU). The prediction is the CLI's, from the flags a user "
        "would type (below), with `--walk eager`.",
        "",
        "Environment: " + "; ".join(f"{k}: {v}" for k, v in env.items()) + ".",
        "",
        "| Class | Runs | Eager / measured, lowest | highest | Deck / measured, lowest | highest |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    classes = dict.fromkeys(r["model_type"] for r in runs)
    for c in classes:
        rs = [r for r in runs if r["model_type"] == c and r["measured_peak"]]
        ratios, deck = [r["ratio"] for r in rs], [r["deck_ratio"] for r in rs]
        out.append(
            f"| {c} | {len(rs)} | {min(ratios):.4f} | {max(ratios):.4f} | {min(deck):.3f} | {max(deck):.3f} |"
        )
    measured = [r for r in runs if r["measured_peak"]]
    worst = max(measured, key=lambda r: abs(r["ratio"] - 1))
    out += [
        "",
        f"Worst of {len(measured)} runs: **{worst['ratio']:.4f}** ({worst['model_type']}, {worst['precision']}, "
        f"{worst['attention']} attention, checkpointing {worst['checkpointing']}). The deck's accounting, for the "
        "same steps, ranges from "
        f"{min(r['deck_ratio'] for r in measured):.3f} to {max(r['deck_ratio'] for r in measured):.3f}.",
        "",
        "Each row is predicted by the command a user types for it, for example the first one:",
        "",
        f"    {measured[0]['command']}",
        "",
        "(`--qkv-bias` for Qwen2, `--preset gpt2` and its own width for GPT-2, `--experts`, "
        "`--experts-per-token`, `--expert-ffn`, `--shared-expert-ffn` and `--shared-expert-gate` for the "
        "mixtures of experts; docs/data/transformers.json holds every row's command.) Shapes: layers L, width h, "
        "heads a, key/value heads k, feed-forward width f (an expert's, with E experts, top k, and Qwen2-MoE's "
        "shared expert's width), vocabulary V.",
        "",
        "| Class | L, h, a, k, f, V | Tokens | Recipe | Attention | Checkpointing | Measured (bytes) "
        "| Eager walk (bytes) | Eager / measured | Deck / measured |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|",
    ]
    for r in measured:
        m = r["model"]
        shape = ", ".join(_ffn(m) if k == "ffn" else str(m[k]) for k in ("layers", "hidden", "heads", "kv_heads", "ffn",
                                                                         "vocab"))  # fmt: skip
        out.append(
            f"| {r['model_type']} | {shape} | {r['micro_batch']} x {r['seq']} | {r['precision']} | {r['attention']} "
            f"| {r['checkpointing']} | {r['measured_peak']:,} | {r['predicted_peak']:,} | {r['ratio']:.4f} "
            f"| {r['deck_ratio']:.3f} |"
        )
    if not any(r["device"] == "cuda" for r in runs):
        out += [
            "",
            "CUDA rows are pending: no GPU was lent for this check. On a GPU machine, "
            "`python scripts/training/measure_transformers.py --device cuda --write` measures the same grid "
            "(`torch.cuda.max_memory_allocated`), predicted with `--device cuda`.",
        ]
    out += [
        "",
        "What the eager walk replays (calc/replay.py, calc/families.py): every op of transformers' code that "
        "makes a tensor as large as the tokens or the parameters, what its autograd node saves, the gradients "
        "its backward makes, and when Python lets each tensor go; autocast's 16-bit copies of every Linear's "
        "input and its cached weight casts; the copies matmul makes of head-split views (only for more than "
        "one sequence); `repeat_kv`'s copies (a view for one key/value head); sdpa's kernels (PyTorch's flash "
        "kernel for the CPU; its math fallback, in fp32, when dropout is on); GPT-2's fused QKV views and "
        "dropout (a noise tensor of the input's dtype on the CPU, a 1-byte mask on CUDA); the recomputation of "
        "a checkpointed layer in backward; the token batch, the padded and shifted labels, AdamW's step "
        "counters (CPU) and its temporaries (single-tensor on the CPU, foreach on CUDA). For the mixtures of "
        "experts, the sparse block of `MixtralSparseMoeBlock` and `Qwen2MoeSparseMoeBlock`: the router's "
        "logits, fp32 softmax and top-k (Mixtral's renormalisation, an in-place division that clones its input "
        "for backward), transformers' default `grouped_mm` experts (the k x tokens (token, expert) pairs "
        "sorted by expert, the tokens gathered in that order, one grouped matmul to gate and up over every "
        "expert's weights, act(gate) x up, one grouped matmul down, times the routing weights, scattered back "
        "and summed over k; in the weights' dtype, fp32 under autocast, as `grouped_mm` is not autocast's), "
        "Qwen2-MoE's shared expert and its sigmoid gate, and the sliding-window mask Qwen2-MoE's model makes "
        "beside the causal one.",
        "",
        "Routing: every tensor of the `grouped_mm` experts has k x tokens rows however the router spreads the "
        "tokens (the per-expert counts only set the offsets), and each expert weight's gradient is written "
        "whole, so the walk needs no assumption about routing and reads none from the run. Measured: zeroing "
        "every router (each token then goes to the same k experts) leaves the peak of both classes' second "
        "shape unchanged to the byte (fp32, sdpa). transformers' per-expert loop (`experts_implementation="
        "\"eager\"`, not the default, not modelled) peaked 2.5% (Mixtral) and 3.1% (Qwen2-MoE) higher on "
        "those steps, also the same under either routing.",
        "",
        "Not modelled: the CPU's bf16 matrix multiplications take scratch buffers from the allocator (oneDNN; "
        "tens to hundreds of KB here, next to each `addmm`/`mm` under autocast), which set the few ratios "
        "below 0.98; and scalar tensors of a few bytes. A fused QKV projection as in Megatron-LM, Phi-3 or "
        "GPT-NeoX would keep the whole QKV output alive through its views; Gemma scales its embeddings and "
        "adds norms; a mixture of experts with dense layers among the sparse ones, an expert capacity, "
        "experts that are not bias-free SwiGLU, or fine-tuned: `--walk eager` refuses those shapes rather than "
        "guess.",
    ]
    return [*out, ""]


def _ffn(model: dict) -> str:
    """A measured model's feed-forward width; for a mixture of experts, an expert's, the experts and top-k."""
    extra = dict(model.get("extra", ()))
    experts = extra.get("num_local_experts", extra.get("num_experts"))
    if not experts:
        return str(model["ffn"])
    shared = extra.get("shared_expert_intermediate_size")
    tail = f", shared {shared})" if shared else ")"
    return f"{model['ffn']} (E {experts}, top {extra['num_experts_per_tok']}{tail}"


def beyond_section() -> list[str]:
    """§11: ZeRO's Figure 1, LLaMA 7B split several ways, and the planner's first answers."""
    from calc.recipes import state_bytes

    llama = calc.PRESETS["llama-7b"]
    out = [
        "## 11. Beyond one device",
        "",
        "### 11.1 ZeRO's Figure 1: 7.5B parameters, K = 12, 64 data-parallel workers",
        "",
        "| ZeRO stage | Sharded | State per device |",
        "|---|---|---:|",
    ]
    sharded = ["nothing (baseline)", "Adam state and master copy", "+ gradients", "+ weights"]
    for zero, what in enumerate(sharded):
        per = state_bytes(7_500_000_000, "mixed", calc.Parallel(dp=64, zero=zero))
        out.append(f"| {zero} | {what} | {gb(sum(per.values()))} |")
    out += [
        "",
        f"### 11.2 LLaMA 7B split several ways (sequence {SEQ:,}, micro-batch 1, mixed precision)",
        "",
        "| dp | tp | pp | ZeRO | Sequence parallel | Recomputation | Peak per device | Set by the event |",
        "|---:|---:|---:|---:|---|---|---:|---|",
    ]
    layouts = [
        (calc.Parallel(), "none"),
        (calc.Parallel(dp=8, zero=1), "none"),
        (calc.Parallel(dp=8, zero=3), "selective"),
        (calc.Parallel(tp=8, sequence_parallel=True), "selective"),
        (calc.Parallel(tp=4, pp=2, sequence_parallel=True), "selective"),
        (calc.Parallel(dp=8, zero=3, flash=True), "none"),
    ]
    for par, recompute in layouts:
        s = calc.step(llama, SEQ, MICRO_BATCH, "mixed", recompute, par=par)
        sp = "yes" if par.sequence_parallel else "no"
        note = " (FlashAttention)" if par.flash else ""
        out.append(
            f"| {par.dp} | {par.tp} | {par.pp} | {par.zero} | {sp} | {recompute}{note} | "
            f"{gb(s['peak'])} | {s['peak_event']} |"
        )
    for name, batch in (("llama-7b", 1024), ("llama-2-70b", 1024)):
        rows = calc.plan(calc.PRESETS[name], SEQ, batch, 80 * calc.GB, limit=5)
        out += [
            "",
            f"### 11.{3 if name == 'llama-7b' else 4} The planner: `{name}`, sequence {SEQ:,}, global batch "
            f"{batch:,}, 80 GB devices",
            "",
            "| Devices | dp | tp | pp | ZeRO | Recomputation | Micro-batch | Micro-batches a step | Peak per device "
            "| Extra compute |",
            "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
            *[
                f"| {r['devices']} | {r['dp']} | {r['tp']} | {r['pp']} | {r['zero']} | {r['recompute']} | "
                f"{r['micro_batch']} | {r['grad_accum']:,} | {gb(r['peak'])} | {r['extra_compute']:.1%} |"
                for r in rows
            ],
        ]
    return [*out, ""]


# torchtune's published peaks for Llama-2-7B fine-tuning on one GPU, batch 2 (GB, CUDA allocator included),
# as the project's issue 12 quotes them: (label, mode, rank, targets, GB). "all layers" is taken as every
# linear of the blocks (all-linear); QLoRA as rank 8 on every linear.
TORCHTUNE = (
    ("LoRA q,v rank 8", "lora", 8, ("q", "v"), "15.57"),
    ("LoRA all layers rank 8", "lora", 8, "all", "15.87"),
    ("LoRA q,v rank 64", "lora", 64, ("q", "v"), "15.86"),
    ("LoRA all layers rank 64", "lora", 64, "all", "17.04"),
    ("QLoRA all layers rank 8", "qlora", 8, "all", "9.29"),
)
# What we assume torchtune ran (its single-device LoRA configs): bf16 weights, adapters and AdamW state,
# activation checkpointing, SDPA (no s x s scores kept), batch 2. Its sequence length is the data's (Alpaca,
# no fixed length), which we cannot know: two lengths are shown.
TORCHTUNE_RECIPE, TORCHTUNE_RECOMPUTE, TORCHTUNE_BATCH, TORCHTUNE_SEQS = "bf16", "full", 2, (512, 2048)


def finetune_section() -> list[str]:
    """§12: optimizers, NF4, and LoRA / QLoRA beside torchtune's published Llama-2-7B figures."""
    from calc import finetune
    from calc.optimizers import OPTIMIZERS, tensor_state_bytes

    llama = calc.PRESETS["llama-7b"]
    out = [
        "## 12. Fine-tuning on one card",
        "",
        "### 12.1 Optimizers",
        "",
        "`--optimizer`: the state each keeps for one 4,096 x 11,008 matrix (an FFN projection of LLaMA 7B), in "
        "bytes a parameter, with the moments in fp32 (`--recipe mixed`) and in bf16 (`--recipe bf16`).",
        "",
        "| `--optimizer` | What it is | fp32 moments | bf16 moments | Source |",
        "|---|---|---:|---:|---|",
    ]
    rows_, cols = 4096, 11008
    for opt in OPTIMIZERS.values():
        per = [tensor_state_bytes(opt.name, rows_, cols, m) / (rows_ * cols) for m in (4, 2)]
        out.append(f"| `{opt.name}` | {opt.label} | {per[0]:.4f} | {per[1]:.4f} | {opt.source} |")
    nf4 = finetune.nf4_bytes(rows_ * cols)
    lora_qv = calc.step(llama, 2048, 1, "bf16", "full", tune=finetune.Tuning("lora"))
    out += [
        "",
        "### 12.2 Trainable parameters and NF4",
        "",
        f"LoRA rank 8 on q and v of Llama-2-7B (32 layers, 4,096 wide): **{lora_qv['trainable_params']:,}** "
        "trainable parameters, r (d_in + d_out) for each adapted linear. QLoRA's base in bitsandbytes' NF4 with "
        f"double quantization: the same matrix takes {nf4:,} bytes, **{8 * nf4 / (rows_ * cols):.4f} bits** a "
        "weight (4 bits, 8 bits of absmax per 64 weights, 32 bits per 64 x 256).",
        "",
        "### 12.3 Beside torchtune's published Llama-2-7B figures",
        "",
        f"Our predictions with `--recipe {TORCHTUNE_RECIPE} --recompute {TORCHTUNE_RECOMPUTE} --flash "
        f"--micro-batch {TORCHTUNE_BATCH}` at sequence {TORCHTUNE_SEQS[0]:,} and {TORCHTUNE_SEQS[1]:,}; the "
        f"terms are at {TORCHTUNE_SEQS[1]:,}. The last two columns compare what each configuration adds to "
        "a reference (LoRA q,v rank 8 for LoRA; LoRA on all layers at rank 8 for QLoRA), where the allocator's "
        "share largely cancels.",
        "",
        "| Configuration | Trainable | Weights | Gradients + optimizer | Activations | Logits | Peak at "
        f"{TORCHTUNE_SEQS[0]:,} | Peak at {TORCHTUNE_SEQS[1]:,} | torchtune | torchtune - ours | Added (ours) "
        "| Added (torchtune) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    par = calc.Parallel(flash=True)
    ours, theirs_all, peaks = {}, {}, {}
    for label, mode, rank, targets, theirs in TORCHTUNE:
        chosen = tuple(finetune.linears(llama)) if targets == "all" else targets
        tune = finetune.Tuning(mode, rank=rank, targets=chosen)
        short, long = (
            calc.step(llama, s, TORCHTUNE_BATCH, TORCHTUNE_RECIPE, TORCHTUNE_RECOMPUTE, par=par, tune=tune)
            for s in TORCHTUNE_SEQS
        )
        ours[label], theirs_all[label] = long, int(float(theirs) * 1000) * calc.GB // 1000
        peaks[label] = short["peak"]
    gaps = {}
    for label, mode, _, _, theirs in TORCHTUNE:
        long, theirs_bytes = ours[label], theirs_all[label]
        b = long["bytes"]
        ref = TORCHTUNE[1][0] if mode == "qlora" else TORCHTUNE[0][0]
        added = ("", "") if label == ref else (
            gb(long["peak"] - ours[ref]["peak"]),
            gb(theirs_bytes - theirs_all[ref]),
        )
        gaps[label] = theirs_bytes - long["peak"]
        out.append(
            f"| {label} | {long['trainable_params']:,} | {gb(b['weights'])} | "
            f"{calc.format_gb(b['gradients'] + b['optimizer'], 2)} GB | {gb(b['activations'])} | {gb(b['logits'])} | "
            f"{gb(peaks[label])} | **{gb(long['peak'])}** | {theirs} GB | {gb(gaps[label])} | "
            f"{added[0]} | {added[1]} |"
        )
    lora = [label for label, mode, *_ in TORCHTUNE if mode == "lora"]
    qlora = next(label for label, mode, *_ in TORCHTUNE if mode == "qlora")
    base = ours[lora[0]]["bytes"]["weights"]
    adds = [ours[label]["peak"] - ours[lora[0]]["peak"] for label in lora[1:]]
    their_adds = [theirs_all[label] - theirs_all[lora[0]] for label in lora[1:]]
    lora_gaps = [gaps[label] for label in lora]
    out += [
        "",
        f"Term by term. *Weights*: the frozen base in bf16 ({gb(base)}) is nearly all of LoRA's peak; the "
        "adapters' own weights, gradients and AdamW state are small: the larger ranks and targets add "
        f"{gb(min(adds))} to {gb(max(adds))} to our peak, and {gb(min(their_adds))} to {gb(max(their_adds))} to "
        "torchtune's. *Activations*: with checkpointing each block keeps its input, and the block being "
        "recomputed holds what a frozen block still needs (Korthikanti et al.'s count less the inputs of frozen "
        "linears, plus the rank-r intermediates). *Logits*: the 16-bit logits and their fp32 copy, $6sbV$, "
        "often set the peak for small adapters. *What the walk leaves out*, and so sits in the difference: the "
        "CUDA allocator's reserved but unused blocks and its rounding; backward's temporaries (the gradient "
        "flowing down the residual stream, cross-entropy's fp32 gradient), RoPE's tables and AdamW's "
        "temporaries, which the eager walk counts (§10.8; for LoRA and frozen layers §12.4); and "
        "Korthikanti et al.'s layer is GPT's (an FFN 4h wide), not Llama's SwiGLU of width 11,008. The CUDA "
        "context is counted by neither.",
        "",
        "What we could not know: the lengths of torchtune's batches (Alpaca examples, not packed to a fixed "
        "length: hence two columns), whether its figure is the allocator's reserved or allocated peak, and "
        "whether its QLoRA peak comes from loading the bf16 checkpoint before quantizing it (torchtune "
        "quantizes with torchao's NF4, the same 4 bits and double-quantized scales as bitsandbytes). LoRA's rows "
        f"are {gb(min(lora_gaps))} to {gb(max(lora_gaps))} below torchtune's at sequence {TORCHTUNE_SEQS[1]:,}; "
        f"QLoRA's {gb(gaps[qlora])} gap is the one we cannot explain term by term. peft's default, fp32 adapters "
        "over a bf16 base (`autocast_adapter_dtype`), is not a recipe here.",
    ]
    return [*out, ""]


def lora_section() -> list[str]:
    """§12.4: the eager walk against peft's LoRA and frozen layers (docs/data/lora.json)."""
    out = ["### 12.4 LoRA steps measured", ""]
    command = "python scripts/training/measure_lora.py --write"
    if not LORA.exists():
        return [*out, f"Pending: run `{command}`.", ""]
    data = json.loads(LORA.read_text())
    runs = [r for r in data["runs"] if r["measured_peak"]]
    worst = max(runs, key=lambda r: abs(r["ratio"] - 1))
    out += [
        "The eager walk (§10.8) with `--finetune lora` and `--finetune freeze`, against transformers' Llama, "
        "Mistral and Qwen2 fine-tuned the way a user's code does it: peft's `get_peft_model(model, "
        "LoraConfig(r, lora_alpha, target_modules, lora_dropout=0.0))` (its fp32 adapters; on a checkpointed "
        "model transformers and peft make the embedding's output require grad), or `requires_grad_(False)` on "
        "the embedding and the first N layers; `torch.optim.AdamW` over the parameters that require grad. The "
        "step, the measurement (the second step's CPU allocator peak) and the prediction (the CLI in-process, "
        f"from the flags in the last column) are §10.8's; `{command}` remakes the table.",
        "",
        f"Environment: {data['environment']}.",
        "",
        f"Worst of {len(runs)} runs: **{worst['ratio']:.4f}** ({worst['model_type']}, {worst['tune']}, "
        f"{worst['precision']}, {worst['attention']} attention, checkpointing {worst['checkpointing']}).",
        "",
        "| Class | Shape | Tokens | Fine-tuning | Trainable | Recipe | Attention | Checkpointing "
        "| Measured (bytes) | Eager walk (bytes) | Eager / measured | Command |",
        "|---|---|---|---|---:|---|---|---|---:|---:|---:|---|",
    ]
    for r in runs:
        m = r["model"]
        shape = f"L {m['layers']}, h {m['hidden']}, {m['heads']} heads, {m['kv_heads']} kv, f {m['ffn']}, "
        shape += f"V {m['vocab']}"
        out.append(
            f"| {r['model_type']} | {shape} | {r['micro_batch']} x {r['seq']} | {r['tune']} "
            f"| {r['trainable_params']:,} | {r['precision']} | {r['attention']} | {r['checkpointing']} "
            f"| {r['measured_peak']:,} | {r['predicted_peak']:,} | {r['ratio']:.4f} | `{r['command']}` |"
        )
    out += [
        "",
        "What the walk follows for fine-tuning: a tensor requires grad only where a trainable parameter or an "
        "input that requires grad made it; an op records a node, and saves what the needed gradients use "
        "(derivatives.yaml), only then; backward stops where nothing below needs a gradient; frozen parameters "
        "get no gradient and no AdamW state, and AdamW's temporaries and step counters cover the trainable "
        "tensors only; autocast caches the 16-bit casts of trainable weights only, so a frozen weight's cast "
        "is made at each call and, where the input needs a gradient, saved; peft's adapter casts a 16-bit "
        "input to fp32 before `lora_A`. Not modelled, beside §10.8's oneDNN scratch buffers: bitsandbytes' 4-bit "
        "layers (`--finetune qlora` walks the deck only) and GPT-2's fused `c_attn` adapter.",
    ]
    return [*out, ""]


def render() -> str:
    llama = calc.PRESETS["llama-7b"]
    rows = calc.table(llama, SEQ, MICRO_BATCH)
    n = calc.param_counts(llama)["total"]
    mixed = calc.step(llama, SEQ, MICRO_BATCH, "mixed", "none")
    dec = calc.PRESETS["decoder"]
    dec_step = calc.step(dec, DECODER_SEQ, DECODER_BATCH, "mixed", "none")
    dec_n = dec_step["params"]
    per_seq_block = calc.layer_bytes(dec, DECODER_SEQ, 1) // 2  # 16-bit bytes -> values
    lines = [
        "# Results",
        "",
        "Every number on this page is computed by `calc` and written by `python scripts/make_results.py`;",
        "a test fails when this file differs from what that command produces. GB is $10^9$ bytes, GiB $2^{30}$.",
        "",
        "## 10. Memory",
        "",
        f"### 10.1 The four recipes: LLaMA 7B, sequence {SEQ:,}, micro-batch {MICRO_BATCH}",
        "",
        f"LLaMA 7B has {n:,} parameters (embedding, 32 layers, final RMSNorm and an untied head).",
        "",
        *recipe_table(rows),
        "",
        *exact_table(rows),
        "",
        "Drawn from the same numbers when the site is built (hooks/figures.py):",
        "",
        "![Memory by category for the four recipes, with each peak and an 80 GB device](figures/memory-breakdown.svg)",
        "",
        "![Peak against sequence length for the four recipes](figures/peak-vs-seq.svg)",
        "",
        "![One training step, event by event, with mixed-precision Adam and no recomputation](figures/step-walk.svg)",
        "",
    ]
    for row in rows:
        if row["id"] in WHY_DIFFERENT:
            lines += [
                f"**Why {row['id']} differs from the deck** ({DECK_PEAKS[row['id']]} GB there, "
                f"{calc.format_gb(row['peak'])} GB here): {WHY_DIFFERENT[row['id']]}.",
                "",
            ]
    lines += [
        "What these figures assume, as the deck does: activations follow Korthikanti et al.'s GPT layer (a "
        "feed-forward layer four times the width, dropout), whatever the model's own feed-forward width; the "
        "FP32 recipe keeps 16-bit activations and logits (fp32 weights with autocast); one micro-batch per "
        "step. The full-recomputation peak holds the 16-bit logits ($2sbV$) that the training loop keeps; at "
        "sequence 4,096 that equals one $V \\times h$ matrix, so this table alone cannot tell that event from "
        "another of the same size: §10.6 checks the walk against real steps instead.",
        "",
        "### 10.2 State: 16 bytes per parameter",
        "",
        f"Mixed-precision Adam: weights {gb(mixed['bytes']['weights'])}, gradients {gb(mixed['bytes']['gradients'])}, "
        f"Adam moments {gb(mixed['bytes']['optimizer'])}, master copy {gb(mixed['bytes']['master'])}: "
        f"$16N$ = {16 * n:,} bytes = **{gb(16 * n)}** ({calc.format_gib(16 * n)} GiB).",
        "",
        "### 10.3 Activations",
        "",
        f"Per layer, no recomputation: {mixed['activations_per_layer']:,} bytes; over 32 layers "
        f"**{gb(mixed['bytes']['activations'])}**. Logits ($6sbV$): {mixed['bytes']['logits']:,} bytes.",
        "",
        "### 10.4 The Decoder",
        "",
        f"{dec_n:,} parameters; $16N$ = **{16 * dec_n:,} bytes** of state. Korthikanti et al.'s formula: "
        f"**{per_seq_block:,} values** per sequence per block. Peak at {DECODER_BATCH} sequences of "
        f"{DECODER_SEQ}, mixed precision, no recomputation: **{dec_step['peak']:,} bytes**, set by: "
        f"{dec_step['peak_event']}.",
        "",
        "### 10.5 Parameter counts of the presets",
        "",
        "| Preset | Parameters |",
        "|---|---:|",
        *[f"| `{name}` | {calc.param_counts(s)['total']:,} |" for name, s in calc.PRESETS.items()],
        "",
        *measured_section(),
        *recipes_section(),
        *transformers_section(),
        *beyond_section(),
        *finetune_section(),
        *lora_section(),
    ]
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--check", action="store_true", help="exit 1 if docs/results.md is not up to date")
    args = p.parse_args()
    text = render()
    if args.check:
        if RESULTS.read_text() != text:
            print("docs/results.md is out of date: run python scripts/make_results.py", file=sys.stderr)
            return 1
        return 0
    RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
