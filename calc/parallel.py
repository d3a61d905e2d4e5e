"""Splitting one model over many devices: data parallelism with ZeRO, tensor, sequence and
pipeline parallelism. Every count here is per device."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .counts import layer_tensors, param_counts
from .shape import Shape


@dataclass(frozen=True)
class Parallel:
    """How the training job is laid out over dp x tp x pp devices."""

    dp: int = 1  # data-parallel workers, each with its own micro-batches
    tp: int = 1  # tensor-parallel ranks splitting each layer (Shoeybi et al. 2019, Megatron-LM)
    pp: int = 1  # pipeline stages splitting the stack of layers (Narayanan et al. 2021, 1F1B)
    zero: int = 0  # ZeRO stage (Rajbhandari et al. 2020): 1 shards Adam, 2 + gradients, 3 + weights
    sequence_parallel: bool = False  # Korthikanti et al. 2022, §4.2.2: norms and dropout split over tp too
    flash: bool = False  # FlashAttention (Dao et al. 2022): the s x s scores are never stored
    ep: int = 1  # expert parallelism: the routed experts split over ep of the dp workers, each holding E/ep
    # (Lepikhin et al. 2021, GShard; DeepSpeed-MoE); ZeRO shards the experts over the other dp/ep
    pp_schedule: str = "1f1b"  # the pipeline's schedule: 1F1B (Narayanan et al. 2021), a stage holding at most
    # pp - stage micro-batches at once, or GPipe (Huang et al. 2019), every micro-batch's forward before any backward
    tp_plan: str = "layers"  # the eager walk's tensor-parallel plan (calc.engines.tensor): torch's styles on the
    # layers' linears, or transformers' own (tp_plan="auto"), which splits the embedding and head by vocabulary
    offload: str = "none"  # what ZeRO keeps in the host's memory (OFFLOADS): ZeRO-Offload's optimizer (Ren et al.
    # 2021), or that and ZeRO-Infinity's 16-bit weights too (Rajbhandari et al. 2021), as DeepSpeed offloads them

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp  # ep takes no devices of its own: it splits the dp workers


SINGLE = Parallel()
OFFLOADS = ("none", "optimizer", "optimizer+params")  # DeepSpeed's offload_optimizer, and offload_param beside it


def split(n: int, parts: int, rank: int = 0) -> int:
    """Rank `rank`'s share of n items split as evenly as possible (rank 0 gets the most)."""
    return n // parts + (1 if rank < n % parts else 0)


def zero_shard(count: int, par: Parallel, from_stage: int, rank: int = 0) -> int:
    """What worker `rank` keeps of `count` values that ZeRO shards from stage `from_stage` on."""
    return split(count, par.dp, rank) if par.zero >= from_stage else count


def stage_layers(shape: Shape, pp: int, stage: int) -> range:
    """The 1-based layer numbers that pipeline stage `stage` holds (earlier stages take any remainder)."""
    start = sum(split(shape.layers, pp, i) for i in range(stage))
    return range(start + 1, start + split(shape.layers, pp, stage) + 1)


