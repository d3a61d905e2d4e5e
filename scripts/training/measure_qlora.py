#!/usr/bin/env python3
"""Check `--finetune qlora` against bitsandbytes' 4-bit layers and peft's LoRA on transformers' Llama.

Each run builds a transformers Llama from a config with random weights (hf_models.py), saves it to a
temporary folder and loads it back the way a QLoRA user does (nothing is downloaded):

    AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, quantization_config=BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16))
    model = peft.get_peft_model(model, LoraConfig(r, lora_alpha, target_modules, lora_dropout=0.0),
                                autocast_adapter_dtype=...)

so every block linear is bitsandbytes' Linear4bit (NF4, double-quantized absmax) and everything else is bf16:
calc's `--recipe bf16 --finetune qlora`. Each run is made with both adapter dtypes: peft's default
(autocast_adapter_dtype=True upcasts the adapters to fp32: calc's `--adapter-dtype fp32`, its default too) and
bf16 adapters (autocast_adapter_dtype=False: `--adapter-dtype model`). Each run is made a second time
without the quantization config (a bf16 base, `--finetune lora`), so what QLoRA changes shows apart from
what the deck walk misses for any LoRA step. AdamW over the adapters; two
steps, the second measured: on the CPU the profiler's allocator peak (profile_step.py), on CUDA
torch.cuda.max_memory_allocated (max_memory_reserved beside it). Two predictions, each the CLI's from the flags
a user types: the deck walk's (`cli_args`) and the eager walk's (`eager_args`: `--walk eager`, which replays
bitsandbytes' Linear4bit and peft's wrapper of it op by op). `--recipe bf16` says what was run: a bf16 model,
the adapters' gradients and AdamW moments in the adapters' dtype (torch's AdamW keeps its state in the
parameters' dtype). Results go to docs/data/qlora.json,
rendered by scripts/make_results.py §12.5.

    python scripts/training/measure_qlora.py                        # on the CPU, print a table
    python scripts/training/measure_qlora.py --device cuda --write  # on a GPU, write docs/data/qlora-cuda.json
    python scripts/training/measure_qlora.py --repredict --write    # predict the recorded runs again

Needs `pip install bitsandbytes` (0.48 or later runs 4-bit layers on the CPU).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import calc_cli  # noqa: E402
import hf_models  # noqa: E402
import measure_lora  # noqa: E402
import measure_transformers  # noqa: E402
import profile_step  # noqa: E402
import torch  # noqa: E402

RESULTS = ROOT / "docs" / "data" / "qlora.json"
RESULTS_CUDA = ROOT / "docs" / "data" / "qlora-cuda.json"  # a GPU's rows (make gpu-check), apart from §12.5's
ALL = measure_lora.ALL
RUNS = [  # (model, seq, micro-batch, tuning); bitsandbytes needs widths that are multiples of its blocks (64)
    (hf_models.Model("llama", 4, 128, 4, 4, 384, 512), 128, 2, measure_lora.Tune("qlora", 8, 16, ("q", "v"))),
    (hf_models.Model("llama", 4, 128, 4, 4, 384, 512), 128, 2, measure_lora.Tune("qlora", 16, 32, ALL)),
    (hf_models.Model("llama", 4, 256, 4, 2, 704, 1024), 256, 1, measure_lora.Tune("qlora", 8, 16, ALL)),
]
# Issue 34: QLoRA on models whose own code measure_lora predicts from their config.json, loaded as above, eager walk
# only; each beside the same step on a bf16 base. A mixture of experts: transformers 5's experts are fused
# parameters and its routers no nn.Linear, so bitsandbytes quantizes only the attention's linears (and a dense
# layer's MLP), the experts and the router stay bf16 (calc.finetune.quantized; the deck walk fine-tunes no mixture
# of experts). Phi-3: its fused qkv_proj and gate_up_proj are one Linear4bit each, one adapter each.
CONFIG_RUNS = [
    (measure_lora.FAMILIES["qwen3_moe"], 128, 2, measure_lora.Tune("qlora", 8, 16, measure_lora.ATTENTION)),
    (measure_lora.FAMILIES["qwen3_moe_mlp_only"], 128, 2, measure_lora.Tune("qlora", 8, 16, measure_lora.ATTENTION)),
    (measure_lora.MIXTRAL, 128, 2, measure_lora.Tune("qlora", 8, 16, measure_lora.ATTENTION)),
    (measure_lora.FAMILIES["qwen3_moe"], 128, 2, measure_lora.Tune("qlora", 8, 16, ALL)),  # the experts' LoRA too
    (replace(measure_lora.FAMILIES["phi3"], hidden=128, ffn=384, extra=tuple(  # whole NF4 blocks
        (k, 32 if k == "head_dim" else v) for k, v in measure_lora.FAMILIES["phi3"].extra)), 128, 2,
     measure_lora.Tune("qlora", 8, 16, ALL)),
    # peft's all-linear as peft converts it: the 4-bit attention's adapters, the bf16 router's and experts' too
    (measure_lora.FAMILIES["qwen3_moe"], 128, 2, measure_lora.Tune("qlora", 8, 16, (measure_lora.ALL_LINEAR,))),
    # GPT-OSS, which TRL's and axolotl's recipes fine-tune: its attention's biased linears 4-bit, its sinks, router
    # and experts bf16
    (measure_lora.FAMILIES["gpt_oss"], 128, 2, measure_lora.Tune("qlora", 8, 16, measure_lora.ATTENTION)),
]
ATTENTIONS, CHECKPOINTING = ("eager", "sdpa"), ("none", "full")
ADAPTER_DTYPES = ("model", "fp32")  # calc's --adapter-dtype: autocast_adapter_dtype=False, then peft's default


def saved(m: hf_models.Model) -> str:
    """A folder holding the model with random weights (fp32), as from_pretrained reads it."""
    folder = tempfile.mkdtemp(prefix="qlora-")
    hf_models.build(m, "eager", "none").save_pretrained(folder)
    return folder


def tuned(folder: str, attention: str, checkpointing: str, tune, device: str, precision: str = "bf16", m=None):
    """The model as a QLoRA user's code leaves it (see the module's docstring). `precision` other than bf16
    (calc's fp32-full and autocast recipes): the model loaded in fp32 (the 4-bit layers still compute in bf16)
    and trained so, with peft's default fp32 adapters (autocast_adapter_dtype=True; without it peft makes the
    adapters of a 4-bit layer bf16, the compute dtype, on an fp32 model too)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                           bnb_4bit_compute_dtype=torch.bfloat16) if tune.mode == "qlora" else None  # fmt: skip
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    net = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, quantization_config=q,
                                               device_map=device, attn_implementation=attention)  # fmt: skip
    net.config.use_cache = False
    if device == "cpu":  # weights read from the file may be mapped, not allocated: copy them where the profiler sees
        for t in [*net.parameters(), *net.buffers()]:
            t.data = t.data.clone()
    if checkpointing == "full":
        net.activation_checkpointing_enable()
    net.train()
    modules = measure_lora.peft_modules(m, tune.targets) if m else [measure_lora.MODULES[t] for t in tune.targets]
    config = LoraConfig(r=tune.rank, lora_alpha=tune.alpha, lora_dropout=0.0, target_modules=modules,
                        target_parameters=m and measure_lora.peft_parameters(m, tune.targets))  # fmt: skip
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        warnings.filterwarnings("ignore", "The following (rank|alpha)_pattern keys did not match", RuntimeWarning)
        upcast = precision != "bf16" or tune.adapter_dtype != "model"  # peft's default: True
        return get_peft_model(net, config, autocast_adapter_dtype=upcast)


