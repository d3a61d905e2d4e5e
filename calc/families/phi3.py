"""transformers' Phi3ForCausalLM (modeling_phi3.py: Phi-3 and Phi-4): Llama's layer with one fused qkv_proj,
whose query, key and value are slices of one buffer, and one fused gate_up_proj, chunked in two; dropout on
each residual branch (resid_pdrop); one mask, sliding where the config has a window."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace

from ..inventory import Tensor, block
from ..parts.mlp import activation
from ..parts.ops import Ops
from ..replay import T
from ..shape import Shape
from . import config as c
from .family import Family, ModelType
from .llama import decoder_layer


def read_phi3(cfg: Mapping) -> dict:
    """Phi3ForCausalLM: fused QKV and gate-up matrices with Llama's sizes, no biases. Its model has no
    embedding dropout in transformers 5 (embd_pdrop is read by nothing)."""
    out = c.llama_like(cfg, False, 4096)
    out.update(
        ffn=c.whole(cfg, "intermediate_size"),
        dropout=c.rate(cfg, "attention_dropout", "resid_pdrop"),
        sliding_window=c.window(cfg),
    )
    head = out["head_size"] or out["hidden"] // out["heads"]
    turned = int(head * rotary_factor(cfg))  # Phi3RotaryEmbedding: int(head_dim * partial_rotary_factor)
    if turned != head:
        out["rope_dim"] = turned
    return out


def rotary_factor(cfg: Mapping) -> float:
    """Phi3Config's partial_rotary_factor: in rope_parameters (or the older rope_scaling), else at the top, 1.0."""
    rope = c.get(cfg, "rope_parameters", None) or c.get(cfg, "rope_scaling", None) or {}
    top = c.get(cfg, "partial_rotary_factor", 1.0)
    factor = rope.get("partial_rotary_factor", top) if isinstance(rope, Mapping) else top
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
        raise c.ConfigError(f"partial_rotary_factor must be above 0 and at most 1, got {json.dumps(factor)}")
    return factor


def tensors(shape: Shape, moe: bool) -> list[Tensor]:
    """Llama's block, with Q, K and V stored as one qkv_proj and the gate and up as one gate_up_proj."""

    def fused(t: Tensor) -> Tensor:
        kind = t.name.split("_proj")[0].rsplit(".", 1)[-1]
        if kind in ("q", "k", "v"):
            return replace(t, fused="self_attn.qkv_proj")
        return replace(t, fused="mlp.gate_up_proj") if kind in ("gate", "up") else t

    return [fused(t) for t in block(shape, moe)]


