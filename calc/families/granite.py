"""transformers' GraniteForCausalLM (modeling_granite.py, IBM's Granite 3): Llama's layer with four
multipliers. The token embeddings are multiplied by embedding_multiplier, each block's attention and
feed-forward outputs by residual_multiplier before their residual sum, the logits divided by
logits_scaling, and the attention scores scaled by attention_multiplier in place of 1/sqrt(d). Each product
with a Python float is a new tensor that autograd saves nothing for; their values change no byte."""

from __future__ import annotations

from collections.abc import Mapping

from ..parts.ops import Ops
from ..replay import T
from . import config as c
from .family import Family, ModelType
from .llama import decoder_layer


def read_granite(cfg: Mapping) -> dict:
    """GraniteConfig's defaults: Llama's (context 2,048, an untied head, as many key/value heads as heads)."""
    out = c.llama_like(cfg, False, 2048)
    out.update(ffn=c.whole(cfg, "intermediate_size"), **c.attention_bias(cfg, c.flag(cfg, "mlp_bias", False)))
    return out


def embed(ops: Ops, x: T) -> T:
    """GraniteModel.forward: inputs_embeds = inputs_embeds * self.embedding_multiplier."""
    return ops.unary("token embeddings x embedding_multiplier", x, [])


def residual(ops: Ops, x: T, y: T, label: str) -> T:
    """GraniteDecoderLayer: hidden_states = residual + hidden_states * self.residual_multiplier."""
    scaled = ops.unary(f"{label}: x residual_multiplier", y, [])
    out = ops.add(x, scaled, label)
    ops.rp.drop(scaled)
    return out


def layer(ops: Ops, x: T, cos: T | None, sin: T | None, mask: T | None) -> T:
    """GraniteDecoderLayer: LlamaDecoderLayer with its residual branches scaled."""
    return decoder_layer(ops, x, cos, sin, mask, residual=residual)


def head(ops: Ops, logits: T) -> T:
    """GraniteForCausalLM.forward: logits = logits / self.config.logits_scaling (rebound: the head's output goes)."""
    scaled = ops.unary("logits / logits_scaling", logits, [], category="logits")
    ops.rp.drop(logits)
    return scaled


MODEL_TYPES = (ModelType("granite", read_granite, "granite"),)
FAMILIES = (Family("granite", ("Granite",), layer, finetune=True, embed=embed, head=head),)
ORDER = 110  # where the registry lists it (calc.families)
PRESETS = {"granite-3.3-8b": "Granite"}  # calc/configs/NAME.json -> its group in the list
