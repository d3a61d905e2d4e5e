#!/usr/bin/env python3
"""Check the eager walk's fine-tuning against peft's LoRA and frozen layers on transformers' own models.

Each run builds a transformers model from a config with random weights (hf_models.py; nothing is
downloaded) and fine-tunes it for two steps, measuring the second step's peak as measure_transformers.py
does (profile_step.py's CPU allocator trace). The model is trained the way a user's code does it:

    lora    model = peft.get_peft_model(model, LoraConfig(r=..., lora_alpha=..., target_modules=[...],
            lora_dropout=0.0)) after the model is built (and, for checkpointing, after
            activation_checkpointing_enable(): peft then calls enable_input_require_grads() itself,
            PeftModel.prepare_model_for_gradient_checkpointing, as it does for any checkpointed model)
    freeze  requires_grad_(False) on the embedding and the first N decoder layers (and on the final norm and the
            head, as LLaMA-Factory's freeze leaves them)

and AdamW over the parameters that require grad only. The prediction is the CLI's, from the flags a user
types (`cli_args`), run in-process. Results go to docs/data/lora.json, rendered by scripts/make_results.py.

    python scripts/training/measure_lora.py             # measure on the CPU, print a table
    python scripts/training/measure_lora.py --write     # and write docs/data/lora.json
    python scripts/training/measure_lora.py --repredict --write   # predict the recorded runs again (calc changed)
    python scripts/training/measure_lora.py --device cuda --write   # on a GPU: docs/data/lora-cuda.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import calc_cli  # noqa: E402
import hf_models  # noqa: E402
import measure_families  # noqa: E402
import measure_transformers  # noqa: E402
import profile_step  # noqa: E402
import torch  # noqa: E402

RESULTS = ROOT / "docs" / "data" / "lora.json"
RESULTS_CUDA = ROOT / "docs" / "data" / "lora-cuda.json"  # a GPU's rows (make gpu-check), apart from §12.4's
MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
           "down": "down_proj"}  # fmt: skip
# Phi-3 stores Q, K and V in one qkv_proj and the gate and up in one gate_up_proj: peft's target_modules names
# those (calc's --lora-targets names their parts together, q,k,v and gate,up)
FUSED = {"phi3": {"q": "qkv_proj", "k": "qkv_proj", "v": "qkv_proj", "gate": "gate_up_proj", "up": "gate_up_proj"}}


# A mixture of experts' gate, up and down are its experts' fused weights, which peft adapts through
# target_parameters (a ParamWrapper on each), not target_modules
ALL_LINEAR = "all-linear"  # peft's shorthand, given to it as is
MOE_TYPES = ("qwen3_moe", "mixtral", "qwen2_moe", "gpt_oss")
EXPERT_PARAMETERS = {"gate": "mlp.experts.gate_up_proj", "up": "mlp.experts.gate_up_proj",
                     "down": "mlp.experts.down_proj"}  # fmt: skip


def peft_modules(m: hf_models.Model, targets: tuple[str, ...]) -> list[str] | str:
    """peft's target_modules for calc's targets on this model: its module names, each once; all-linear itself,
    which peft resolves by the model's type (on a mixture of experts, calc.finetune.all_linear)."""
    if targets == (ALL_LINEAR,):
        return ALL_LINEAR
    names = {**MODULES, **FUSED.get(m.model_type, {})}
    return list(dict.fromkeys(names[t] for t in targets if m.model_type not in MOE_TYPES or t not in EXPERT_PARAMETERS))


def peft_parameters(m: hf_models.Model, targets: tuple[str, ...]) -> list[str] | None:
    """peft's target_parameters for calc's targets on this model (a mixture of experts' gate, up, down), or None."""
    names = list(dict.fromkeys(EXPERT_PARAMETERS[t] for t in targets if t in EXPERT_PARAMETERS))
    return names if m.model_type in MOE_TYPES and names else None