def rotate(ops: Ops, x: T, cos: T, sin: T, label: str) -> T:
    """Phi-3's apply_rotary_pos_emb: x[..., :rotary_dim] (all of it: the eager walk refuses a
    partial_rotary_factor below 1, calc.families.eager_lacks) rotated as Llama's, then torch.cat([rotated,
    x[..., rotary_dim:]]): a copy, whose backward hands each part a view of its gradient; the slice's
    backward (slice_backward) writes a full-size gradient of x."""
    rp = ops.rp
    part = rp.view(x, x.nbytes // x.unit, f"{label}[..., :rotary_dim]")
    rp.node("slice", part, inputs=[(x, x.nbytes, "new")])
    rotated = ops.rotary(part, cos, sin, label)
    rp.drop(part)
    y = ops.new(rotated.nbytes // rotated.unit, rotated.unit, f"rotated {label}, concatenated", "cat")
    rp.node("cat", y, inputs=[(rotated, rotated.nbytes, "pass")])
    y.heads_first = True
    rp.drop(rotated)
    return y


def states(ops: Ops, normed: T, cos: T | None, sin: T | None, layer: str) -> tuple[T, T, T]:
    """Phi3Attention: qkv = qkv_proj(x); the query, key and value are slices of it (views that keep it
    alive: the value, never copied, holds the whole buffer wherever it is saved); rotary positions on the
    query and key. Each slice's backward writes a gradient of the whole buffer, summed in place."""
    rp, sh, n = ops.rp, ops.st.shape, ops.st.tokens
    h, qw, kw = sh.hidden, sh.q_width, sh.kv_width
    qkv = ops.linear(normed, h, qw + 2 * kw, f"{layer} qkv_proj", False, f"{layer}: Q, K and V")
    qkv.sum_in_place = True  # slice_backward's gradients are its own: InputBuffer adds them in place
    parts = []
    for what, width in (("Q", qw), ("K", kw), ("V", kw)):
        view = rp.view(qkv, n * width, f"{layer}: {what}")
        rp.node("slice", view, inputs=[(qkv, qkv.nbytes, "new")])
        parts.append(view)
    rp.drop(qkv)
    q, k, v = parts
    qr, kr = (rotate(ops, t, cos, sin, f"{layer}: {w}") for t, w in ((q, "Q"), (k, "K")))
    rp.drop(q, k)
    return qr, kr, v


def gate_up(ops: Ops, normed: T, layer: str) -> T:
    """Phi3MLP: gate_up_proj(x).chunk(2): up * act(gate) (the product's operands in that order), down_proj.
    The chunks are views of the one buffer (SplitBackward writes one gradient of it)."""
    rp, sh, n = ops.rp, ops.st.shape, ops.st.tokens
    h, f = sh.hidden, sh.ffn
    both = ops.linear(normed, h, 2 * f, f"{layer} mlp.gate_up_proj", False, f"{layer}: gate and up")
    gate, up = (rp.view(both, n * f, f"{layer}: {what}") for what in ("gate", "up"))
    rp.node("chunk", None, inputs=[(both, both.nbytes, "new")], outs=(gate, up))
    rp.drop(both)
    act = activation(ops, gate, f"{layer}: act(gate)")
    inner = ops.mul(up, act, f"{layer}: up * act(gate)")
    rp.drop(act, gate, up)
    out = ops.linear(inner, f, h, f"{layer} mlp.down_proj", False, f"{layer}: down")
    rp.drop(inner)
    return out


def residual(ops: Ops, x: T, y: T, label: str) -> T:
    """Phi3DecoderLayer: residual + resid_dropout(hidden_states)."""
    dropped = ops.dropout(y, label)
    out = ops.add(x, dropped, label)
    ops.rp.drop(dropped)
    return out


def layer(ops: Ops, x: T, cos: T | None, sin: T | None, mask: T | None) -> T:
    """Phi3DecoderLayer: LlamaDecoderLayer with Phi-3's fused projections and its residual dropout."""
    return decoder_layer(ops, x, cos, sin, mask, states=states, residual=residual, ffn=gate_up)


def sdpa_mask(shape: Shape, seq: int) -> bool:
    """Phi3Model passes sdpa create_sliding_window_causal_mask's mask where the window is no longer than the
    sequence (a shorter one needs none: _ignore_causal_mask_sdpa)."""
    return bool(shape.sliding_window) and seq >= shape.sliding_window


MODEL_TYPES = (ModelType("phi3", read_phi3, "phi3"),)
# peft's LoRA targets Phi3Attention's qkv_proj and Phi3MLP's gate_up_proj whole (one A and one B each): calc's
# --lora-targets names them q,k,v and gate,up together (lora_fused); under QLoRA each is one bitsandbytes Linear4bit
# (calc.finetune.quantized, calc.parts.linear.QUANTIZED)


def problem(shape) -> tuple[str, str] | None:
    """Where Phi-3's code cannot have this shape: its attention always rotates (apply_rotary_pos_emb, rotate)."""
    return ("positions", "Phi-3's code has rotary positions") if shape.positions != "rope" else None


FAMILIES = (Family("phi3", ("Phi-3",), layer, finetune=True, tensors=tensors, sdpa_mask=sdpa_mask, lora_fused=True,
                   problem=problem),)  # fmt: skip
ORDER = 70  # where the registry lists it (calc.families)
PRESETS = {"phi-4": "Phi"}  # calc/configs/NAME.json -> its group in the list