def resident(net: torch.nn.Module) -> int:
    """Bytes of every parameter and buffer, and of bitsandbytes' quantization state (absmax, code books)."""
    seen, total = set(), 0

    def add(t):
        nonlocal total
        if isinstance(t, torch.Tensor) and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()

    for t in [*net.parameters(), *net.buffers()]:
        add(t)
        state = getattr(t, "quant_state", None)
        while state is not None:
            add(state.absmax)
            add(state.code)
            state = state.state2
    return total


def measure_step(folder, attention, checkpointing, seq, b, tune, device, precision: str = "bf16", m=None) -> dict:
    """The second step's peak and start, and what the model holds, in bytes."""
    vocab = json.loads((Path(folder) / "config.json").read_text())["vocab_size"]
    batches = [hf_models.tokens(vocab, seq, b, seed).to(device) for seed in (0, 1)]

    def make():
        net = tuned(folder, attention, checkpointing, tune, device, precision, m)
        return net, torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=1e-3)

    body = profile_step.two_steps(make, lambda s, x: hf_models.train_step(*s, x, precision), batches)
    got, (net, _) = profile_step.on(device, body)
    trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
    return {**got, "measured_trainable": trainable, "model_bytes": resident(net)}


def cli_args(m: hf_models.Model, seq: int, b: int, checkpointing: str, attention: str, tune) -> list[str]:
    """The command a user types to predict this step (the deck walk; SDPA's fused kernels keep no scores)."""
    shape = ["--layers", m.layers, "--hidden", m.hidden, "--heads", m.heads, "--kv-heads", m.kv_heads]
    shape += ["--ffn", m.ffn, "--vocab", m.vocab, "--seq", seq, "--micro-batch", b, "--recipe", "bf16"]
    shape += ["--recompute", checkpointing, "--flash" if attention == "sdpa" else "--no-flash"]
    return [str(a) for a in shape] + tune.flags()


