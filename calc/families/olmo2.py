"""transformers' Olmo2ForCausalLM and Olmo3ForCausalLM (modeling_olmo2.py, modeling_olmo3.py): no norm before
attention or the MLP but one after each (post_attention_layernorm, post_feedforward_layernorm, before the
residual sum); an RMSNorm over the whole query and the whole key projection (q_norm, k_norm: heads x d and
kv_heads x d wide), and Olmo2RMSNorm's (weight * x).to(input dtype); rotary tables in fp32, the rotated
states cast back to the projections' dtype. OLMo 3 adds sliding-window layers (layer_types; every fourth
attends to the whole sequence by default), each layer type with its own rotary tables and its own mask."""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..inventory import Tensor, attention, mlp, norm
from ..parts.ops import Ops
from ..replay import T
from ..shape import Shape
from . import config as c
from .family import Family, ModelType
from .llama import attend, feed_forward, rotate


def read_olmo2(cfg: Mapping) -> dict:
    """Olmo2Config's defaults: as many key/value heads as heads, context 2,048, an untied head, no biases
    (attention_bias puts them on Q, K, V and O, which calc does not count apart from the MLP's)."""
    out = c.llama_like(cfg, False, 2048)
    out.update(ffn=c.whole(cfg, "intermediate_size"), **c.attention_bias(cfg))
    return out


def layer_types(cfg: Mapping, layers: int, default: list[str]) -> list[str]:
    """config.layer_types ("sliding_attention" or "full_attention", one a layer), or the class's default."""
    types = c.get(cfg, "layer_types", default)
    kinds = ("sliding_attention", "full_attention")
    if not isinstance(types, list) or len(types) != layers or any(t not in kinds for t in types):
        raise c.ConfigError(f"layer_types must list {layers} of {' or '.join(kinds)}, got {json.dumps(types)[:80]}")
    return types


def windowed(cfg: Mapping, layers: int, types: list[str]) -> dict:
    """The window and the layers that attend to the whole sequence all the same (1 = the first)."""
    window = c.window(cfg, None, 4096)
    full = tuple(i + 1 for i, t in enumerate(types) if t == "full_attention")
    if not window or len(full) == layers:  # no layer slides
        return {"sliding_window": 0}
    return {"sliding_window": window, "global_layers": full}


def read_olmo3(cfg: Mapping) -> dict:
    """Olmo3Config: OLMo 2's, with a window of 4,096 on the layers layer_types says slide (by default all
    but every fourth)."""
    out = read_olmo2(cfg)
    n = out["layers"]
    types = layer_types(cfg, n, ["sliding_attention" if (i + 1) % 4 else "full_attention" for i in range(n)])
    out.update(windowed(cfg, n, types))
    return out


def tensors(shape: Shape, moe: bool) -> list[Tensor]:
    """Olmo2DecoderLayer's tensors: attention with q_norm and k_norm over the whole projections, the MLP, and
    the two norms after them."""
    out = [*attention(shape), *norm(shape, "post_attention_layernorm", attention=True)]
    out += [Tensor("self_attn.q_norm.weight", shape.q_width, attention=True),
            Tensor("self_attn.k_norm.weight", shape.kv_width, attention=True)]  # fmt: skip
    return [*out, *mlp(shape, shape.ffn), *norm(shape, "post_feedforward_layernorm")]


def states(ops: Ops, x: T, cos: T | None, sin: T | None, layer: str) -> tuple[T, T, T]:
    """Olmo2Attention: q_norm(q_proj(x)) and k_norm(k_proj(x)) over the whole projection, v_proj(x); the
    rotary positions (fp32 tables), and apply_rotary_pos_emb's .to(q's dtype) back to the norms' dtype."""
    sh, rp = ops.st.shape, ops.rp
    h = sh.hidden
    out = []
    for what, width in (("q", sh.q_width), ("k", sh.kv_width)):
        p = ops.linear(x, h, width, f"{layer} {what}_proj", False, f"{layer}: {what.upper()}")
        out.append(ops.rms_norm(p, f"{layer} {what}_norm", width, weight_first=True))
        rp.drop(p)
    v = ops.linear(x, h, sh.kv_width, f"{layer} v_proj", False, f"{layer}: V")
    q, k = rotate(ops, *out, cos, sin, layer)
    if cos is not None and q.unit != out[0].unit:  # q_embed.to(q_type), k_embed.to(k_type)
        back = [ops.unary(f"{layer}: rotated {w} in its dtype", t, [], out[0].unit) for t, w in ((q, "Q"), (k, "K"))]
        rp.drop(q, k)
        q, k = back
    return q, k, v


