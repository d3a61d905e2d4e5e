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
QLORA = ROOT / "docs" / "data" / "qlora.json"  # scripts/training/measure_qlora.py
FAMILIES = ROOT / "docs" / "data" / "families.json"  # scripts/training/measure_families.py
LOOPS = ROOT / "docs" / "data" / "loops.json"  # scripts/training/measure_loops.py
ENGINES = ROOT / "docs" / "data" / "engines.json"  # scripts/training/measure_engines.py
# What `make gpu-check` writes (scripts/training/gpu_check.py), by the measurement it comes from.
CUDA_SOURCES = {"dense (§10.6)": MEASUREMENTS, "transformers' models (§10.8)": TRANSFORMERS,
                "LoRA": ROOT / "docs" / "data" / "lora-cuda.json", "QLoRA": ROOT / "docs" / "data" / "qlora-cuda.json",
                "loops (§13.2)": LOOPS}  # fmt: skip
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


def section_data(heading: str, path: Path, command: str) -> tuple[list[str], dict | None]:
    """A measured section's heading, and the JSON its command writes to `path`; None while that file is missing,
    and then the heading says which command to run."""
    out = [heading, ""]
    if not path.exists():
        return [*out, f"Pending: run `{command}`.", ""], None
    return out, json.loads(path.read_text())


def measured_section() -> list[str]:
    out, data = section_data("### 10.6 Checked against a real training step", MEASUREMENTS,
                             "python scripts/training/measure.py --write")
    if data is None:
        return out
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
        tensors = run.get("measured_peak_tensors", m)  # a CPU row: the workspace apart; a GPU's: its peak
        cells += [f"{m:,}", f"{run['predicted_peak']:,}", f"{run['predicted_peak'] / m:.3f}"]
        cells += [f"{eager:,}", f"{eager / tensors:.3f}"] if eager is not None else ["", ""]
        out.append("| " + " | ".join(cells) + " |")
    cpu = [run for run in runs if run["device"] == "cpu" and run.get("measured_peak") is not None]
    out += ["", *workspace_note(cpu, "docs/data/measurements.json", lambda r: f"`{r['name']}`, {r['recompute']}")]
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


TRANSFORMERS_PROSE = """\
Models this project did not write: transformers' `LlamaForCausalLM`, `MistralForCausalLM`, `Qwen2ForCausalLM` (q/k/v
biases), `GPT2LMHeadModel` (its default dropout of 0.1) and two mixtures of experts, `MixtralForCausalLM` and
`Qwen2MoeForCausalLM` (every layer sparse, with its gated shared expert; transformers' default `grouped_mm` experts,
no router loss), each built from a config with random weights, in fp32 (`fp32-full`) and under `torch.autocast` in
bfloat16 (`autocast`), with `attn_implementation` eager and sdpa, without and with transformers' gradient
checkpointing. The step is the usual loop: `loss = model(input_ids=x, labels=x).loss`, `loss.backward()`,
`torch.optim.AdamW` `step()`, `zero_grad()`; the second step is measured, its peak the largest running total of
PyTorch's allocator (every allocation recorded by the profiler on the CPU; `torch.cuda.max_memory_allocated` on a
GPU). The prediction is the CLI's, from the flags a user would type (below), with `--walk eager`.

Environment: {environment}.
"""
TRANSFORMERS_WORST = """\
Worst of {runs} runs: **{worst[ratio]:.4f}** ({worst[model_type]}, {worst[precision]}, {worst[attention]} attention,
checkpointing {worst[checkpointing]}). The deck's accounting, for the same steps, ranges from {deck_low:.3f} to
{deck_high:.3f}.

Each row is predicted by the command a user types for it, for example the first one:

    {first_command}

(`--qkv-bias` for Qwen2, `--preset gpt2` and its own width for GPT-2, `--experts`, `--experts-per-token`,
`--expert-ffn`, `--shared-expert-ffn` and `--shared-expert-gate` for the mixtures of experts;
docs/data/transformers.json holds every row's command.) Shapes: layers L, width h, heads a, key/value heads k,
feed-forward width f (an expert's, with E experts, top k, and Qwen2-MoE's shared expert's width), vocabulary V.
"""
TRANSFORMERS_PENDING = """\
CUDA rows are pending: no GPU was lent for this check. On a GPU machine, `python
scripts/training/measure_transformers.py --device cuda --write` measures the same grid
(`torch.cuda.max_memory_allocated`), predicted with `--device cuda`.
"""
TRANSFORMERS_FOLLOWS = """\
What the eager walk replays (calc/replay.py, calc/families.py): every op of transformers' code that makes a tensor
as large as the tokens or the parameters, what its autograd node saves, the gradients its backward makes, and when
Python lets each tensor go; autocast's 16-bit copies of every Linear's input and its cached weight casts; the copies
matmul makes of head-split views (only for more than one sequence); `repeat_kv`'s copies (a view for one key/value
head); sdpa's kernels (PyTorch's flash kernel for the CPU; its math fallback, in fp32, when dropout is on); GPT-2's
fused QKV views and dropout (a noise tensor of the input's dtype on the CPU, a 1-byte mask on CUDA); the
recomputation of a checkpointed layer in backward; the token batch, the padded and shifted labels, AdamW's step
counters (CPU) and its temporaries (single-tensor on the CPU, foreach on CUDA). For the mixtures of experts, the
sparse block of `MixtralSparseMoeBlock` and `Qwen2MoeSparseMoeBlock`: the router's logits, fp32 softmax and top-k
(Mixtral's renormalisation, an in-place division that clones its input for backward), transformers' default
`grouped_mm` experts (the k x tokens (token, expert) pairs sorted by expert, the tokens gathered in that order, one
grouped matmul to gate and up over every expert's weights, act(gate) x up, one grouped matmul down, times the
routing weights, scattered back and summed over k; in the weights' dtype, fp32 under autocast, as `grouped_mm` is
not autocast's), Qwen2-MoE's shared expert and its sigmoid gate, and the sliding-window mask Qwen2-MoE's model makes
beside the causal one.

Routing: every tensor of the `grouped_mm` experts has k x tokens rows however the router spreads the tokens (the
per-expert counts only set the offsets), and each expert weight's gradient is written whole, so the walk needs no
assumption about routing and reads none from the run. Measured: zeroing every router (each token then goes to the
same k experts) leaves the peak of both classes' second shape unchanged to the byte (fp32, sdpa). transformers'
per-expert loop (`experts_implementation="eager"`, not the default, not modelled) peaked 2.5% (Mixtral) and 3.1%
(Qwen2-MoE) higher on those steps, also the same under either routing.

Not modelled: the CPU's bf16 matrix multiplications take scratch buffers from the allocator (oneDNN; tens to
hundreds of KB here, next to each `addmm`/`mm` under autocast), which set the few ratios below 0.98; and scalar
tensors of a few bytes. A fused QKV projection as in Megatron-LM, Phi-3 or GPT-NeoX would keep the whole QKV output
alive through its views; Gemma scales its embeddings and adds norms; a mixture of experts with an expert capacity,
experts that are not bias-free SwiGLU, or fine-tuned: `--walk eager` refuses those shapes rather than guess (dense
layers among the sparse ones it has replayed since, §13.1).
"""


