"""Fine-tuning on one device: LoRA, QLoRA, frozen layers and any optimizer, walked as the deck walks a step.

The deck's walk (calc.walk) trains every parameter with Adam. Here some parameters are frozen: a frozen
parameter has its weights and nothing else (no gradient, no optimizer state, no master copy). Adapters
(Hu et al. 2021, LoRA) are trainable parameters of their own: rank r on a linear d_in -> d_out adds
A (r x d_in) and B (d_out x r), r (d_in + d_out) parameters. Activations follow Korthikanti et al.'s
count (calc.activations) with what a frozen layer no longer needs taken out and what an adapter needs
put in (layer_bytes). Single device (or data parallelism without ZeRO, which is the same per device).

Left out: in the lowest block, the ops before its first adapter record nothing in PyTorch (no input needs a
gradient yet), which this count still keeps like any frozen block's; GPT-2's fused c_attn is adapted here as
separate q, k and v projections (peft adapts the fused layer, r (h + 3h) parameters), and its per-tensor
optimizer state (8-bit, Adafactor) is counted with Llama's separate projections."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from . import activations as act
from . import counts, inventory, phases
from .counts import param_counts
from .families import FAMILIES, listing, tuning_lacks
from .optimizers import OPTIMIZERS, ceil_div, state_bytes
from .parallel import SINGLE, Parallel
from .parts.linear import NF4_BLOCK, NF4_DQ_BLOCK  # bitsandbytes' NF4 format, with its 4-bit layer
from .recipes import RECIPES, Recipe
from .shape import Shape
from .walk import Event, Reps, Segment

MODES = ("full", "lora", "qlora", "freeze")
TARGETS = ("q", "k", "v", "o", "gate", "up", "down")  # peft's q_proj ... down_proj in transformers' Llama
QLORA_EXPERTS = ("qwen3_moe", "llama", "gpt_oss")  # the families whose mixtures of experts QLoRA was measured on
# (Mixtral's code is the llama family's; Qwen2-MoE's too, refused by its shared expert)
ATTENTION = ("q", "k", "v", "o")  # the linears LoRA adapts in a mixture of experts' blocks (moe_problem)
ALL_LINEAR = "all-linear"  # peft's shorthand: every linear of the blocks (not the head), by model type (all_linear)
# The adapters' dtype. fp32: peft's default, get_peft_model(..., autocast_adapter_dtype=True) upcasts adapters
# made in a 16-bit dtype to fp32 (peft/tuners/tuners_utils.py, _cast_adapter_dtype); model: the model's own
# dtype (autocast_adapter_dtype=False). On an fp32 model the two are the same.
ADAPTER_DTYPES = ("fp32", "model")

FP32 = 4


@dataclass(frozen=True)
class Tuning:
    """How a step fine-tunes: which parameters train, with which optimizer."""

    mode: str = "full"  # full: every parameter; lora / qlora: adapters only; freeze: the first layers frozen
    optimizer: str = "adamw"  # calc.optimizers.OPTIMIZERS
    rank: int = 8  # LoRA's r
    alpha: int = 16  # LoRA's alpha: the update is scaled by alpha / r, which changes no byte
    targets: tuple[str, ...] = ("q", "v")  # the linears of each block that get an adapter (TARGETS)
    freeze_layers: int = 0  # freeze: the first N blocks (and the embedding) are frozen
    freeze_embedding: bool = True  # freeze: the embedding (and a head tied to it) frozen too; False: it trains
    freeze_head: bool = False  # freeze: the final norm and an untied head frozen too (LLaMA-Factory's freeze)
    paged: bool = False  # the optimizer state lives in CPU-pageable memory (bitsandbytes' paged optimizers)
    adapter_dtype: str = "fp32"  # lora / qlora: the adapters' dtype (ADAPTER_DTYPES); fp32 is peft's default
    moe_all_linear: bool = False  # all-linear on Qwen3-MoE or Mixtral as peft converts it (all_linear): the router's
    # weight adapted too, the experts' gate_up_proj at twice the rank

    @property
    def default(self) -> bool:
        """The deck's own step: everything trains with AdamW on the device."""
        return self.mode == "full" and self.optimizer == "adamw" and not self.paged

    @property
    def adapters(self) -> bool:
        return self.mode in ("lora", "qlora")

    @property
    def embedding_under_frozen(self) -> bool:
        """freeze with --no-freeze-embedding: the embedding trains below frozen blocks, a backward only the
        eager walk replays (the deck's frozen blocks keep nothing)."""
        return self.mode == "freeze" and not self.freeze_embedding


