"""Precision recipes: bytes per parameter against their sources, and what each changes in the walks."""

import pytest

import calc
from calc.recipes import RECIPES, state_bytes

LLAMA = calc.PRESETS["llama-7b"]


@pytest.mark.parametrize(
    ("recipe", "per_param", "source"),
    [
        # Rajbhandari et al. 2020 (ZeRO), §3.1: 2 + 2 bytes of fp16 weights and gradients, K = 12 of optimizer state
        ("mixed", 16, "ZeRO"),
        # Plain fp32 Adam: 4 + 4 + 8
        ("fp32", 16, "fp32"),
        ("fp32-full", 16, "fp32"),
        ("autocast", 16, "autocast"),
        # Megatron-LM theoretical_memory_usage.py: 18 bytes a parameter, 6 + 12 with the distributed optimizer
        ("megatron", 18, "Megatron-LM"),
        # bf16 weights, gradients and both moments, no master copy
        ("bf16", 8, "bf16"),
    ],
)
def test_bytes_per_parameter_match_their_source(recipe, per_param, source):
    """Each recipe's bytes per parameter are its source's, and the recipe names that source."""
    r = RECIPES[recipe]
    assert r.per_param() == per_param
    assert source in r.source


def test_zero_k_and_megatron_split():
    """ZeRO's K = 12 (master copy and two moments) beside 2 + 2; Megatron's 6 (bf16 weights, fp32 main
    gradients) beside 12 that its distributed optimizer shards (ZeRO-1)."""
    mixed, megatron = RECIPES["mixed"], RECIPES["megatron"]
    assert (mixed.weights + mixed.gradients, mixed.optimizer + mixed.master) == (4, 12)
    assert (megatron.weights + megatron.gradients, megatron.optimizer + megatron.master) == (6, 12)
    n, dp = 1_000_000, 8
    sharded = state_bytes(n, "megatron", calc.Parallel(dp=dp, zero=1))
    assert sharded["weights"] + sharded["gradients"] == 6 * n
    assert sharded["optimizer"] + sharded["master"] == 12 * n // dp


def test_the_decks_table_does_not_move():
    """mixed and fp32 stay as the deck defines them: its four peaks."""
    peaks = {row["id"]: calc.format_gb(row["peak"]) for row in calc.table(LLAMA, 4096, 1)}
    assert peaks == {"mixed-none": "199.5", "mixed-selective": "115.8", "mixed-full": "110.7", "fp32-none": "186.3"}


def test_fp32_full_doubles_the_decks_activations():
    """fp32-full keeps fp32 activations: twice the 16-bit ones the deck's fp32 row counts."""
    deck, full = (calc.step(LLAMA, 4096, 1, r)["bytes"] for r in ("fp32", "fp32-full"))
    assert full["activations"] == 2 * deck["activations"]
    assert {c: full[c] for c in ("weights", "gradients", "optimizer")} == {
        c: deck[c] for c in ("weights", "gradients", "optimizer")
    }


def test_megatron_gradients_are_resident_from_the_start():
    """Megatron's main-gradient buffer is allocated once: resident before the forward pass and after the step."""
    s = calc.step(LLAMA, 4096, 1, "megatron")
    start = [e for e in s["events"] if e["phase"] == "start"]
    assert start[-1]["totals"]["gradients"] == 4 * s["params"]
    assert s["events"][-1]["totals"]["gradients"] == 4 * s["params"]
    assert s["static"] == 18 * s["params"]


def test_autocast_saves_16_bit_copies_in_the_eager_walk():
    """Under autocast every Linear saves its own 16-bit input: the eager walk keeps more per layer than a
    16-bit model and less than fp32."""
    shape = LLAMA.replace(layers=2)
    kept = {
        r: calc.step(shape, 512, 1, r, walk="eager")["activations_per_layer"] for r in ("bf16", "autocast", "fp32-full")
    }
    assert kept["bf16"] < kept["autocast"] < kept["fp32-full"]
