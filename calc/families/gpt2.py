"""transformers' GPT2LMHeadModel (modeling_gpt2.py): LayerNorm, learned positions, one fused QKV Conv1D,
biases everywhere but the tied head, GELU's tanh approximation written out, dropout."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..inventory import Tensor, block
from ..parts.mlp import activation
from ..parts.ops import Ops
from ..replay import T
from ..shape import Shape
from . import config as c
from .family import Family, ModelType


def read_gpt2(cfg: Mapping) -> dict:
    """GPT2LMHeadModel: LayerNorm, learned positions, biases everywhere but the tied head."""
    attention = c.attention(cfg, gpt2=True)
    hidden = attention["hidden"]
    return {
        "layers": c.whole(cfg, "n_layer"),
        **attention,
        "ffn": c.whole(cfg, "n_inner", 4 * hidden),
        "vocab": c.whole(cfg, "vocab_size"),
        "gated_ffn": False,
        "tied": c.flag(cfg, "tie_word_embeddings", True),
        "norm": "layer",
        "bias": True,
        "head_bias": False,
        "positions": "learned",
        "context": c.whole(cfg, "n_positions", 1024),
        "final_norm": True,
        "activation": c.activation_of(cfg, "activation_function", "gelu_new"),
        "dropout": c.rate(cfg, "embd_pdrop", "attn_pdrop", "resid_pdrop"),
        "family": "gpt2",
    }


def layer(ops: Ops, x: T, cos: T, sin: T, mask: T | None) -> T:
    """GPT2Block (modeling_gpt2.py): LayerNorm, one fused QKV Conv1D whose output the head-split views of
    Q, K and V keep alive, attention, projection, dropout, residual; LayerNorm, Conv1D, GELU, Conv1D,
    dropout, residual."""
    rp, sh = ops.rp, ops.st.shape
    h, f = sh.hidden, sh.ffn
    layer = "layer {layer}"
    normed = ops.layer_norm(x, f"{layer} ln_1")
    qkv = ops.linear(normed, h, 3 * h, f"{layer} attn.c_attn", sh.bias, f"{layer}: Q, K and V")
    rp.drop(normed)
    # .split(h, dim=2): three views of the one buffer, whose gradients SplitBackward concatenates
    n = ops.st.tokens
    q, k, v = (rp.view(qkv, n * h, f"{layer}: {what}") for what in ("Q", "K", "V"))
    rp.node("split", None, inputs=[(qkv, qkv.nbytes, "new")], outs=(q, k, v))
    rp.drop(qkv)
    if ops.st.attention == "eager":
        attn, weights = ops.eager_attention(q, k, v, mask, layer)
    elif sh.dropout and ops.st.device == "cpu":
        attn, weights = ops.sdpa_math(q, k, v, layer)
    else:
        attn, weights = ops.sdpa(q, k, v, layer)
    rp.drop(q, k, v)
    o = ops.linear(attn, h, h, f"{layer} attn.c_proj", sh.bias, f"{layer}: attention projection")
    rp.drop(attn)
    od = ops.dropout(o, f"{layer}: attention projection")
    rp.drop(o)
    mid = ops.add(od, x, f"{layer}: residual after attention")
    rp.drop(od)
    normed = ops.layer_norm(mid, f"{layer} ln_2")
    up = ops.linear(normed, h, f, f"{layer} mlp.c_fc", sh.bias, f"{layer}: c_fc")
    rp.drop(normed)
    act = activation(ops, up, f"{layer}: GELU")
    rp.drop(up)
    down = ops.linear(act, f, h, f"{layer} mlp.c_proj", sh.bias, f"{layer}: c_proj")
    rp.drop(act)
    dd = ops.dropout(down, f"{layer}: feed-forward output")
    rp.drop(down)
    out = ops.add(mid, dd, f"{layer}: residual after the feed-forward layer")
    rp.drop(mid, dd, weights)
    return out


def tensors(shape: Shape, moe: bool) -> list[Tensor]:
    """Llama's block, with Q, K and V stored as one Conv1D (c_attn: its weight and its bias)."""
    def fused(t: Tensor) -> Tensor:
        qkv = t.name.split("_proj")[0] in ("q", "k", "v")
        return replace(t, fused="attn.c_attn" + ("" if t.cols else ".bias")) if qkv else t

    return [fused(t) for t in block(shape, moe)]


def problem(shape: Shape) -> tuple[str, str] | None:
    """(field, message) where a shape cannot be written with GPT-2's code: its fused QKV layer has every
    head's key and value, and its blocks are LayerNorm, a plain feed-forward layer and learned positions."""
    if shape.kv_heads != shape.heads:
        return "kv-heads", "GPT-2's fused QKV layer has as many key/value heads as heads"
    if shape.gated_ffn:
        return "gated-ffn", "GPT-2's feed-forward layer is not gated"
    if shape.norm != "layer":
        return "norm", "GPT-2 uses LayerNorm"
    if shape.positions != "learned":
        return "positions", "GPT-2 learns its positions"
    return None


# GPT2Config.attribute_map: the usual names of its n_* keys
ALIASES = (("hidden_size", "n_embd"), ("max_position_embeddings", "n_positions"), ("num_attention_heads", "n_head"),
           ("num_hidden_layers", "n_layer"))  # fmt: skip
MODEL_TYPES = (ModelType("gpt2", read_gpt2, "gpt2", ALIASES),)
FAMILIES = (Family("gpt2", ("GPT-2",), layer, tensors=tensors, problem=problem),)
ORDER = 80  # where the registry lists it (calc.families)
# calc/configs/NAME.json -> its group in the list: Brown et al. 2020's 175B model (Table 2.1) in GPT-2's code
PRESETS = {"gpt-3-175b": "GPT"}
