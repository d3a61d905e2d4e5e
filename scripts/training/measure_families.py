#!/usr/bin/env python3
"""Measure the model families people train now, and record what today's CLI says of each (issue 18's groundwork).

Each family is a tiny transformers model from a config with random weights (hf_models.py; nothing is
downloaded), trained for two steps with the usual loop (hf_models.train_step, PyTorch's AdamW); the second is
measured with profile_step's harness, over two shapes (the layers take the peak, or a vocabulary of 8,192
does), fp32 and autocast, eager and sdpa attention, checkpointing off and on. Every config keeps its
family's own features at a small size: q/k norms, soft-caps, sliding windows shorter than the sequence (64 of
128), fused projections, latent attention, experts, sinks, layers without RoPE. The prediction is the CLI's,
from the config.json and the flags a user would type (calc_cli.py), by the eager walk (`--walk eager`) and by
the deck walk; or the CLI's refusal. Beside each family: transformers' own parameter count of the config on
the meta device, and calc's.

The published config.json of each preset issue 18 lists (calc/configs/, where a public copy was found) is
counted the same way: transformers' count on the meta device, and calc's from `--hf-config` or its refusal.

    python scripts/training/measure_families.py               # measure on the CPU, print a table
    python scripts/training/measure_families.py --write       # and write docs/data/families.json
    python scripts/training/measure_families.py --dry-run     # one step of each family, nothing written
    python scripts/training/measure_families.py --repredict --write   # ask the CLI again (calc changed)
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import calc_cli  # noqa: E402
import hf_models  # noqa: E402
import measure_transformers  # noqa: E402
import profile_step  # noqa: E402
import torch  # noqa: E402

RESULTS = ROOT / "docs" / "data" / "families.json"
CONFIGS = ROOT / "calc" / "configs"
SEQ, MICRO_BATCH = 128, 2  # tokens of one step; every sliding window below is half the sequence
WINDOW = SEQ // 2
# Token ids inside the tiny vocabularies (several families' defaults point past them).
TOKENS = (("pad_token_id", 0), ("bos_token_id", 0), ("eos_token_id", 1))
HEAD = (("head_dim", 16),)  # hidden / heads, stated: several families default to 64, 128 or 256


def family(model_type: str, *extra: tuple[str, object], kv: int = 2, ffn: int = 128, vocab: int = 512):
    """A tiny model of the family: 2 layers, width 64, 4 heads, its own features in `extra`."""
    return hf_models.Model(model_type, 2, 64, 4, kv, ffn, vocab, (*TOKENS, *HEAD, *extra))


# fmt: off
FAMILIES = {
    "qwen3": family("qwen3"),
    # use_sliding_window: the layers from max_window_layers on slide (the second of two), their sdpa given the mask
    "qwen3_window": family("qwen3", ("use_sliding_window", True), ("sliding_window", WINDOW), ("max_window_layers", 1)),
    "qwen3_moe": family("qwen3_moe", ("num_experts", 4), ("num_experts_per_tok", 2), ("moe_intermediate_size", 48),
                        ("decoder_sparse_step", 1), ("mlp_only_layers", [])),
    "gemma": family("gemma"),  # Gemma 1: GemmaRMSNorm, scaled embeddings, a GELU-tanh gate, no window
    "gemma2": family("gemma2", ("sliding_window", WINDOW), ("query_pre_attn_scalar", 16)),
    "gemma3_text": family("gemma3_text", ("sliding_window", WINDOW), ("query_pre_attn_scalar", 16),
                          ("sliding_window_pattern", 2)),
    "phi3": family("phi3"),
    "olmo2": family("olmo2"),
    "olmo3": family("olmo3", ("sliding_window", WINDOW)),
    "smollm3": family("smollm3", ("no_rope_layer_interval", 2)),
    "ministral": family("ministral", ("sliding_window", WINDOW)),
    "ministral3": family("ministral3"),  # Mistral 3's text model (mistral3 wraps it with a vision tower)
    "deepseek_v3": family("deepseek_v3", ("q_lora_rank", 32), ("kv_lora_rank", 16), ("qk_nope_head_dim", 16),
                          ("qk_rope_head_dim", 8), ("head_dim", 8), ("v_head_dim", 16),  # head_dim: the rotary part
                          ("n_routed_experts", 4), ("n_shared_experts", 1), ("num_experts_per_tok", 2),
                          ("moe_intermediate_size", 32), ("n_group", 1), ("topk_group", 1),
                          ("first_k_dense_replace", 1), kv=4),
    "gpt_oss": family("gpt_oss", ("num_local_experts", 4), ("num_experts_per_tok", 2), ("sliding_window", WINDOW)),
    "llama4_text": family("llama4_text", ("num_local_experts", 4), ("num_experts_per_tok", 1),
                          ("intermediate_size_mlp", 128), ("interleave_moe_layer_step", 1),
                          ("no_rope_layer_interval", 2), ("attention_chunk_size", WINDOW)),
    # issue 32: dense layers among the experts, 4 layers. Llama-4-Maverick's layout (interleave_moe_layer_step 2:
    # dense, experts, dense, experts; the dense MLP wider than an expert), Qwen3-MoE's mlp_only_layers (experts,
    # dense, dense, experts) and Qwen2-MoE's decoder_sparse_step 2 (dense, experts with the shared one, ...)
    "llama4_text_interleaved": hf_models.Model("llama4_text", 4, 64, 4, 2, 96, 512, (
        *TOKENS, *HEAD, ("num_local_experts", 4), ("num_experts_per_tok", 1), ("intermediate_size_mlp", 160),
        ("interleave_moe_layer_step", 2), ("no_rope_layer_interval", 2), ("attention_chunk_size", WINDOW))),
    "qwen3_moe_mlp_only": hf_models.Model("qwen3_moe", 4, 64, 4, 2, 160, 512, (
        *TOKENS, *HEAD, ("num_experts", 4), ("num_experts_per_tok", 2), ("moe_intermediate_size", 48),
        ("decoder_sparse_step", 1), ("mlp_only_layers", [1, 2]))),
    "qwen2_moe_sparse_step": hf_models.Model("qwen2_moe", 4, 64, 4, 2, 160, 512, (
        *TOKENS, *HEAD, ("num_experts", 4), ("num_experts_per_tok", 2), ("moe_intermediate_size", 48),
        ("shared_expert_intermediate_size", 64), ("decoder_sparse_step", 2), ("mlp_only_layers", []))),
    "granite": family("granite", ("embedding_multiplier", 12.0), ("attention_multiplier", 0.0625),
                      ("residual_multiplier", 0.22), ("logits_scaling", 8.0)),
}
# fmt: on
VOCAB_HEAVY = 8192  # the second shape: the same model with a vocabulary whose b x s x V logits take the peak
GRID = list(itertools.product(hf_models.PRECISIONS, hf_models.ATTENTIONS, hf_models.CHECKPOINTING))
# The presets issue 18 lists, by the file name their published config.json has under calc/configs/.
PRESETS = ("qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gemma-2-27b", "gemma-3-12b", "gemma-3-27b",
           "phi-4", "olmo-2-13b", "smollm3-3b", "deepseek-v3", "gpt-oss-20b", "gpt-oss-120b", "granite-3.3-8b",
           "llama-4-scout")  # fmt: skip


def shapes(name: str) -> dict[str, hf_models.Model]:
    """The family's two measured shapes: its layers take the peak, or its vocabulary does."""
    return {"layers": FAMILIES[name], "vocab": replace(FAMILIES[name], vocab=VOCAB_HEAVY)}


