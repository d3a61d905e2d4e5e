"""transformers' GemmaForCausalLM, Gemma2ForCausalLM and Gemma3ForCausalLM (modeling_gemma.py, modeling_gemma2.py,
modeling_gemma3.py; transformers 5.23), replayed by the eager walk.

What the three share: the token embeddings multiplied by sqrt(width) (the normalizer, a tensor in the
embedding's dtype: GemmaTextScaledWordEmbedding), GemmaRMSNorm (1 + weight, in fp32, cast back last), a
GELU-tanh gate, wide heads (256 at any width), a tied head. Gemma 2 adds a norm after attention and around
the MLP (four a block), a tanh soft-cap on the attention scores (eager attention only: Gemma2 refuses sdpa)
and on the logits, and layers alternating between a sliding window and the whole sequence (layer_types),
each with its mask. Gemma 3 keeps the four norms, normalises each head of the queries and keys (q_norm,
k_norm, before the rotary positions), drops the attention soft-cap (Gemma3Attention does not pass it),
makes five sliding layers of each six (sliding_window_pattern) and gives them rotary tables of their own
(the local base). query_pre_attn_scalar changes the scores' scale, a product with a Python float that
saves nothing."""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..inventory import Tensor, block
from ..parts.mlp import mlp
from ..parts.ops import Ops
from ..replay import T
from ..shape import Shape
from . import config as c
from .family import Family, ModelType
from .llama import qkv, rotate

LAYER_TYPES = {"sliding_attention": "s", "full_attention": "f"}  # config.layer_types -> Shape.layer_types


def read_gemma(cfg: Mapping) -> dict:
    """GemmaForCausalLM: head size 256 whatever the width, tied head, GELU (tanh) gate."""
    out = c.llama_like(cfg, True, 8192, 16, 256, ("hidden_act", "gelu_pytorch_tanh"))
    out.update(ffn=c.whole(cfg, "intermediate_size"), **c.attention_bias(cfg))
    return out


def read_gemma2(cfg: Mapping) -> dict:
    """Gemma2ForCausalLM: Gemma's layer with a norm after attention and after the FFN too (four a block),
    soft-caps of 50 on the scores and 30 on the logits (null: none), every other layer sliding."""
    out = c.llama_like(cfg, True, 8192, 4, 256, ("hidden_activation", "gelu_pytorch_tanh"))
    out.update(ffn=c.whole(cfg, "intermediate_size"), norms_per_layer=4, sliding_window=c.window(cfg, None, 4096))
    out.update(c.attention_bias(cfg), attn_softcap=cap(cfg, "attn_logit_softcapping", True))
    out.update(logit_softcap=cap(cfg, "final_logit_softcapping", True), layer_types=layer_types(cfg, out["layers"], 2))
    causal(cfg)
    return out


def read_gemma3_text(cfg: Mapping) -> dict:
    """Gemma3ForCausalLM (Gemma3TextConfig): Gemma 2's block with q/k norms, no attention soft-cap (the code
    ignores attn_logit_softcapping), a logit soft-cap only where given, sliding_window_pattern 6."""
    out = c.llama_like(cfg, True, 131072, 4, 256, ("hidden_activation", "gelu_pytorch_tanh"))
    out.update(ffn=c.whole(cfg, "intermediate_size"), norms_per_layer=4, sliding_window=c.window(cfg, None, 4096))
    out.update(c.attention_bias(cfg), logit_softcap=cap(cfg, "final_logit_softcapping", False))
    pattern = c.whole(cfg, "sliding_window_pattern", 6)
    out.update(layer_types=layer_types(cfg, out["layers"], pattern))
    causal(cfg)
    return out


def read_gemma3(cfg: Mapping) -> dict:
    """Gemma3ForConditionalGeneration's config (model_type gemma3): its language model, text_config, is what
    a text model of it reads (Gemma3ForCausalLM); the vision tower is not counted."""
    text = cfg.get("text_config")
    if not isinstance(text, Mapping):
        raise c.ConfigError("text_config is missing: the multimodal Gemma 3 config keeps its language model there")
    return read_gemma3_text(text)


def cap(cfg: Mapping, key: str, default: bool) -> bool:
    """Whether a soft-cap applies: a positive number, null for none, the class's default when missing."""
    if key not in cfg:
        return default
    value = cfg[key]
    if value is None:
        return False
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise c.ConfigError(f"{key} must be a positive number or null, got {json.dumps(value)}")
    return True


