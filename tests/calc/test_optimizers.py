"""Optimizers: each one's state bytes against its source."""

import pytest

import calc
from calc import finetune
from calc.optimizers import BNB_8BIT_BLOCK, OPTIMIZERS, bnb_8bit_bytes, state_bytes, tensor_state_bytes

LLAMA = calc.PRESETS["llama-7b"]


def test_adamw_is_two_moments_of_the_recipe_dtype():
    """AdamW keeps exp_avg and exp_avg_sq: 2 x 4 bytes in fp32 recipes, 2 x 2 in bf16."""
    assert tensor_state_bytes("adamw", 4096, 11008, 4) == 8 * 4096 * 11008
    assert tensor_state_bytes("adamw", 4096, 0, 2) == 4 * 4096


@pytest.mark.parametrize("recipe", list(calc.RECIPES))
def test_adamw_over_the_model_is_the_recipes_optimizer_bytes(recipe):
    """Summed over every tensor of the model, AdamW's state is the recipe's `optimizer` bytes a parameter."""
    moment = calc.RECIPES[recipe].optimizer // 2
    tensors = finetune.trainable_tensors(LLAMA, finetune.Tuning())
    assert state_bytes("adamw", tensors, moment) == calc.RECIPES[recipe].optimizer * calc.param_counts(LLAMA)["total"]


def test_8bit_adam_is_a_byte_a_moment_plus_block_scales():
    """bitsandbytes 0.50: uint8 moments and one fp32 absmax per 256 elements each; fp32 below 4,096 elements."""
    assert BNB_8BIT_BLOCK == 256
    assert bnb_8bit_bytes(4096 * 4096, 2) == 2 * (4096 * 4096 + 4 * 65536)
    assert bnb_8bit_bytes(4096, 2) == 2 * (4096 + 4 * 16)  # 4,096 is not below min_8bit_size
    assert bnb_8bit_bytes(4097, 2) == 2 * (4097 + 4 * 17)  # a partial block still has its absmax
    assert bnb_8bit_bytes(4095, 2) == 2 * 4 * 4095  # small tensors keep fp32 state
    # The recipe's moment dtype does not change 8-bit state.
    assert tensor_state_bytes("adamw-8bit", 4096, 4096, 2) == tensor_state_bytes("adamw-8bit", 4096, 4096, 4)


def test_sgd_lion_and_momentum():
    """SGD keeps nothing; SGD with momentum and Lion keep one buffer the parameter's size."""
    assert tensor_state_bytes("sgd", 4096, 4096, 4) == 0
    assert tensor_state_bytes("sgd-momentum", 4096, 4096, 4) == 4 * 4096 * 4096
    assert tensor_state_bytes("lion", 4096, 4096, 2) == 2 * 4096 * 4096


def test_adafactor_factors_matrices_only():
    """Adafactor (beta1=None): a row and a column vector for a matrix, the whole second moment for a vector."""
    assert tensor_state_bytes("adafactor", 11008, 4096, 4) == 4 * (11008 + 4096)
    assert tensor_state_bytes("adafactor", 4096, 0, 4) == 4 * 4096


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_full_fine_tuning_differs_from_adam_by_the_state_only(optimizer):
    """The step with another optimizer is the deck's step with that optimizer's state in place of Adam's."""
    adam = calc.step(LLAMA, seq=2048, recompute="full")
    other = calc.step(LLAMA, seq=2048, recompute="full", tune=finetune.Tuning(optimizer=optimizer))
    state = state_bytes(optimizer, finetune.trainable_tensors(LLAMA, finetune.Tuning()), 4)
    assert other["bytes"]["optimizer"] == state
    assert other["peak"] == adam["peak"] - adam["bytes"]["optimizer"] + state
    assert other["trainable_params"] == adam["trainable_params"] == adam["params"]


def test_paged_optimizer_state_is_off_the_device():
    """--paged-optimizer: the state is in CPU-pageable memory, so the device holds none of it."""
    lora = finetune.Tuning("lora")
    on = calc.step(LLAMA, tune=lora)
    off = calc.step(LLAMA, tune=finetune.Tuning("lora", paged=True))
    assert off["bytes"]["optimizer"] == 0 < on["bytes"]["optimizer"]
    assert off["static"] == on["static"] - on["bytes"]["optimizer"]
    assert any("paged" in e["label"] and e["bytes"] == 0 for e in off["events"])
