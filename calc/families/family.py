"""What a family module declares: its model types (how each config.json is read) and its code."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelType:
    """A config.json model_type: the reader of its keys (-> Shape fields) and whose code runs it."""

    name: str  # config.json's model_type
    read: Callable[[Mapping], dict]  # the config -> Shape's fields
    family: str  # Shape.family: whose code runs it


@dataclass(frozen=True)
class Family:
    """Whose code a Shape runs (Shape.family), and what of it the eager walk replays."""

    name: str  # Shape.family
    models: tuple[str, ...]  # how a message names the models it runs: ("Llama", "Mistral", "Qwen2")
    layer: Callable | None = None  # the eager walk's decoder layer (ops, x, cos, sin, mask) -> x; None: not replayed
    closed_form: bool = False  # the eager walk has a closed form of its own for it (calc.eager: the Decoder)
    experts: bool = False  # the eager walk replays its mixture of experts (Mixtral's, Qwen2-MoE's)
    finetune: bool = False  # the eager walk replays peft's LoRA and frozen layers on it
    window_mask: Callable | None = None  # (shape) -> whether its model also makes a sliding-window mask, used or
    # not, under eager attention
    embed: Callable | None = None  # (ops, x) -> x: what its model does to the token embeddings first
    head: Callable | None = None  # (ops, logits) -> logits: what it does to the logits before the loss
    tensors: Callable | None = None  # (shape, moe) -> one block's calc.inventory.Tensor list; None: Llama's block
    problem: Callable | None = None  # (shape) -> (field, message) where its code cannot have this shape, or None
    expert_bias: bool = False  # its experts have biases (GPT-OSS's), which the eager walk replays
    rotary_width: Callable | None = None  # (shape) -> values a position of its rotary cos and sin tables; None:
    # head_dim (LlamaRotaryEmbedding's cat of the frequencies with themselves)
    window_layer: Callable | None = None  # (shape, layer from 1) -> whether that layer is given the sliding-window
    # mask (window_mask's) rather than the causal one
    sdpa_window: Callable | None = None  # (shape) -> whether, under sdpa, its model makes the window mask as a
    # tensor (Llama 4's chunked one), which the window layers are given
    attentions: tuple[str, ...] = ("sdpa", "eager")  # the attn_implementation values its model accepts here

    @property
    def eager(self) -> bool:
        return self.layer is not None or self.closed_form
