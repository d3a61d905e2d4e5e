"""Model families: one module each, registered here by the config.json model_type it reads.

A module says how to read its model types' config.json (calc.families.config) and, where the eager walk
replays its code, its decoder layer composed from calc.parts. What the eager walk supports, and the message
for what it refuses, come from this registry alone (`eager_lacks`, `tuning_lacks`)."""

from __future__ import annotations

import pkgutil
from importlib import import_module

from ..shape import Shape
from .family import Family, ModelType

NOT_FAMILIES = ("__init__", "config", "family")  # the package's own modules


def _modules() -> list:
    """Every family module of this package, in the order each one's ORDER says: a new family is one file.
    (pkgutil lists them wherever the package is: a folder, an installed wheel, or a zip on sys.path.)"""
    names = {m.name for m in pkgutil.iter_modules(__path__)} - set(NOT_FAMILIES)
    modules = [import_module(f"{__name__}.{name}") for name in names]
    return sorted(modules, key=lambda m: (m.ORDER, m.__name__))  # ties by name: pkgutil's set has no order


MODULES = _modules()
# config.json model types, in the order messages list them
MODEL_TYPES: dict[str, ModelType] = {t.name: t for m in MODULES for t in m.MODEL_TYPES}
# Shape.family -> whose code, in the order `--family` lists them
FAMILIES: dict[str, Family] = {f.name: f for m in MODULES for f in m.FAMILIES}
# calc/configs/NAME.json -> its group in the presets' list (calc.presets), in the order they are listed
CONFIG_PRESETS: dict[str, str] = {name: group for m in MODULES for name, group in getattr(m, "PRESETS", {}).items()}


def listing(names: list[str]) -> str:
    """["A", "B", "C"] -> "A, B and C"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def eager_lacks(shape: Shape) -> str | None:
    """A feature of this shape that calc.eager's walk does not replay yet, or None."""
    fam = FAMILIES[shape.family]
    if shape.moe_layers:
        moe = _moe_lacks(shape, fam)
        if moe:
            return moe
    if not fam.eager:
        replayed = listing([m for f in FAMILIES.values() if f.layer is not None for m in f.models])
        return f"transformers' {shape.family} code (it replays {replayed})"
    if fam.closed_form and shape.q_width != shape.hidden:  # the Decoder's closed form sizes attention by the width
        return "a head size apart from width / heads"
    if shape.norms_per_layer not in fam.norms:
        return f"{shape.norms_per_layer} norms a block in {shape.family}'s code"
    if shape.rotary_dim != shape.head_dim and not shape.kv_rank:  # latent attention rotates a part by design
        return "rotary positions on part of each head (partial_rotary_factor)"
    return None


def _moe_lacks(shape: Shape, fam: Family) -> str | None:
    """What of a mixture of experts the eager walk does not replay: it follows MixtralSparseMoeBlock,
    Qwen2MoeSparseMoeBlock (a shared expert with its gate) and Qwen3MoeSparseMoeBlock with transformers'
    default grouped_mm experts."""
    if not fam.experts:
        return f"a mixture of experts in {shape.family}'s code (it replays Mixtral's, Qwen2-MoE's and Qwen3-MoE's)"
    if fam.moe_lacks:
        return fam.moe_lacks(shape)
    # a guard for a family added later: each family with experts today replays dense layers beside them, or
    # refuses them in its own check (GPT-OSS, DeepSeek-V3's moe_lacks)
    if shape.dense_layers and not fam.dense_among_experts:
        return f"dense layers beside the experts in {fam.models[0]}'s code"
    if not shape.gated_ffn or (shape.bias and not fam.expert_bias):
        return "experts that are not bias-free SwiGLU (Mixtral's and Qwen2-MoE's are)"
    if shape.capacity_factor:
        return "an expert capacity (transformers' Mixtral and Qwen2-MoE drop no tokens)"
    if fam.name == "llama" and bool(shape.shared_expert_ffn) != shape.shared_expert_gate:  # Llama's code: Qwen2-MoE
        return "a shared expert without Qwen2-MoE's sigmoid gate (or a gate without one)"
    return None


def attention_lacks(shape: Shape, attention: str) -> str | None:
    """Why the family's model cannot run this attention implementation (GPT-OSS refuses sdpa), or None."""
    fam = FAMILIES[shape.family]
    if attention in fam.attentions:
        return None
    return f"transformers' {fam.models[0]} code runs {listing(list(fam.attentions))} attention only: --attention eager"


def tuning_lacks(shape: Shape, mode: str = "lora") -> str | None:
    """Why the eager walk cannot replay this fine-tuning (`mode`: peft's LoRA, QLoRA, or frozen layers) on this
    shape, or None. Where the model has experts, neither walk fine-tunes it otherwise (calc.finetune.check)."""
    fam = FAMILIES[shape.family]
    if shape.experts:
        if mode in ("lora", "qlora") and fam.expert_lora:
            return None
        moe = listing([m for f in FAMILIES.values() for m in f.expert_lora])
        return (f"a mixture of experts is fine-tuned by the eager walk only with peft's LoRA (QLoRA on Qwen3-MoE and "
                f"Mixtral alone), on {moe}, and by no walk otherwise")
    if fam.finetune:
        return None
    tuned = listing([m for f in FAMILIES.values() if f.finetune for m in f.models])
    return f"the eager walk fine-tunes dense {tuned} only: use the deck walk"


__all__ = ["CONFIG_PRESETS", "FAMILIES", "MODEL_TYPES", "Family", "ModelType", "attention_lacks", "eager_lacks",
           "listing", "tuning_lacks"]  # fmt: skip