def layer_split(shape: Shape, par: Parallel, moe: bool) -> dict[str, int]:
    """One layer's parameters on one device, as (split over tensor-parallel ranks, replicated on each, routed
    experts on this device), from each tensor's Megatron-LM layout (calc.inventory): column-parallel matrices
    (Q, K, V, up, gate) and their biases and row-parallel matrices (O, down) are split over tp; the biases
    after a row-parallel matrix, the norms, the router and the shared expert's gate are replicated; the routed
    experts are split over ep, and each expert over tp."""
    tensors = layer_tensors(shape, moe)
    split_part = sum(t.numel for t in tensors if t.tp in ("column", "row"))
    replicated = sum(t.numel for t in tensors if t.tp == "replicated")
    experts = sum(t.numel for t in tensors if t.tp == "experts")
    return {"split": split_part // par.tp, "replicated": replicated, "experts": experts // par.ep // par.tp}


def device_params(shape: Shape, par: Parallel = SINGLE, stage: int = 0, tp_rank: int = 0) -> dict[str, int]:
    """Parameters one device holds before ZeRO (see _device_params)."""
    return dict(_device_params(shape, par, stage, tp_rank))


def stage_kinds(shape: Shape, pp: int, stage: int) -> list[tuple[range, bool]]:
    """The stage's layers in runs of one kind, bottom up: (layer numbers, mixture of experts?), the kinds as
    Shape.moe_layer says (DeepSeek's dense first layers, Llama 4's interleaved ones)."""
    layers, runs = stage_layers(shape, pp, stage), []
    for i in layers:
        moe = shape.moe_layer(i)
        if runs and runs[-1][1] == moe:
            runs[-1] = (range(runs[-1][0].start, i + 1), moe)
        else:
            runs.append((range(i, i + 1), moe))
    return runs


@lru_cache(maxsize=256)  # a chart's sweep asks the same question hundreds of times
def _device_params(shape: Shape, par: Parallel, stage: int, tp_rank: int) -> tuple[tuple[str, int], ...]:
    """Parameters one device holds before ZeRO: its stage's layers, split over tensor-parallel ranks
    (layer_split), its share of the routed experts, the embedding and head split by vocabulary (Megatron-LM).
    `per_layer` is one of its mixture-of-experts layers when it has any (`per_dense_layer` the others), and
    `experts` the routed experts' parameters it holds, which ZeRO shards over dp / ep workers only."""
    t, n = par.tp, param_counts(shape)
    kinds = {moe: layer_split(shape, par, moe) for moe in (False, True) if not moe or shape.moe_layers}
    per = {moe: k["split"] + k["replicated"] + k["experts"] for moe, k in kinds.items()}
    first, last = stage == 0, stage == par.pp - 1
    vocab_rows = split(shape.vocab, t, tp_rank)
    runs = stage_kinds(shape, par.pp, stage)
    layers = sum(len(r) * per[moe] for r, moe in runs)
    # Tied heads share the embedding on one device; a last stage elsewhere keeps its own copy (Megatron-LM).
    has_head = last and (not shape.tied or par.pp > 1)
    head_bias = 1 if shape.bias and shape.head_bias and not shape.tied else 0
    out = {
        "embedding": vocab_rows * shape.hidden if first else 0,
        "positions": n["positions"] if first else 0,
        "per_layer": per[bool(shape.moe_layers)],
        "per_dense_layer": per[False],
        "replicated_per_layer": kinds[bool(shape.moe_layers)]["replicated"],
        "layers": layers,
        "final_norm": n["final_norm"] if last else 0,
        "head": vocab_rows * (shape.hidden + head_bias) if has_head else 0,
        "experts": sum(len(r) * kinds[moe]["experts"] for r, moe in runs),
        "experts_per_layer": kinds[True]["experts"] if shape.moe_layers else 0,
    }
    out["total"] = out["embedding"] + out["positions"] + out["layers"] + out["final_norm"] + out["head"]
    # Held whole by every tensor-parallel rank of the stage.
    out["replicated"] = out["positions"] + out["final_norm"] + sum(len(r) * kinds[moe]["replicated"] for r, moe in runs)
    return tuple(out.items())


def lone_problem(par: Parallel) -> tuple[str, str] | None:
    """(field, message) where the layout names a split with nothing to split over (calc.inputs.late_problem, and
    calc.api for what it walks beside a pipeline): a ZeRO stage over one data-parallel worker (with nothing
    offloaded), or a tensor-parallel plan over one rank; or None."""
    if par.zero and par.dp == 1 and par.offload == "none":
        return "zero", (f"ZeRO {par.zero} shards the step's state over the --dp workers, and there is one worker: "
                        "give --dp 2 or more, or ZeRO 0")  # fmt: skip
    if par.tp_plan != SINGLE.tp_plan and par.tp == 1:
        return "tp-plan", "splits the layers over tensor-parallel ranks, and there is one rank: give --tp 2 or more"
    return None


def check(shape: Shape, par: Parallel) -> tuple[str, str] | None:
    """Why this layout cannot split this shape, as (field, reason), or None."""
    widths = [("heads", shape.heads), ("key/value heads", shape.kv_heads), ("FFN width", shape.ffn)]
    if shape.moe_layers:
        widths.append(("expert FFN width", shape.expert_width))
        if shape.shared_expert_ffn:
            widths.append(("shared-expert FFN width", shape.shared_expert_ffn))
    for what, n in widths:
        if n % par.tp:
            return "tp", f"{par.tp} tensor-parallel ranks do not divide the {n:,} {what}"
    if par.ep > 1 and not shape.moe_layers:
        return "ep", "expert parallelism needs a mixture of experts (--experts)"
    if shape.experts % par.ep:
        return "ep", f"{par.ep} expert-parallel ranks do not divide the {shape.experts} experts"
    if par.dp % par.ep:
        return "ep", f"{par.ep} expert-parallel ranks do not divide the {par.dp} data-parallel workers"
    if par.pp > shape.layers:
        return "pp", f"{par.pp} pipeline stages are more than the {shape.layers} layers"
    return None
