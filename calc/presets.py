"""Published model shapes, as plain data: today's five typed out, the others as their config.json files."""

import os

from . import families
from .counts import param_counts
from .hf import shape_from_text
from .shape import Shape

PRESETS: dict[str, Shape] = {
    # Touvron et al. 2023 (LLaMA), Table 2: 6.7B; SwiGLU FFN 11,008, RMSNorm, rotary, untied head.
    "llama-7b": Shape("llama-7b", 32, 4096, 32, 32, 11008, 32000, True, False, "rms", False, "rope", 2048),
    # The course's Decoder (chapter 3): width 16, 2 heads, 2 blocks, GELU FFN twice the width,
    # vocabulary 64, context 8, learned positions, pre-norm LayerNorm, no linear biases,
    # head tied to the embedding and no final norm: 5,376 parameters.
    "decoder": Shape("decoder", 2, 16, 2, 2, 32, 64, False, True, "layer", False, "learned", 8, False).replace(
        activation="gelu", family="decoder"
    ),
    # Radford et al. 2019, the 124M GPT-2: LayerNorm, biases, learned positions, tied head, GELU's tanh
    # approximation written out (gelu_new), dropout 0.1.
    "gpt2": Shape("gpt2", 12, 768, 12, 12, 3072, 50257, False, True, "layer", True, "learned", 1024).replace(
        activation="gelu_new", dropout=True, family="gpt2"
    ),
    # Touvron et al. 2023 (Llama 2), Table 1 / the released configs.
    "llama-2-13b": Shape("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, True, False, "rms", False, "rope", 4096),
    # Llama 2 70B uses grouped-query attention with 8 key/value heads.
    "llama-2-70b": Shape("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, True, False, "rms", False, "rope", 4096),
}

# calc/configs/NAME.json: the fields of each model's published config.json, typed out from its released
# hyperparameters; each family module names its own (calc.families), with its group in the list.
CONFIG_PRESETS = tuple(families.CONFIG_PRESETS)

CONFIGS = os.path.join(os.path.dirname(__file__), "configs")  # package data, installed beside the modules


def config_text(name: str) -> str:
    """The config.json text of a preset stored as a file. An installed wheel puts it next to calc's modules,
    in Pyodide too, where a plain open() spares the page importlib.resources (pathlib, tempfile, zipfile,
    typing) at start-up; calc imported from a zip (zipimport) reads it through importlib.resources."""
    try:
        with open(os.path.join(CONFIGS, f"{name}.json"), encoding="utf-8") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        from importlib import resources

        return resources.files(__package__).joinpath("configs", f"{name}.json").read_text(encoding="utf-8")


PRESETS.update({name: shape_from_text(config_text(name), name) for name in CONFIG_PRESETS})

# The presets by family, for a grouped list (every preset in exactly one group): the typed-out ones, then
# each config's in its family's order; groups in this order, any other after them.
TYPED_GROUPS = {"decoder": "The course", "llama-7b": "Llama", "llama-2-13b": "Llama", "llama-2-70b": "Llama",
                "gpt2": "GPT"}  # fmt: skip
GROUP_ORDER = ("The course", "Llama", "Mistral", "Qwen", "Gemma", "GPT")


def _groups() -> dict[str, tuple[str, ...]]:
    grouped: dict[str, list[str]] = {group: [] for group in GROUP_ORDER}
    for name, group in {**TYPED_GROUPS, **families.CONFIG_PRESETS}.items():
        grouped.setdefault(group, []).append(name)
    return {group: tuple(names) for group, names in grouped.items() if names}


PRESET_GROUPS: dict[str, tuple[str, ...]] = _groups()

def catalog() -> list[dict]:
    """Each preset with its group, its parameters, and those one token uses (fewer for a mixture of experts)."""
    out = []
    for group, names in PRESET_GROUPS.items():
        for name in names:
            counts = param_counts(PRESETS[name])
            out.append({"group": group, "name": name, "params": counts["total"], "active": counts["active"]})
    return out