@dataclass(frozen=True)
class Tune:
    """How a run fine-tunes: calc's --finetune and its flags."""

    mode: str  # "lora" or "freeze"
    rank: int = 8
    alpha: int = 16
    targets: tuple[str, ...] = ("q", "v")  # calc's names (MODULES gives peft's)
    freeze_layers: int = 0
    embedding: bool = False  # freeze: the embedding trains (calc's --no-freeze-embedding), only the blocks frozen
    head: bool = False  # freeze: the final norm and the head frozen too (calc's --freeze-head, LLaMA-Factory's freeze)
    adapter_dtype: str = ""  # calc's --adapter-dtype where the run sets peft's autocast_adapter_dtype; "": not said

    def flags(self) -> list[str]:
        if self.mode == "freeze":
            trained = ["--no-freeze-embedding"] if self.embedding else []
            head = ["--freeze-head"] if self.head else []
            return ["--finetune", "freeze", "--freeze-layers", str(self.freeze_layers), *trained, *head]
        adapter = ["--adapter-dtype", self.adapter_dtype] if self.adapter_dtype else []
        return ["--finetune", self.mode, "--lora-rank", str(self.rank), "--lora-alpha", str(self.alpha),
                "--lora-targets", ",".join(self.targets), *adapter]  # fmt: skip

    def label(self) -> str:
        if self.mode == "freeze":
            return f"freeze {self.freeze_layers}" + (", embedding trained" if self.embedding else "") + (
                ", head and final norm frozen" if self.head else "")
        return f"lora r{self.rank} {','.join(self.targets)}"


