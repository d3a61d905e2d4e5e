"""The optimizer's part of the eager walk's step (issue 19): its state beyond AdamW's moments, and the
temporaries of its step, tensor by tensor in the order the optimizer visits them.

Sizes are formulas of the trainable tensors' values P (calc.inventory, in model.parameters() order) and
`unit`, the bytes of one moment value (the recipe's: calc.optimizers). Sources are the installed torch
2.13, transformers 5.23 and bitsandbytes 0.50.2, checked against traced CPU steps
(docs/data/loops.json; the step's own 12 bytes of wrapped scalars are left out, as calc leaves scalars out).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import counts, finetune, inventory
from .optimizers import BNB_MIN_8BIT_SIZE, FP32, bnb_8bit_bytes, tensor_state_bytes
from .shape import Shape
from .walk import Event

BNB_QMAPS = 2 * 256 * FP32  # bitsandbytes' dynamic and unsigned dynamic maps (qmap1, qmap2): 256 fp32 values
# each, one pair shared by every 8-bit tensor (Optimizer2State.init_state, bitsandbytes/optim/optimizer.py:518-521)
RMS_SCALAR = FP32  # transformers' Adafactor keeps state["RMS"], a 0-dim fp32 tensor, per tensor (optimization.py:1257)


@dataclass(frozen=True)
class Param:
    """One trainable parameter tensor as stored: rows x cols (cols 0: a vector), and how Trainer groups it."""

    rows: int
    cols: int = 0
    decay: bool = True  # Trainer's weight-decay group: not a norm or a bias (trainer.py:1416)
    embedding: bool = False  # an nn.Embedding's weight (Trainer keeps its 8-bit state in 32 bits)

    @property
    def numel(self) -> int:
        return self.rows * (self.cols or 1)


def _stored(tensors: list[inventory.Tensor], out_first: bool = False) -> list[Param]:
    """Tensors as stored: fused ones (GPT-2's c_attn, the experts') as one, a LayerNorm's gain and bias as two.
    `out_first`: each with its stored first dimension as its rows (what FSDP2 cuts): an nn.Linear's weight as
    (out, in), where calc.inventory lists (in, out), and the experts' fused weights by expert (E, the rest)."""
    out: list[Param] = []
    fused: dict[str, list[inventory.Tensor]] = {}
    for t in tensors:
        decay = not ("norm" in t.name or t.name.endswith("bias"))
        if t.fused:
            if t.fused not in fused:
                fused[t.fused] = []
                out.append(t.fused)  # a placeholder, filled in below
            fused[t.fused].append(t)
            continue
        out += [Param(t.cols, t.rows, decay) if out_first and t.cols else Param(t.rows, t.cols, decay)] * t.count
    for i, p in enumerate(out):
        if isinstance(p, str):
            parts = fused[p]
            flat = len({t.rows for t in parts}) == 1 and all(t.count == 1 for t in parts)
            cols, numel = sum(t.cols for t in parts), sum(t.numel for t in parts)
            if flat and cols:
                out[i] = Param(cols, parts[0].rows) if out_first else Param(parts[0].rows, cols)
            elif out_first and len({t.count for t in parts}) == 1 and parts[0].count > 1:  # experts: (E, ...)
                out[i] = Param(parts[0].count, numel // parts[0].count)
            else:
                out[i] = Param(numel)
    return out


def _block(shape: Shape, moe: bool, out_first: bool = False) -> list[Param]:
    """A block in transformers' order: the attention module, the MLP, then the block's norms (`out_first`:
    _stored's)."""
    tensors = counts.layer_tensors(shape, moe)
    norms = [t for t in tensors if "norm" in t.name]
    return _stored([t for t in tensors if "norm" not in t.name] + norms, out_first)


def model_groups(shape: Shape, tune: finetune.Tuning = finetune.DEFAULT) -> list[tuple[list[Param], list[Param]]]:
    """Every parameter tensor of the model, as FSDP2 groups them with fully_shard on each decoder layer and on
    the model: the root's (embedding, final norm, head), then each layer's; each as stored (rows: its first
    dimension, which FSDP2 cuts). Each group as (its tensors, those of them that train): under peft's LoRA a
    layer holds its adapters too (lora_A, r x d_in; lora_B, d_out x r), and only they train."""
    embed, layers, tail = _as_stored(shape)
    if not tune.adapters:
        return [(g, g) for g in [embed + tail, *layers]]
    adapters = [Param(rows, cols) for _, rows, cols in finetune.adapter_tensors(shape, tune)]
    return [(embed + tail, []), *((layer + adapters, adapters) for layer in layers)]


def stage_groups(shape: Shape, first: bool, last: bool) -> list[tuple[list[Param], list[Param]]]:
    """model_groups of one pipeline stage whose layers are `shape`'s (full training): its root (the embedding on
    the first stage, the final norm and head on the last; nothing in between), then each of its layers."""
    embed, layers, tail = _as_stored(shape)
    root = (embed if first else []) + (tail if last else [])
    return [(g, g) for g in [root, *layers]]


def model_params(shape: Shape) -> list[Param]:
    """Every parameter tensor of the model in model.parameters() order, each as stored: full training's
    trainable tensors, each with its first dimension as its rows."""
    embed, layers, tail = _as_stored(shape)
    return embed + [p for layer in layers for p in layer] + tail


def _as_stored(shape: Shape) -> tuple[list[Param], list[list[Param]], list[Param]]:
    """(embedding and positions, each block's tensors, final norm and head), each tensor as stored."""
    outer = inventory.outer_tensors(shape)
    embed = [Param(t.rows, t.cols, True, t.name.startswith("embed")) for t in outer["embedding"] + outer["positions"]]
    # calc.inventory lists a block's matrices as (in, out); nn.Linear stores (out, in), GPT-2's Conv1D (in, out)
    layers = [_block(shape, shape.moe_layer(i), shape.family != "gpt2") for i in range(1, shape.layers + 1)]
    return embed, layers, _stored(outer["final_norm"] + outer["head"])


def trainable(shape: Shape, tune: finetune.Tuning) -> list[Param]:
    """The trainable tensors in model.parameters() order: embedding, blocks, final norm, head (calc.finetune
    says which train; peft's adapters are lora_A then lora_B of each target, in the block's order)."""
    outer = inventory.outer_tensors(shape)
    if tune.adapters:
        block = [Param(rows, cols) for _, rows, cols in finetune.adapter_tensors(shape, tune)]
        return block * shape.layers
    first = tune.freeze_layers if tune.mode == "freeze" else 0
    layers = [p for i in range(first + 1, shape.layers + 1) for p in _block(shape, shape.moe_layer(i))]
    embedding = [] if not finetune.embedding_trains(tune) else [Param(t.rows, t.cols, True, t.name.startswith("embed"))
                                                for t in outer["embedding"] + outer["positions"]]  # fmt: skip
    return embedding + layers + ([] if finetune.head_frozen(tune) else _stored(outer["final_norm"] + outer["head"]))


def stage_params(shape: Shape, tune: finetune.Tuning, first: bool, last: bool, stored: bool = False) -> list[Param]:
    """The trainable tensors of one pipeline stage whose layers are `shape`'s: the blocks, the embedding on the
    first stage, the final norm and the head on the last (calc.engines.pipeline); `stored`: each as stored, its
    rows FSDP2's (model_params: full training only)."""
    outer, params = inventory.outer_tensors(shape), model_params(shape) if stored else trainable(shape, tune)
    front = len(outer["embedding"] + outer["positions"]) if finetune.embedding_trains(tune) and not first else 0
    back = 0 if last or finetune.head_frozen(tune) else len(_stored(outer["final_norm"] + outer["head"]))
    return params[front : len(params) - back]


def groups(params: list[Param], loop: str) -> list[list[Param]]:
    """The optimizer's parameter groups: one (model.parameters()) in a bare loop; Trainer's two
    (trainer.py:1272-1284), the decay group (every weight in model order) then the norms and biases."""
    if loop == "bare":
        return [params]
    return [g for g in ([p for p in params if p.decay], [p for p in params if not p.decay]) if g]


def _pairs(sizes: list[int]) -> int:
    """max over i of P(i-1) + 2 P(i): the previous tensor's result is freed only once the next one's exists."""
    best, prev = 0, 0
    for n in sizes:
        best, prev = max(best, prev + 2 * n), n
    return best


def temporaries(optimizer: str, impl: str, grouped: list[list[Param]], unit: int) -> tuple[int, str]:
    """(bytes, how): the most the optimizer's step holds at once beyond its state."""
    sizes = [[p.numel for p in g] for g in grouped]
    if optimizer == "adamw" and impl == "single":
        return unit * max(map(_pairs, sizes)), (
            "single-tensor AdamW, per group: sqrt(v) and denom = sqrt(v) / c + eps (adam.py:544) beside the "
            "previous tensor's denom, freed by the assignment")
    if optimizer == "adamw" and impl == "foreach":
        how = "foreach AdamW (PyTorch's CUDA default): _foreach_sqrt of every second moment at once"
        return unit * max(map(sum, sizes)), how  # per group: the groups run one after another
    if optimizer == "adafactor":  # its `update` is one local of step(), carried across the groups
        flat = [n for g in sizes for n in g]
        return unit * _pairs(flat), ("Adafactor: update = grad**2 + eps (optimization.py:1261) beside the previous "
                                     "tensor's update, freed when the new one is assigned")  # fmt: skip
    if optimizer == "lion":
        biggest = max(n for g in sizes for n in g)
        return 3 * FP32 * biggest, "bitsandbytes' CPU Lion: g.float() * scale, state1.mul().add() and its sign()"
    if optimizer == "adamw-8bit":
        top = max((5 if _bits8(p, True) else 3) * FP32 * p.numel for g in grouped for p in g)
        return top, ("bitsandbytes' CPU 8-bit AdamW: both moments dequantized, the fp32 gradient, sqrt and its "
                     "division (5 x 4P); a 32-bit tensor 3 x 4P")  # fmt: skip
    return 0, "in place"  # fused AdamW (one _fused_adamw_ call); SGD: param.add_(grad or momentum_buffer)


def _bits8(p: Param, trainer: bool) -> bool:
    """Whether bitsandbytes keeps this tensor's state in 8 bits: at least min_8bit_size values, and not an
    embedding under Trainer (register_module_override(..., {"optim_bits": 32}), trainer.py:1330-1338)."""
    return p.numel >= BNB_MIN_8BIT_SIZE and not (trainer and p.embedding)


def state_events(optimizer: str, params: list[Param], loop: str, unit: int, source: str) -> list[Event]:
    """The state of an optimizer other than AdamW, resident as the (second) step begins."""
    trainer = loop != "bare"
    state = 0
    for p in params:
        if optimizer == "adamw-8bit":
            state += bnb_8bit_bytes(p.numel, 2) if _bits8(p, trainer) else 2 * FP32 * p.numel
        else:
            state += tensor_state_bytes(optimizer, p.rows, p.cols, unit)
    out = [Event("start", "optimizer state of the trainable parameters", "optimizer", state, source)] if state else []
    if optimizer == "adamw-8bit" and any(_bits8(p, trainer) for p in params):
        out.append(Event("start", "bitsandbytes' quantization maps (qmap1, qmap2)", "optimizer", BNB_QMAPS,
                         "2 x 256 fp32, one pair for every 8-bit tensor"))  # fmt: skip
    if optimizer == "adafactor":
        out.append(Event("start", "Adafactor's RMS of each tensor", "optimizer", RMS_SCALAR * len(params),
                         "state['RMS']: a 0-dim fp32 tensor per parameter (optimization.py:1257)"))  # fmt: skip
    return out