DEFAULT = Tuning()


def trained_recipe(recipe: str, tune: Tuning) -> Recipe:
    """What a trainable parameter costs under this recipe. peft's default adapters on a 16-bit model are fp32
    parameters: torch writes their gradients in fp32 and AdamW keeps its moments in the parameters' dtype,
    with no master copy to keep (fp32 Adam's 4 + 4 + 8). Otherwise the recipe's own."""
    r = RECIPES[recipe]
    if tune.adapters and tune.adapter_dtype == "fp32" and r.weights < FP32:
        return replace(r, weights=FP32, gradients=FP32, optimizer=2 * FP32, master=0,
                       source="peft's fp32 adapters: fp32 Adam (4 + 4 + 8)")  # fmt: skip
    return r


def linears(shape: Shape) -> dict[str, tuple[int, int]]:
    """(d_in, d_out) of each linear layer of one block that LoRA can target, in TARGETS order (no gate without
    a gated FFN), from calc.inventory."""
    return dict(_linears(shape, FAMILIES[shape.family].tensors))


@lru_cache(maxsize=64)
def _linears(shape: Shape, own) -> dict[str, tuple[int, int]]:
    """linears' dict, listed once per shape (`own`: the family's lister, part of the key as in calc.counts)."""
    return {t.target: (t.rows, t.cols) for t in counts.layer_tensors(shape) if t.target}


def adapted(shape: Shape, targets: tuple[str, ...]) -> list[tuple[str, int, int]]:
    """The linear layers of one block that peft puts an adapter on for these targets, in the block's order, as
    (module name, d_in, d_out): q_proj ... down_proj, one for each target; where the family's LoRA adapts a
    fused store whole (Phi-3's qkv_proj and gate_up_proj: Family.lora_fused), one adapter for its targets
    together, as wide as its parts (calc.check refuses a store named in part)."""
    return list(_adapted(shape, tuple(targets), FAMILIES[shape.family].tensors))


@lru_cache(maxsize=64)
def _adapted(shape: Shape, targets: tuple[str, ...], own) -> tuple[tuple[str, int, int], ...]:
    """adapted's list, made once per shape and targets (`own`: the family's lister, as in _linears)."""
    whole = FAMILIES[shape.family].lora_fused
    out: dict[str, tuple[int, int]] = {}
    for t in counts.layer_tensors(shape):
        if t.target in targets and (t.target in ATTENTION or not shape.moe_layers):  # experts: expert_adapted
            key = t.fused if whole and t.fused else f"{t.target}_proj"
            d_in, d_out = out.get(key, (t.rows, 0))
            out[key] = (d_in, d_out + t.cols)
    return tuple((key.rsplit(".", 1)[-1], d_in, d_out) for key, (d_in, d_out) in out.items())


def expert_adapted(shape: Shape, tune: Tuning) -> list[tuple[str, int, int, int]]:
    """The parameters peft's LoRA adapts through target_parameters (its ParamWrapper), as (name, d_in, d_out,
    rows of A): the experts' experts.gate_up_proj for gate and up (one weight, named together: check) and
    experts.down_proj for down, one adapter of rank r an expert on each (A is (r E) x d_in, B d_out x (r E));
    under all-linear's conversion (Tuning.moe_all_linear) gate_up_proj at twice the rank, and the router's
    gate.weight (one adapter, r x d_in and d_out x r). None on a model without experts, whose gate, up and down
    are linears (adapted)."""
    if not shape.moe_layers or not tune.adapters:
        return []
    f, h, e, r = shape.expert_width, shape.hidden, shape.experts, tune.rank
    converted = tune.moe_all_linear
    return ([("experts.gate_up_proj", h, 2 * f, (2 if converted else 1) * r * e)] if "gate" in tune.targets
            else []) + ([("experts.down_proj", f, h, r * e)] if "down" in tune.targets else []) + (
        [("gate.weight", h, e, r)] if converted else [])  # fmt: skip


