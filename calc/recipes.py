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
    activations: int = 2  # bytes an activation value (Korthikanti et al. count 16-bit ones)
    autocast: bool = False  # torch.autocast(bfloat16): matmuls in 16 bits, the rest in the weights' fp32
    grad_buffer: bool = False  # gradients live in a buffer allocated once, resident through the step
    computes: str = ""  # the recipe the forward and backward run as, where the engine casts (FSDP2's policy)

    def per_param(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.master


RECIPES: dict[str, Recipe] = {
    # Rajbhandari et al. 2020 (ZeRO), §3.1: 2 + 2 bytes of fp16 weights and gradients, and
    # K = 12 bytes of optimizer state: fp32 momentum, variance (8) and master weights (4).
    "mixed": Recipe("mixed", "mixed-precision Adam", 2, 2, 8, 4, "ZeRO §3.1 (K = 12)"),
    # Kingma & Ba 2015 in fp32: weights, gradients and both moments at 4 bytes; no master copy.
    "fp32": Recipe("fp32", "FP32 Adam", 4, 4, 8, 0, "Adam in fp32 (4 + 4 + 8)"),
    # The same state, and activations in fp32 too: a model trained in plain fp32.
    "fp32-full": Recipe("fp32-full", "FP32 Adam, fp32 activations", 4, 4, 8, 0, "Adam in fp32 (4 + 4 + 8)", 4),
    # torch.autocast(bfloat16) over an fp32 model (PyTorch AMP): the state of "fp32"; Linear layers and
    # matmuls compute and save 16-bit values, everything else stays fp32 (calc.families).
    "autocast": Recipe(
        "autocast", "autocast bf16 over fp32 Adam", 4, 4, 8, 0, "torch.autocast over fp32 Adam (4 + 4 + 8)", 2, True
    ),
    # Megatron-LM (megatron/training/theoretical_memory_usage.py): bf16 weights, fp32 main gradients in a
    # buffer allocated once, fp32 master weights and Adam moments: 2 + 4 + 12 = 18 bytes a parameter
    # (6 + 12/dp with its distributed optimizer, ZeRO-1 here).
    "megatron": Recipe(
        "megatron", "Megatron-LM bf16, fp32 main gradients", 2, 4, 8, 4, "Megatron-LM (6 + 12 bytes)", grad_buffer=True
    ),
    # Pure bf16 training: weights, gradients and both Adam moments in bf16, no master copy (2 + 2 + 4).
    "bf16": Recipe("bf16", "pure bf16 Adam", 2, 2, 4, 0, "bf16 weights, gradients and moments (2 + 2 + 4)"),
    # FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) over an fp32 model: the fp32 shards are
    # the weights the optimizer steps (no separate master copy), gradients reduced and Adam's moments in fp32;
    # a layer's bf16 parameters exist only while it is gathered, and forward and backward run in pure bf16
    # (torch/distributed/fsdp/_fully_shard/_fsdp_param.py init_dtype_attrs). Data-parallel (--dp, --zero 2 or 3).
    "fsdp-bf16": Recipe("fsdp-bf16", "FSDP2 bf16 policy over fp32 shards", 4, 4, 8, 0,
                        "FSDP2 MixedPrecisionPolicy(bf16, fp32): fp32 shards (4 + 4 + 8)", 2, computes="bf16"),
}


def state_bytes(params: int, recipe: str, par: Parallel = SINGLE, rank: int = 0) -> dict[str, int]:
    """Weights, gradients, Adam moments and master copy on data-parallel worker `rank`.

    ZeRO (Rajbhandari et al. 2020, §5) partitions Adam's state and the master copy from stage 1,
    the gradients from stage 2 and the weights themselves at stage 3."""
    r, away = RECIPES[recipe], OFFLOADED[par.offload]
    return {
        "weights": 0 if "weights" in away else r.weights * zero_shard(params, par, 3, rank),
        "gradients": 0 if par.zero >= 2 and away else r.gradients * zero_shard(params, par, 2, rank),
        "optimizer": 0 if away else r.optimizer * zero_shard(params, par, 1, rank),
        "master": 0 if away else r.master * zero_shard(params, par, 1, rank),
    }


# What each --offload keeps in the host's memory instead of the device's (calc.parallel.OFFLOADS). ZeRO-Offload
# (Ren et al. 2021, §4.1) moves the optimizer's state and its step to the CPU: each rank's partition of the fp32
# weights, of Adam's two moments and of the gradients, which DeepSpeed reduces and copies to the host as backward
# makes them (from ZeRO 2 the device keeps none; under ZeRO 1 every gradient stays until the step). With the
# weights too (ZeRO-Infinity, Rajbhandari et al. 2021; DeepSpeed's offload_param, ZeRO 3 only) the rank's shard of
# the weights lives on the host and is gathered to the device module by module.
OFFLOADED = {"none": (), "optimizer": ("optimizer",), "optimizer+params": ("optimizer", "weights")}
HOST_SOURCE = ("ZeRO-Offload (Ren et al. 2021), as DeepSpeed 0.19 allocates it: the rank's fp32 partition, its "
               ".grad and Adam's moments on the host, and a model-dtype buffer of the partition beside them "
               "(stage_1_and_2.py param_buffer_of_bit16_for_cpu_offload_groups, accumulated_grads_in_cpu; stage3.py "
               "grad_partitions_flat_buffer)")  # fmt: skip
OFFLOAD_RECIPES = ("mixed", "fp32")  # DeepSpeed's bf16/fp16 and fp32 optimizers (an fp32 partition and Adam)


def host_bytes(params: int, recipe: str, par: Parallel, rank: int = 0, accumulating: bool = False) -> dict[str, int]:
    """What data-parallel worker `rank` keeps in the host's memory under par.offload (OFFLOADED), as DeepSpeed 0.19
    allocates it: its partition's fp32 copy of the weights (the master copy; DeepSpeed makes one under fp32 too),
    Adam's moments, the fp32 gradients the CPU's Adam steps with, and a buffer of the partition in the model's dtype
    (under ZeRO 1 and 2 the pinned weights it copies the step's result through, under ZeRO 3 the gradients as
    reduced); under ZeRO 1 and 2 with more than one micro-batch a step (`accumulating`) the gradients summed on the
    host in the model's dtype; with the weights offloaded its shard of them. Empty without offload."""
    away = OFFLOADED[par.offload]
    if not away:
        return {}
    r, shard = RECIPES[recipe], zero_shard(params, par, 1, rank)
    out = {"master": 4 * shard, "optimizer": r.optimizer * shard, "gradients": 4 * shard}
    out["buffer"] = (r.weights if par.zero < 3 else r.gradients) * shard
    if accumulating and par.zero < 3:
        out["accumulated"] = r.gradients * shard
    return {**out, "weights": r.weights * zero_shard(params, par, 3, rank)} if "weights" in away else out


RECOMPUTE = ("none", "selective", "full")

# The deck's four recipes, in its table's order: (recipe, recomputation).
TABLE_ROWS = (("mixed", "none"), ("mixed", "selective"), ("mixed", "full"), ("fp32", "none"))
