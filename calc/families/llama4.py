"""transformers' Llama4ForCausalLM on a llama4_text config (modeling_llama4.py; Llama 4 Scout's language model):
Llama's layer with rotary positions as complex products, an L2 norm on each head of Q and K on the rotary
layers (use_qk_norm), every no_rope_layer_interval-th layer without positions and its queries scaled by
position (attn_temperature_tuning), chunked attention on the rotary layers, and a mixture of experts that
sends every token through every expert, weighted by its router score, beside a shared expert."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import partial

from ..inventory import Tensor, block
from ..parts.mlp import activation, mlp
from ..parts.ops import AUTOCAST, Ops
from ..replay import T
from ..shape import Shape
from . import config as c
from .family import Family, ModelType
from .llama import attend, decoder_layer


def read_llama4_text(cfg: Mapping) -> dict:
    """Llama4TextConfig's defaults: 48 layers, 40 heads of 128, 8 key/value heads, 16 experts of
    intermediate_size 8,192 (top 1) and a shared expert as wide, dense layers of intermediate_size_mlp 16,384
    off the interleave_moe_layer_step (or moe_layers), every 4th layer without RoPE, an untied head."""
    out = c.llama_like(cfg, False, 4096 * 32, 8, 128)
    out.update(c.attention_bias(cfg))
    experts = c.whole(cfg, "num_local_experts", 16)
    k = c.whole(cfg, "num_experts_per_tok", 1)
    if k > experts:
        raise c.ConfigError(f"num_experts_per_tok ({k}) is more than num_local_experts ({experts})")
    layers, width = out["layers"], c.whole(cfg, "intermediate_size", 8192)
    step = c.whole(cfg, "interleave_moe_layer_step", 1)
    moe = c.get(cfg, "moe_layers", list(range(step - 1, layers, step)))
    if not isinstance(moe, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in moe):
        raise c.ConfigError(f"moe_layers must be a list of layer numbers, got {json.dumps(moe)}")
    sparse = [i in moe for i in range(layers)]
    out.update(ffn=c.whole(cfg, "intermediate_size_mlp", 16384), family="llama4_text",
               no_rope_interval=_no_rope_interval(cfg, layers), qk_l2_norm=c.flag(cfg, "use_qk_norm", True),
               temperature_tuning=c.flag(cfg, "attn_temperature_tuning", True))  # fmt: skip
    if any(sparse):
        out.update(experts=experts, experts_per_token=k, expert_ffn=width, shared_expert_ffn=width,
                   **c.dense_layers(sparse))  # fmt: skip
    return out


def _no_rope_interval(cfg: Mapping, layers: int) -> int:
    """The interval of the layers without RoPE: no_rope_layer_interval's pattern (no_rope_layers, where given,
    must be one: 1 for a layer with RoPE, 0 for one without)."""
    interval = c.whole(cfg, "no_rope_layer_interval", 4)
    given = c.get(cfg, "no_rope_layers", [])
    if given and given != [int((i + 1) % interval != 0) for i in range(layers)]:
        raise c.ConfigError("no_rope_layers: calc reads every no_rope_layer_interval-th layer without RoPE only")
    return interval


def tensors(shape: Shape, moe: bool) -> list[Tensor]:
    """Llama's block (the experts and the ungated shared expert of the sparse layers): no tensors of its own."""
    return block(shape, moe)


def chunked(shape: Shape, layer: int) -> bool:
    """layer_types: chunked_attention on the layers with RoPE (Llama4TextAttention.use_rope: not on every
    no_rope_interval-th layer, Shape.rotary), full_attention on the others."""
    return shape.rotary(layer)


