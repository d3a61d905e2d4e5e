"""Optimizers: the state each keeps per trainable parameter tensor, in bytes, with its source.

Precision and optimizer are two axes. A recipe (calc.recipes) fixes the dtype of the optimizer's
full-size state: its `optimizer` field is Adam's two moments, so one moment costs recipe.optimizer // 2
bytes (4 in fp32 recipes, 2 in `bf16`). Each optimizer here says how many such buffers it keeps and
of what size; 8-bit Adam ignores the recipe's moment dtype (its state is always 8-bit plus fp32 scales).
Scalars (a `step` count per tensor) are left out, as the deck leaves them out of Adam."""

from __future__ import annotations

from dataclasses import dataclass

# bitsandbytes' 8-bit optimizers (bitsandbytes/optim/optimizer.py, Optimizer2State.init_state, 0.50.2 as
# installed): a tensor of fewer than min_8bit_size = 4096 elements keeps fp32 moments; a larger one keeps
# each moment in uint8 with one fp32 absmax per block of 256 elements ("blocksize = 256", line 524; older
# releases, e.g. commit 06029dd, had blocks of 2048). Measured: docs/data/loops.json's trainer-adamw-8bit rows.
BNB_MIN_8BIT_SIZE = 4096
BNB_8BIT_BLOCK = 256
FP32 = 4


def ceil_div(n: int, d: int) -> int:
    return -(-n // d)


@dataclass(frozen=True)
class Optimizer:
    """What one optimizer keeps for each trainable tensor."""

    name: str
    label: str
    moments: int  # full-size state buffers per parameter, each in the recipe's moment dtype
    factored: bool  # Adafactor: a matrix's second moment as a row vector and a column vector
    bits8: bool  # bitsandbytes' block-wise 8-bit state
    source: str


OPTIMIZERS: dict[str, Optimizer] = {
    # Loshchilov & Hutter 2019 (torch.optim.AdamW): exp_avg and exp_avg_sq, each the parameter's size.
    "adamw": Optimizer("adamw", "AdamW", 2, False, False, "AdamW: two moments (Loshchilov & Hutter 2019)"),
    # Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization": both moments in uint8 with
    # block-wise fp32 absmax (bitsandbytes.optim.AdamW8bit; see BNB_8BIT_BLOCK).
    "adamw-8bit": Optimizer(
        "adamw-8bit",
        "AdamW 8-bit (bitsandbytes)",
        2,
        False,
        True,
        f"bitsandbytes AdamW8bit: 1 byte a moment + fp32 absmax per {BNB_8BIT_BLOCK} (Dettmers et al. 2022)",
    ),
    # torch.optim.SGD with momentum=0 keeps no state (momentum_buffer stays None).
    "sgd": Optimizer("sgd", "SGD", 0, False, False, "SGD without momentum: no state"),
    # torch.optim.SGD(momentum > 0): one momentum_buffer the parameter's size.
    "sgd-momentum": Optimizer("sgd-momentum", "SGD with momentum", 1, False, False, "SGD: one momentum buffer"),
    # Shazeer & Stern 2018, Adafactor (transformers.optimization.Adafactor, beta1=None by default): no first
    # moment; a matrix's second moment factored into exp_avg_sq_row (rows) and exp_avg_sq_col (columns); a
    # vector's second moment kept whole.
    "adafactor": Optimizer(
        "adafactor", "Adafactor", 1, True, False, "Adafactor: factored second moment, no first (Shazeer & Stern 2018)"
    ),
    # Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms" (Lion): one moment, exp_avg.
    "lion": Optimizer("lion", "Lion", 1, False, False, "Lion: one moment (Chen et al. 2023)"),
}


def bnb_8bit_bytes(numel: int, moments: int) -> int:
    """bitsandbytes' 8-bit state of one tensor: fp32 moments below BNB_MIN_8BIT_SIZE elements, else one
    byte per element per moment and one fp32 absmax per BNB_8BIT_BLOCK elements per moment."""
    if numel < BNB_MIN_8BIT_SIZE:
        return moments * FP32 * numel
    return moments * (numel + FP32 * ceil_div(numel, BNB_8BIT_BLOCK))


def tensor_state_bytes(optimizer: str, rows: int, cols: int, moment_bytes: int) -> int:
    """The state `optimizer` keeps for one trainable tensor of rows x cols (cols 0: a vector of `rows`),
    its full-size buffers `moment_bytes` each."""
    opt = OPTIMIZERS[optimizer]
    numel = rows * cols if cols else rows
    if opt.bits8:
        return bnb_8bit_bytes(numel, opt.moments)
    if opt.factored and cols:
        return moment_bytes * (rows + cols)  # exp_avg_sq_row (rows) + exp_avg_sq_col (cols)
    return opt.moments * moment_bytes * numel


def state_bytes(optimizer: str, tensors, moment_bytes: int) -> int:
    """The optimizer's state for trainable tensors given as (count, rows, cols) triples."""
    return sum(count * tensor_state_bytes(optimizer, rows, cols, moment_bytes) for count, rows, cols in tensors)


def elementwise(optimizer: str) -> bool:
    """True where the state is a whole number of bytes per parameter, whatever the tensors' shapes (so ZeRO
    can shard it as it shards Adam's)."""
    opt = OPTIMIZERS[optimizer]
    return not (opt.bits8 or opt.factored)