def transformers_section() -> list[str]:
    """§10.8: the eager walk against transformers' own models (docs/data/transformers.json)."""
    command = "python scripts/training/measure_transformers.py --write"
    out, data = section_data("### 10.8 Checked against transformers' own models", TRANSFORMERS, command)
    if data is None:
        return out
    runs = data["runs"]
    env = "; ".join(f"{k}: {v}" for k, v in data.get("environment", {}).items())
    out += [*prose(TRANSFORMERS_PROSE, environment=env), "",
            "| Class | Runs | Eager / measured, lowest | highest | Deck / measured, lowest | highest |",
            "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for c in dict.fromkeys(r["model_type"] for r in runs):
        rs = [r for r in runs if r["model_type"] == c and r["measured_peak"]]
        ratios, deck = [r["ratio"] for r in rs], [r["deck_ratio"] for r in rs]
        out.append(f"| {c} | {len(rs)} | {min(ratios):.4f} | {max(ratios):.4f} | {min(deck):.3f} | {max(deck):.3f} |")
    measured = [r for r in runs if r["measured_peak"]]
    worst = max(measured, key=lambda r: abs(r["ratio"] - 1))
    deck = [r["deck_ratio"] for r in measured]
    out += ["", *prose(TRANSFORMERS_WORST, runs=len(measured), worst=worst, deck_low=min(deck), deck_high=max(deck),
                       first_command=measured[0]["command"]), "",
            "| Class | L, h, a, k, f, V | Tokens | Recipe | Attention | Checkpointing | Measured (bytes) "
            "| Eager walk (bytes) | Eager / measured | Deck / measured |",
            "|---|---|---|---|---|---|---:|---:|---:|---:|"]  # fmt: skip
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
        out += ["", *prose(TRANSFORMERS_PENDING)]
    return [*out, "", *prose(TRANSFORMERS_FOLLOWS), ""]


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


# torchtune's published peaks for Llama-2-7B fine-tuning on one GPU, batch 2 (GB): its LoRA tutorial's table
# (docs/source/tutorials/lora_finetune.rst) and its QLoRA tutorial's (qlora_finetune.rst), "peak memory
# reserved, training", as torchtune's memory_stats_log prints torch.cuda.max_memory_reserved. (label, mode,
# rank, targets, GB). The LoRA tutorial's "all layers" are q, k, v, output_proj, the MLP *and the output
# projection* (apply_lora_to_output: True); 7B_qlora_single_device.yaml adapts every block linear at rank 8,
# not the output projection.
TORCHTUNE = (
    ("LoRA q,v rank 8", "lora", 8, ("q", "v"), "15.57"),
    ("LoRA all layers rank 8", "lora", 8, "all", "15.87"),
    ("LoRA q,v rank 64", "lora", 64, ("q", "v"), "15.86"),
    ("LoRA all layers rank 64", "lora", 64, "all", "17.04"),
    ("QLoRA all layers rank 8", "qlora", 8, "all", "9.29"),
)
# The QLoRA tutorial's "peak memory reserved, model init" for the same two recipes (GB). memory_stats_log
# resets the peak counters after logging, which sets the reserved peak to what is reserved now: the caching
# allocator keeps what init reserved, so training's reserved peak cannot be below it.
TORCHTUNE_INIT = {"LoRA q,v rank 8": "13.98", "QLoRA all layers rank 8": "9.13"}
# What torchtune ran (7B_lora_single_device.yaml, 7B_qlora_single_device.yaml): dtype bf16 (weights, adapters
# and torch.optim.AdamW's state all bf16), enable_activation_checkpointing: True, compile: False, SDPA
# attention (no s x s scores kept), batch 2. Its sequence length is the data's (alpaca_cleaned_dataset,
# max_seq_len null: each batch padded to its longer example), which we cannot know: two lengths are shown.
TORCHTUNE_RECIPE, TORCHTUNE_RECOMPUTE, TORCHTUNE_BATCH, TORCHTUNE_SEQS = "bf16", "full", 2, (512, 2048)


def _torchtune_runs(llama) -> dict:
    """For each torchtune row: the deck walk and (LoRA only) the eager walk at both lengths, and the tuning."""
    from calc import finetune

    par, out = calc.Parallel(flash=True), {}
    for label, mode, rank, targets, theirs in TORCHTUNE:
        chosen = tuple(finetune.linears(llama)) if targets == "all" else targets
        tune = finetune.Tuning(mode, rank=rank, targets=chosen, adapter_dtype="model")  # torchtune's bf16 adapters
        how = {"micro_batch": TORCHTUNE_BATCH, "recipe": TORCHTUNE_RECIPE, "recompute": TORCHTUNE_RECOMPUTE}
        deck = [calc.step(llama, s, **how, par=par, tune=tune) for s in TORCHTUNE_SEQS]
        eager = None
        if mode == "lora":
            eager = [calc.step(llama, s, **how, walk="eager", attention="sdpa", tune=tune) for s in TORCHTUNE_SEQS]
        head = rank * (llama.hidden + llama.vocab) if mode == "lora" and targets == "all" else 0
        out[label] = {"tune": tune, "deck": deck, "eager": eager, "head_adapter": head,
                      "theirs": int(float(theirs) * 1000) * calc.GB // 1000}  # fmt: skip
    return out


def nf4_init_transient(n: int) -> int:
    """Bytes torchao's to_nf4 held at once while quantizing an n-weight matrix, before it quantized in chunks:
    quantize_tensor_nearest compares every weight with the 16 NF4 values, (value - nf4).abs() in bf16 (the
    difference and its absolute value, n x 16 each) and then min(dim=-1) (n bf16 values, n int64 indices)."""
    return 2 * (n * 16 * 2) + n * (2 + 8)


def deepspeed_section() -> list[str]:
    """§11.5: DeepSpeed's own estimators (recorded by scripts/training/deepspeed_estimators.py) beside calc's ZeRO
    accounting for the same parameter counts."""
    from calc.api import NODE
    from calc.recipes import host_bytes, state_bytes

    path = ROOT / "docs" / "data" / "deepspeed_estimators.json"
    data = json.loads(path.read_text())
    out = [
        "### 11.5 DeepSpeed's estimators beside calc",
        "",
        f"DeepSpeed {data['deepspeed']}'s `estimate_zero2_model_states_mem_needs` and "
        "`estimate_zero3_model_states_mem_needs` (the arithmetic behind its `..._all_cold` estimators, "
        f"`additional_buffer_factor` {data['additional_buffer_factor']}, `zero_init` on) for calc's presets' "
        "parameter counts, beside calc's model states per device for `--dp N --zero K` in mixed precision "
        "(weights, gradients, Adam state and master copy: ZeRO's Figure 1). Recorded by "
        "`scripts/training/deepspeed_estimators.py` (`docs/data/deepspeed_estimators.json`); calc's side is "
        "today's. Neither side counts activations, logits or DeepSpeed's buckets.",
        "",
        "| Model | GPUs | ZeRO | Offload | DeepSpeed per GPU | calc per GPU | DeepSpeed / calc "
        "| DeepSpeed's host RAM a node | calc's host a node | DeepSpeed / calc (host) |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in data["rows"]:
        assert row["params"] == calc.param_counts(calc.PRESETS[row["model"]])["total"], row["model"]
        par = calc.Parallel(dp=row["gpus"], zero=row["stage"], offload=row["offload"])
        ours = sum(state_bytes(row["params"], "mixed", par).values())
        ratio = f"{row['deepspeed_gpu'] / ours:.3f}" if ours else "- (calc: 0)"
        host = sum(host_bytes(row["params"], "mixed", par).values()) * min(row["gpus"], NODE)
        host_ratio = f"{row['deepspeed_host_per_node'] / host:.3f}" if host else "-"
        out.append(f"| `{row['model']}` | {row['gpus']} | {row['stage']} | {row['offload']} | "
                   f"{gb(row['deepspeed_gpu'])} | {gb(ours)} | {ratio} | {gb(row['deepspeed_host_per_node'])} | "
                   f"{gb(host) if host else 'none'} | {host_ratio} |")
    one = next(r for r in data["rows"] if r["gpus"] == 1 and r["stage"] == 2 and r["offload"] == "none")
    out += [
        "",
        f"Why DeepSpeed says {one['deepspeed_gpu'] // one['params']} bytes a parameter on one GPU where calc says "
        f"{sum(state_bytes(one['params'], 'mixed', calc.Parallel()).values()) // one['params']}: its estimator "
        "counts for stage 2, beside the 16-bit weights and gradients and the fp32 master copy and Adam moments that "
        "ZeRO's paper (and calc) count, an fp32 copy of each rank's gradient partition: 18 bytes a parameter over "
        "the GPUs where calc has 14 (its comment: \"18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit + "
        "8_optimizer_states_32bit\"), so DeepSpeed / calc is 1.25 on one GPU and falls towards 1 as the GPUs "
        "grow. For stage 3 it counts 18 bytes a parameter over the GPUs where calc has 16, and 4 bytes for each "
        "parameter of the largest module (the embedding or the head here), gathered whole; its code gives no "
        "breakdown of the 18.",
        "",
        "With offload (`--offload optimizer`, or `optimizer+params` under ZeRO 3; the deck walk's accounting of "
        "what DeepSpeed 0.19's code allocates, not measured) calc keeps on the host each process's partition of the "
        "fp32 weights, Adam's two moments and the fp32 gradients (16 bytes a parameter) and one more copy of the "
        "partition in the model's dtype (stage 1 and 2: the pinned weights the step's result goes back through, "
        "`param_buffer_of_bit16_for_cpu_offload_groups`; stage 3: the reduced gradients, "
        "`grad_partitions_flat_buffer`), 18 bytes in all, and with the weights offloaded their 16-bit shard, 20; a "
        f"node holds {NODE} processes' (fewer where the job has fewer). Under stage 1 and 2 a step of several "
        "micro-batches adds a 16-bit copy of the accumulated gradients (`accumulated_grads_in_cpu`), which these "
        "rows, one micro-batch a step, leave out. On the device calc keeps the 16-bit weights (none with the "
        "weights offloaded: they are gathered module by module) and, under ZeRO 1, the gradients. DeepSpeed's "
        "estimators count 16 and 18 bytes a parameter, without that 16-bit copy, times their buffer factor of 1.5: "
        "their host figure is 1.333 of calc's (16 x 1.5 / 18), and 1.350 with the weights offloaded (18 x 1.5 / 20), "
        "wherever they count the offloaded state alone. Where the ratio is higher they count something else "
        "instead: under stage 2 with offload, 4 bytes a parameter for every GPU in the job, the fp32 copy each "
        "process loads the checkpoint into, whenever that is more (8 GPUs: 32 bytes against 16). On the device, "
        "under stage 3, they count the largest module gathered whole in fp32 (4 bytes a parameter of it); calc's "
        "walk gathers each module in its 16-bit dtype as it runs, and counts none in the resident state. Neither "
        "counts DeepSpeed's gradient buckets, nor, under stage 1 and 2 with offload, the device's gradient buffer "
        "of the largest parameter's size (`temp_grad_buffer_for_gpu_offload`). Without offload DeepSpeed's host "
        "column is the checkpoint copy, which calc does not count.",
        "",
    ]
    return out


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
    long_, short_ = f"{TORCHTUNE_SEQS[1]:,}", f"{TORCHTUNE_SEQS[0]:,}"
    out += [
        "",
        "### 12.2 Trainable parameters and NF4",
        "",
        f"LoRA rank 8 on q and v of Llama-2-7B (32 layers, 4,096 wide): **{lora_qv['trainable_params']:,}** "
        "trainable parameters, r (d_in + d_out) for each adapted linear. QLoRA's base in bitsandbytes' NF4 with "
        f"double quantization: the same matrix takes {nf4:,} bytes, **{8 * nf4 / (rows_ * cols):.4f} bits** a "
        "weight (4 bits, 8 bits of absmax per 64 weights, 32 bits per 64 x 256). torchao's NF4Tensor, which "
        "torchtune uses, keeps the same 4-bit codes and 8-bit scales but its 256-block factors in bf16: "
        f"{8 * (nf4 - 2 * (rows_ * cols // (64 * 256))) / (rows_ * cols):.4f} bits, about 1 MB less for the "
        "whole 7B model.",
        "",
        "### 12.3 Beside torchtune's published Llama-2-7B figures",
        "",
        f"Our predictions with `--recipe {TORCHTUNE_RECIPE} --recompute {TORCHTUNE_RECOMPUTE} --flash "
        f"--micro-batch {TORCHTUNE_BATCH}` at sequence {short_} and {long_}; the terms are the deck walk's at "
        f"{long_}. torchtune's figures are the CUDA caching allocator's *reserved* peak "
        "(`torch.cuda.max_memory_reserved`, as its tutorials' tables and `memory_stats_log` say), ours the "
        "allocated peak of one step.",
        "",
        "| Configuration | Trainable | Weights | Gradients + optimizer | Activations | Logits | Deck walk at "
        f"{short_} | Deck walk at {long_} | Eager walk at {short_} | Eager walk at {long_} | torchtune |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    runs = _torchtune_runs(llama)
    for label, *_, theirs in TORCHTUNE:
        run = runs[label]
        long, b = run["deck"][1], run["deck"][1]["bytes"]
        eager = [gb(e["peak"]) for e in run["eager"]] if run["eager"] else ["not walked"] * 2
        out.append(
            f"| {label} | {long['trainable_params']:,} | {gb(b['weights'])} | "
            f"{calc.format_gb(b['gradients'] + b['optimizer'], 2)} GB | {gb(b['activations'])} | {gb(b['logits'])} | "
            f"{gb(run['deck'][0]['peak'])} | {gb(long['peak'])} | {eager[0]} | **{eager[1]}** | {theirs} GB |"
        )
    out += ["", *_torchtune_terms(llama, runs)]
    return [*out, ""]


def _torchtune_terms(llama, runs: dict) -> list[str]:
    """§12.3's term-by-term account of the difference, row by row: the table, then what each row says."""
    return [*_torchtune_table(llama, runs), *_torchtune_prose(llama, runs)]


def _torchtune_qlora(llama, runs: dict) -> dict:
    """The QLoRA row's terms: its run, the NF4 base resident at the step's start, torchtune's reserve at model
    init, and torchao's quantization transient for the largest matrix."""
    from calc import finetune

    qlora = next(label for label, mode, *_ in TORCHTUNE if mode == "qlora")
    largest = max(d_in * d_out for d_in, d_out in finetune.linears(llama).values())
    return {"label": qlora, "q": runs[qlora], "model": runs[qlora]["deck"][1]["events"][0]["bytes"],
            "init": int(float(TORCHTUNE_INIT[qlora]) * 1000) * calc.GB // 1000, "largest": largest,
            "transient": nf4_init_transient(largest)}  # fmt: skip


def _torchtune_table(llama, runs: dict) -> list[str]:
    lora = [label for label, mode, *_ in TORCHTUNE if mode == "lora"]
    out = [
        "Term by term, row by row (GB; *deck* and *eager* are our two walks at the two lengths):",
        "",
        f"| Configuration | Eager - deck at {TORCHTUNE_SEQS[1]:,} | Output projection's adapter | torchtune - "
        f"eager at {TORCHTUNE_SEQS[0]:,} | torchtune - eager at {TORCHTUNE_SEQS[1]:,} | Reserved at model init "
        "(torchtune) | What is left |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for label in lora:
        run = runs[label]
        eager, deck, theirs = run["eager"], run["deck"], run["theirs"]
        head = run["head_adapter"]
        head_cell = f"{head:,} params, {calc.format_gb(8 * head, 3)} GB" if head else "none"
        init = TORCHTUNE_INIT.get(label)
        left = [theirs - e["peak"] - 8 * head for e in eager]
        verdict = (
            "within what the unknown length spans"
            if left[0] >= 0 >= left[1]
            else f"{gb(min(left, key=abs))} at the nearer length"
        )
        out.append(
            f"| {label} | {gb(eager[1]['peak'] - deck[1]['peak'])} | {head_cell} | {gb(theirs - eager[0]['peak'])} "
            f"| {gb(theirs - eager[1]['peak'])} | {init + ' GB' if init else 'not published'} | {verdict} |"
        )
    t = _torchtune_qlora(llama, runs)
    q, qlora = t["q"], t["label"]
    out.append(
        f"| {qlora} | not walked | none | {gb(q['theirs'] - q['deck'][0]['peak'])} (deck) | "
        f"{gb(q['theirs'] - q['deck'][1]['peak'])} (deck) | {TORCHTUNE_INIT[qlora]} GB | "
        f"{gb(q['theirs'] - t['init'])} grew in training |"
    )
    return out


def _torchtune_prose(llama, runs: dict) -> list[str]:
    lora = [label for label, mode, *_ in TORCHTUNE if mode == "lora"]
    t = _torchtune_qlora(llama, runs)
    q, qlora, model, init, largest, transient = (t[k] for k in ("q", "label", "model", "init", "largest",
                                                                "transient"))  # fmt: skip
    e_lora = runs[lora[0]]["eager"]
    span = [gb(e_lora[i]["peak"]) for i in (0, 1)]
    bf16_base = runs[TORCHTUNE[1][0]]["deck"][1]["events"][0]["bytes"]
    eager_q = [e["peak"] - bf16_base + model for e in runs[TORCHTUNE[1][0]]["eager"]]
    return [
        "",
        "*The LoRA rows.* The deck walk leaves out backward's temporaries; the eager walk, which follows peft's "
        "LoRA within 3% of measured steps (§12.4), counts them: cross-entropy's fp32 gradient beside the fp32 "
        "logits sets its peak, "
        f"{gb(runs[lora[0]]['eager'][1]['peak'] - runs[lora[0]]['deck'][1]['peak'])} above the deck's at "
        f"{TORCHTUNE_SEQS[1]:,}. torchtune's LoRA figures then lie inside the range the unknown length spans "
        f"(LoRA q,v rank 8: {span[0]} at {TORCHTUNE_SEQS[0]:,}, {span[1]} at {TORCHTUNE_SEQS[1]:,}, torchtune "
        "15.57 GB): Alpaca examples are padded only to the longer of each pair, and the peak over an epoch is "
        "set by its longest batch, which we cannot know. The LoRA tutorial's \"all layers\" also adapt the "
        "output projection, which calc cannot: its adapter's weights, gradients and AdamW state (8 bytes a "
        "parameter in bf16) are the column shown; its rank-r intermediate is small, and its s x b x V output "
        "lives only during the head's forward, below the cross-entropy peak (our reading; not measured). The "
        "caching allocator's rounding and the blocks it keeps reserved are in torchtune's figure and in "
        "neither walk: at model init it reserved 0.02 GB more than it allocated (13.98 against 13.96 GB). "
        "The eager walk replays peft's LoRA layer, whose ops torchtune's `LoRALinear` matches (the frozen "
        "linear, then B(A(x)) scaled and added). torchtune keeps its adapters in bf16, so these rows are "
        "walked with `--adapter-dtype model`; peft's default fp32 adapters would add the fp32 copy of each "
        "adapted layer's input that peft casts for them (with checkpointing, in the recomputed block only).",
        "",
        f"*The QLoRA row.* Its training figure ({q['theirs'] / calc.GB:.2f} GB) is only "
        f"{gb(q['theirs'] - init)} above what torchtune reserved while building the model "
        f"({TORCHTUNE_INIT[qlora]} GB), and `memory_stats_log` resets the peak counters after model init "
        "without emptying the cache: training's reserved peak starts from what init left reserved. So the "
        "9.29 GB is set by model init, not by the step. The step itself, by our walks, allocates "
        f"{gb(q['deck'][0]['peak'])} to {gb(q['deck'][1]['peak'])} (deck walk, at {TORCHTUNE_SEQS[0]:,} and "
        f"{TORCHTUNE_SEQS[1]:,}) or about {gb(eager_q[0])} to {gb(eager_q[1])} (the eager walk's LoRA step on "
        f"all layers with its bf16 base, {gb(bf16_base)}, replaced by the NF4 one, {gb(model)}: an estimate, "
        "the eager walk replays bitsandbytes' 4-bit layers (§12.5), not torchao's that torchtune runs), which "
        "fits inside the init reserve. What init held: "
        f"the NF4 model ({gb(model)}), and the quantization's temporaries. torchao's `to_nf4` at the time "
        "compared every weight with the 16 NF4 values at once, `(value - nf4).abs()` in bf16, then took the "
        f"minimum: for one 4,096 x 11,008 matrix {gb(transient)} at once (later torchao quantizes in chunks). "
        f"NF4 model plus that transient: {gb(model + transient)}; the remaining "
        f"{gb(init - model - transient)} up to 9.13 GB is uncertain (the allocator's fragmentation over "
        "blocks of many sizes, the checkpoint's bf16 tensors copied to the GPU one at a time to be quantized; "
        "neither is published). torchtune's current QLoRA config also uses `CEWithChunkedOutputLoss`, which "
        "upcasts the logits to fp32 a chunk at a time; whether the tutorial's run did is not stated.",
        "",
        "Not in either walk, and small here: the CUDA context (outside PyTorch's allocator), RoPE's tables. "
        "The per-call dequantized weight of a 4-bit linear is the deck walk's as one layer's largest "
        f"({gb(2 * largest)}), and the eager walk's at every call as bitsandbytes makes it (§12.5).",
    ]


def _short_shape(m: dict) -> str:
    """A measured model's shape as §10.8 writes it: layers, width, heads, key/value heads, FFN, vocabulary."""
    return ", ".join(str(m[k]) for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab"))


QLORA_PROSE = """\
transformers' Llama with random weights, saved and loaded back the way a QLoRA user loads a checkpoint:
`from_pretrained(dtype=torch.bfloat16, quantization_config=BitsAndBytesConfig(load_in_4bit=True,
bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16))`, so every block
linear is bitsandbytes' `Linear4bit`; peft's LoRA, once with its default `autocast_adapter_dtype=True` (fp32
adapters: calc's `--adapter-dtype fp32`, its default too) and once with `autocast_adapter_dtype=False` (bf16
adapters: `--adapter-dtype model`); `torch.optim.AdamW` over the adapters; the second step's CPU allocator peak
(§10.8's profiler replay). bitsandbytes runs its 4-bit layers on the CPU (from 0.48; without the optional `kernels`
package it falls back to PyTorch code
that dequantizes the weight for each matmul). Each run is made again from the same file without the quantization
config (a bf16 base, `--finetune lora`), so what QLoRA changes shows apart from what the deck walk misses for any
step of so small a model. `{command}` remakes the table; with `--device cuda` it measures
`torch.cuda.max_memory_allocated` on a GPU instead (not run: no GPU here).

Environment: {environment}.

Eager walk (`--walk eager`) / the step's tensors, QLoRA: **{eager_low:.4f} to {eager_high:.4f}**, {within} of {runs}
runs within 3%; worst **{worst_ratio:.4f}** ({worst[tune]}, {worst[attention]} attention, checkpointing
{worst[checkpointing]}); the same steps on a bf16 base: {lora_low:.4f} to {lora_high:.4f}. Deck walk / measured,
QLoRA: {deck_low:.4f} to {deck_high:.4f}; on a bf16 base: {deck_lora_low:.4f} to {deck_lora_high:.4f}. What QLoRA
saves (the bf16 step's peak less the QLoRA step's), deck walk / measured: {saved_low:.4f} to {saved_high:.4f}.
"""
QLORA_FOLLOWS = """\
*Model held* is every parameter and buffer and bitsandbytes' quantization state as the loaded model holds them;
calc's NF4 count leaves out the code books (16 fp32 values for the 4-bit codes and 256 for the 8-bit absmax, 1,088
bytes in every quantized linear) and RoPE's inverse frequencies (two buffers of head size / 2 fp32 values); the
eager walk adds the code books (RoPE's few hundred bytes are left out).

What the eager walk follows for QLoRA (bitsandbytes 0.50, `calc/families.py`, `Ops._linear4bit`):
`Linear4bit.forward` casts its input to the compute dtype (bf16; a no-op here) and calls `matmul_4bit`, whose
`MatMul4Bit` autograd function saves only the packed weight (a parameter: no new bytes). Its forward is the
`gemm_4bit` op, on the CPU PyTorch code (`backends/default/ops.py`) around bitsandbytes' CPU kernels
(`backends/cpu/ops.py`): the absmax decoded from its 8-bit code to fp32 (one value per 64 weights) plus the offset
(a second fp32 tensor), the whole weight dequantized to bf16, `F.linear`, and both freed as the op returns; where no
input needs a gradient (the first layer's projections without an adapter) the same temporaries and no node. Its
backward dequantizes the weight again (`F.dequantize_4bit`) beside the input's gradient. peft's wrapper of a 4-bit
layer (`tuners/lora/bnb.py`) clones the base layer's result (`result.clone()`, which saves nothing) before adding
the adapter's, whose dtype is the recipe's (`--recipe bf16`: the bf16 adapters these runs train). On CUDA the same
path runs past the fused kernel's rows (1,536); at most 4 rows `gemm_4bit` takes the fused kernel, which dequantizes
nothing, and between the two CUDA picks by the GPU's architecture (`_gemm_4bit_use_custom_cuda`): the walk follows
the dequantizing fallback there, the larger. {close} of {runs} runs land within 0.3% of the step's tensors, every
one within {widest:.1%}; against the full measured peak, the workspace included, {close_peak} of {runs} land within
0.3%, the farthest at {farthest_peak:.4f}; {held} of the {runs} QLoRA peaks hold a workspace block, those of
runs with checkpointing {held_checkpointing}. The commands: `{eager_command}` (eager), `{deck_command}` (deck), and
their like.
"""


def qlora_section() -> list[str]:
    """§12.5: bitsandbytes' NF4 layers with peft's LoRA, measured, beside the eager and deck walks
    (docs/data/qlora.json)."""
    command = "python scripts/training/measure_qlora.py --write"
    out, data = section_data("### 12.5 QLoRA steps measured", QLORA, command)
    if data is None:
        return out
    runs = data["runs"]
    ratios, lora_ratios = [r["ratio"] for r in runs], [r["lora"]["ratio"] for r in runs]
    eager, eager_lora = [_qlora_eager(r) for r in runs], [_qlora_eager(r["lora"]) for r in runs]
    saved = [((r["lora"]["measured_peak"] - r["measured_peak"]), (r["lora"]["predicted_peak"] - r["predicted_peak"]))
             for r in runs]  # fmt: skip
    saved_ratio = [p / m for m, p in saved]
    worst = max(runs, key=lambda r: abs(_qlora_eager(r) - 1))
    out += prose(QLORA_PROSE, command=command, environment=data["environment"], eager_low=min(eager),
                 eager_high=max(eager), within=sum(abs(x - 1) <= 0.03 for x in eager), runs=len(runs),
                 worst=worst, worst_ratio=_qlora_eager(worst), lora_low=min(eager_lora),
                 lora_high=max(eager_lora), deck_low=min(ratios), deck_high=max(ratios), deck_lora_low=min(lora_ratios),
                 deck_lora_high=max(lora_ratios), saved_low=min(saved_ratio), saved_high=max(saved_ratio))  # fmt: skip
    out += ["", *workspace_note([x for r in runs for x in (r, r["lora"])], "docs/data/qlora.json", _qlora_where)]
    out += [
        "",
        "| L, h, a, k, f, V | Tokens | Fine-tuning | Adapters | Attention | Checkpointing | Model held (bytes) "
        "| NF4 base, calc "
        "(bytes) | QLoRA measured | its tensors | QLoRA eager walk | Eager / tensors | QLoRA deck walk "
        "| Deck / measured | bf16 base measured | its tensors | bf16 eager walk | Eager / tensors | bf16 deck walk "
        "| Deck / measured | Saved, measured | Saved, deck walk |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r, (m_saved, p_saved) in zip(runs, saved, strict=True):
        lo, shape = r["lora"], _short_shape(r["model"])
        out.append(
            f"| {shape} | {r['micro_batch']} x {r['seq']} | {r['tune']} | {ADAPTER_CELLS[r['adapter_dtype']]} "
            f"| {r['attention']} | {r['checkpointing']} "
            f"| {r['model_bytes']:,} | {r['predicted_weights']:,} | {r['measured_peak']:,} "
            f"| {r['measured_peak_tensors']:,} | {r['eager_predicted_peak']:,} | {_qlora_eager(r):.4f} "
            f"| {r['predicted_peak']:,} | {r['ratio']:.4f} | {lo['measured_peak']:,} | {lo['measured_peak_tensors']:,} "
            f"| {lo['eager_predicted_peak']:,} | {_qlora_eager(lo):.4f} | {lo['predicted_peak']:,} | {lo['ratio']:.4f} "
            f"| {m_saved:,} | {p_saved:,} |"
        )
    close = sum(abs(x - 1) <= 0.003 for x in eager)
    on_peak = [r["eager_predicted_peak"] / r["measured_peak"] for r in runs]  # the workspace included
    held = {r["checkpointing"] for r in runs if r["workspace_at_peak"]}
    out += ["", *prose(QLORA_FOLLOWS, close=close, runs=len(runs), widest=max(abs(x - 1) for x in eager),
                       close_peak=sum(abs(x - 1) <= 0.003 for x in on_peak),
                       farthest_peak=max(on_peak, key=lambda x: abs(x - 1)),
                       held=sum(r["workspace_at_peak"] > 0 for r in runs),
                       held_checkpointing=" or ".join(sorted(held)),
                       eager_command=runs[0]["eager_command"],
                       deck_command=runs[0]["command"])]  # fmt: skip
    return [*out, "", *qlora_configs(data.get("config_runs", []))]


QLORA_MOE_PROSE = """\
QLoRA on mixtures of experts (issue 34), loaded as above from each model's saved config.json: Qwen3-MoE (every
layer with experts, and with dense layers among them: `mlp_only_layers`), Mixtral and GPT-OSS (its attention's
linears biased, its sinks, under eager attention, the only one its code runs). transformers 5 keeps a
layer's experts as two fused parameters (`experts.gate_up_proj`, `experts.down_proj`) and its router as no
`nn.Linear`, so bitsandbytes quantizes only the attention's linears and a dense layer's MLP: **the experts and the
router stay bf16**, and they are most of such a model. calc counts them so (`calc.finetune.quantized`):
Qwen3-30B-A3B under `--finetune qlora` on q, k, v and o stores {big_qlora} of weights (the adapters included),
against {big_bf16} for the whole model in bf16. peft's `all-linear` there is the 4-bit attention's adapters and,
as peft converts it (§12.4), the bf16 router's and experts' too.
The deck walk fine-tunes no mixture of experts, so only the eager walk is shown, each run beside the same step on a
bf16 base (`--finetune lora`); each run {tokens} tokens, its adapters bf16 or fp32 (peft's default). Eager walk /
the step's tensors, QLoRA: **{low:.4f} to {high:.4f}** over {runs} runs,
worst **{worst_ratio:.4f}** ({worst[tune]}, {worst[model_type]}, {worst[attention]} attention, checkpointing
{worst[checkpointing]}); on a bf16 base: {lora_low:.4f} to {lora_high:.4f}. *Model held* less calc's weights is
RoPE's two inverse-frequency buffers (fp32, head size / 2 each): {rope}. The first row's command: `{command}`.
These bf16 steps showed two things the eager walk had missed, in any step of 16-bit weights, and which it now
follows: ATen's `softmax(x, dtype=float32)` of 16-bit scores copies them to fp32 first (`_softmax(x.toType(...))`;
the fused half-to-float kernel is CUDA's, for fp16 only), and in backward makes their gradient in fp32 before
casting it back; and Mixtral's router keeps its renormalised weights in fp32, so the experts' bf16 output is
promoted for the product with them, on the CPU through a copy (`calc.parts.experts.routing_weighted`). Before,
the steps with checkpointing read 0.93 to 0.96.
"""


QLORA_PHI3_PROSE = """\
Phi-3's fused stores under QLoRA, in the same table: bitsandbytes makes `qkv_proj` and `gate_up_proj` one
`Linear4bit` each, and peft puts one adapter on each (`--lora-targets q,k,v,o,gate,up,down`, as for its LoRA in
§12.4), so calc counts one NF4 store and one set of code books for each (`calc.finetune.quantized`). Eager walk /
the step's tensors, QLoRA and its bf16 base together: **{low:.4f} to {high:.4f}** over {runs} steps.
"""


def qlora_configs(runs: list[dict]) -> list[str]:
    """§12.5's QLoRA on mixtures of experts and on Phi-3 (docs/data/qlora.json's config_runs), eager walk only."""
    if not runs:
        return []
    moe = [r for r in runs if r["model_type"] != "phi3"]
    eager, lora = [_qlora_eager(r) for r in moe], [_qlora_eager(r["lora"]) for r in moe]
    worst = max(moe, key=lambda r: abs(_qlora_eager(r) - 1))
    rope = {r["model_bytes"] - r["predicted_weights"] for r in runs}
    phi = [_qlora_eager(x) for r in runs if r["model_type"] == "phi3" for x in (r, r["lora"])]
    big = calc.PRESETS["qwen3-30b-a3b"]
    qlora = calc.finetune.weight_bytes(big, "bf16", calc.finetune.Tuning("qlora", targets=calc.finetune.ATTENTION))
    out = prose(QLORA_MOE_PROSE, big_qlora=gb(sum(qlora.values())), big_bf16=gb(2 * calc.param_counts(big)["total"]),
                tokens=" or ".join(sorted({f"{r['micro_batch']} x {r['seq']}" for r in runs})),
                low=min(eager), high=max(eager), runs=len(moe), worst=worst,
                worst_ratio=_qlora_eager(worst), lora_low=min(lora), lora_high=max(lora),
                rope=" or ".join(f"{n:,} bytes" for n in sorted(rope)), command=moe[0]["eager_command"])  # fmt: skip
    if phi:
        out += ["", *prose(QLORA_PHI3_PROSE, low=min(phi), high=max(phi), runs=len(phi))]
    out += [
        "",
        "| Model (L, h, a, k, f, V) | Fine-tuning | Adapters, attention, checkpointing | Model held (bytes) "
        "| calc's weights (bytes) | QLoRA tensors | QLoRA eager walk | Eager / tensors | bf16 base tensors "
        "| bf16 eager walk | Eager / tensors |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        lo = r["lora"]
        out.append(
            f"| {r['model_type']} ({_short_shape(r['model'])}) | {r['tune']} "
            f"| {'bf16' if r['adapter_dtype'] == 'model' else 'fp32'}, {r['attention']}, {r['checkpointing']} "
            f"| {r['model_bytes']:,} | {r['predicted_weights']:,} | {r['measured_peak_tensors']:,} "
            f"| {r['eager_predicted_peak']:,} | {_qlora_eager(r):.4f} | {lo['measured_peak_tensors']:,} "
            f"| {lo['eager_predicted_peak']:,} | {_qlora_eager(lo):.4f} |"
        )
    return [*out, ""]


ADAPTER_CELLS = {"fp32": "fp32 (peft's default)", "model": "bf16"}  # §12.5's adapters' dtype (--adapter-dtype)


def _qlora_eager(row: dict) -> float:
    """A QLoRA (or bf16 base) row's eager walk / the step's tensors (the measured peak less the workspace)."""
    return _against_tensors(row, "eager_predicted_peak")


def _against_tensors(row: dict, predicted: str) -> float:
    """A measured row's prediction (its `predicted` key) / the step's tensors: the measured peak less the matrix
    library's workspace (scripts/training/profile_step.py)."""
    return row[predicted] / row["measured_peak_tensors"]


def _qlora_where(row: dict) -> str:
    return (f"{row['tune']}, {ADAPTER_CELLS[row['adapter_dtype']]} adapters, {_short_shape(row['model'])}, "
            f"{row['micro_batch']} x {row['seq']} tokens, "
            f"{row['attention']} attention, checkpointing {row['checkpointing']}")  # fmt: skip


LORA_PROSE = """\
The eager walk (§10.8) with `--finetune lora` and `--finetune freeze`, against transformers' Llama, Mistral and
Qwen2 (their shape as flags) and each family issue 18 adds that peft adapts by its q_proj ... down_proj (Qwen3,
Granite, Gemma 1 to 3, OLMo 2 and 3, SmolLM3, Ministral and Ministral 3), and Phi-3, whose fused qkv_proj and
gate_up_proj peft adapts whole, one adapter each (issue 34; calc's `--lora-targets` names their parts together,
q,k,v and gate,up), and mixtures of experts (issue 34): LoRA on the attention of Qwen3-MoE, with dense layers
among its experts too, Mixtral, Qwen2-MoE, GPT-OSS and Llama 4, the experts and router frozen, and on the experts' fused
weights too through peft's `target_parameters` (`mlp.experts.gate_up_proj` for calc's gate,up and
`mlp.experts.down_proj` for down: a `ParamWrapper` on each) of Qwen3-MoE, Mixtral and GPT-OSS (the tiny model
of §13.1, its own config.json passed as `--hf-config`, recorded beside the row), fine-tuned the way a user's
code does it: peft's `get_peft_model(model, LoraConfig(r, lora_alpha, target_modules,
lora_dropout=0.0))` (its fp32 adapters; on a checkpointed model transformers and peft make the embedding's
output require grad), or
`requires_grad_(False)` on the embedding and the first N layers (and on the final norm and head, where the row
says so: LLaMA-Factory's freeze); `torch.optim.AdamW` over the parameters that
require grad. The step, the measurement (the second step's CPU allocator peak) and the prediction (the CLI
in-process, from the flags a user types) are §10.8's; `{command}` remakes the table.

Each row is predicted by the command a user types for it (docs/data/lora.json holds every row's), for example
the first one:

    {first_command}

Environment: {environment}.

Worst of {runs} runs: **{worst_ratio:.4f}** ({worst[model_type]}, {worst[tune]}, {worst[precision]},
{worst[attention]} attention, checkpointing {worst[checkpointing]}).
"""
LORA_FOLLOWS = """\
What the walk follows for fine-tuning: a tensor requires grad only where a trainable parameter or an input that
requires grad made it; an op records a node, and saves what the needed gradients use (derivatives.yaml), only
then; backward stops where nothing below needs a gradient; frozen parameters get no gradient and no AdamW state,
and AdamW's temporaries and step counters cover the trainable tensors only; autocast caches the 16-bit casts of
trainable weights only, so a frozen weight's cast is made at each call and, where the input needs a gradient,
saved; frozen experts' grouped matmuls save no input, as `GroupedMmBackward0` keeps its input only for the
weight's gradient (without that, the mixtures of experts' steps above read 4 to 16% high), and Llama 4's
experts' `bmm` likewise (`BmmBackward0`; without it, its attention-only steps read 7 to 18% high); where the experts are
adapted, peft's `ParamWrapper` makes W + scaling x B A of every expert with `torch.baddbmm` when the experts'
forward reads the weight, which the grouped matmul saves with its input, and backward makes its full-size
gradient before the adapters'; peft's adapter casts a 16-bit input to fp32 before `lora_A` (fp32 adapters,
peft's default and calc's; with `--adapter-dtype model` they keep a 16-bit model's dtype, as half of §12.5's
runs do). peft's `all-linear` on a mixture of experts is given to peft as a user gives it, and peft 0.21
converts it by model type: on Qwen3-MoE and Mixtral the attention's projections, the router's weight (a
`ParamWrapper` on a 2-D weight: `B A x scaling`, under autocast from A's and B's cached 16-bit casts, cast to
the weight's dtype, `W + delta` made once and saved by the router's linear with its input) and the experts'
weights, `gate_up_proj` at twice the rank; on GPT-OSS the attention alone. Not modelled, beside §10.8's oneDNN
scratch buffers: GPT-2's fused `c_attn` adapter (refused by the eager walk) and `all-linear` on a mixture of
experts with a shared expert or dense layers (refused naming `--lora-targets`). The checkpointed steps with
adapted experts read up to {ckpt_high:,} bytes high, which is left. bitsandbytes' 4-bit layers (`--finetune
qlora`) are §12.5's.
"""


WORKSPACE_NOTE = """\
The eager walk's ratios here are against the step's tensors: its measured peak less the workspace the CPU's
matrix library (oneDNN, for bf16) allocates and frees inside a single matmul-family op, which calc does not model
(`scripts/training/profile_step.py` finds each such block in the profiler's trace). The largest block seen was
{largest:,} bytes, in `{at}` ({where}); leaving the workspace out lowers a step's measured peak by at most {most:,}
bytes ({share:.2%}). Each row's full measured peak, the workspace included, is its `measured_peak` in {data_file},
beside `measured_peak_tensors` and `workspace_peak`."""
NO_WORKSPACE_NOTE = """\
No matrix multiplication of these steps took a workspace from the allocator (`workspace_peak` is 0 in every row
of {data_file}, `scripts/training/profile_step.py`), so the step's tensors are its measured peak."""


def workspace_note(rows: list[dict], data_file: str, where) -> list[str]:
    """What the eager walk's ratios of these CPU rows are against, from the data: the step's tensors, with the
    largest workspace block seen and the row it was seen in (`where(row)`); [] where no row records the split."""
    rows = [r for r in rows if "measured_peak_tensors" in r]
    if not rows:
        return []
    big = max(rows, key=lambda r: r["workspace_peak"])
    if big["workspace_peak"] == 0:
        return prose(NO_WORKSPACE_NOTE, data_file=data_file)
    most = max(rows, key=lambda r: r["measured_peak"] - r["measured_peak_tensors"])
    gap = most["measured_peak"] - most["measured_peak_tensors"]
    return prose(WORKSPACE_NOTE, largest=big["workspace_peak"], at=big["workspace_at"], where=where(big), most=gap,
                 share=gap / most["measured_peak"], data_file=data_file)  # fmt: skip


def prose(template: str, **values) -> list[str]:
    """Markdown prose with {names} filled from the data, as results.md writes it: each paragraph (its lines up
    to a blank one) on one line, a line indented four spaces (a code block) as it is."""
    out, paragraph = [], []
    for line in template.format(**values).splitlines():
        if line.startswith("    ") or not line:
            out += [" ".join(paragraph)] if paragraph else []
            out.append(line)
            paragraph = []
        else:
            paragraph.append(line)
    return out + ([" ".join(paragraph)] if paragraph else [])


def lora_section() -> list[str]:
    """§12.4: the eager walk against peft's LoRA and frozen layers (docs/data/lora.json)."""
    command = "python scripts/training/measure_lora.py --write"
    out, data = section_data("### 12.4 LoRA steps measured", LORA, command)
    if data is None:
        return out
    runs = [r for r in data["runs"] if r["measured_peak"]]
    worst = max(runs, key=lambda r: abs(_lora_eager(r) - 1))
    out += prose(LORA_PROSE, command=command, first_command=runs[0]["command"], environment=data["environment"],
                 runs=len(runs), worst=worst, worst_ratio=_lora_eager(worst))  # fmt: skip
    out += ["", *workspace_note(runs, "docs/data/lora.json", _lora_where)]
    out += [
        "",
        "| Class | L, h, a, k, f, V | Tokens | Fine-tuning | Trainable | Recipe | Attention | Checkpointing "
        "| Step's tensors (bytes) | Eager walk (bytes) | Eager / tensors |",
        "|---|---|---|---|---:|---|---|---|---:|---:|---:|",
    ]
    for r in runs:
        out.append(
            f"| {r['model_type']} | {_short_shape(r['model'])} | {r['micro_batch']} x {r['seq']} | {r['tune']} "
            f"| {r['trainable_params']:,} | {r['precision']} | {r['attention']} | {r['checkpointing']} "
            f"| {r['measured_peak_tensors']:,} | {r['predicted_peak']:,} | {_lora_eager(r):.4f} |"
        )
    return [*out, "", *prose(LORA_FOLLOWS, **_lora_gaps(runs)), ""]


def _lora_gaps(runs: list[dict]) -> dict[str, int]:
    """The gap §12.4's prose leaves, in bytes from the data: the most a checkpointed step with adapted experts
    reads high."""
    experts = [r for r in runs if r["model_type"] in ("qwen3_moe", "mixtral") and r["checkpointing"] == "full"
               and ("gate" in r["tune"] or "all-linear" in r["tune"])]  # fmt: skip
    return {"ckpt_high": max((r["predicted_peak"] - r["measured_peak_tensors"] for r in experts), default=0)}


def _lora_eager(row: dict) -> float:
    """A LoRA row's eager walk / the step's tensors (the measured peak less the workspace)."""
    return _against_tensors(row, "predicted_peak")


def _lora_where(row: dict) -> str:
    return (f"{row['model_type']}, {row['tune']}, {row['precision']}, {row['attention']} attention, checkpointing "
            f"{row['checkpointing']}")  # fmt: skip


# §13: the families and loops people train now, measured, beside what today's CLI answers. The prose is
# Markdown with {names} filled from the data (prose()); the tables are rendered below it.
FAMILIES_PROSE = """\
Each family is a tiny transformers model built from a config with random weights ({shape}), trained two
steps with the usual loop (PyTorch's AdamW); the second step is measured with the harness of §10.8
(`scripts/training/profile_step.py`) in fp32 and under autocast, with eager and sdpa attention, without and
with checkpointing: {measured} steps of {families} families, {not_run} not run because transformers itself
refuses that attention for the family. The CLI is then asked as a user would ask it: the config.json with
`--hf-config`, the step's flags, `--walk eager` and the deck walk. **`--walk eager` answers {eager_answered}
of the {families} families and the deck walk {deck_answered}**{refused}; the worst ratio (predicted /
measured) of each walk is shown per family. Each family's parameters: transformers' own count of the tiny
config on the meta device, and calc's where it reads the config. Environment: {environment}."""
LOOPS_PROSE = """\
The loops most training runs through, each run as it comes for two optimizer steps on transformers' Llama
and Qwen2 (two shapes each, one where the vocabulary of {vocab:,} takes the peak), fp32 and autocast
(`bf16=True`), checkpointing off and on; the second optimizer step is measured with the same harness. The
prediction is the CLI's from the config.json and the flags a user would type for that loop (below), by
`--walk eager` and by the deck walk; the worst case per loop and family (largest distance from 1).
**`--walk eager` answers {answered} of the {loops} loops**{refused}: Trainer's
(`--loop trainer`: its collator's tensors, its parameter groups and gradient clipping), with any optimizer
and gradient accumulation, within {trainer_worst} of the measured peak, and TRL's SFTTrainer with LoRA
(`--loop sft`: its chunked log-prob head, which never builds the logits), {sft_low:.4f} to {sft_high:.4f}
of it. The deck walk has no loop of its own. It {deck_trainer_way} Trainer's steps ({deck_trainer}
of the measured peak) and {deck_sft_way} SFTTrainer's ({deck_sft}): TRL's chunked head never builds the
`b x s x V` logits the deck walk counts, but the working memory of its fixed-width tiles, which sets the
eager walk's peak in {sft_tiles} of the {sft_rows} SFTTrainer steps, is something the deck walk has no term
for. `trainer-torchtune-ce` is Trainer with
torchtune's chunked cross-entropy (`--loss torchtune-chunked`; torchtune is not installed, so the script patches
the model's forward with a re-implementation of its source). Liger's fused linear cross-entropy
(`--loss liger-fused`) runs Triton kernels, on CUDA only: it is modelled from its source, not measured.
Environment: {environment}."""


def _said(answer: dict) -> str:
    """A CLI answer in a table cell: the ratio, or the refusal's message."""
    if "ratio" in answer:
        return f"{answer['ratio']:.3f}"
    message = answer["refused"].removeprefix("error: ")
    return "refused: " + message.split("; supported")[0].split(": use the deck walk")[0]  # the reason, not the advice


def _worst(rows: list[dict], walk: str) -> str:
    """The worst case of one walk over measured rows: the ratio farthest from 1, else the (first) refusal."""
    said = [r[walk] for r in rows if walk in r]
    ratios = [a for a in said if "ratio" in a]
    if ratios:
        return _said(max(ratios, key=lambda a: abs(a["ratio"] - 1)))
    return _said(said[0]) if said else "not run"


def families_section() -> list[str]:
    """§13.1 and §13.3: the families people train now (docs/data/families.json)."""
    out, data = section_data("### 13.1 Model families, measured", FAMILIES,
                             "python scripts/training/measure_families.py --write")  # fmt: skip
    if data is None:
        return out
    runs, families = data["runs"], data["families"]
    measured = [r for r in runs if "measured_peak" in r]
    per = {name: [r for r in runs if r["family"] == name] for name in families}
    eager_refused = sum(all("ratio" not in r.get("eager", {}) for r in rows) for rows in per.values())
    deck_refused = sum(all("ratio" not in r.get("deck", {}) for r in rows) for rows in per.values())
    m, vocabs = runs[0]["model"], sorted({r["model"]["vocab"] for r in runs})
    deep = {name: rows[0]["model"]["layers"] for name, rows in per.items() if rows[0]["model"]["layers"] != m["layers"]}
    deeper = "".join(f", {k} for {calc.families.listing([f'`{n}`' for n in deep if deep[n] == k])}"
                     for k in sorted(set(deep.values())))  # fmt: skip
    shape = (f"width {m['hidden']}, {m['heads']} heads, {m['layers']} layers{deeper}; sequence {runs[0]['seq']}; "
             f"vocabulary {' and '.join(f'{v:,}' for v in vocabs)}, the larger one's logits taking the peak")
    refused = f" (the others refused, naming what they lack; `--hf-config` reads {len(calc.hf.READERS)} model types)" \
        if eager_refused or deck_refused else ""
    out += [*prose(FAMILIES_PROSE, shape=shape, measured=len(measured), families=len(families),
                                  not_run=len(runs) - len(measured), eager_answered=len(families) - eager_refused,
                                  deck_answered=len(families) - deck_refused, refused=refused,
                                  environment=data["environment"]), ""]
    out += ["| Family | Parameters (transformers, the smaller vocabulary) | calc | Steps measured | "
            "Measured peak (largest) | `--walk eager`, worst | deck walk, worst |",
            "|---|---:|---|---:|---:|---|---|"]  # fmt: skip
    for name, rows in per.items():
        got = [r for r in rows if "measured_peak" in r]
        count = families[name]["calc"]
        calc_says = f"{count['params']:,}" if "params" in count else "refused"
        out.append(f"| `{name}` | {families[name]['transformers_params']:,} | {calc_says} | {len(got)} of {len(rows)} "
                   f"| {max(r['measured_peak'] for r in got):,} | {_worst(got, 'eager')} | {_worst(got, 'deck')} |")
    return [*out, ""]


def presets_section() -> list[str]:
    """§13.3: the published config.json files stored under calc/configs/, counted by transformers and calc."""
    out, data = section_data("### 13.3 Published configs, counted", FAMILIES,
                             "python scripts/training/measure_families.py --counts --write")  # fmt: skip
    presets = (data or {}).get("presets", [])
    if data is not None and not presets:
        return [*out, "None stored yet.", ""]
    out += ["The published `config.json` of the models people train now, where a public copy was found (stored "
            "in `calc/configs/`; those calc reads are presets): transformers' parameter count on the meta device (a "
            "multimodal release: its language model), and calc's from `--hf-config` or its refusal.", "",
            "| Config | model_type | Parameters (transformers) | calc |", "|---|---|---:|---|"]  # fmt: skip
    for row in presets:
        calc_says = f"{row['calc']['params']:,}" if "params" in row["calc"] else _said(row["calc"])
        kind = row["model_type"] + (f", {row['counted']}" if "counted" in row else "")
        out.append(f"| `{row['preset']}.json` | {kind} | {row['transformers_params']:,} | {calc_says} |")
    return [*out, ""]


def loops_section() -> list[str]:
    """§13.2: the training loops, measured (docs/data/loops.json)."""
    out, data = section_data("### 13.2 Training loops, measured", LOOPS,
                             "python scripts/training/measure_loops.py --write")  # fmt: skip
    if data is None:
        return out
    runs = data["runs"]
    loops = list(dict.fromkeys(r["loop"] for r in runs))
    answered = [name for name in loops if any("ratio" in r["eager"] for r in runs if r["loop"] == name)]
    trainer = [r["eager"]["ratio"] for r in runs if r["loop"].startswith("trainer") and "ratio" in r["eager"]]
    sft = [r["eager"]["ratio"] for r in runs if r["loop"] == "sft-lora"]
    unanswered = [name for name in loops if name not in answered]
    refused = f" ({', '.join(f'`{n}`' for n in unanswered)} refused)" if unanswered else ""
    out += [*prose(LOOPS_PROSE, vocab=max(r["model"]["vocab"] for r in runs), answered=len(answered),
                               refused=refused,
                               loops=len(loops), trainer_worst=f"{max(abs(x - 1) for x in trainer):.2%}",
                               sft_low=min(sft), sft_high=max(sft), **_deck_on_loops(runs),
                               environment="; ".join(f"{k}: {v}" for k, v in data["environment"].items())), ""]
    out += ["| Loop | Family | Steps | `--walk eager`, worst | deck walk, worst | A user's command (one of them) |",
            "|---|---|---:|---|---|---|"]  # fmt: skip
    for name in loops:
        for family in dict.fromkeys(r["model_type"] for r in runs):
            rows = [r for r in runs if r["loop"] == name and r["model_type"] == family]
            out.append(f"| `{name}` | `{family}` | {len(rows)} | {_worst(rows, 'eager')} | {_worst(rows, 'deck')} "
                       f"| `{rows[0]['eager']['command']}` |")
    return [*out, ""]


def _deck_on_loops(runs: list[dict]) -> dict[str, str]:
    """What LOOPS_PROSE says of the deck walk on Trainer's and SFTTrainer's steps: the range of its ratios and
    which way they miss, read from the rows (so the sentence cannot point the other way from its table)."""
    def way(ratios: list[float]) -> str:
        return "over-counts" if min(ratios) > 1 else "under-counts" if max(ratios) < 1 else "is off both ways on"

    said = {}
    for key, loop in (("trainer", lambda n: n.startswith("trainer")), ("sft", lambda n: n == "sft-lora")):
        ratios = [r["deck"]["ratio"] for r in runs if loop(r["loop"]) and "ratio" in r.get("deck", {})]
        said[f"deck_{key}"] = f"{min(ratios):.3f} to {max(ratios):.3f}"
        said[f"deck_{key}_way"] = way(ratios)
    sft = [r for r in runs if r["loop"] == "sft-lora"]
    said["sft_rows"] = len(sft)
    said["sft_tiles"] = sum("ChunkedLogProbFunction" in r["eager"].get("peak_event", "") for r in sft)
    return said


def _predicted_ratio(row: dict) -> float | None:
    """A measured row's eager-walk ratio (predicted / measured), whichever script wrote it."""
    for value in (row.get("eager", {}).get("ratio"), row.get("eager_ratio"), row.get("ratio_eager"), row.get("ratio")):
        if value is not None:
            return value
    return None


ENGINES_PROSE = """Data, tensor and pipeline parallelism as torch runs them, rank by rank (issue 31): {steps} real CPU
steps of {processes} processes each (gloo over loopback; {families}; {shape}; fp32 and autocast, and under FSDP2 its
bf16 policy too, checkpointing off and on),
every process measured from an empty start with the harness of §10.8, its third step (DDP rebuilds its buckets in
the second), each case run {runs} times and each rank's lowest peak kept (below). `ddp` is
`DistributedDataParallel` with torch's defaults around PyTorch's AdamW; `ddp-zero1` is the same with
`ZeroRedundancyOptimizer(optimizer_class=AdamW)`; `fsdp2` is `fully_shard` on each decoder layer and then on the
model with torch's default `reshard_after_forward=True`, and `fsdp2-zero2` the same with `False`, each around AdamW;
the recipe `fsdp-bf16` is either of them with `mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16,
reduce_dtype=torch.float32)` on every `fully_shard` call over the fp32 model, and no autocast. `fsdp2-lora` and
`fsdp2-zero2-lora` are the same engines around peft's LoRA (`get_peft_model` first, r 8 on q and v, fp32
adapters; AdamW over the adapters), predicted with `--finetune lora`: every rank gathers the frozen weights as
before, and reduces and steps only its rows of the adapters.
`tp` is tensor parallelism as most hand-written `parallelize_module` plans give it, one call a decoder layer on a
one-dimensional mesh: `ColwiseParallel()` on q, k, v, gate and up, `RowwiseParallel()` on o and down, the
embedding, the norms and the head whole on every rank, every rank on the same batch, around AdamW. `tp-hf` is
tensor parallelism as transformers applies its own plan: `from_pretrained(path, tp_plan="auto", dtype=torch.float32)`
on a checkpoint saved in bf16 (as the Hub ships them), under the environment torchrun sets, which shards the same
linears of each layer (transformers' own colwise and rowwise hooks over DTensor weights) and also the embedding
(`embedding_rowwise`) and the head (`colwise_gather_output`) by the vocabulary; Qwen3's q and k norms are
`replicated_with_grad_allreduce`. `tp-sp` is `tp` with sequence parallelism as torchtitan plans it over a
transformers model: each layer's two norms `SequenceParallel()`, the attention's and the MLP's input gathered by
`PrepareModuleInput` (`Shard(1)` to `Replicate()`), `RowwiseParallel(output_layouts=Shard(1))` on o and down, the
first layer's input cut to the rank's positions and the head's input gathered again, the final norm
`SequenceParallel()`. `tp-eager` is `tp` with transformers' eager attention (`attn_implementation="eager"`: the
scores and probabilities, b x heads / tp x s x s, kept for backward) where every other case runs sdpa.
`fsdp2-tp` is FSDP2 over tensor parallelism as torchtitan composes them, on 4 processes: a
(2, 2) device mesh, the `tp` plan over its "tp" dimension (processes 2i and 2i + 1 split each layer), then
`fully_shard` on each decoder layer and on the model over its "dp" dimension with torch's defaults
(`reshard_after_forward=True`), each data-parallel pair on its own batch; `fsdp2-zero2-tp` the same with
`reshard_after_forward=False`, on the Llama; `fsdp2-tp-sp` the same as `fsdp2-tp` with the `tp-sp` plan over the
"tp" dimension (torchtitan's two-dimensional default). `llama-tied` is
Llama with 6 layers (the eager walk replays 5 and stretches the middle ones) and a tied head, and `qwen3_moe` is
Qwen3-MoE with 4 experts a layer (top 2), both under FSDP2, and `llama-tied` under `tp-hf` too (on 2 processes:
its head is the embedding's split table, gathered as an untied head is). Qwen3-MoE's checkpointed steps read
1.0002 (autocast) and 1.0005 (fp32) high, as its one-device steps
do (§13.1): the one-device walk's residual, not FSDP2's. `llama-mha` is
Llama with as many key/value heads as query heads (4, so that 4 processes split them) and a vocabulary of 128, so
that its peak falls in the layers, where tensor parallelism's collectives are; it runs under `tp`, `tp-hf`,
`tp-sp`, `tp-eager`, `fsdp2-tp` and `fsdp2-tp-sp` only. Over 3
processes FSDP2 pads rows (a width of 64 does not divide by 3), so its last rank holds fewer rows than the others.
`pp-1f1b` and `pp-gpipe` are `torch.distributed.pipelining`'s `Schedule1F1B` and `ScheduleGPipe` over one
`PipelineStage` a process, on a 4-layer Llama (`llama-4`) or Qwen3 (`qwen3-4`) cut by hand into 2, 3 (2, 1 and 1
layers: uneven) or 4 stages of consecutive layers, the first with the embedding, the last with the final norm, the
head and transformers' `ForCausalLMLoss` as the schedule's `loss_fn`. `pp-interleaved-1f1b` is
`ScheduleInterleaved1F1B` over two `PipelineStage`s a process (torchtitan's default for a looped schedule): process
r runs stages r and r + N of 2N, on the same 4-layer models over 2 processes (a layer a stage) and on a 6-layer
Llama (`llama-6`) over 2 (2, 2, 1 and 1 layers: uneven) or 3 processes, one AdamW over both of a process's
stages. Each stage's module is the model's own
forward over its layers (and, under autocast, its own autocast region); `n_microbatches` is twice the stages
({micro_batches} micro-batches of {micro_batch} sequences), torch's defaults otherwise; the first stage is given the
input ids, the last the labels, the stages between no batch; AdamW steps each stage's parameters.
`pp-1f1b-ddp`, `pp-1f1b-fsdp2` and `pp-1f1b-tp` are `pp-1f1b` over 2 stages on 4 processes as torchtitan composes a
pipeline with data or tensor parallelism: a (2, 2) device mesh, the pipeline's dimension outermost (processes 2i and
2i + 1 run stage i); under `pp-1f1b-ddp` each stage's module is wrapped in `DistributedDataParallel` over its "dp"
dimension (torch's defaults; the stage runs every forward and every backward but the step's last under `no_sync`),
and under `pp-1f1b-ddp-zero1` the stage's parameters are stepped by `ZeroRedundancyOptimizer(optimizer_class=AdamW)`
over the same dimension beside that DDP;
under `pp-1f1b-fsdp2` `fully_shard` runs on each of the stage's layers and then on the stage's module over "dp" with
`reshard_after_forward=False` (torchtitan's default beside a pipeline; the stage runs every backward without
resharding or reducing, and reduce-scatters every group once its backwards end), and under `pp-1f1b-fsdp2-zero3`
and `pp-gpipe-fsdp2-zero3` (1F1B and GPipe) with `reshard_after_forward=True` (torch's default: each forward
reshards every group as it returns, and a backward after a forward gathers them again); under both each process of
a stage has its own batch; under `pp-1f1b-tp` the `tp` plan splits each decoder layer over the "tp" dimension before the
stages are cut, both processes of a stage on one batch, and under `pp-1f1b-tp-sp` with its sequence parallelism
(as `tp-sp`: the model's first layer cuts the sequence on the first stage, the stages send and receive s / 2
positions, each stage module's rotary tables made for the whole sequence). `pp-1f1b-fsdp2-tp` is torchtitan's
three dimensions on 8 processes of the 4-layer Llama: a (2, 2, 2) mesh ("pp", "dp", "tp"), the `tp` plan over "tp",
then `fully_shard` over "dp" as under `pp-1f1b-fsdp2`, each data-parallel pair of tensor-parallel processes on its own
batch, and `pp-1f1b-fsdp2-tp-zero3` the same with `reshard_after_forward=True`. `pp-gpipe-ddp`, `pp-gpipe-fsdp2` and
`pp-gpipe-tp` are `pp-1f1b-ddp`, `pp-1f1b-fsdp2` and `pp-1f1b-tp` under GPipe, and `pp-interleaved-1f1b-tp` is the
`tp` plan beside `pp-interleaved-1f1b` (2 pipeline processes of 2 stages each, each beside its tensor-parallel pair),
on the 4-layer Llama.
`pp-interleaved-1f1b-ddp` and `pp-interleaved-1f1b-ddp-zero1` are `pp-interleaved-1f1b` on the same (2, 2) mesh (4
stages over 2 pipeline processes, each beside its data-parallel pair): each of a process's two stage modules wrapped
in `DistributedDataParallel` over "dp", and under `-zero1` one `ZeroRedundancyOptimizer` over both stages'
parameters. These DDP modules are made with `static_graph=True`, and so are `pp-gpipe-ddp`'s: with torch's defaults
torch 2.13 fails at the second step under either schedule (the reducer's bucket rebuild counts every parameter
twice, an internal assert in `reducer.cpp`), a failure a plain two-layer model of `nn.Linear`s shows too under
interleaved 1F1B; `static_graph` changes no byte a rank holds.
The prediction is the CLI's, `--walk eager --dp N` with `--zero 1`, `2` or `3`, `--walk eager --tp N` (with
`--tp-plan transformers` for `tp-hf`, `--sequence-parallel` for `tp-sp`, `--attention eager` for `tp-eager`),
`--walk eager --dp 2 --tp 2 --zero 3
--engine fsdp2` for `fsdp2-tp` (`--zero 2` for `fsdp2-zero2-tp`, `--sequence-parallel` for `fsdp2-tp-sp`), or
`--walk eager --pp N --pp-schedule 1f1b|gpipe|interleaved-1f1b --grad-accum M` (with `--dp 2 --engine ddp` for
`pp-1f1b-ddp` and `pp-interleaved-1f1b-ddp`, `--dp 2 --zero 1 --engine ddp` for `pp-1f1b-ddp-zero1` and
`pp-interleaved-1f1b-ddp-zero1`, `--dp 2 --zero 2 --engine fsdp2` for
`pp-1f1b-fsdp2` (`--zero 3` for `pp-1f1b-fsdp2-zero3` and `pp-gpipe-fsdp2-zero3`), `--tp 2` for `pp-1f1b-tp`
(and `--sequence-parallel` for `pp-1f1b-tp-sp`), all three of
`--dp 2 --zero 2 --engine fsdp2 --tp 2` for `pp-1f1b-fsdp2-tp`, `--zero 3` for `pp-1f1b-fsdp2-tp-zero3`; the
GPipe and interleaved ones as their 1F1B twins), from the config.json, one per rank
(`rank_peaks` in
`--json`). Under DDP it is the eager walk of one device plus DDP's
gradient buckets (a second flat copy of every gradient, `gradient_as_bucket_view=False`), with each rank's own
share of AdamW under ZeRO 1 (`calc/engines/ddp.py`). Under FSDP2 it is the same step with the rank's padded rows of
every weight, each group all-gathered, copied out, resharded and reduce-scattered around its layer as torch 2.13
does it, the backward prefetch, the reduce-scatter buffers, and the rank's rows of AdamW (`calc/engines/fsdp.py`);
under `fsdp-bf16` the shards, the reduced gradients and AdamW's state stay fp32 while the layers run as a pure bf16
model, each all-gather casts the rank's shards into one flat bf16 input before it gathers bf16, and each
reduce-scatter copies the bf16 gradients into an fp32 input (`fsdp::chunk_cat`, a bf16 copy of each gradient's
chunks on the way).
Under `tp` it is the step of the narrower model one rank runs (its share of the heads and of the MLP's width, the
rest whole), with o's and down's partial outputs all-reduced into new tensors in forward and the partial gradients
of q, k, v, gate and up's inputs all-reduced into new tensors in backward (`calc/engines/tensor.py`). Under `tp-hf`
the rank also keeps vocab / tp rows of the embedding and the head and their AdamW state; its lookup masks the ids
outside its rows and all-reduces the partial embeddings into a new tensor; its head writes its vocab / tp columns
of the logits, which funcol all-gathers (with gloo's flat copy and receive buffer) and DTensor concatenates into
the whole logits, a new tensor, the loss then running on them as on one device; backward cuts the logits' gradient
to the rank's columns, and writes the embedding's gradient whole (vocab x h on every rank, from the replicated ids
and gradient) until zero_grad. Under `tp-sp` the norms, the residual sums and the residual stream hold s / tp
positions; each gather is funcol's all-gather (its buffer, gloo's flat copy and receive buffer) and DTensor's
concatenation along the sequence, a new tensor, which q, k and v (gate and up) save whole for backward, where
Korthikanti et al. save the rank's part and gather it again; o's and down's partial outputs are reduce-scattered
(the shards concatenated into the scatter's layout, its output, gloo's clone of its input), their gradients
gathered in backward, and the summed partial gradients of the gathered inputs reduce-scattered back. Under
`fsdp2-tp` and `fsdp2-zero2-tp` it is FSDP2's step (as above) over the model one tensor-parallel rank runs (as under
`tp`): its padded rows of that rank's tensors, each group gathered back to them, the layers plan's all-reduces inside;
under `fsdp2-tp-sp` the same around the `tp-sp` rank's layers, its gathers and reduce-scatters inside.
Under a pipeline it is each stage's own step: its parameters and AdamW's state, a receive buffer a micro-batch for its
input (every stage but the first) and for its output's gradient (every stage but the last), kept from step to step;
each micro-batch's forward and backward through its layers in the schedule's order, the first backward writing each
parameter's gradient and the later ones adding into it; each output and input gradient let go as the schedule lets go
of its send (GPipe once its backward loop ends; 1F1B the last output it sent in its warm-up once its steady phase
ends; interleaved 1F1B every one as the step ends, `_PipelineScheduleRuntime` waiting on its sends only then), a
process under interleaved 1F1B running both its stages' micro-batches in the order torch computes for it
(`_get_1f1b_rank_ops`: a round of micro-batches through one of its stages, then the other); and, on the last stage,
every micro-batch's logits kept until the next step begins, with one more copy of them all as the step returns them
merged (`calc/engines/pipeline.py`); beside DDP, each stage's buckets (a second copy of its gradients, made when
DDP wraps the stage's module), and with ZeroRedundancyOptimizer the rank's share of the stage's AdamW (its
moments and its step's temporaries, `calc/engines/ddp.py` `partition`); beside FSDP2, the rank's rows of the stage's
weights and of AdamW's state, every
group all-gathered and copied out before the first micro-batch and kept whole all step (under `-zero3` gathered in
each forward, unless a backward just before left it whole, and let go as the forward returns; gathered again by
each backward that follows a forward, and kept: `calc/engines/fsdp.py` `in_stage`), the gradients accumulated
whole, and each group resharded and reduce-scattered in turn, root first, once the backwards end
(`calc/engines/fsdp.py`, `staged`), over the layers plan's tensors where both run beside it; beside the layers
plan, each stage's step of the narrower model one rank runs (as
under `tp`), the activations it sends and receives whole. Worst rank, predicted / measured:
{worst}. The deck walk's `--dp N --zero K`, `--tp N` and `--pp N` (1F1B only: it refuses `--pp-schedule
gpipe` and `interleaved-1f1b`) give {deck_low} to {deck_high} of the busiest rank. It counts no bucket; under ZeRO
1 it saves the sharded
moments that DDP's buckets spend again (ZeRO-1 as torch runs it peaks where one device does); under ZeRO 2 and 3 it
counts one gathered layer and no root, no prefetch and no flat buffers; under `--tp` it splits the head and the
logits by the vocabulary (Megatron's vocabulary-parallel head), where `tp` keeps the head whole on every rank and
`tp-hf` splits it but gathers the whole logits for the loss, and keeps the embedding's gradient whole;
under `--pp` it counts the papers' micro-batches in flight, and none of the receive buffers, the kept logits or
their merged copy. Its one-device accounting is not eager autograd's either.

{high} of the {rank_steps} rank-steps read high by exactly DDP's buckets (the DDP ranks below 0.95 in the table):
each of them starts the measured step that many bytes above its peers, and rises from its start as they do. They are
the buckets DDP made when it wrapped the model, which it replaces when it rebuilds them in the second iteration: the
last reference to them goes with an all-reduce's work on gloo's thread, so the profiler never sees them freed, and
their addresses are not handed out again before the peak. {gathered} high by exactly one group's all-gather output
(`dp` x its padded shard) in every one of its runs, from a start equal to its peers': the last reference to that
buffer went with the all-gather's work on gloo's thread. {started}. {workspace}. {reduced}. {scattered}. {rerun}.
{other}. The figures are as measured.

gloo runs every collective on a worker thread of its own, whose frees torch 2.13's profiler does not record. The
harness counts a block freed unseen when the allocator hands its address out again (`profile_step.unseen_frees`;
none in a one-thread profile), at the latest moment it can have been freed, and counts a block a collective
allocates for itself (gloo's flat copy and receive buffer in an all-gather, its clone in a reduce-scatter) freed
when the collective returns, where a quiet run sees it freed (`profile_step.collective_frees`). Whether gloo's
thread or the step drops a tensor's last reference changes from run to run, and a free left unseen only raises a
rank's figure, so each rank's lowest of {runs} runs is kept. `tp-hf` loads its model with
`HF_DEACTIVATE_ASYNC_LOAD=1`, so that from_pretrained's allocations are made on the profiled thread (its default
loader threads would hide the rank's weights from the profile); a checkpoint saved in the dtype it loads in (fp32
here) would on the CPU keep each row-split weight's whole tensor, the rank's shard a view of it (transformers'
`DtensorShardOperation.shard_tensor` slices without a copy), which is not modelled. DDP or ZeRO 1 beside tensor
parallelism, FSDP2 over transformers' tensor-parallel plan, and a pipeline beside FSDP2 with
`reshard_after_forward=True` or under interleaved 1F1B, sequence parallelism beside FSDP2 over the layers plan,
transformers' plan, or DDP and tensor parallelism together are not replayed yet: the eager walk refuses them,
naming the deck walk, whose figures for them are the papers' accounting and are not held against an engine. The eager
walk of FSDP2 covers fp32 parameters, computed in them or under the bf16 policy, full training of a dense model or of
Qwen3-MoE, and
peft's LoRA (fp32 adapters, fp32-full or autocast) on a dense one; of `tp`, `tp-hf` and `tp-sp`, full training of
Llama's and Qwen3's dense layers, fp32 or autocast (`tp-hf` with a vocabulary the ranks divide, its head tied or not,
`tp-sp` under the layers plan with a sequence the ranks divide), and of `fsdp2-tp` and `fsdp2-tp-sp` the same over
the layers plan; of a
pipeline, full training of Llama's and Qwen3's dense, untied layers, fp32 or
autocast (interleaved 1F1B with 2 stages a process, as torchtitan runs it by default; another count is not
offered), beside DDP (with ZeroRedundancyOptimizer too; under interleaved 1F1B and GPipe with
`static_graph=True`), FSDP2 (under 1F1B or GPipe) or the layers plan too, each
stage's forward its own autocast region (an autocast
region around the schedule's whole step keeps
each weight's cast from the first micro-batch to the last, and is not modelled); each with AdamW in a bare loop, on
the CPU; the rest is refused, naming the field. The collectives' own scratch memory (gloo's, NCCL's) is outside
PyTorch's allocator and not counted; on CUDA the buckets' rounding is from source, not measured. Environment:
{environment}.
"""


def peers(row: dict, rank: int) -> list[dict]:
    """The ranks whose step is a rank's own, itself among them: every rank of the case, or beside a pipeline's
    stages (pp-1f1b-ddp, pp-1f1b-ddp-zero1, pp-1f1b-fsdp2 and its -zero3, pp-1f1b-tp and the interleaved ones
    beside DDP: a (pp, 2) mesh; pp-1f1b-fsdp2-tp: (pp, 2, 2)) those of its stage."""
    beside = ("-ddp", "-fsdp2", "-tp", "-ddp-zero1", "-tp-sp", "-fsdp2-zero3", "-tp-zero3")
    if row["engine"].endswith(beside) and row["engine"].startswith("pp-"):
        size = row["world"] // (row["micro_batches"] // 2)  # a stage's processes: micro-batches are twice the stages
        return row["ranks"][rank - rank % size : rank - rank % size + size]
    return row["ranks"]


def _runs(data: dict) -> str:
    """How many times each case ran, in words: "3", or "3 (6 for `a` and `b`)"."""
    more: dict[int, list[str]] = {}
    for engine, n in data.get("runs_of", {}).items():
        more.setdefault(n, []).append(f"`{engine}`")
    extra = "; ".join(f"{n} for {calc.families.listing(engines)}" for n, engines in more.items())
    return f"{data.get('runs_each', 1)}" + (f" ({extra})" if extra else "")


def unseen_start(row: dict, rank: int) -> bool:
    """Whether a rank's measured step reads high by exactly what it started above its lowest peer with (a block
    of the step before freed unseen on gloo's thread), within a kilobyte, and rises from its start as a peer does
    (within 1%)."""
    r = row["ranks"][rank]
    lowest = min(x["measured_start"] for x in peers(row, rank))
    above, high = r["measured_start"] - lowest, r["measured_peak"] - r["predicted_peak"]
    rise = r["measured_peak"] - r["measured_start"]
    others = [x["measured_peak"] - x["measured_start"] for x in peers(row, rank) if x is not r]
    return above >= 1024 and abs(high - above) < 1024 and min(abs(rise - p) for p in others) <= 0.01 * rise


def workspace_held(row: dict, rank: int) -> bool:
    """Whether a rank's peak holds a block of the matmul library's workspace (profile_step.workspace) and its
    tensors' own peak (the running sum without the workspace) is predicted within a kilobyte."""
    r = row["ranks"][rank]
    near = abs(r["measured_peak_tensors"] - r["predicted_peak"]) < 1024
    return r["measured_peak"] > r["measured_peak_tensors"] and near


def unseen_reduced(row: dict, rank: int) -> bool:
    """Whether a tensor-parallel rank reads high by exactly one all-reduce output of o or down (the hidden state,
    b x s x h values in the matmul's dtype: bf16 under autocast), or of a column-wise linear's input gradient in
    backward (b x s x h in fp32: the input is wrapped before autocast casts it), or under transformers' plan of
    the embedding (b x s x h in fp32), within a kilobyte, from a start equal to its lowest peer's or above it by
    that block (one of the step before): a functional collective's output whose last reference went with its
    work on gloo's thread."""
    if row["engine"] not in ("tp", "tp-hf", "fsdp2-tp", "fsdp2-zero2-tp", "pp-1f1b-tp", "pp-1f1b-fsdp2-tp",
                             "pp-1f1b-fsdp2-tp-zero3", "pp-gpipe-tp", "pp-interleaved-1f1b-tp"):
        return False
    r, m = row["ranks"][rank], row["model"]
    hidden = row["seq"] * row["micro_batch"] * m["hidden_size"]
    reduced = {hidden * (2 if row["precision"] == "autocast" else 4), 4 * hidden}  # forward's, backward's
    lowest = min(x["measured_start"] for x in peers(row, rank))
    high = r["measured_peak"] - r["predicted_peak"]
    above = r["measured_start"] - lowest
    return any(abs(high - n) < 1024 and above in (0, n) for n in reduced)


def unseen_scattered(row: dict, rank: int) -> bool:
    """Whether a rank under sequence parallelism reads high by exactly one reduce-scatter output, within a kilobyte:
    o's or down's (s / tp positions of the hidden state in the matmul's dtype: bf16 under autocast), or in backward
    a gathered input's gradient (s / tp positions in fp32): a functional collective's output whose last reference
    went with its work on gloo's thread. Its start is not held to its peers': the step before left blocks of its
    own unseen (a norm's gradient all-reduced by AdamW among them)."""
    if not row["engine"].endswith("tp-sp"):  # tp-sp, fsdp2-tp-sp, pp-1f1b-tp-sp
        return False
    r, m = row["ranks"][rank], row["model"]
    tp = 2 if row["engine"].startswith(("fsdp2", "pp-")) else row["world"]  # the others: a (world / 2, 2) mesh
    part = row["seq"] * row["micro_batch"] * m["hidden_size"] // tp
    scattered = {part * (2 if row["precision"] == "autocast" else 4), part * 4}
    return any(abs(r["measured_peak"] - r["predicted_peak"] - n) < 1024 for n in scattered)


def rerun_reduced(row: dict, rank: int) -> bool:
    """Whether a rank of the layers plan under eager attention (`tp-eager`) reads high by exactly one all-reduce
    output of o (b x s x h values in fp32), within a kilobyte, from its peers' start: in a checkpointed fp32 step
    the layer's re-run does not free the all-reduced attention projection at the residual sum, as it does under
    sdpa and under autocast, on both ranks in every run. The walk does not model it; its cause is not found."""
    if row["engine"] != "tp-eager":
        return False
    r, m = row["ranks"][rank], row["model"]
    lowest = min(x["measured_start"] for x in row["ranks"])
    whole = 4 * row["seq"] * row["micro_batch"] * m["hidden_size"]
    return abs(r["measured_peak"] - r["predicted_peak"] - whole) < 1024 and r["measured_start"] == lowest


def unseen_buckets(row: dict, rank: int) -> bool:
    """Whether a rank's measured step reads high by DDP's first buckets, freed unseen on gloo's thread: its peak
    above the prediction, and its start above its lowest peer's, by the buckets' bytes (a second copy of the
    trainable gradients, fp32 in both measured recipes), within a kilobyte."""
    buckets, r = 4 * row["eager"]["trainable_params"], row["ranks"][rank]
    lowest = min(x["measured_start"] for x in peers(row, rank))
    near = lambda n: abs(n - buckets) < 1024  # noqa: E731
    return near(r["measured_peak"] - r["predicted_peak"]) and near(r["measured_start"] - lowest)


def unseen_gathered(row: dict, rank: int) -> bool:
    """Whether an FSDP2 rank's measured step reads high by exactly one group's all-gather output (`dp` x its
    padded shard, fp32), within a kilobyte: a buffer whose last reference went with an all-gather's work on
    gloo's thread, in every run of the case, unseen by the profiler."""
    if not row["engine"].startswith("fsdp2"):
        return False
    from calc.engines.fsdp import FullyShard
    from calc.engines.tensor import TensorParallel
    from calc.finetune import DEFAULT, Tuning
    from calc.hf import shape_from_config
    from calc.optim_step import model_groups

    two = "-tp" in row["engine"]  # FSDP2 x TP: a (world / 2, 2) mesh, groups of a tensor-parallel rank's
    dp, r, shape = row["world"] // (2 if two else 1), row["ranks"][rank], shape_from_config(row["model"])
    unit = 2 if row["precision"] == "fsdp-bf16" else 4  # the bf16 policy gathers bf16
    tune = Tuning("lora") if row["engine"].endswith("-lora") else DEFAULT  # a layer's adapters are in its group
    groups = model_groups(TensorParallel(2).local(shape) if two else shape, tune)
    sizes = {unit * dp * FullyShard(dp).padded(g) for g, _ in groups}
    return any(abs(r["measured_peak"] - r["predicted_peak"] - n) < 1024 for n in sizes)


UNSEEN = (
    unseen_buckets,
    unseen_gathered,
    unseen_start,
    workspace_held,
    unseen_reduced,
    unseen_scattered,
    rerun_reduced,
)  # in this order: the first that fits


def explained_by(row: dict, rank: int):
    """The first of UNSEEN that explains a rank's measured step reading away from its prediction, or None."""
    return next((f for f in UNSEEN if f(row, rank)), None)


def _cases(found: list) -> str:
    """The rank-steps `found` lists ((row, rank) pairs), in words."""
    return calc.families.listing([f"`{row['engine']}` `{row['family']}` x{row['world']} {row['precision']}, "
                                  f"checkpointing {row['checkpointing']}, rank {i}" for row, i in found])  # fmt: skip


def _started(found: list) -> str:
    if not found:
        return "No rank-step reads high by a block of the step before"
    n = len(found)
    return (
        f"{n} rank-step{' reads' if n == 1 else 's read'} high by exactly what {'it' if n == 1 else 'each'} "
        "started the measured step above its lowest peer with (a block of the step before, a rotary table or an "
        "all-reduce's output, whose free gloo's thread made unseen in every run), and "
        f"{'rises' if n == 1 else 'each rises'} from its start as its peers do: {_cases(found)}"
    )


def _held(found: list) -> str:
    if not found:
        return "No rank-step's peak holds a matmul's workspace"
    n = len(found)
    return (
        f"{n} rank-step{'' if n == 1 else 's'} hold at the peak a block of oneDNN's workspace, which a bf16 matmul "
        "allocates and frees inside itself and calc does not model (§10.8); their tensors' own peak (the running "
        f"sum without the workspace) is predicted within a kilobyte: {_cases(found)}"
    )


def _reduced(found: list) -> str:
    if not found:
        return "No tensor-parallel rank-step reads high by an all-reduce's output"
    n = len(found)
    return (
        f"{n} tensor-parallel rank-step{' reads' if n == 1 else 's read'} high by exactly one all-reduce output "
        "of o or down (b x s x h values in the matmul's dtype), or under `tp-hf` of the embedding (b x s x h in "
        "fp32), from a start equal to its peers' or above it by one such block of the step before: a functional "
        "collective's output whose last reference went with its work on gloo's thread, counted live until its "
        f"address was handed out again: {_cases(found)}"
    )


def _scattered(found: list) -> str:
    if not found:
        return "No rank-step under sequence parallelism reads high by a reduce-scatter's output"
    n = len(found)
    return (
        f"{n} rank-step{' reads' if n == 1 else 's read'} under sequence parallelism high by exactly one "
        "reduce-scatter output (s / tp positions of the hidden state: o's or down's in the matmul's dtype, or a "
        "gathered input's gradient in fp32), its last reference gone with its work on gloo's thread; "
        f"{'its' if n == 1 else 'their'} starts too sit above the lowest peer's by blocks of the step before: "
        f"{_cases(found)}"
    )


def _rerun(found: list) -> str:
    if not found:
        return "No rank-step under eager attention reads high by an all-reduce's output"
    n = len(found)
    return (
        f"{n} rank-step{' reads' if n == 1 else 's read'} under eager attention high by exactly one all-reduce "
        "output of o (b x s x h in fp32), from a start equal to its peers': in a checkpointed fp32 step the layer's "
        "re-run does not free the all-reduced attention projection at the residual sum, as it does under sdpa and "
        "under autocast, on both ranks in every run; the walk does not model it, and its cause is not found: "
        f"{_cases(found)}"
    )


def _others(found: list) -> str:
    """The rank-steps more than 0.1% away from their prediction that no UNSEEN explains."""
    if not found:
        return "Every other rank-step is within 0.1% of its prediction"
    each = calc.families.listing([f"{_cases([(row, i)])} ({ratio:.4f}, by {_excess(row, i):,} bytes)"
                                  for row, i, ratio in found])  # fmt: skip
    return (
        f"{len(found)} more rank-step{' reads' if len(found) == 1 else 's read'} high by what no rule above "
        f"accounts for whole (a workspace block and an unseen free at once, or a block unseen at its free): {each}"
    )


def _excess(row: dict, rank: int) -> int:
    r = row["ranks"][rank]
    return r["measured_peak"] - r["predicted_peak"]


def engines_section() -> list[str]:
    """§14: data parallelism rank by rank (docs/data/engines.json)."""
    out, data = section_data("## 14. Beyond one device, rank by rank", ENGINES,
                             "python scripts/training/measure_engines.py --write")  # fmt: skip
    if data is None:
        return out
    runs = data["runs"]
    engines = dict.fromkeys(row["engine"] for row in runs)
    exact = lambda r: r["predicted_peak"] / r["measured_peak"]  # noqa: E731  (the table's ratios are rounded)
    ratios = {e: [exact(r) for row in runs if row["engine"] == e for r in row["ranks"]] for e in engines}
    explained = lambda row, i: any(f(row, i) for f in UNSEEN)  # noqa: E731
    listed = lambda row, i: explained(row, i) or abs(row["ranks"][i]["ratio"] - 1) > 0.001  # noqa: E731  (below)
    clean = {e: [exact(r) for row in runs if row["engine"] == e for i, r in enumerate(row["ranks"])
                 if not listed(row, i)] for e in engines}  # fmt: skip
    high = [(row, i) for row in runs for i in range(len(row["ranks"])) if unseen_buckets(row, i)]
    gathered = [(row, i) for row in runs for i in range(len(row["ranks"])) if unseen_gathered(row, i)]
    by_rule: dict = {rule: [] for rule in UNSEEN}  # the rank-steps each rule explains first (explained_by)
    for row in runs:
        for i in range(len(row["ranks"])):
            if (rule := explained_by(row, i)) is not None:
                by_rule[rule].append((row, i))
    started, held, reduced = by_rule[unseen_start], by_rule[workspace_held], by_rule[unseen_reduced]
    scattered, rerun = by_rule[unseen_scattered], by_rule[rerun_reduced]
    other = [(row, i, row["ranks"][i]["ratio"]) for row in runs for i in range(len(row["ranks"]))
             if not explained(row, i) and abs(row["ranks"][i]["ratio"] - 1) > 0.001]
    worst = "; ".join(f"`{e}` {min(x):.5f} to {max(x):.5f}" + (f" ({min(clean[e]):.5f} to {max(clean[e]):.5f} "
                      "apart from the ranks below)" if clean[e] != x else "") for e, x in ratios.items())  # fmt: skip
    deck = [row["deck"]["ratio"] for row in runs if "ratio" in row["deck"]]
    m = runs[0]["model"]
    shape = (
        f"{m['num_hidden_layers']} layers (the pipelines' 4 or 6), width {m['hidden_size']}, "
        f"vocabulary {m['vocab_size']:,}, "
        f"sequence {runs[0]['seq']}, micro-batch {runs[0]['micro_batch']}"
    )
    gathered_text = f"{len(gathered)} FSDP2 rank-step{' reads' if len(gathered) == 1 else 's read'}"
    values = {"high": len(high), "gathered": gathered_text, "rank_steps": sum(len(r["ranks"]) for r in runs),
              "started": _started(started), "workspace": _held(held), "reduced": _reduced(reduced),
              "scattered": _scattered(scattered), "rerun": _rerun(rerun), "other": _others(other),
              "micro_batches": " or ".join(str(n) for n in sorted({r["micro_batches"] for r in runs
                                                                   if "micro_batches" in r})),
              "micro_batch": runs[0]["micro_batch"],
              "steps": len(runs),
              "runs": _runs(data),
              "processes": calc.families.listing([str(w) for w in sorted({r["world"] for r in runs})]),
              "families": ", ".join(f"`{f}`" for f in dict.fromkeys(r["family"] for r in runs)), "shape": shape,
              "worst": worst, "deck_low": f"{min(deck):.3f}", "deck_high": f"{max(deck):.3f}",
              "environment": data["environment"]}  # fmt: skip
    out += [*prose(ENGINES_PROSE, **values), ""]
    out += [
        "| Family | Engine | Processes | Recipe | Checkpointing | Measured, busiest rank | "
        "`--walk eager`, each rank | deck walk | A user's command |",
        "|---|---|---:|---|---|---:|---|---|---|",
    ]
    for row in runs:
        each = " ".join(f"{r['ratio']:.4f}" for r in row["ranks"])
        busiest = max(r["measured_peak"] for r in row["ranks"])
        out.append(
            f"| `{row['family']}` | `{row['engine']}` | {row['world']} | {row['precision']} | "
            f"{row['checkpointing']} | {busiest:,} | {each} | {_said(row['deck'])} | "
            f"`{row['eager']['command']}` |"
        )
    return [*out, ""]


def gpu_section() -> list[str]:
    """§13.4: every CUDA row `make gpu-check` wrote, with the caching allocator's view beside the peak."""
    out = ["### 13.4 On one GPU", ""]
    rows = {}
    for name, path in CUDA_SOURCES.items():
        data = json.loads(path.read_text()) if path.exists() else {"runs": []}
        got = [r for r in data["runs"] if r.get("device") == "cuda" and r.get("measured_peak") is not None]
        if got:
            rows[name] = got
    if not rows:
        return [*out, "Pending: no GPU was lent for this check. `make gpu-check` runs every CUDA measurement "
                "(dense, mixtures of experts, LoRA, QLoRA, the loops) on one GPU in at most 8 minutes and writes "
                "the JSON this section reads; it is ready and untried (`make gpu-check DRY_RUN=1` runs a small "
                "sample of each on the CPU).", ""]  # fmt: skip
    out += ["| Measurement | Steps | Peak (max_memory_allocated), largest | max_memory_reserved / allocated, "
            "largest | `--walk eager` / measured |", "|---|---:|---:|---:|---|"]  # fmt: skip
    for name, got in rows.items():
        reserved = [r["max_memory_reserved"] / r["measured_peak"] for r in got if "max_memory_reserved" in r]
        ratios = [x for x in map(_predicted_ratio, got) if x is not None]
        span = f"{min(ratios):.3f} to {max(ratios):.3f}" if ratios else "refused"
        out.append(f"| {name} | {len(got)} | {max(r['measured_peak'] for r in got):,} | "
                   f"{f'{max(reserved):.3f}' if reserved else 'not recorded'} | {span} |")
    return [*out, ""]


def overview_section() -> list[str]:
    """§10.1: the deck's four recipes for LLaMA 7B, their figures, and why a peak differs from the deck's."""
    llama = calc.PRESETS["llama-7b"]
    rows = calc.table(llama, SEQ, MICRO_BATCH)
    n = calc.param_counts(llama)["total"]
    lines = [
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
    return [
        *lines,
        "What these figures assume, as the deck does: activations follow Korthikanti et al.'s GPT layer (a "
        "feed-forward layer four times the width, dropout), whatever the model's own feed-forward width; the "
        "FP32 recipe keeps 16-bit activations and logits (fp32 weights with autocast); one micro-batch per "
        "step. The full-recomputation peak holds the 16-bit logits ($2sbV$) that the training loop keeps; at "
        "sequence 4,096 that equals one $V \\times h$ matrix, so this table alone cannot tell that event from "
        "another of the same size: §10.6 checks the walk against real steps instead.",
        "",
    ]


def state_section() -> list[str]:
    """§10.2 to §10.5: LLaMA 7B's state and activations, the Decoder's numbers, the presets' counts."""
    llama = calc.PRESETS["llama-7b"]
    n = calc.param_counts(llama)["total"]
    mixed = calc.step(llama, SEQ, MICRO_BATCH, "mixed", "none")
    dec = calc.PRESETS["decoder"]
    dec_step = calc.step(dec, DECODER_SEQ, DECODER_BATCH, "mixed", "none")
    dec_n = dec_step["params"]
    per_seq_block = calc.layer_bytes(dec, DECODER_SEQ, 1) // 2  # 16-bit bytes -> values
    return [
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
    ]


HEADER = [
    "# Results",
    "",
    "Every number on this page is computed by `calc` and written by `python scripts/make_results.py`;",
    "a test fails when this file differs from what that command produces. GB is $10^9$ bytes, GiB $2^{30}$.",
    "",
    "## 10. Memory",
    "",
]


def render() -> str:
    """docs/results.md: its sections in order, each rendered from calc and the measurements' data."""
    lines = [
        *HEADER,
        *overview_section(),
        *state_section(),
        *measured_section(),
        *recipes_section(),
        *transformers_section(),
        *beyond_section(),
        *deepspeed_section(),
        *finetune_section(),
        *lora_section(),
        *qlora_section(),
        "## 13. The families and loops people train now",
        "",
        *families_section(),
        *loops_section(),
        *presets_section(),
        *gpu_section(),
        *engines_section(),
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