def all_linear(shape: Shape) -> tuple[tuple[str, ...], bool] | str:
    """peft's all-linear on this shape: (calc's targets, Tuning.moe_all_linear), or why it is not modelled. Dense
    blocks: every linear they have (linears). A mixture of experts in transformers 5 keeps only its attention's
    projections as nn.Linear (the router and the experts are parameters); peft 0.21 adds, on the model types it
    converts from transformers 4 (utils/transformers_weight_conversion.py, _resolve_string_target_modules), the
    router and the experts by their old names, which become target_parameters: the router's weight at rank r,
    the experts' gate_up_proj at twice the rank (rank_pattern, alpha doubled too) and down_proj at r. Qwen3-MoE
    and Mixtral are converted (Family.all_linear_experts); GPT-OSS is not: its attention alone. (Qwen2-MoE is
    not converted either, peft mapping the models it converts to its pattern, not itself: its all-linear is the
    attention and the shared expert's linears, refused here with the dense layers among experts.)"""
    if not shape.moe_layers:
        return tuple(linears(shape)), False
    if tuning_lacks(shape, "lora"):  # a model whose LoRA no walk replays: check says so, naming the model
        return ATTENTION, False
    if shape.shared_expert_ffn or shape.moe_layers < shape.layers:
        return ("peft's all-linear adapts the shared expert's or the dense layers' linears too, which is not "
                "modelled on a mixture of experts yet: name the attention's q, k, v and o")  # fmt: skip
    if not FAMILIES[shape.family].all_linear_experts:
        return ATTENTION, False
    return (*ATTENTION, "gate", "up", "down"), True


def fused_apart(shape: Shape, targets: tuple[str, ...]) -> tuple[str, list[str]] | None:
    """(a fused store's module name, the targets it holds) where these targets name some of it but not all, on a
    family whose LoRA adapts it whole (peft adapts Phi-3's qkv_proj as one linear: q alone cannot be), or None."""
    if not FAMILIES[shape.family].lora_fused:
        return None
    stores: dict[str, list[str]] = {}
    for t in counts.layer_tensors(shape):
        if t.target and t.fused:
            stores.setdefault(t.fused, []).append(t.target)
    return next(((s.rsplit(".", 1)[-1], held) for s, held in stores.items()
                 if {*held} & {*targets} and not {*held} <= {*targets}), None)  # fmt: skip


def whole(shape: Shape, targets: tuple[str, ...]) -> tuple[str, ...]:
    """These targets with every part of a fused store they name, where the family's LoRA adapts it whole (Phi-3's
    q and v: q, k and v, its qkv_proj), in TARGETS order."""
    apart = fused_apart(shape, targets)
    if apart is None:
        return targets
    return whole(shape, tuple(t for t in TARGETS if t in targets or t in apart[1]))


def adapter_tensors(shape: Shape, tune: Tuning) -> list[tuple[int, int, int]]:
    """One block's adapters as (count, rows, cols): A is r x d_in, B d_out x r for every adapted linear."""
    out = []
    for _, d_in, d_out in adapted(shape, tune.targets):
        out += [(1, tune.rank, d_in), (1, d_out, tune.rank)]
    for _, d_in, d_out, ranks in expert_adapted(shape, tune):  # a ParamWrapper's A, its B
        out += [(1, ranks, d_in), (1, d_out, ranks)]
    return out


def triples(tensors: list[inventory.Tensor]) -> list[tuple[int, int, int]]:
    return [(t.count, t.rows, t.cols) for t in tensors]


def layer_tensors(shape: Shape) -> list[tuple[int, int, int]]:
    """One dense block's parameter tensors as (count, rows, cols), cols 0 for a vector (calc.inventory)."""
    return triples(counts.layer_tensors(shape))


def outer_tensors(shape: Shape) -> dict[str, list[tuple[int, int, int]]]:
    """The tensors outside the blocks: embedding (and learned positions), final norm, untied head."""
    outer = {part: triples(tensors) for part, tensors in inventory.outer_tensors(shape).items()}
    return {"embedding": outer["embedding"] + outer["positions"], "final_norm": outer["final_norm"],
            "head": outer["head"]}  # fmt: skip


def numel(tensors) -> int:
    return sum(count * rows * (cols or 1) for count, rows, cols in tensors)


def embedding_trains(tune: Tuning) -> bool:
    """Whether the embedding (and a head tied to it) trains: in full training, and under freeze where
    --no-freeze-embedding says so (issue 34: freezing the first blocks only, the embedding still trained)."""
    return tune.mode == "full" or tune.embedding_under_frozen


