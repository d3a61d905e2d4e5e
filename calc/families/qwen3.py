"""transformers' Qwen3ForCausalLM (modeling_qwen3.py): Llama's layer with an RMSNorm on each head of the
queries and of the keys (q_norm, k_norm: head_dim wide, before the rotary positions), an explicit head_dim,
no biases by default. With use_sliding_window, the layers from max_window_layers on slide (layer_types),
as OLMo 3's do: the model makes both masks and passes sdpa the sliding one, to the sliding layers."""

from __future__ import annotations

from collections.abc import Mapping

from ..inventory import Tensor, block
from ..parts.ops import Ops
from ..replay import T
from ..shape import Shape
from . import config as c
from .family import Family, ModelType
from .llama import decoder_layer, rotate
from .olmo2 import layer_mask, layer_types, sdpa_mask, window_layer, window_mask, windowed


def read_qwen3(cfg: Mapping) -> dict:
    """Qwen3Config's defaults: 32 key/value heads, head_dim 128, context 32,768, an untied head; a sliding
    window only with use_sliding_window, on the layers from max_window_layers (28) on unless layer_types
    says otherwise."""
    out = c.llama_like(cfg, False, 32768, 32, 128)
    out.update(ffn=c.whole(cfg, "intermediate_size"))
    out.update(c.attention_bias(cfg))
    n = out["layers"]
    if not c.window(cfg, "use_sliding_window"):
        return {**out, "sliding_window": 0}
    first = c.whole(cfg, "max_window_layers", 28, smallest=0)
    types = layer_types(cfg, n, ["sliding_attention" if i >= first else "full_attention" for i in range(n)])
    return {**out, **windowed(cfg, n, types)}


def tensors(shape: Shape, moe: bool) -> list[Tensor]:
    """Llama's block and the two head norms' gains (replicated under tensor parallelism)."""
    d = shape.head_dim
    norms = [Tensor(f"self_attn.{n}_norm.weight", d, attention=True) for n in ("q", "k")]
    return [*block(shape, moe), *norms]


def states(ops: Ops, normed: T, cos: T | None, sin: T | None, layer: str) -> tuple[T, T, T]:
    """Qwen3Attention: q_norm(q_proj(x)), k_norm(k_proj(x)) over each head, then the rotary positions; each
    projection's output lives on only as what its norm saves."""
    sh, rp = ops.st.shape, ops.rp
    h, d = sh.hidden, sh.head_dim
    q = ops.linear(normed, h, sh.q_width, f"{layer} q_proj", sh.bias, f"{layer}: Q")
    qn = ops.rms_norm(q, f"{layer} q_norm", d)
    rp.drop(q)
    k = ops.linear(normed, h, sh.kv_width, f"{layer} k_proj", sh.bias, f"{layer}: K")
    kn = ops.rms_norm(k, f"{layer} k_norm", d)
    rp.drop(k)
    v = ops.linear(normed, h, sh.kv_width, f"{layer} v_proj", sh.bias, f"{layer}: V")
    return (*rotate(ops, qn, kn, cos, sin, layer), v)


def layer(ops: Ops, x: T, cos: T | None, sin: T | None, mask: T | None) -> T:
    """Qwen3DecoderLayer: LlamaDecoderLayer with Qwen3's query and key states; under sdpa a full-attention
    layer gets no mask (Qwen3Model's causal_mask_mapping, as OLMo 3's)."""
    return decoder_layer(ops, x, cos, sin, layer_mask(ops, mask), states=states)


MODEL_TYPES = (ModelType("qwen3", read_qwen3, "qwen3"),)
FAMILIES = (Family("qwen3", ("Qwen3",), layer, finetune=True, window_mask=window_mask, sdpa_mask=sdpa_mask,
                   window_layer=window_layer, tensors=tensors),)  # fmt: skip
ORDER = 100  # where the registry lists it (calc.families)
PRESETS = {"qwen3-8b": "Qwen", "qwen3-32b": "Qwen"}  # calc/configs/NAME.json -> its group in the list