ALL = ("q", "k", "v", "o", "gate", "up", "down")
RUNS = [  # (model, seq, micro-batch, tuning)
    (hf_models.Model("llama", 4, 64, 4, 4, 176, 512), 128, 2, Tune("lora", 8, 16, ("q", "v"))),
    (hf_models.Model("llama", 4, 64, 4, 4, 176, 512), 128, 2, Tune("lora", 16, 32, ALL)),
    (hf_models.Model("llama", 4, 64, 4, 4, 176, 512), 128, 2, Tune("freeze", freeze_layers=2)),
    (hf_models.Model("mistral", 4, 64, 4, 1, 176, 256), 256, 1, Tune("lora", 4, 8, ALL)),
    (hf_models.Model("qwen2", 3, 128, 8, 2, 344, 1000), 64, 2, Tune("lora", 8, 16, ("q", "k", "v", "o"))),
]
FAMILIES = measure_families.FAMILIES  # a tiny model of each family, its own features kept (sliding windows...)
TIED = lambda name: replace(FAMILIES[name], extra=(*FAMILIES[name].extra, ("tie_word_embeddings", True)))  # noqa: E731
GEMMA3 = replace(FAMILIES["gemma3_text"], layers=4)  # a sliding and a full layer twice (sliding_window_pattern 2)
RUNS += [  # the families issue 18 adds, each from its config.json (`--hf-config`)
    (FAMILIES["qwen3"], 128, 2, Tune("lora", 8, 16, ALL)),
    (FAMILIES["qwen3"], 128, 2, Tune("lora", 8, 16, ("q", "v"))),
    (FAMILIES["granite"], 128, 2, Tune("lora", 8, 16, ALL)),
    (FAMILIES["gemma"], 128, 2, Tune("lora", 8, 16, ALL)),
    (FAMILIES["gemma"], 128, 2, Tune("freeze", freeze_layers=1)),  # the scaled embedding's output made the leaf
    (FAMILIES["gemma2"], 128, 2, Tune("lora", 8, 16, ALL)),
    (GEMMA3, 128, 2, Tune("lora", 8, 16, ALL)),
    (GEMMA3, 128, 2, Tune("lora", 16, 32, ("q", "v"))),
    (FAMILIES["olmo2"], 128, 2, Tune("lora", 8, 16, ALL)),
    (FAMILIES["olmo2"], 128, 2, Tune("lora", 4, 8, ("q", "v"))),
    (FAMILIES["olmo3"], 128, 2, Tune("lora", 8, 16, ALL)),
    (FAMILIES["smollm3"], 128, 2, Tune("lora", 8, 16, ALL)),
    (FAMILIES["ministral"], 128, 2, Tune("lora", 8, 16, ALL)),
    (FAMILIES["ministral3"], 128, 2, Tune("lora", 8, 16, ALL)),
    (FAMILIES["phi3"], 128, 2, Tune("freeze", freeze_layers=1)),
]
RUNS += [  # issue 34: the first blocks frozen, the embedding trained (backward reaches it through them)
    (hf_models.Model("llama", 4, 64, 4, 4, 176, 512), 128, 2, Tune("freeze", freeze_layers=2, embedding=True)),
    (TIED("gemma"), 128, 2, Tune("freeze", freeze_layers=1, embedding=True)),  # the tied head trains with it
    (TIED("smollm3"), 128, 2, Tune("freeze", freeze_layers=1, embedding=True)),  # tied, its no-RoPE layers
]
RUNS += [  # issue 34: Phi-3's fused qkv_proj and gate_up_proj, one adapter each as peft puts it
    (FAMILIES["phi3"], 128, 2, Tune("lora", 8, 16, ALL)),  # all-linear: qkv_proj, o_proj, gate_up_proj, down_proj
    (FAMILIES["phi3"], 128, 2, Tune("lora", 16, 32, ("q", "k", "v", "o"))),
]
ATTENTION = ("q", "k", "v", "o")
MIXTRAL = hf_models.mixtral(2, 64, 4, 2, 96, 256, 4, 2)
QWEN2_MOE = hf_models.qwen2_moe(2, 64, 4, 2, 96, 256, 4, 2, 160)
RUNS += [  # issue 34: LoRA on a mixture of experts' attention, the experts and the router frozen (from config.json)
    (FAMILIES["qwen3_moe"], 128, 2, Tune("lora", 8, 16, ATTENTION)),
    (FAMILIES["qwen3_moe"], 128, 2, Tune("lora", 16, 32, ("q", "v"))),
    (FAMILIES["qwen3_moe_mlp_only"], 128, 2, Tune("lora", 8, 16, ATTENTION)),  # dense layers among the experts
    (MIXTRAL, 128, 2, Tune("lora", 8, 16, ATTENTION)),
    (QWEN2_MOE, 128, 2, Tune("lora", 8, 16, ("q", "v"))),  # the shared expert frozen too
    (FAMILIES["gpt_oss"], 128, 2, Tune("lora", 8, 16, ATTENTION)),  # biased projections, sinks, sliding layers
]
RUNS += [  # issue 34: LoRA on the experts' fused weights too (peft's target_parameters: a ParamWrapper on each)
    (FAMILIES["qwen3_moe"], 128, 2, Tune("lora", 8, 16, ALL)),
    (FAMILIES["qwen3_moe"], 128, 2, Tune("lora", 4, 8, ("q", "v", "down"))),
    (MIXTRAL, 128, 2, Tune("lora", 8, 16, ALL)),
    (FAMILIES["gpt_oss"], 128, 2, Tune("lora", 8, 16, ALL)),  # the experts of TRL's gpt-oss recipe
]
RUNS += [  # issue 34: peft's all-linear on a mixture of experts, which peft 0.21 converts by model type: the router
    # and the experts too (gate_up_proj at twice the rank) on Qwen3-MoE and Mixtral, the attention alone on GPT-OSS
    (FAMILIES["qwen3_moe"], 128, 2, Tune("lora", 8, 16, (ALL_LINEAR,))),
    (MIXTRAL, 128, 2, Tune("lora", 8, 16, (ALL_LINEAR,))),
    (FAMILIES["gpt_oss"], 128, 2, Tune("lora", 8, 16, (ALL_LINEAR,))),
]
RUNS += [  # issue 32: LLaMA-Factory's freeze: the last blocks alone train, the head and final norm frozen too
    (hf_models.Model("llama", 4, 64, 4, 4, 176, 512), 128, 2, Tune("freeze", freeze_layers=2, head=True)),
    (FAMILIES["qwen3"], 128, 2, Tune("freeze", freeze_layers=1, head=True)),
]
RUNS += [  # issue 34: LoRA on Llama 4's attention, its experts, shared expert and router frozen (bmm then saves no
    # input), with dense layers among the experts too (interleave_moe_layer_step 2, Llama-4-Maverick's layout)
    (FAMILIES["llama4_text"], 128, 2, Tune("lora", 8, 16, ATTENTION)),
    (FAMILIES["llama4_text_interleaved"], 128, 2, Tune("lora", 8, 16, ("q", "v"))),
]
SHAPE_FLAGS = ("llama", "mistral", "qwen2")  # the first runs' model types, predicted from shape flags as recorded
GRID = list(itertools.product(hf_models.PRECISIONS, hf_models.ATTENTIONS, hf_models.CHECKPOINTING))