def trainable_tensors(shape: Shape, tune: Tuning) -> list[tuple[int, int, int]]:
    """Every trainable tensor of the model. freeze trains the blocks above the first N, the final norm and an
    untied head (frozen too where head_frozen; the embedding, and a head tied to it, stay frozen unless
    embedding_trains); lora and qlora only the adapters."""
    outer = outer_tensors(shape)
    if tune.adapters:
        return [(shape.layers * c, r, k) for c, r, k in adapter_tensors(shape, tune)]
    layers = shape.layers - (tune.freeze_layers if tune.mode == "freeze" else 0)
    out = [(layers * c, r, k) for c, r, k in layer_tensors(shape)]
    out += [] if head_frozen(tune) else outer["final_norm"] + outer["head"]
    return out + (outer["embedding"] if embedding_trains(tune) else [])


def head_frozen(tune: Tuning) -> bool:
    """Whether freeze leaves the final norm and an untied head frozen too (--freeze-head: LLaMA-Factory's freeze,
    which trains only its chosen blocks unless freeze_extra_modules names more). A tied head is the embedding's
    weight: it trains with the embedding (--no-freeze-embedding), the final norm frozen alone."""
    return tune.mode == "freeze" and tune.freeze_head


@counts.per_shape
def trainable_params(shape: Shape, tune: Tuning = DEFAULT) -> int:
    """The parameters that train: e.g. 4,194,304 for LoRA rank 8 on q and v of Llama-2-7B."""
    if tune.mode == "full":
        return param_counts(shape)["total"]  # any shape, a mixture of experts included
    return numel(trainable_tensors(shape, tune))


def nf4_bytes(n: int) -> int:
    """One tensor of n weights in bitsandbytes' NF4 with double quantization (see NF4_BLOCK)."""
    blocks = ceil_div(n, NF4_BLOCK)
    return ceil_div(n, 2) + blocks + FP32 * ceil_div(blocks, NF4_DQ_BLOCK)


def weight_bytes(shape: Shape, recipe: str, tune: Tuning) -> dict[str, int]:
    """{"base": the model's weights, "adapters": the adapters'}. QLoRA stores every block linear in NF4
    (transformers' bitsandbytes integration quantizes every nn.Linear but the head) and the rest (embedding,
    norms, biases, head) in the compute dtype, the recipe's weights dtype."""
    return dict(_weight_bytes(shape, recipe, tune))


@counts.per_shape
def _weight_bytes(shape: Shape, recipe: str, tune: Tuning) -> dict[str, int]:
    """weight_bytes' dict, computed once (a copy is returned)."""
    w, wa = RECIPES[recipe].weights, trained_recipe(recipe, tune).weights
    total = param_counts(shape)["total"]
    adapters = shape.layers * numel(adapter_tensors(shape, tune)) if tune.adapters else 0
    if tune.mode != "qlora":
        return {"base": w * total, "adapters": wa * adapters}
    four = quantized(shape)
    return {"base": sum(map(nf4_bytes, four)) + w * (total - sum(four)), "adapters": wa * adapters}


def quantized(shape: Shape) -> list[int]:
    """The weights of each linear of the blocks that transformers' bitsandbytes integration stores in NF4 (every
    nn.Linear but the head), one entry a linear over every block. In a mixture of experts' sparse layers only
    the attention's: the experts are fused parameters (gate_up_proj, down_proj) and the router is no
    nn.Linear in transformers 5, so both stay in the compute dtype (a Qwen3-MoE or Mixtral loaded with
    BitsAndBytesConfig(load_in_4bit=True), bitsandbytes 0.50); a dense layer among them has its MLP in NF4."""
    stores: dict[str, list] = {}  # a fused store (Phi-3's qkv_proj, gate_up_proj) is one Linear4bit of its parts
    for t in counts.layer_tensors(shape):
        if t.target:
            stores.setdefault(t.fused or t.target, [0, t.target in ATTENTION])[0] += t.rows * t.cols
    attention = [n for n, attends in stores.values() if attends]
    mlp = [n for n, attends in stores.values() if not attends]
    return attention * shape.layers + mlp * (shape.layers - shape.moe_layers)