def layer(ops: Ops, x: T, cos: T | None, sin: T | None, mask: T | None) -> T:
    """Olmo2DecoderLayer (and Olmo3's): attention on the layer's input, post_attention_layernorm, the
    residual; the MLP on its sum, post_feedforward_layernorm, the residual."""
    rp, sh = ops.rp, ops.st.shape
    name = "layer {layer}"
    q, k, v = states(ops, x, cos, sin, name)
    attn, weights = attend(ops, q, k, v, layer_mask(ops, mask), name)
    o = ops.linear(attn, sh.q_width, sh.hidden, f"{name} o_proj", False, f"{name}: attention projection")
    rp.drop(attn, q, k, v)  # the attention's states live until it returns, after o_proj
    normed = ops.rms_norm(o, f"{name} post_attention_layernorm", weight_first=True)
    rp.drop(o)
    mid = ops.add(x, normed, f"{name}: residual after attention")
    rp.drop(normed)
    down = feed_forward(ops, mid, name)
    normed = ops.rms_norm(down, f"{name} post_feedforward_layernorm", weight_first=True)
    rp.drop(down)
    out = ops.add(mid, normed, f"{name}: residual after the feed-forward layer")
    rp.drop(mid, normed, weights)  # the attention's weights (`hidden_states, _ =`) live until the layer returns
    return out


def layer_mask(ops: Ops, mask: T | None) -> T | None:
    """The mask a layer gets: under sdpa only the sliding layers are given one (the full ones' is None)."""
    if ops.st.attention == "sdpa" and not ops.st.shape.slides(ops.rp.layer):
        return None
    return mask


def sdpa_mask(shape: Shape, seq: int) -> bool:
    """Olmo3Model passes sdpa a sliding-window mask (to its sliding layers) where the window is no longer than
    the sequence (_ignore_causal_mask_sdpa)."""
    return bool(shape.sliding_window) and seq >= shape.sliding_window


def window_mask(shape: Shape) -> bool:
    """Olmo3Model makes both masks, used or not (create_causal_mask and create_sliding_window_causal_mask)."""
    return bool(shape.sliding_window)


def window_layer(shape: Shape, layer: int) -> bool:
    """Whether a layer is given the sliding-window mask (causal_mask_mapping[layer_type]): under eager attention
    a checkpoint keeps the mask its layer was given, the sliding one for a sliding layer (calc.eager_step)."""
    return shape.slides(layer)


def rope_tables(shape: Shape) -> int:
    """Olmo3Model's rotary tables: one (cos, sin) pair for each layer type present."""
    return len({shape.slides(i) for i in range(1, shape.layers + 1)})


MODEL_TYPES = (ModelType("olmo2", read_olmo2, "olmo2"), ModelType("olmo3", read_olmo3, "olmo3"))
FAMILIES = (
    Family("olmo2", ("OLMo 2",), layer, finetune=True, tensors=tensors, rope_fp32=True),
    Family("olmo3", ("OLMo 3",), layer, finetune=True, tensors=tensors, window_mask=window_mask, sdpa_mask=sdpa_mask,
           rope_tables=rope_tables, rope_fp32=True, window_layer=window_layer),
)  # fmt: skip
ORDER = 120  # where the registry lists it (calc.families)
# calc/configs/NAME.json -> its group in the list: allenai/OLMo-2-1124-13B's config.json, as copied in
# github.com/mauer4/Attention-From-Scratch (weights/allenai/OLMo-2-1124-13B/config.json)
PRESETS = {"olmo-2-13b": "OLMo"}