def runs_attention(m: hf_models.Model) -> tuple[str, ...]:
    """The attention implementations its family's code accepts (Gemma 2's: eager; calc refuses the others)."""
    from calc import families

    family = families.MODEL_TYPES[m.model_type].family
    return families.FAMILIES[family].attentions


def tuned(m: hf_models.Model, attention: str, checkpointing: str, tune: Tune) -> torch.nn.Module:
    """The model as the user's fine-tuning code leaves it (see the module's docstring)."""
    net = hf_models.build(m, attention, checkpointing)
    if tune.mode == "lora":
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=tune.rank, lora_alpha=tune.alpha, lora_dropout=0.0,
                            target_modules=peft_modules(m, tune.targets),
                            target_parameters=peft_parameters(m, tune.targets))  # fmt: skip
        with warnings.catch_warnings():  # peft 0.21 reads transformers 5's deprecated is_gradient_checkpointing
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
            # and, converting all-linear on a mixture of experts, warns that its gate_up_proj rank and alpha patterns
            # matched no module, though its ParamWrapper on gate_up_proj is made at that rank (lora.json's rows)
            warnings.filterwarnings("ignore", "The following (rank|alpha)_pattern keys did not match", RuntimeWarning)
            return get_peft_model(net, config)
    if not tune.embedding:  # frozen with a head tied to it (one Parameter)
        net.model.embed_tokens.requires_grad_(False)
    for layer in net.model.layers[: tune.freeze_layers]:
        layer.requires_grad_(False)
    if tune.head:  # LLaMA-Factory's freeze: the chosen blocks alone train (a tied head is the embedding's)
        net.model.norm.requires_grad_(False)
        net.lm_head.requires_grad_(False)
    return net


def measure_cpu(m, precision, attention, checkpointing, seq, b, tune: Tune) -> dict:
    """The second step's allocator peak of a fine-tuned model on the CPU, in bytes (profile_step's harness)."""
    return measure_step(m, precision, attention, checkpointing, seq, b, tune, "cpu")


def measure_step(m, precision, attention, checkpointing, seq, b, tune: Tune, device: str) -> dict:
    """The second step's peak of a fine-tuned model on `device`, in bytes, and the parameters it trains."""

    def make():
        net = tuned(m, attention, checkpointing, tune).to(device)
        return net, torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=1e-3)

    batches = [hf_models.tokens(m.vocab, seq, b, seed).to(device) for seed in (0, 1)]
    body = profile_step.two_steps(make, lambda s, x: hf_models.train_step(*s, x, precision), batches)
    got, (net, _) = profile_step.on(device, body)
    trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
    return {**got, "measured_trainable": trainable}


def cli_args(m, seq, b, precision, attention, checkpointing, tune: Tune, device: str = "cpu") -> list[str]:
    """The command a user types to predict this step: Llama's, Mistral's and Qwen2's shape as flags, another
    family's config.json (`--hf-config`, its own features kept)."""
    if m.model_type in SHAPE_FLAGS:
        return measure_transformers.cli_args(m, seq, b, precision, attention, checkpointing, device) + tune.flags()
    config = calc_cli.config_file(config_name(m), m.config())
    run = ["--hf-config", config, "--seq", seq, "--micro-batch", b, "--walk", "eager", "--recipe", precision]
    run += ["--attention", attention, "--recompute", checkpointing, "--device", device]
    return [str(a) for a in run] + tune.flags()


def config_name(m: hf_models.Model) -> str:
    """The name of a run's config.json, as its recorded command shows it: the model type and its layers."""
    return f"lora-{m.model_type}-l{m.layers}"


