"""Bytes per parameter for each precision/optimiser recipe."""

from __future__ import annotations

from dataclasses import dataclass

from .parallel import SINGLE, Parallel, zero_shard


@dataclass(frozen=True)
class Recipe:
    """What one parameter costs on the device during training."""

    name: str
    label: str
    weights: int  # bytes per parameter of the weights the model computes with
    gradients: int  # bytes per parameter of the gradients
    optimizer: int  # Adam's first and second moments
    master: int  # fp32 master copy kept beside 16-bit weights
    source: str

    def per_param(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.master


RECIPES: dict[str, Recipe] = {
    # Rajbhandari et al. 2020 (ZeRO), §3.1: 2 + 2 bytes of fp16 weights and gradients, and
    # K = 12 bytes of optimizer state: fp32 momentum, variance (8) and master weights (4).
    "mixed": Recipe("mixed", "mixed-precision Adam", 2, 2, 8, 4, "ZeRO §3.1 (K = 12)"),
    # Kingma & Ba 2015 in fp32: weights, gradients and both moments at 4 bytes; no master copy.
    "fp32": Recipe("fp32", "FP32 Adam", 4, 4, 8, 0, "Adam in fp32 (4 + 4 + 8)"),
}


def state_bytes(params: int, recipe: str, par: Parallel = SINGLE, rank: int = 0) -> dict[str, int]:
    """Weights, gradients, Adam moments and master copy on data-parallel worker `rank`.

    ZeRO (Rajbhandari et al. 2020, §5) partitions Adam's state and the master copy from stage 1,
    the gradients from stage 2 and the weights themselves at stage 3."""
    r = RECIPES[recipe]
    return {
        "weights": r.weights * zero_shard(params, par, 3, rank),
        "gradients": r.gradients * zero_shard(params, par, 2, rank),
        "optimizer": r.optimizer * zero_shard(params, par, 1, rank),
        "master": r.master * zero_shard(params, par, 1, rank),
    }


RECOMPUTE = ("none", "selective", "full")

# The deck's four recipes, in its table's order: (recipe, recomputation).
TABLE_ROWS = (("mixed", "none"), ("mixed", "selective"), ("mixed", "full"), ("fp32", "none"))
