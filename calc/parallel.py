"""Splitting one model over many devices: data parallelism with ZeRO, tensor, sequence and
pipeline parallelism. Every count here is per device."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .shape import Shape, param_counts


@dataclass(frozen=True)
class Parallel:
    """How the training job is laid out over dp x tp x pp devices."""

    dp: int = 1  # data-parallel workers, each with its own micro-batches
    tp: int = 1  # tensor-parallel ranks splitting each layer (Shoeybi et al. 2019, Megatron-LM)
    pp: int = 1  # pipeline stages splitting the stack of layers (Narayanan et al. 2021, 1F1B)
    zero: int = 0  # ZeRO stage (Rajbhandari et al. 2020): 1 shards Adam, 2 + gradients, 3 + weights
    sequence_parallel: bool = False  # Korthikanti et al. 2022, §4.2.2: norms and dropout split over tp too
    flash: bool = False  # FlashAttention (Dao et al. 2022): the s x s scores are never stored

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp


SINGLE = Parallel()


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


def device_params(shape: Shape, par: Parallel = SINGLE, stage: int = 0, tp_rank: int = 0) -> dict[str, int]:
    """Parameters one device holds before ZeRO (see _device_params)."""
    return dict(_device_params(shape, par, stage, tp_rank))


@lru_cache(maxsize=256)  # a chart's sweep asks the same question hundreds of times
def _device_params(shape: Shape, par: Parallel, stage: int, tp_rank: int) -> tuple[tuple[str, int], ...]:
    """Parameters one device holds before ZeRO: its stage's layers, split over tensor-parallel ranks.

    Matrices are split over tp; norms, position tables and the biases after a row-parallel matrix
    are replicated on every rank; the embedding and head are split by vocabulary (Megatron-LM)."""
    t, n = par.tp, param_counts(shape)
    if t == 1:
        per_layer, replicated_per_layer = n["per_layer"], 0
    else:
        h, kv_width = shape.hidden, shape.kv_heads * shape.head_dim
        m = 3 if shape.gated_ffn else 2
        matrices = 2 * h * h + 2 * h * kv_width + m * h * shape.ffn
        column_bias = (h + 2 * kv_width + (m - 1) * shape.ffn) if shape.bias else 0
        row_bias = 2 * h if shape.bias else 0  # after attention's output and the FFN's down projection
        norms = n["per_layer"] - matrices - column_bias - row_bias
        replicated_per_layer = row_bias + norms
        per_layer = (matrices + column_bias) // t + replicated_per_layer
    first, last = stage == 0, stage == par.pp - 1
    vocab_rows = split(shape.vocab, t, tp_rank)
    layers = len(stage_layers(shape, par.pp, stage))
    # Tied heads share the embedding on one device; a last stage elsewhere keeps its own copy (Megatron-LM).
    has_head = last and (not shape.tied or par.pp > 1)
    out = {
        "embedding": vocab_rows * shape.hidden if first else 0,
        "positions": n["positions"] if first else 0,
        "per_layer": per_layer,
        "replicated_per_layer": replicated_per_layer,
        "layers": layers * per_layer,
        "final_norm": n["final_norm"] if last else 0,
        "head": vocab_rows * (shape.hidden + (1 if shape.bias and not shape.tied else 0)) if has_head else 0,
    }
    out["total"] = out["embedding"] + out["positions"] + out["layers"] + out["final_norm"] + out["head"]
    # Held whole by every tensor-parallel rank of the stage.
    out["replicated"] = out["positions"] + out["final_norm"] + layers * replicated_per_layer
    return tuple(out.items())


def check(shape: Shape, par: Parallel) -> tuple[str, str] | None:
    """Why this layout cannot split this shape, as (field, reason), or None."""
    for what, n in (("heads", shape.heads), ("key/value heads", shape.kv_heads), ("FFN width", shape.ffn)):
        if n % par.tp:
            return "tp", f"{par.tp} tensor-parallel ranks do not divide the {n:,} {what}"
    if par.pp > shape.layers:
        return "pp", f"{par.pp} pipeline stages are more than the {shape.layers} layers"
    return None