def recorded_args(row: dict) -> list[str]:
    """A recorded row's command as flags, its config.json (recorded beside it, "config") written again."""
    args = row["command"].split()[3:]
    if "config" in row:
        i = args.index("--hf-config") + 1
        args[i] = str(calc_cli.config_file(args[i].removesuffix(".json"), row["config"]))
    return args


def measure(m, seq, b, tune, precision, attention, checkpointing, device: str = "cpu") -> dict:
    t0 = time.perf_counter()
    got = measure_step(m, precision, attention, checkpointing, seq, b, tune, device)
    args = cli_args(m, seq, b, precision, attention, checkpointing, tune, device)
    pred = measure_transformers.predict(args)
    return {
        "model_type": m.model_type,
        "model": asdict(m),
        "tune": tune.label(),
        "seq": seq,
        "micro_batch": b,
        "precision": precision,
        "attention": attention,
        "checkpointing": checkpointing,
        "device": device,
        **got,
        "trainable_params": pred["trainable_params"],
        "predicted_peak": pred["peak"],
        "predicted_peak_event": pred["peak_event"],
        "ratio": round(pred["peak"] / got["measured_peak"], 4),
        "command": "python -m calc " + " ".join(calc_cli._shown(a) for a in args),
        **({} if m.model_type in SHAPE_FLAGS else {"config": m.config()}),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def repredict() -> dict:
    """docs/data/lora.json with every run predicted again from its recorded command, its measurements kept."""
    data = json.loads(RESULTS.read_text())
    for row in data["runs"]:
        pred = measure_transformers.predict(recorded_args(row))
        row.update(trainable_params=pred["trainable_params"], predicted_peak=pred["peak"],
                   predicted_peak_event=pred["peak_event"], ratio=round(pred["peak"] / row["measured_peak"], 4))
    return data


def kept(old: list[dict], new: list[dict]) -> list[dict]:
    """The rows of a file after measuring some of its runs again: every run in RUNS' order, its new rows where it
    was measured, else its recorded ones."""
    def as_json(model) -> object:  # a recorded model holds lists where a new one holds tuples
        return json.loads(json.dumps(model))

    def run_of(row: dict) -> int:
        return next(i for i, (m, seq, b, tune) in enumerate(RUNS) if as_json(asdict(m)) == as_json(row["model"])
                    and tune.label() == row["tune"] and (seq, b) == (row["seq"], row["micro_batch"]))

    measured = {run_of(r) for r in new}
    rows = [r for r in old if run_of(r) not in measured] + new
    return sorted(rows, key=run_of)  # stable: each run's rows in the order they were measured


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="measure_lora.py", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(ROOT)} (on cuda: -cuda.json)")
    p.add_argument("--only", type=int, action="append", help="only these runs (indices into RUNS)")
    p.add_argument("--repredict", action="store_true", help="predict the recorded runs again, measuring nothing")
    args = p.parse_args(argv)
    if args.repredict:
        data = repredict()
        if args.write:
            RESULTS.write_text(json.dumps(data, indent=1) + "\n")
        return 0
    import peft

    rows = []
    for i, (m, seq, b, tune) in enumerate(RUNS):
        if args.only and i not in args.only:
            continue
        for precision, attention, checkpointing in GRID:
            if attention not in runs_attention(m):
                continue
            row = measure(m, seq, b, tune, precision, attention, checkpointing, args.device)
            rows.append(row)
            print(
                f"{i} {row['model_type']:11} kv{m.kv_heads} {row['tune']:28} {precision:9} {attention:5} "
                f"{checkpointing:4} {row['measured_peak']:>11,} {row['predicted_peak']:>11,} {row['ratio']:.4f}"
                f" tensors {row['predicted_peak'] / row['measured_peak_tensors']:.4f}"
                f" trainable {row['measured_trainable']} / {row['trainable_params']}",
                flush=True,
            )
    if args.write:
        env = f"{measure_transformers.environment(args.device)}, peft {peft.__version__}"
        out = RESULTS if args.device == "cpu" else RESULTS_CUDA
        if args.only and out.exists():  # the other runs' rows kept as recorded, in RUNS' order
            rows = kept(json.loads(out.read_text())["runs"], rows)
        out.write_text(json.dumps({"environment": env, "runs": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