def rotate(ops: Ops, x: T, freqs: T, label: str) -> tuple[T, T]:
    """apply_rotary_emb's half for x: x.float() viewed as complex, times freqs_cis (a complex64 product that
    saves freqs_cis only). (the product, the fp32 input it holds until apply_rotary_emb returns)."""
    wide = x if x.unit == 4 else ops.unary(f"{label} in fp32", x, [], 4)
    y = ops.new(x.nbytes // x.unit, 4, f"rotated {label}", "view_as_complex(x) * freqs_cis: complex64")
    ops.rp.node("mul", y, saved=[freqs], inputs=[(wide, wide.nbytes, "new")])
    return y, wide


def l2_norm(ops: Ops, x: T, label: str) -> T:
    """Llama4TextL2Norm over each head: x.float(); x * rsqrt(x.pow(2).mean(-1) + eps); .type_as(x). No weight."""
    rp, d = ops.rp, ops.st.shape.head_dim
    n = x.nbytes // x.unit // d
    x32 = x if x.unit == 4 else ops.unary(f"{label} qk_norm: input in fp32", x, [], 4)
    sq = ops.new(n * d, 4, f"{label} qk_norm: x^2", "pow(2) saves its input")
    rp.node("pow", sq, saved=[x32], inputs=[(x32, x32.nbytes, "new")])
    mean = ops.new(n, 4, f"{label} qk_norm: mean of x^2", "mean(-1)")
    rp.node("mean", mean, inputs=[(sq, sq.nbytes, "new")])
    rp.drop(sq)
    var = ops.new(n, 4, f"{label} qk_norm: variance + eps", "add")
    rp.node("add", var, inputs=[(mean, mean.nbytes, "pass")])
    rstd = ops.new(n, 4, f"{label} qk_norm: 1/std", "rsqrt saves its result")
    rp.node("rsqrt", rstd, saved=[rstd], inputs=[(var, var.nbytes, "new")])
    rp.drop(var)
    out = ops.new(n * d, 4, f"{label} qk_norm output", "mul saves both operands")
    rp.node("mul", out, saved=[x32, rstd], inputs=[(x32, x32.nbytes, "new"), (rstd, rstd.nbytes, "new")],
            work=[n * d * 4])  # fmt: skip
    rp.drop(mean, rstd)
    if x32 is not x:
        rp.drop(x32)
    if x.unit != 4:  # .type_as(x)
        back = ops.unary(f"{label} qk_norm output in 16 bits", out, [], x.unit)
        rp.drop(out)
        out = back
    return out


def states(ops: Ops, normed: T, cos: T, sin: T, layer: str) -> tuple[T, T, T]:
    """Llama4TextAttention's query, key and value states: the projections; on a rotary layer
    apply_rotary_emb (Q and K as complex numbers times freqs_cis: the rotary tables' bytes, `cos` here; each
    cast back with type_as) and the L2 norm of each head; on a layer without RoPE the queries times
    log1p(floor((position + 1) / floor_scale)) x attn_scale + 1, cast back to their dtype."""
    sh, rp, st = ops.st.shape, ops.rp, ops.st
    h = sh.hidden
    q = ops.linear(normed, h, sh.q_width, f"{layer} q_proj", sh.bias, f"{layer}: Q")
    k = ops.linear(normed, h, sh.kv_width, f"{layer} k_proj", sh.bias, f"{layer}: K")
    v = ops.linear(normed, h, sh.kv_width, f"{layer} v_proj", sh.bias, f"{layer}: V")
    if sh.rotary(rp.layer):
        wide = [t if t.unit == 4 else ops.unary(f"{layer}: {w} in fp32", t, [], 4) for t, w in ((q, "Q"), (k, "K"))]
        rotated = []
        for t, w in zip(wide, ("Q", "K"), strict=True):
            y = ops.new(t.nbytes // t.unit, 4, f"{layer}: rotated {w}", "view_as_complex(x) * freqs_cis: complex64")
            rp.node("mul", y, saved=[cos, sin], inputs=[(t, t.nbytes, "new")])  # freqs_cis: cos and sin's bytes
            rotated.append(y)
        out = [y if t.unit == 4 else ops.unary(f"{y.label} in 16 bits", y, [], t.unit)
               for y, t in zip(rotated, (q, k), strict=True)]  # fmt: skip
        rp.drop(*(y for y, o in zip(rotated, out, strict=True) if o is not y))
        rp.drop(*(w for w, t in zip(wide, (q, k), strict=True) if w is not t), q, k)
        q, k = out
        if sh.qk_l2_norm:
            qn = l2_norm(ops, q, f"{layer}: Q")
            rp.drop(q)
            kn = l2_norm(ops, k, f"{layer}: K")
            rp.drop(k)
            q, k = qn, kn
    elif sh.temperature_tuning:
        rp.drop(ops.new(st.seq, 8, f"{layer}: positions", "torch.arange(s)"))
        scales = ops.new(st.seq, 4, f"{layer}: attention scales", "log1p(floor((positions + 1) / floor_scale))")
        scales.requires_grad = False
        t = ops.new(q.nbytes // q.unit, max(q.unit, 4), f"{layer}: Q x attention scales", "mul saves the scales")
        rp.node("mul", t, saved=[scales], inputs=[(q, q.nbytes, "new")])
        rp.drop(scales)
        back = t if t.unit == q.unit else ops.unary(f"{layer}: scaled Q in its dtype", t, [], q.unit)
        rp.drop(q, *([t] if back is not t else []))
        q = back
    if st.attention == "sdpa" and chunked(sh, rp.layer):  # a mask: sdpa_attention_forward repeats K and V itself
        (kr, _), (vr, _) = ops.repeat_kv(k, "K"), ops.repeat_kv(v, "V")
        rp.drop(k, v)
        k, v = kr, vr
    return q, k, v


def expert_bmm(ops: Ops, x: T, name: str, width_in: int, width_out: int, label: str) -> T:
    """torch.bmm of the experts' tokens (E x tokens x width_in) with a parameter (E x width_in x width_out): it
    saves its input only for the weight's gradient and the weight only for the input's (BmmBackward0, as mm:
    frozen experts keep no input). Autocast casts the input to 16 bits and the weight too, a cast cached until
    the region ends for a weight that requires grad, made at each call and freed unless saved for a frozen one
    (calc.parts.linear's _linear)."""
    rp, st = ops.rp, ops.st
    e, params = st.shape.experts, st.shape.experts * width_in * width_out
    trains = rp.needs(name)
    cast = w16 = None
    if ops.autocast:
        if x.unit != AUTOCAST:
            x = cast = ops.cast16(x, x.label)
        how = "autocast caches a weight's cast" if trains else "autocast casts a frozen weight at each call"
        w16 = rp.new(params * AUTOCAST, f"16-bit copy of {name}", how, "weights")
        if trains:
            ops.casts.append((rp.layer, w16))
    y = ops.new(e * st.tokens * width_out, ops.mm, label, f"bmm: E x tokens x {width_out}")
    saved = ([x] if trains else []) + ([w16] if w16 is not None and x.requires_grad else [])
    rp.node("bmm", y, saved=saved, inputs=[(x, x.nbytes, "new"), (name, params * st.param_bytes, "param")],
            work=[params * AUTOCAST] if ops.autocast and trains else [])  # fmt: skip
    rp.drop(cast)
    if w16 is not None and not trains:
        rp.drop(w16, why="an uncached cast of a frozen weight")
    return y


def router(ops: Ops, x: T, layer: str) -> tuple[T, T]:
    """Llama4Router: nn.Linear to E logits; topk (saves its indices); full_like(-inf).scatter_ of the top-k
    values (saves the indices); sigmoid of its .float() (saves its result), cast back. (scores, logits)."""
    rp, st = ops.rp, ops.st
    n, e, k = st.tokens, st.shape.experts, st.shape.experts_per_token
    logits = ops.linear(x, st.shape.hidden, e, f"{layer} feed_forward.router", False, f"{layer}: router logits")
    top = ops.new(n * k, logits.unit, f"{layer}: top-k logits", "topk: tokens x k values")
    index = ops.new(n * k, 8, f"{layer}: top-k experts", "topk: tokens x k int64 indices")
    index.requires_grad = False
    rp.node("topk", top, saved=[index], inputs=[(logits, logits.nbytes, "new")])
    filled = ops.new(n * e, logits.unit, f"{layer}: -inf but the top-k logits", "full_like(logits, -inf)")
    filled.requires_grad = False
    scattered = rp.view(filled, n * e, f"{layer}: top-k logits scattered")
    rp.node("scatter_", scattered, saved=[index], inputs=[(top, top.nbytes, "new")])
    rp.drop(filled, top, index)
    wide = scattered if scattered.unit == 4 else ops.unary(f"{layer}: router scores in fp32", scattered, [], 4)
    sig = ops.new(n * e, 4, f"{layer}: sigmoid of the router scores", "sigmoid saves its result")
    rp.node("sigmoid", sig, saved=[sig], inputs=[(wide, wide.nbytes, "new")])
    if wide is not scattered:
        rp.drop(wide)
    scores = sig if logits.unit == 4 else ops.unary(f"{layer}: router scores in 16 bits", sig, [], logits.unit)
    if scores is not sig:
        rp.drop(sig)
    rp.drop(scattered)  # router_scores is rebound
    return scores, logits


def sparse_block(ops: Ops, x: T, layer: str) -> tuple[T, T]:
    """Llama4TextMoe: the router; every token repeated for each of the E experts and scaled by its score (the
    mul saves both); Llama4TextExperts: bmm to 2 x the expert width, up * act(gate), bmm back; the shared
    expert (Llama4TextMLP); plus, in place, the experts' outputs summed over E (its gradient an expand that
    reshaping copies). (the output, the router's logits, which the layer holds until it returns)."""
    rp, st = ops.rp, ops.st
    sh = st.shape
    n, h, e, f = st.tokens, sh.hidden, sh.experts, sh.expert_width
    scores, logits = router(ops, x, layer)
    rep = ops.new(e * n * h, x.unit, f"{layer}: tokens repeated for every expert", "hidden_states.repeat(E, 1)")
    rp.node("repeat", rep, inputs=[(x, x.nbytes, "new")])
    col = ops.new(e * n, scores.unit, f"{layer}: router scores, a column", "transpose(0, 1).reshape(-1, 1): a copy")
    rp.node("reshape", col, inputs=[(scores, scores.nbytes, "pass")])
    unit = max(rep.unit, col.unit)
    if col.unit != unit:  # the 16-bit scores promoted for the product
        rp.drop(ops.new(e * n, unit, f"{layer}: router scores promoted", "type promotion"))
    routed = ops.new(e * n * h, unit, f"{layer}: tokens x router score", "mul saves both operands")
    rp.node("mul", routed, saved=ops.pair(rep, col), inputs=[(rep, rep.nbytes, "new"), (col, col.nbytes, "new")],
            work=[e * n * h * unit])  # fmt: skip
    rp.drop(rep, col)
    name = f"{layer} feed_forward.experts"
    proj = expert_bmm(ops, routed, f"{name}.gate_up_proj", h, 2 * f, f"{layer}: experts' gate and up")
    gate, up = (rp.view(proj, e * n * f, f"{layer}: experts' {what}") for what in ("gate", "up"))
    rp.node("split", None, inputs=[(proj, proj.nbytes, "new")], outs=(gate, up))
    rp.drop(proj)
    act = activation(ops, gate, f"{layer}: experts' act(gate)")
    inner = ops.mul(up, act, f"{layer}: experts' up * act(gate)")
    rp.drop(act, gate, up)
    down = expert_bmm(ops, inner, f"{name}.down_proj", f, h, f"{layer}: experts' output")
    rp.drop(inner)
    shared = mlp(ops, x, sh.shared_expert_ffn, f"{layer} feed_forward.shared_expert.", f"{layer}: shared expert's ",
                 False, True, "output")  # fmt: skip
    total = ops.new(n * h, down.unit, f"{layer}: experts' outputs summed over E", "reshape(E, -1, h).sum(0)")
    rp.node("sum", total, inputs=[(down, down.nbytes, "new")])  # an expand, reshaped: a copy
    rp.drop(down)
    out = rp.view(shared, n * h, f"{layer}: shared expert + experts")  # out.add_(...): in place
    rp.node("add_", out, inputs=[(shared, shared.nbytes, "pass"), (total, total.nbytes, "pass")])
    rp.drop(shared, total, routed, scores, why="Llama4TextMoe returns")
    return out, logits


def moe_tail(ops: Ops, mid: T, normed: T, weights: T | None, layer: str) -> T:
    """Llama4TextDecoderLayer after its post-attention norm: the sparse block, then the residual; the layer
    holds the router's logits (and the attention weights) until it returns."""
    rp = ops.rp
    moe, logits = sparse_block(ops, normed, layer)
    rp.drop(normed)
    out = ops.add(mid, moe, f"{layer}: residual after the experts")
    rp.drop(mid, moe, logits, weights)
    return out


def layer(ops: Ops, x: T, cos: T, sin: T, mask: T | None) -> T:
    """Llama4TextDecoderLayer: LlamaDecoderLayer with Llama 4's query and key states and its sparse block (on the
    layers in moe_layers: Shape.moe_layer; Llama4TextMLP, intermediate_size_mlp wide, on the others); under sdpa
    with the chunked mask its states come with K and V repeated already. Its forward binds the attention's
    output to attention_states, which lives until the layer returns."""
    return decoder_layer(ops, x, cos, sin, mask, states=states, moe=moe_tail, attention=partial(attend, repeated=True),
                         holds_attention=True)  # fmt: skip


def half_head(shape: Shape) -> int:
    """Llama4TextRotaryEmbedding's freqs_cis: complex64 of head_dim / 2 a position, the bytes of cos and sin of
    head_dim / 2 each (the eager walk's two rotary tables)."""
    return shape.head_dim // 2


def window_mask(shape: Shape) -> bool:
    """Llama4TextModel.forward makes the causal mask and the chunked one, whatever its layer types."""
    return True


def problem(shape: Shape) -> tuple[str, str] | None:
    """Where Llama 4's code cannot have this shape: gated experts and a shared expert without a gate, RMSNorm,
    rotary positions."""
    if shape.experts and (shape.shared_expert_gate or not shape.shared_expert_ffn):
        return "shared-expert-ffn", "Llama 4's experts come with a shared expert, ungated"
    if not shape.gated_ffn or shape.norm != "rms" or shape.positions != "rope":
        return "norm", "Llama 4's code has gated feed-forward layers, RMSNorm and rotary positions"
    return None


MODEL_TYPES = (ModelType("llama4_text", read_llama4_text, "llama4_text"),)
FAMILY = Family("llama4_text", ("Llama 4",), layer, experts=True, window_mask=window_mask, tensors=tensors,
                rotary_width=half_head, window_layer=chunked, problem=problem, sdpa_window=window_mask,
                dense_among_experts=True, expert_lora=("Llama 4",))  # fmt: skip
FAMILIES = (FAMILY,)
ORDER = 130  # where the registry lists it (calc.families)