@counts.per_shape
def optimizer_bytes(shape: Shape, recipe: str, tune: Tuning) -> int:
    """The optimizer's state for every trainable tensor; the recipe gives its moments' dtype (trained_recipe)."""
    return state_bytes(tune.optimizer, trainable_tensors(shape, tune), trained_recipe(recipe, tune).optimizer // 2)


def dropped_inputs(shape: Shape, sb: int, targets: tuple[str, ...]) -> int:
    """16-bit bytes a frozen block no longer keeps: the input of a frozen linear serves only its weight's
    gradient (dx = dy W needs W, not x), so it is not saved unless an adapter on the same input needs it.
    In Korthikanti et al.'s count: Q, K and V's shared input (2sbh), the output projection's input
    (2sb x q width), the FFN's input (2sbh, gate and up) and the second linear's input (8sbh)."""
    h = shape.hidden
    dropped = 0
    if not {"q", "k", "v"} & set(targets):
        dropped += 2 * sb * h
    if "o" not in targets:
        dropped += 2 * sb * shape.q_width
    if not {"gate", "up"} & set(targets):
        dropped += 2 * sb * h
    if "down" not in targets:
        dropped += 8 * sb * h
    return dropped


def adapter_activation_bytes(shape: Shape, sb: int, tune: Tuning, activation_bytes: int, widened: int = 0) -> int:
    """Bytes each block's adapters keep (lora_dropout = 0, peft's and torchtune's default: nn.Identity). x A,
    the rank-r intermediate, is B's input: sb r values a target. Its own input x is the frozen linear's,
    already counted. Adapters `widened` to more bytes than the model's weights (peft's fp32 adapters on a
    16-bit model: trained_recipe) get x cast to their dtype first (peft's _cast_input_dtype, in each LoRA
    layer's forward), a copy that lora_A keeps for its weight's gradient: sb d_in more values a target, and
    the intermediate is in the adapters' dtype too."""
    layers = adapted(shape, tune.targets)
    if not widened:
        return act.at_width(2 * sb * tune.rank * len(layers), activation_bytes)
    return widened * sb * sum(tune.rank + d_in for _, d_in, _ in layers)


def layer_bytes(
    shape: Shape,
    seq: int,
    micro_batch: int,
    recompute: str,
    activation_bytes: int,
    frozen: Tuning | None,
    flash: bool = False,
    widened: int = 0,
) -> tuple[int, int]:
    """(kept through the forward pass, all the layer holds for backward) of one block: a trainable one when
    `frozen` is None (Korthikanti et al., as the deck), else a frozen one carrying `frozen`'s adapters,
    `widened` to that many bytes a value where they are wider than the model (adapter_activation_bytes).
    `flash`: attention stores no s x s scores (FlashAttention, or SDPA's fused kernels)."""
    par = _par(flash)
    if frozen is None:
        full = act.layer_bytes(shape, seq, micro_batch, par)
        kept = act.kept_bytes(shape, seq, micro_batch, recompute, par)
        return act.at_width(kept, activation_bytes), act.at_width(full, activation_bytes)
    sb = seq * micro_batch
    outside, inside, scores = act.layer_parts(shape, seq, micro_batch, par)
    targets = frozen.targets if frozen.adapters else ()
    dropped = dropped_inputs(shape, sb, targets)
    adapters = adapter_activation_bytes(shape, sb, frozen, activation_bytes, widened) if frozen.adapters else 0
    full = act.at_width(outside + inside + scores - dropped, activation_bytes) + adapters
    selective = act.at_width(outside + inside - dropped, activation_bytes) + adapters
    kept = {"none": full, "selective": selective, "full": act.at_width(2 * sb * shape.hidden, activation_bytes)}
    return kept[recompute], full


def widened(recipe: str, tune: Tuning) -> int:
    """The adapters' bytes a value where they are wider than the model's weights (trained_recipe), else 0."""
    wa = trained_recipe(recipe, tune).weights
    return wa if tune.adapters and wa > RECIPES[recipe].weights else 0


def _par(flash: bool) -> Parallel:
    return Parallel(flash=True) if flash else SINGLE


def check(shape: Shape, tune: Tuning) -> tuple[str, str] | None:
    """(field, reason) where this fine-tuning does not apply to this shape, or None."""
    if shape.moe_layers and not tune.default:
        return moe_problem(shape, tune)
    if tune.adapters:
        missing = [t for t in tune.targets if t not in linears(shape)]
        if missing:
            return "lora-targets", f"the model has no {missing[0]} projection (its FFN is not gated)"
        apart = fused_apart(shape, tune.targets)
        if apart:
            module, held = apart
            named = listing(held)
            return "lora-targets", (f"{named} are one linear in {FAMILIES[shape.family].models[0]}'s code "
                                    f"({module}), which peft adapts whole: name {named} together, or all-linear")
    if tune.mode == "freeze" and tune.freeze_layers > shape.layers:
        return "freeze-layers", f"{tune.freeze_layers} frozen layers are more than the {shape.layers} layers"
    if not trainable_params(shape, tune):
        if head_frozen(tune):
            return "freeze-head", "leaves nothing to train: every block frozen, the final norm and head with them"
        return "freeze-layers", "leaves nothing to train (a tied head is frozen with the embedding)"
    return None


def moe_problem(shape: Shape, tune: Tuning) -> tuple[str, str] | None:
    """(field, reason) where this fine-tuning of a mixture of experts is not modelled, or None: peft's LoRA with
    AdamW on the attention's linears and on the experts' weights, which the eager walk replays
    (calc.families.tuning_lacks says on which models). In transformers 5 the experts are fused parameters
    (gate_up_proj, down_proj: E x rows x cols), not linears, which peft adapts through target_parameters (its
    ParamWrapper: expert_adapted, at the rank given). Named in target_modules, peft 0.21 converts them by model
    type (calc.trainers.moe_targets)."""
    if tune.optimizer != "adamw" or tune.paged:
        return ("optimizer" if tune.optimizer != "adamw" else "paged-optimizer",
                "a mixture of experts is modelled with AdamW on the device only")  # fmt: skip
    if tune.mode not in ("lora", "qlora"):
        return "finetune", ("not modelled for a mixture of experts yet (the eager walk replays peft's LoRA and QLoRA "
                            "on one)")  # fmt: skip
    lacks = tuning_lacks(shape, tune.mode)  # the model before its targets: a fix the next refusal would refuse
    if lacks:
        return "finetune", lacks
    if tune.mode == "qlora" and (shape.shared_expert_ffn or shape.family not in QLORA_EXPERTS):
        return "finetune", ("QLoRA on a mixture of experts is modelled on Qwen3-MoE, Mixtral and GPT-OSS (no shared "
                            "expert): --finetune lora on this one")  # fmt: skip
    experts = [t for t in tune.targets if t not in ATTENTION]
    if experts and (shape.shared_expert_ffn or shape.moe_layers < shape.layers):
        return "lora-targets", ("LoRA on the experts of a model with a shared expert or dense layers among them is not "
                                "modelled yet: name the attention's q, k, v and o")
    if experts and ("gate" in experts) != ("up" in experts):
        return "lora-targets", ("the experts' gate and up are one weight (gate_up_proj), which peft's "
                                "target_parameters adapts whole: name gate and up together")
    return None


LAYER = "layer {layer}"  # a block's label, filled in per repetition


class TunedStep:
    """The builders of segments' phases for one fine-tuning step on one device: what each needs of the recipe,
    the trainable parameters' recipe (trained_recipe), the optimizer and one block's sizes, worked out once."""

    def __init__(self, shape: Shape, seq: int, micro_batch: int, recipe: str, recompute: str, activation_bytes: int,
                 tune: Tuning, flash: bool, accumulating: bool = False):  # fmt: skip
        self.shape, self.recipe, self.recompute, self.tune = shape, recipe, recompute, tune
        self.accumulating = accumulating  # a micro-batch after the first: the trainable gradients are resident
        self.r, self.t, self.opt = RECIPES[recipe], trained_recipe(recipe, tune), OPTIMIZERS[tune.optimizer]
        self.n = param_counts(shape)
        self.grads_of = f"trainable parameters x {self.t.gradients} bytes ({self.t.source})"
        self.frozen_below = tune.freeze_layers if tune.mode == "freeze" else 0  # blocks 1..N keep nothing
        frozen = tune if tune.adapters else None
        self.kept, self.full = layer_bytes(shape, seq, micro_batch, recompute, activation_bytes, frozen, flash,
                                           widened(recipe, tune))  # fmt: skip
        self.logits16 = act.at_width(act.logits_16bit_bytes(shape, seq, micro_batch), activation_bytes)
        self.logits32 = act.logits_fp32_bytes(shape, seq, micro_batch)

    def start(self) -> list[Event]:
        """The state resident before the step: the base weights (NF4 under QLoRA), the adapters, the optimizer's
        state (or none on the device: paged), the trainable parameters' master copy and gradient buffer."""
        shape, tune, r, t, opt = self.shape, self.tune, self.r, self.t, self.opt
        weights, trainable = weight_bytes(shape, self.recipe, tune), trainable_params(shape, tune)
        qlora = tune.mode == "qlora"
        base_label = ("NF4 base weights resident" if qlora else "weights resident") + (
            " (frozen)" if tune.mode != "full" else "")  # fmt: skip
        base_source = ("bitsandbytes NF4, blocks of 64, double-quantized absmax (QLoRA §3); the rest in the "
                       "compute dtype" if qlora else r.source)  # fmt: skip
        out = [Event("start", base_label, "weights", weights["base"], base_source)]
        if weights["adapters"]:
            out.append(Event("start", "LoRA adapters resident", "weights", weights["adapters"],
                             f"r (d_in + d_out) per target, {t.weights} bytes each (Hu et al. 2021)"))  # fmt: skip
        state = optimizer_bytes(shape, self.recipe, tune)
        if tune.paged:
            out.append(Event("start", f"{opt.label} state paged to CPU memory (not on the device)", "optimizer", 0,
                             "bitsandbytes paged optimizer: unified memory, evicted to the host under pressure"))
        elif state:
            out.append(Event("start", f"{opt.label} state resident", "optimizer", state, opt.source))
        if t.master:
            out.append(Event("start", "fp32 master weights of the trainable parameters resident", "master",
                             t.master * trainable, t.source))  # fmt: skip
        if t.grad_buffer:
            out.append(phases.grad_buffer(t.gradients * trainable, t.source))
        elif self.accumulating and trainable:
            out.append(Event("start", "gradients of the step's earlier micro-batches resident", "gradients",
                             t.gradients * trainable, self.grads_of))  # fmt: skip
        return out

    def grads(self, label: str, params: int) -> list[Event]:
        """A module's trainable parameters' gradients, written in full (none into a main-gradient buffer); a later
        micro-batch's are added into the resident ones and freed (autograd's AccumulateGrad), as the deck's."""
        if self.t.grad_buffer or not params:
            return []
        g = self.t.gradients * params
        out = [phases.weight_grads(label, g, self.grads_of)]
        if self.accumulating:
            out.append(Event("backward", f"{label}: add them into the resident gradients", "gradients", -g,
                             "autograd's AccumulateGrad"))  # fmt: skip
        return out

    def transient(self, phase: str) -> list[Event]:
        """QLoRA: each block linear's NF4 weight dequantized to the compute dtype while it runs, one at a time (a
        fused store whole: Phi-3's gate_up_proj, calc.finetune.adapted)."""
        if self.tune.mode != "qlora":
            return []
        stores = adapted(self.shape, tuple(linears(self.shape)))
        largest = self.r.weights * max(d_in * d_out for _, d_in, d_out in stores)
        source = "bitsandbytes dequantize_4bit: one linear's weight in the compute dtype at a time"
        return [
            Event(phase, f"{phase} {LAYER}: dequantize its largest NF4 weight to 16 bits", "weights", largest, source),
            Event(phase, f"{phase} {LAYER}: free the dequantized weight", "weights", -largest, source),
        ]

    def trained(self) -> range:
        """The blocks autograd goes through: above the frozen ones, up to the top."""
        return range(self.frozen_below + 1, self.shape.layers + 1)

    def forward(self) -> list[Segment]:
        """The blocks below every trainable one keep nothing; the others keep their activations."""
        segs = []
        if self.frozen_below:
            nothing = Event("forward", f"forward {LAYER}: frozen below every trainable layer, keeps nothing",
                            "activations", 0, "autograd records nothing below the lowest trainable parameter")
            segs.append(Segment((nothing,), Reps(range(1, self.frozen_below + 1))))
        adapters = self.tune.adapters
        source = ("Korthikanti et al. 2022 less the inputs of frozen linears, plus the rank-r intermediates"
                  if adapters else "Korthikanti et al. 2022, as the deck")  # fmt: skip
        forward = phases.kept(LAYER, self.kept, source, "frozen, carrying adapters: " if adapters else "")
        segs.append(Segment((forward, *self.transient("forward")), Reps(self.trained())))
        return segs

    def head(self) -> list[Segment]:
        """The head's logits and the loss, their backward, and the final norm's (where they train)."""
        n, tune = self.n, self.tune
        head_trains = tune.mode in ("full", "freeze") and not self.shape.tied and not head_frozen(tune)
        head_params = n["head"] if head_trains else (n["embedding"] if tune.mode == "full" else 0)
        segs = [Segment(tuple(phases.logits(self.logits16, self.logits32)))]
        segs.append(Segment((*self.grads("loss and head backward", head_params), phases.loss_done(-self.logits32))))
        if tune.mode in ("full", "freeze") and n["final_norm"] and not head_frozen(tune):
            segs.append(Segment(tuple(self.grads("final norm backward", n["final_norm"]))))
        return segs

    def backward(self) -> Segment:
        """Each trained block from the top down: recompute, free its activations, write its gradients."""
        tune = self.tune
        out = []
        if self.recompute != "none":
            out.append(phases.recomputed(LAYER, self.full - self.kept, "what the forward pass did not keep"))
        dequant = self.transient("backward")
        out += [*dequant[:1], phases.freed(LAYER, -self.full), *dequant[1:]]
        layer_grads = numel(adapter_tensors(self.shape, tune)) if tune.adapters else self.n["per_layer"]
        out += self.grads(f"backward {LAYER}" + (": adapters" if tune.adapters else ""), layer_grads)
        trained = self.trained()
        return Segment(tuple(out), Reps(range(trained.stop - 1, trained.start - 1, -1)))

    def embedding_backward(self) -> list[Segment]:
        """Full fine-tuning: the embedding's gradient (a tied one's accumulates into the head's)."""
        n = self.n
        embed = n["positions"] + (0 if self.shape.tied else n["embedding"])
        return [Segment(tuple(self.grads("embedding backward", embed)))] if self.tune.mode == "full" and embed else []

    def end(self, segs: list[Segment]) -> list[Event]:
        """The loop drops the logits, the optimizer steps in place, zero_grad frees the gradients held."""
        return phases.end(segs, self.t, self.opt.label, "state and weights updated in place", -self.logits16)


def segments(
    shape: Shape,
    seq: int,
    micro_batch: int,
    recipe: str,
    recompute: str,
    activation_bytes: int,
    tune: Tuning,
    flash: bool = False,
    accumulating: bool = False,
) -> list[Segment]:
    """One fine-tuning step on one device, every size in bytes, in the deck walk's order (calc.walk.template):
    state resident; each block's forward keeps its activations; head and loss; backward from the top, down to
    the lowest block that trains or carries an adapter (autograd goes no lower: nothing below needs a
    gradient); the optimizer; zero_grad. Each phase is a builder of TunedStep; the events told alike by the
    deck's walk are calc.phases'. Its frozen blocks keep nothing: a trained embedding under them
    (--no-freeze-embedding) is the eager walk's (calc.inputs refuses it here). `accumulating` walks a
    micro-batch after the first of a step: the trainable parameters' gradients are resident from its start."""
    if tune.embedding_under_frozen:
        raise ValueError("the deck walk freezes the embedding with the blocks: --no-freeze-embedding is the eager "
                         "walk's")
    step = TunedStep(shape, seq, micro_batch, recipe, recompute, activation_bytes, tune, flash, accumulating)
    segs = [Segment(tuple(step.start())), *step.forward(), *step.head(), step.backward(), *step.embedding_backward()]
    segs.append(Segment(tuple(step.end(segs))))
    return [s for s in segs if s.events]


def sizes(
    shape: Shape,
    seq: int,
    micro_batch: int,
    recipe: str,
    recompute: str,
    activation_bytes: int,
    tune: Tuning,
    flash: bool = False,
) -> dict[str, int]:
    """The full size of each category, as calc.api.sizes gives the deck's: the state, the activations all
    blocks keep through the forward pass, the logits."""
    t = trained_recipe(recipe, tune)
    weights = weight_bytes(shape, recipe, tune)
    trainable = trainable_params(shape, tune)
    frozen = tune if tune.adapters else None
    kept, _ = layer_bytes(shape, seq, micro_batch, recompute, activation_bytes, frozen, flash, widened(recipe, tune))
    frozen_below = tune.freeze_layers if tune.mode == "freeze" else 0
    return {
        "weights": weights["base"] + weights["adapters"],
        "gradients": t.gradients * trainable,
        "optimizer": 0 if tune.paged else optimizer_bytes(shape, recipe, tune),
        "master": t.master * trainable,
        "activations": (shape.layers - frozen_below) * kept,
        "logits": act.at_width(act.logits_16bit_bytes(shape, seq, micro_batch), activation_bytes)
        + act.logits_fp32_bytes(shape, seq, micro_batch),
    }