def eager_args(m: hf_models.Model, seq: int, b: int, checkpointing: str, attention: str, tune, device: str,
               precision: str = "bf16"):  # fmt: skip
    """The command a user types for the eager walk of this step."""
    run = measure_transformers.cli_args(m, seq, b, precision, attention, checkpointing, device)
    return run + tune.flags()


def predictions(row: dict) -> dict:
    """A run's predictions, deck walk and eager walk, from the CLI; its measurements are the row's."""
    flags = row["command"].split()[3:]  # the deck walk's command, as recorded
    given = dict(itertools.pairwise(flags))  # each flag and the value after it
    tune = measure_lora.Tune(given["--finetune"], int(given["--lora-rank"]), int(given["--lora-alpha"]),
                             tuple(given["--lora-targets"].split(",")),
                             adapter_dtype=given.get("--adapter-dtype", "model"))  # fmt: skip
    m = hf_models.Model(**row["model"])
    return _predict(m, row["seq"], row["micro_batch"], tune, row["attention"], row["checkpointing"], row["device"],
                    row["measured_peak"])  # fmt: skip


def _predict(m, seq, b, tune, attention, checkpointing, device, measured_peak: int) -> dict:
    """The deck walk's and the eager walk's predictions of one run, from the CLI with a user's flags."""
    args = cli_args(m, seq, b, checkpointing, attention, tune)
    pred = measure_transformers.predict(args)
    eager = eager_args(m, seq, b, checkpointing, attention, tune, device)
    walked = measure_transformers.predict(eager)
    return {
        "trainable_params": pred["trainable_params"],
        "predicted_weights": pred["bytes"]["weights"],
        "predicted_peak": pred["peak"],
        "predicted_peak_event": pred["peak_event"],
        "ratio": round(pred["peak"] / measured_peak, 4),
        "command": "python -m calc " + " ".join(args),
        "eager_trainable_params": walked["trainable_params"],
        "eager_predicted_peak": walked["peak"],
        "eager_peak_event": walked["peak_event"],
        "eager_ratio": round(walked["peak"] / measured_peak, 4),
        "eager_command": "python -m calc " + " ".join(eager),
    }


