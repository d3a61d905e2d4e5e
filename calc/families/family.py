"""What a family module declares: its model types (how each config.json is read) and its code."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from .config import Aliased

# Layers of one kind. The eager walk (calc.eager_step) replays one layer of each kind, not every layer: a run of
# consecutive layers of the same kind is replayed as its first, two of its middle and its last layer, and the
# middle ones are stretched over the run (their events checked the same; otherwise the whole model is
# replayed); a run whose kinds repeat with a period (sliding and full layers alternating) likewise, a period for
# a layer. Two layers are of the same kind when the family's code runs the same ops on the same sizes in
# both: `Family.layer_kind(shape, index)` says so, index counted from 1 as `Replay.layer` counts it. The
# default, `dense_or_moe`, separates the dense layers from the mixture-of-experts ones (Shape.moe_layer);
# the walk adds whether the layer is frozen (calc.finetune's freeze_layers). A family whose layer reads its
# index (`ops.rp.layer`: sliding-window layers among global ones, layers without rotary positions, a dense
# first layer) must return a key that differs wherever the layer's ops or sizes do, e.g.
# `lambda shape, i: (dense_or_moe(shape, i), i > shape.dense_layers + 2)`. A key that differs for every index is
# always safe (the whole model is replayed) and only slower. Comments, not a docstring: they cost the page's
# wheel nothing.


def dense_or_moe(shape, index: int) -> Hashable:
    """The default kind of layer `index` (from 1): a mixture of experts (Shape.moe_layer) or a dense layer
    (every layer of a model without experts); and whether it has rotary positions (Shape.rotary) and slides
    (Shape.slides)."""
    kind = "moe" if shape.moe_layer(index) else "dense"
    return kind, shape.rotary(index), shape.slides(index)


@dataclass(frozen=True)
class ModelType:
    """A config.json model_type: the reader of its keys (-> Shape fields) and whose code runs it."""

    name: str  # config.json's model_type
    read: Callable[[Mapping], dict]  # the config -> Shape's fields
    family: str  # Shape.family: whose code runs it
    aliases: tuple[tuple[str, str], ...] = ()  # its config class's attribute_map, (alias, stored name) pairs of
    # the keys `read` reads: one setting under either name (calc.families.config.Aliased)

    def fields(self, cfg: Mapping) -> dict:
        """The Shape's fields of this model type's config, each key read under either of its names."""
        return self.read(Aliased(cfg, dict(self.aliases)))


@dataclass(frozen=True)
class Family:
    """Whose code a Shape runs (Shape.family), and what of it the eager walk replays."""

    name: str  # Shape.family
    models: tuple[str, ...]  # how a message names the models it runs: ("Llama", "Mistral", "Qwen2")
    layer: Callable | None = None  # the eager walk's decoder layer (ops, x, cos, sin, mask) -> x; None: not replayed
    closed_form: bool = False  # the eager walk has a closed form of its own for it (calc.eager: the Decoder)
    experts: bool = False  # the eager walk replays its mixture of experts (Mixtral's, Qwen2-MoE's)
    finetune: bool = False  # the eager walk replays peft's LoRA and frozen layers on it
    expert_lora: tuple[str, ...] = ()  # the models with experts of its code that the eager walk fine-tunes with
    # peft's LoRA, on the attention's linears and the experts' weights (calc.finetune.check says which targets)
    all_linear_experts: bool = True  # peft converts all-linear on its experts to the router and the experts
    # (calc.finetune.all_linear; GPT-OSS's: the attention alone)
    window_mask: Callable | None = None  # (shape) -> whether its model also makes a sliding-window mask, used or
    # not, under eager attention
    embed: Callable | None = None  # (ops, x) -> x: what its model does to the token embeddings first
    head: Callable | None = None  # (ops, logits) -> logits: what it does to the logits before the loss (it
    # drops the logits it rebinds)
    tensors: Callable | None = None  # (shape, moe) -> one block's calc.inventory.Tensor list; None: Llama's block
    problem: Callable | None = None  # (shape) -> (field, message) where its code cannot have this shape, or None
    layer_kind: Callable = dense_or_moe  # (shape, index from 1) -> a key, the same for layers whose replay is the
    # same (the module's docstring: what the eager walk replays once for each kind)
    sdpa_mask: Callable | None = None  # (shape, seq) -> whether its model passes sdpa a sliding-window mask (a
    # window no longer than the sequence; create_sliding_window_causal_mask), to the layers that slide
    rope_tables: Callable | None = None  # (shape) -> the rotary (cos, sin) pairs its model makes (None: one)
    rope_fp32: bool = False  # its rotary embedding returns cos and sin in fp32, not cast to the model's dtype
    norms: tuple[int, ...] = (2,)  # the norms a block its layer replays (norms_per_layer; Gemma 2's: 4)
    norm: Callable | None = None  # (ops, x, name) -> x: its model's norm op where it is not Llama's or LayerNorm
    layer_inputs: Callable | None = None  # (ops, cos, sin, mask) -> ((cos, sin, mask) for each layer, what the
    # model's forward makes beside them and holds until it returns): a model whose layers differ in their masks
    # or rotary tables (Gemma 2's and Gemma 3's sliding and full layers)
    attentions: tuple[str, ...] = ("sdpa", "eager")  # the attn_implementation values its model accepts
    qk_norms: bool = False  # its attention normalises each head of the queries and keys (the deck counts them)
    moe_lacks: Callable | None = None  # (shape) -> what of its own mixture of experts the eager walk does not
    # replay, or None; unset: Mixtral's and Qwen2-MoE's checks (calc.families._moe_lacks)
    expert_bias: bool = False  # its experts have biases (GPT-OSS's), which the eager walk replays
    dense_among_experts: bool = False  # the eager walk replays dense layers beside its experts, first or among
    # them (Llama 4's interleave_moe_layer_step, Qwen-MoE's decoder_sparse_step and mlp_only_layers: Shape.moe_layer)
    rotary_width: Callable | None = None  # (shape) -> values a position of its rotary cos and sin tables; None:
    # head_dim (LlamaRotaryEmbedding's cat of the frequencies with themselves)
    window_layer: Callable | None = None  # (shape, layer from 1) -> whether that layer is given the sliding-window
    # mask (window_mask's) rather than the causal one
    sdpa_window: Callable | None = None  # (shape) -> whether, under sdpa, its model makes the window mask as a
    # tensor (Llama 4's chunked one), which the window layers are given
    lora_fused: bool = False  # peft's LoRA adapts its fused stores whole (Phi-3's qkv_proj and gate_up_proj, one
    # adapter each: calc.finetune.adapted), not each part (calc.inventory.Tensor.fused)
    embed_module: bool = False  # its `embed` is the embedding module's own forward (Gemma's scaled embedding), so
    # enable_input_require_grads' hook on that module makes embed's output the leaf, not the lookup's

    @property
    def eager(self) -> bool:
        return self.layer is not None or self.closed_form