def layer_types(cfg: Mapping, layers: int, pattern: int) -> str:
    """config.layer_types as one letter a layer ("s" sliding, "f" full); when missing, every `pattern`-th
    layer full and the others sliding, as Gemma2Config and Gemma3TextConfig's __post_init__ make them."""
    given = cfg.get("layer_types")
    if given is None:
        return "".join("f" if (i + 1) % pattern == 0 else "s" for i in range(layers))
    if not isinstance(given, list) or len(given) != layers or any(t not in LAYER_TYPES for t in given):
        names = " or ".join(LAYER_TYPES)
        raise c.ConfigError(f"layer_types must list {names} for each of the {layers} layers")
    return "".join(LAYER_TYPES[t] for t in given)


def causal(cfg: Mapping) -> None:
    """calc replays the causal masks; Gemma 3's bidirectional option changes them."""
    if c.flag(cfg, "use_bidirectional_attention", False):
        raise c.ConfigError("use_bidirectional_attention is not supported: calc replays causal attention")


def tensors(shape: Shape, moe: bool) -> list[Tensor]:
    """Llama's block (with Gemma 2's four norms) and, for Gemma 3, the two head norms' gains."""
    if shape.family != "gemma3_text":
        return block(shape, moe)
    norms = [Tensor(f"self_attn.{n}_norm.weight", shape.head_dim, attention=True) for n in ("q", "k")]
    return [*block(shape, moe), *norms]


def norm(ops: Ops, x: T, name: str) -> T:
    """Every norm of a Gemma model is GemmaRMSNorm."""
    return ops.gemma_rms_norm(x, name)


def embed(ops: Ops, x: T) -> T:
    """GemmaTextScaledWordEmbedding.forward: embedding(input_ids) * embed_scale.to(weight.dtype); the
    product with a 0-dim buffer saves nothing a gradient needs of the embeddings' size. It is the module's
    forward (Family.embed_module): enable_input_require_grads' hook makes the product the leaf."""
    return ops.unary("token embeddings x sqrt(width)", x, [])


def head(ops: Ops, logits: T) -> T:
    """Gemma2ForCausalLM and Gemma3ForCausalLM.forward: the final-logit soft-cap where the config has one."""
    return ops.softcap(logits, "logits", "logits") if ops.st.shape.logit_softcap else logits


def states(ops: Ops, normed: T, cos: T | None, sin: T | None, layer: str) -> tuple[T, T, T]:
    """Gemma3Attention: q_norm(q_proj(x)), k_norm(k_proj(x)) over each head (GemmaRMSNorm), then the rotary
    positions; Gemma and Gemma 2 project as Llama does. Each projection's output lives on only as what its
    norm saves (query_states, key_states rebound)."""
    sh, rp = ops.st.shape, ops.rp
    if sh.family != "gemma3_text":
        return qkv(ops, normed, cos, sin, layer)
    h, d = sh.hidden, sh.head_dim
    q = ops.linear(normed, h, sh.q_width, f"{layer} q_proj", sh.bias, f"{layer}: Q")
    k = ops.linear(normed, h, sh.kv_width, f"{layer} k_proj", sh.bias, f"{layer}: K")
    v = ops.linear(normed, h, sh.kv_width, f"{layer} v_proj", sh.bias, f"{layer}: V")
    qn = ops.gemma_rms_norm(q, f"{layer} q_norm", d)
    rp.drop(q)
    kn = ops.gemma_rms_norm(k, f"{layer} k_norm", d)
    rp.drop(k)
    return (*rotate(ops, qn, kn, cos, sin, layer), v)


def attend(ops: Ops, q: T, k: T, v: T, mask: T | None, layer: str) -> tuple[T, T | None]:
    """The attention interface the config picks: eager_attention_forward (Gemma 2's with its soft-cap), or
    sdpa_attention_forward, causal where the layer has no mask and masked where it has one."""
    if ops.st.attention == "sdpa":
        return ops.sdpa(q, k, v, layer, mask)
    return ops.eager_attention(q, k, v, mask, layer, softcap=ops.st.shape.attn_softcap)