def meta_params(config: dict) -> int:
    """transformers' own parameter count of a config: the model built on the meta device (no memory)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = {k: v for k, v in config.items() if k != "quantization_config"}  # count the model, not its storage
    cfg = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in net.parameters())


def text_config(config: dict) -> dict:
    """The language model's config: a multimodal config's text_config (Gemma 3, Llama 4), else the config."""
    return config.get("text_config") or config


def cli_args(name: str, m: hf_models.Model, precision: str, attention: str, checkpointing: str) -> list[str]:
    """The command a user types: their config.json and the step."""
    config = calc_cli.config_file(f"family-{name}-v{m.vocab}", m.config())
    run = ["--hf-config", str(config), "--seq", SEQ, "--micro-batch", MICRO_BATCH, "--walk", "eager"]
    run += ["--recipe", precision, "--attention", attention, "--recompute", checkpointing, "--device", "cpu"]
    return [str(a) for a in run]


def recorded_args(row: dict) -> list[str]:
    """The command a user types for a recorded row (cli_args from the row's own fields)."""
    m = shapes(row["family"])[row["shape"]]
    return cli_args(row["family"], m, row["precision"], row["attention"], row["checkpointing"])


def measure(name: str, m: hf_models.Model, precision: str, attention: str, checkpointing: str,
            shape: str = "layers") -> dict:  # fmt: skip
    """One row: the family's step measured, and what the CLI says by both walks (or why it did not run)."""
    t0 = time.perf_counter()
    row = {"family": name, "shape": shape, "model_type": m.model_type, "model": asdict(m), "seq": SEQ,
           "micro_batch": MICRO_BATCH,
           "precision": precision, "attention": attention, "checkpointing": checkpointing, "device": "cpu"}  # fmt: skip
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = profile_step.measure_cpu(m, precision, attention, checkpointing, SEQ, MICRO_BATCH)
    except Exception as e:  # a family that does not run this way in transformers: say so, measure nothing
        return {**row, "not_run": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    args = cli_args(name, m, precision, attention, checkpointing)
    eager = calc_cli.compared(args, got["measured_peak"])
    deck = calc_cli.compared(calc_cli.deck_args(args), got["measured_peak"])
    return {**row, **got, "eager": eager, "deck": deck, "seconds": round(time.perf_counter() - t0, 2)}


def calc_count(name: str, config: dict) -> dict:
    """calc's parameter count of a config, as the CLI gives it (or its refusal)."""
    path = calc_cli.config_file(f"count-{name}", config)
    said = calc_cli.answer(["--hf-config", str(path), "--seq", "8"])
    return {"params": said["params"]} if "params" in said else said


def counts(name: str, config: dict) -> dict:
    """transformers' parameter count of a config on the meta device, and calc's (or its refusal)."""
    return {"transformers_params": meta_params(text_config(config)), "calc": calc_count(name, config)}


def recount(old: dict) -> None:
    """calc's counts again, beside the recorded transformers' counts (no model is built)."""
    for name, row in old["families"].items():
        row["calc"] = calc_count(name, FAMILIES[name].config())
    for row in old["presets"]:
        row["calc"] = calc_count(row["preset"], json.loads((CONFIGS / f"{row['preset']}.json").read_text()))


def preset_rows() -> list[dict]:
    """Each listed preset whose published config.json is stored, counted both ways."""
    rows = []
    for name in PRESETS:
        path = CONFIGS / f"{name}.json"
        if path.exists():
            config = json.loads(path.read_text())
            row = {"preset": name, "model_type": config["model_type"], **counts(name, config)}
            if "text_config" in config:  # a multimodal release: transformers counts its language model
                row["counted"] = f"text_config ({text_config(config)['model_type']})"
            rows.append(row)
    return rows


def show(row: dict) -> str:
    run = f"{row['family']:12} v{row['model']['vocab']:<5} {row['precision']:9} {row['attention']:5}"
    run += f" {row['checkpointing']:4}"
    if "not_run" in row:
        return f"{run} not run: {row['not_run']}"
    said = [f"{e['ratio']:.4f}" if "ratio" in e else "refused" for e in (row["eager"], row["deck"])]
    return f"{run} {row['measured_peak']:>11,}  eager {said[0]:8} deck {said[1]}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="measure_families.py", description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    p.add_argument("--family", action="append", choices=list(FAMILIES), help="only these families")
    p.add_argument("--dry-run", action="store_true", help="one step of each family; nothing written")
    p.add_argument("--counts", action="store_true", help="only the presets' parameter counts (measure nothing)")
    p.add_argument("--repredict", action="store_true", help="ask the CLI again (steps, counts); measure none")
    args = p.parse_args(argv)
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"families": {}, "runs": []}
    if args.repredict:
        calc_cli.repredict(old["runs"], recorded_args)
        recount(old)
        if args.write:
            RESULTS.write_text(json.dumps(old, indent=1) + "\n")
        return 0
    names = args.family or list(FAMILIES)
    rows, families = [], {}
    for name in [] if args.counts else names:
        families[name] = {"model_type": FAMILIES[name].model_type, **counts(name, FAMILIES[name].config())}
        for (shape, m), (precision, attention, checkpointing) in itertools.product(
            list(shapes(name).items())[: 1 if args.dry_run else 2], GRID[:1] if args.dry_run else GRID
        ):
            rows.append(measure(name, m, precision, attention, checkpointing, shape))
            print(show(rows[-1]), flush=True)
    presets = preset_rows()
    for row in presets:
        print(f"{row['preset']:16} transformers {row['transformers_params']:>16,}  calc {row['calc']}", flush=True)
    if args.write and not args.dry_run:
        kept = [r for r in old["runs"] if r["family"] not in families]
        data = {"environment": measure_transformers.environment("cpu"), "families": {**old["families"], **families},
                "presets": presets, "runs": kept + rows}  # fmt: skip
        RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