def measure(folder, m, seq, b, tune, attention, checkpointing, device) -> dict:
    t0 = time.perf_counter()
    got = measure_step(folder, attention, checkpointing, seq, b, tune, device)
    return {
        "model_type": m.model_type,
        "model": asdict(m),
        "tune": f"{tune.mode} r{tune.rank} {','.join(tune.targets)}",
        "adapter_dtype": tune.adapter_dtype,
        "seq": seq,
        "micro_batch": b,
        "precision": "bf16",
        "attention": attention,
        "checkpointing": checkpointing,
        "device": device,
        **got,
        **_predict(m, seq, b, tune, attention, checkpointing, device, got["measured_peak"]),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def measure_config(folder, m, seq, b, tune, attention, checkpointing, device) -> dict:
    """One QLoRA (or bf16-base LoRA) step of a mixture of experts, measured, and the eager walk's prediction from
    the flags a user types with the model's config.json."""
    t0 = time.perf_counter()
    got = measure_step(folder, attention, checkpointing, seq, b, tune, device, m=m)
    row = {"model_type": m.model_type, "model": asdict(m), "tune": f"{tune.mode} r{tune.rank} {','.join(tune.targets)}",
           "adapter_dtype": tune.adapter_dtype, "seq": seq, "micro_batch": b, "precision": "bf16",
           "attention": attention, "checkpointing": checkpointing, "device": device, **got,
           "config": m.config()}  # fmt: skip
    args = measure_lora.cli_args(m, seq, b, "bf16", attention, checkpointing, tune, device)
    row["eager_command"] = "python -m calc " + " ".join(calc_cli._shown(a) for a in args)
    return {**row, **config_predictions(row), "seconds": round(time.perf_counter() - t0, 2)}


def config_predictions(row: dict) -> dict:
    """A mixture of experts' row predicted by the eager walk, from its recorded command and config.json."""
    walked = measure_transformers.predict(measure_lora.recorded_args({**row, "command": row["eager_command"]}))
    start = [e for e in walked["events"] if e["phase"] == "start" and e["category"] == "weights"]
    return {"eager_trainable_params": walked["trainable_params"], "eager_predicted_peak": walked["peak"],
            "eager_peak_event": walked["peak_event"], "eager_ratio": round(walked["peak"] / row["measured_peak"], 4),
            "predicted_weights": sum(e["bytes"] for e in start)}  # fmt: skip


def repredict() -> dict:
    """docs/data/qlora.json with every run predicted again (both walks), its measurements kept."""
    data = json.loads(RESULTS.read_text())
    for row in data.get("config_runs", []):
        for r in (row, row["lora"]):
            r.update(config_predictions(r))
    for row in data["runs"]:
        row.update(predictions(row))
        row["lora"].update(predictions(row["lora"]))
        print(f"{row['tune']:28} {row['attention']:5} {row['checkpointing']:4} eager {row['eager_ratio']:.4f} "
              f"(bf16 base {row['lora']['eager_ratio']:.4f}) deck {row['ratio']:.4f}", flush=True)  # fmt: skip
    return data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="measure_qlora.py", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    p.add_argument("--only", type=int, action="append", help="only these runs (indices into RUNS)")
    p.add_argument("--repredict", action="store_true", help="predict the recorded runs again, measuring nothing")
    p.add_argument("--configs", action="store_true", help="measure CONFIG_RUNS (QLoRA on mixtures of experts and "
                                                          "Phi-3) into the recorded file's config_runs, keeping its "
                                                          "other runs")  # fmt: skip
    args = p.parse_args(argv)
    if args.repredict:
        data = repredict()
        if args.write:
            RESULTS.write_text(json.dumps(data, indent=1) + "\n")
        return 0
    import bitsandbytes
    import peft

    if args.configs:
        return measure_configs(args)
    rows = []
    for i, attention, checkpointing, row, lora in grid(RUNS, args.only, measure, args.device):
        rows.append({**row, "lora": lora})
        print(
            f"{i} {row['tune']:28} lora {lora['measured_peak']:>11,} {lora['predicted_peak']:>11,} "
            f"{lora['ratio']:.4f}\n{'':30} {attention:5} {checkpointing:4} start {row['measured_start']:>11,} "
            f"model {row['model_bytes']:>11,} / {row['predicted_weights']:>11,} peak "
            f"{row['measured_peak']:>11,} {row['predicted_peak']:>11,} {row['ratio']:.4f} eager "
            f"{row['eager_predicted_peak']:>11,} {row['eager_ratio']:.4f} trainable "
            f"{row['measured_trainable']} / {row['trainable_params']}",
            flush=True,
        )
    if args.write:
        env = f"{measure_transformers.environment(args.device)}, peft {peft.__version__}, "
        env += f"bitsandbytes {bitsandbytes.__version__}"
        out = RESULTS if args.device == "cpu" else RESULTS_CUDA
        out.write_text(json.dumps({"environment": env, "runs": rows}, indent=1) + "\n")
    return 0


def _qlora_ratio(row: dict) -> float:
    return row["eager_predicted_peak"] / row["measured_peak_tensors"]


def grid(runs: list, only: list[int] | None, how, device: str):
    """Each of `runs` (those whose index is in `only`, where given) with both adapter dtypes, both attentions and
    checkpointing off and on, measured by `how` (measure or measure_config) and again on a bf16 base (LoRA):
    (index, attention, checkpointing, the QLoRA row, the bf16 base's row)."""
    for i, (m, seq, b, tune) in enumerate(runs):
        if only and i not in only:
            continue
        folder = saved(m)
        attentions = [a for a in ATTENTIONS if a in measure_lora.runs_attention(m)]  # GPT-OSS: eager only
        for adapter, attention, checkpointing in itertools.product(ADAPTER_DTYPES, attentions, CHECKPOINTING):
            run = replace(tune, adapter_dtype=adapter)
            yield (i, attention, checkpointing, how(folder, m, seq, b, run, attention, checkpointing, device),
                   how(folder, m, seq, b, replace(run, mode="lora"), attention, checkpointing, device))


def measure_configs(args) -> int:
    """CONFIG_RUNS measured, each with both adapter dtypes, attentions and checkpointing, and on a bf16 base."""
    rows = []
    for i, attention, checkpointing, row, lora in grid(CONFIG_RUNS, args.only, measure_config, args.device):
        rows.append({**row, "lora": lora})
        print(f"{i} {row['model_type']:10} {row['tune']:26} {row['adapter_dtype']:5} {attention:5} {checkpointing:4} "
              f"model {row['model_bytes']:>10,} / {row['predicted_weights']:>10,} "
              f"qlora {row['measured_peak_tensors']:>11,} {_qlora_ratio(row):.4f} bf16 base {_qlora_ratio(lora):.4f}",
              flush=True)
    if args.write:  # the runs measured now replace theirs; the others (--only) are kept, in CONFIG_RUNS' order
        data = json.loads(RESULTS.read_text())
        order = [(json.dumps(asdict(m)), f"{t.mode} r{t.rank} {','.join(t.targets)}") for m, _, _, t in CONFIG_RUNS]
        new = {(json.dumps(r["model"]), r["tune"]) for r in rows}
        kept = [r for r in data.get("config_runs", []) if (json.dumps(r["model"]), r["tune"]) not in new]
        data["config_runs"] = sorted(kept + rows, key=lambda r: order.index((json.dumps(r["model"]), r["tune"])))
        RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