def layer(ops: Ops, x: T, cos: T | None, sin: T | None, mask: T | None) -> T:
    """GemmaDecoderLayer (Llama's, with GemmaRMSNorm), Gemma2DecoderLayer and Gemma3DecoderLayer: the
    attention's output normed (post_attention_layernorm) before its residual, and the MLP between
    pre_feedforward_layernorm and post_feedforward_layernorm (four norms a block). The attention's weights
    (`hidden_states, _ = self.self_attn(...)`) live until the layer returns."""
    rp, sh = ops.rp, ops.st.shape
    four = sh.norms_per_layer == 4
    name = "layer {layer}"
    normed = norm(ops, x, f"{name} input_layernorm")
    q, k, v = states(ops, normed, cos, sin, name)
    attn, weights = attend(ops, q, k, v, mask, name)
    o = ops.linear(attn, sh.q_width, sh.hidden, f"{name} o_proj", sh.bias, f"{name}: attention projection")
    rp.drop(attn, q, k, v, normed)  # the attention's states live until it returns, after o_proj
    if four:
        post = norm(ops, o, f"{name} post_attention_layernorm")
        rp.drop(o)
        o = post
    mid = ops.add(x, o, f"{name}: residual after attention")
    rp.drop(o)
    pre = norm(ops, mid, f"{name} {'pre_feedforward_layernorm' if four else 'post_attention_layernorm'}")
    down = mlp(ops, pre, sh.ffn, f"{name} ", f"{name}: ", sh.bias, sh.gated_ffn)
    rp.drop(pre)
    if four:
        post = norm(ops, down, f"{name} post_feedforward_layernorm")
        rp.drop(down)
        down = post
    out = ops.add(mid, down, f"{name}: residual after the feed-forward layer")
    rp.drop(mid, down, weights)
    return out


def layer_inputs(ops: Ops, cos: T | None, sin: T | None, mask: T | None):
    """Gemma2Model and Gemma3TextModel.forward: causal_mask_mapping holds a full and a sliding-window mask,
    both made whatever the layers (create_causal_mask, create_sliding_window_causal_mask). Under eager each is
    a b x 1 x s x s additive mask in the embedding's dtype; under sdpa the full one is None (is_causal) and the
    sliding one a boolean s x s mask expanded over the batch (a view), unless the window is longer than the
    sequence (_ignore_causal_mask_sdpa: kv_length < sliding_window). Gemma 3 makes rotary tables for each
    layer type present (the local base for the sliding ones). Returns each layer's (cos, sin, mask) and the
    tensors made here, which the model's forward holds until it returns."""
    st, sh = ops.st, ops.st.shape
    unit = 4 if st.autocast else st.act  # the embeddings' dtype
    made, window = [], None
    if st.attention == "eager":
        window = ops.new(st.micro_batch * st.seq * st.seq, unit, "sliding-window mask", "torch.where(mask, 0, min)")
    elif sh.sliding_window and st.seq >= sh.sliding_window:
        window = ops.new(st.seq * st.seq, 1, "sliding-window mask (bool)", "sdpa_mask: (1, 1, s, s) expanded")
    if window is not None:
        window.requires_grad = False
        made.append(window)
    kinds = {sh.slides(i) for i in range(1, sh.layers + 1)}
    local = (cos, sin)
    if sh.family == "gemma3_text" and True in kinds and cos is not None:
        d = sh.head_dim  # Gemma3RotaryEmbedding(x, position_ids, "sliding_attention"): (1, s, head_dim) each
        local = tuple(ops.new(st.seq * d, unit, f"local rotary {w}", "the local base's rotary table") for w in "cs")
        for t in local:
            t.requires_grad = False
        made += local
    per_layer = [(*local, window) if sh.slides(i) else (cos, sin, mask) for i in range(1, sh.layers + 1)]
    return per_layer, made


def problem(shape: Shape) -> tuple[str, str] | None:
    """(field, message) where a shape cannot be written with Gemma's code: GemmaRMSNorm, rotary positions, a
    gated feed-forward layer and a final norm in each of its three models."""
    if shape.norm != "rms":
        return "norm", "Gemma's code normalises with GemmaRMSNorm"
    if shape.positions != "rope":
        return "positions", "Gemma's code uses rotary positions"
    if not shape.gated_ffn:
        return "gated-ffn", "Gemma's feed-forward layer is gated"
    if not shape.final_norm:
        return "final-norm", "Gemma's code norms the last layer's output"
    return None


MODEL_TYPES = (
    ModelType("gemma", read_gemma, "gemma"),
    ModelType("gemma2", read_gemma2, "gemma2"),
    ModelType("gemma3_text", read_gemma3_text, "gemma3_text"),
    ModelType("gemma3", read_gemma3, "gemma3_text"),
)
SHARED = {"finetune": True, "embed_module": True, "embed": embed, "head": head, "norm": norm, "tensors": tensors,
          "problem": problem}  # fmt: skip
FAMILIES = (
    Family("gemma", ("Gemma",), layer, **SHARED),
    Family("gemma2", ("Gemma 2",), layer, norms=(4,), layer_inputs=layer_inputs, attentions=("eager",), **SHARED),
    Family("gemma3_text", ("Gemma 3",), layer, norms=(4,), layer_inputs=layer_inputs, qk_norms=True, **SHARED),
)
ORDER = 60  # where the registry lists it (calc.families)
PRESETS = {"gemma-2-9b": "Gemma", "gemma-2-27b": "Gemma", "gemma-3-12b": "Gemma", "gemma-3-27b": "Gemma"}
