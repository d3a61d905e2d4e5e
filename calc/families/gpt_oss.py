"""transformers' GptOssForCausalLM (modeling_gpt_oss.py; gpt-oss-20b, gpt-oss-120b): Llama's layer with biases
on Q, K, V and O, a learned sink logit per head beside the scores (eager attention only: its model refuses
sdpa), layers alternating a sliding window and the full sequence, and every MLP a mixture of experts: a router
with a bias, softmax over the top-k logits, and clamped SwiGLU experts with biases (GptOssExperts, run by
transformers' default grouped_mm experts)."""

from __future__ import annotations

from collections.abc import Mapping

from ..inventory import Tensor, block
from ..parts.experts import expert_weight, for_weight, routing_weighted, sorted_pairs, summed_back
from ..parts.ops import Ops
from ..replay import T
from ..shape import Shape
from . import config as c
from .family import Family, ModelType


def read_gpt_oss(cfg: Mapping) -> dict:
    """GptOssConfig's defaults: 36 layers, 128 experts of intermediate_size 2,880, top 4, 64 heads of 64, 8
    key/value heads, a window of 128 on every other layer, biases on attention (attention_bias), an untied
    head."""
    out = c.llama_like(cfg, False, 131072, 8, 64)
    experts = c.whole(cfg, "num_local_experts", 128)
    k = c.whole(cfg, "num_experts_per_tok", 4)
    if k > experts:
        raise c.ConfigError(f"num_experts_per_tok ({k}) is more than {c.written(cfg, 'num_local_experts')} ({experts})")
    ffn = c.whole(cfg, "intermediate_size", 2880)
    out.update(ffn=ffn, experts=experts, experts_per_token=k, expert_ffn=ffn, family="gpt_oss")
    out.update(bias=c.flag(cfg, "attention_bias", True), sliding_window=c.window(cfg, default=128))
    return out


def tensors(shape: Shape, moe: bool) -> list[Tensor]:
    """Llama's block (with attention_bias, biases on Q, K, V and O), the experts' biases (gate_up_proj_bias and
    down_proj_bias, always there), the router's bias and a sink logit per head."""
    extra = [Tensor("self_attn.sinks", shape.heads, attention=True)]
    if moe:
        extra.append(Tensor("mlp.router.bias", shape.experts))
    if moe and not shape.bias:  # the experts' biases are there whatever attention_bias says
        f, e = shape.expert_width, shape.experts
        extra += [Tensor("mlp.experts.gate_up_proj_bias", 2 * f, count=e, tp="experts"),
                  Tensor("mlp.experts.down_proj_bias", shape.hidden, count=e, tp="experts")]  # fmt: skip
    return [*block(shape, moe), *extra]


def rotate(ops: Ops, x: T, cos: T, sin: T, label: str) -> T:
    """_apply_rotary_emb: the two halves of x (torch.chunk: views), first * cos - second * sin and
    second * cos + first * sin, concatenated; cos and sin are head_dim / 2 wide and the muls save them."""
    rp = ops.rp
    n, unit = x.nbytes // x.unit, max(x.unit, cos.unit)
    first, second = (rp.view(x, n // 2, f"{label}: {what} half") for what in ("first", "second"))
    rp.node("chunk", None, inputs=[(x, x.nbytes, "new")], outs=(first, second))
    halves = []
    for a, b, op in ((first, second, "sub"), (second, first, "add")):
        p = ops.new(n // 2, unit, f"{label}: {a.label} x cos", "mul")
        rp.node("mul", p, saved=[cos], inputs=[(a, a.nbytes, "new")])
        q = ops.new(n // 2, unit, f"{label}: {b.label} x sin", "mul")
        rp.node("mul", q, saved=[sin], inputs=[(b, b.nbytes, "new")])
        y = ops.new(n // 2, unit, f"{label}: rotated {a.label}", op)
        rp.node(op, y, inputs=[(p, p.nbytes, "pass"), (q, q.nbytes, "pass" if op == "add" else "new")])
        rp.drop(p, q)
        halves.append(y)
    rp.drop(first, second)
    out = ops.new(n, unit, f"rotated {label}", "cat")
    rp.node("cat", out, inputs=[(h, h.nbytes, "pass") for h in halves])
    rp.drop(*halves)
    return out


def states(ops: Ops, normed: T, cos: T, sin: T, layer: str) -> tuple[T, T, T]:
    """GptOssAttention's query, key and value states: the biased projections, the rotary positions on Q and K."""
    sh, rp = ops.st.shape, ops.rp
    h = sh.hidden
    q = ops.linear(normed, h, sh.q_width, f"{layer} q_proj", sh.bias, f"{layer}: Q")
    k = ops.linear(normed, h, sh.kv_width, f"{layer} k_proj", sh.bias, f"{layer}: K")
    v = ops.linear(normed, h, sh.kv_width, f"{layer} v_proj", sh.bias, f"{layer}: V")
    qr, kr = rotate(ops, q, cos, sin, f"{layer}: Q"), rotate(ops, k, cos, sin, f"{layer}: K")
    rp.drop(q, k)
    return qr, kr, v


def sinks(ops: Ops, masked: T, v: T, layer: str) -> T:
    """GPT-OSS's eager_attention_forward after the masked scores (Ops.eager_attention's `weigh`): the sinks (one
    logit a head, expanded over the rows) concatenated as a last column; minus each row's max (max saves its
    indices); softmax in that dtype (saves its result); the sink column sliced off (a view); dropout; cast to
    V's dtype. attn_weights holds the masked scores until it is rebound to these weights."""
    rp, st = ops.rp, ops.st
    sh = st.shape
    rows = sh.heads * st.tokens
    scores, wide = rows * st.seq, rows * (st.seq + 1)
    unit = max(masked.unit, st.act)  # the sinks are in the model's dtype
    combined = ops.new(wide, unit, f"{layer}: scores and sinks", "torch.cat([scores, sinks], -1)")
    rp.node("cat", combined, inputs=[(masked, masked.nbytes, "pass"), (f"{layer} self_attn.sinks",
                                     sh.heads * st.param_bytes, "param")])  # fmt: skip
    top = ops.new(rows, unit, f"{layer}: each row's max", "max(dim=-1).values")
    index = ops.new(rows, 8, f"{layer}: each row's argmax", "max(dim=-1) saves its indices")
    index.requires_grad = False
    rp.node("max", top, saved=[index], inputs=[(combined, combined.nbytes, "new")])
    rp.drop(index)
    shifted = ops.new(wide, unit, f"{layer}: scores minus their max", "sub")
    # the max's gradient: -grad over every value, summed to one a row
    rp.node("sub", shifted, inputs=[(combined, combined.nbytes, "pass"), (top, top.nbytes, "new")],
            work=[combined.nbytes])  # fmt: skip
    rp.drop(combined, top)
    probs = ops.new(wide, unit, f"{layer}: softmax", "softmax saves its result")
    rp.node("softmax", probs, saved=[probs], inputs=[(shifted, shifted.nbytes, "new")])
    rp.drop(shifted)
    kept = rp.view(probs, scores, f"{layer}: probabilities without the sinks")  # probs[..., :-1]
    rp.node("slice", kept, inputs=[(probs, probs.nbytes, "new")])
    dropped = ops.dropout(kept, f"{layer}: attention probabilities")
    weights = dropped if dropped.unit == v.unit else ops.unary(f"{layer}: probabilities in V's dtype", dropped, [],
                                                                v.unit)  # fmt: skip
    if weights is not dropped:
        rp.drop(dropped)
    rp.drop(masked, probs, kept)  # attn_weights is rebound; probs and scores go as the function returns
    return weights


def router(ops: Ops, x: T, layer: str) -> tuple[T, T, T]:
    """GptOssTopKRouter: F.linear with its bias to E logits; topk of the logits (saves its indices); softmax
    over the k values in their dtype (saves its result). (logits, scores, indices)."""
    rp, st = ops.rp, ops.st
    n, k = st.tokens, st.shape.experts_per_token
    logits = ops.linear(x, st.shape.hidden, st.shape.experts, f"{layer} mlp.router", True, f"{layer}: router logits")
    top = ops.new(n * k, logits.unit, f"{layer}: top-k logits", "topk: tokens x k values")
    index = ops.new(n * k, 8, f"{layer}: top-k experts", "topk: tokens x k int64 indices")
    index.requires_grad = False
    rp.node("topk", top, saved=[index], inputs=[(logits, logits.nbytes, "new")])
    scores = ops.new(n * k, top.unit, f"{layer}: routing weights", "softmax saves its result")
    rp.node("softmax", scores, saved=[scores], inputs=[(top, top.nbytes, "new")])
    rp.drop(top)
    return logits, scores, index


def expert_biases(ops: Ops, ids: T, name: str, width: int, label: str) -> T:
    """_grouped_linear's bias, taken before the grouped matmul runs (selected_biases = bias[expert_ids_g], saving
    the ids): the bias of each pair's expert, gathered."""
    rp, st = ops.rp, ops.st
    s = ids.nbytes // ids.unit
    b = ops.new(s * width, st.act, f"{label} biases", f"{name}[expert_ids_g]")
    rp.node("index", b, saved=[ids], inputs=[(name, st.shape.experts * width * st.param_bytes, "param")])
    return b


def biased(ops: Ops, y: T, b: T, label: str) -> T:
    """The gathered biases `b` added in place into the grouped matmul's output `y` (AddBackward0 saves nothing):
    the output, now holding the sum."""
    rp = ops.rp
    out = rp.view(y, y.nbytes // y.unit, f"{label} + biases")
    rp.node("add_", out, inputs=[(y, y.nbytes, "pass"), (b, b.nbytes, "pass")])
    rp.drop(y)
    return out


def clamped_swiglu(ops: Ops, proj: T, layer: str) -> T:
    """GptOssExperts._apply_gate: gate and up interleaved (gate_up[..., ::2], [..., 1::2]: views whose
    gradients are full-size); gate.clamp(max=limit) and up.clamp(-limit, limit), each saving its input (so the
    grouped matmul's output lives on); gate * sigmoid(gate * alpha); (up + 1) * glu."""
    rp = ops.rp
    s_f = proj.nbytes // proj.unit // 2
    gate, up = (rp.view(proj, s_f, f"{layer}: experts' {what}") for what in ("gate", "up"))
    for t in (gate, up):
        rp.node("slice", t, inputs=[(proj, proj.nbytes, "new")])
    gc, uc = (ops.unary(f"{t.label}, clamped", t, [t]) for t in (gate, up))
    rp.drop(gate, up)
    scaled = ops.unary(f"{layer}: experts' gate x alpha", gc, [])
    sig = ops.new(s_f, scaled.unit, f"{layer}: experts' sigmoid(gate x alpha)", "sigmoid saves its result")
    rp.node("sigmoid", sig, saved=[sig], inputs=[(scaled, scaled.nbytes, "new")])
    rp.drop(scaled)
    glu = ops.mul(gc, sig, f"{layer}: experts' glu")
    rp.drop(sig)
    one = ops.new(s_f, uc.unit, f"{layer}: experts' up + 1", "add of a Python number saves nothing")
    rp.node("add", one, inputs=[(uc, uc.nbytes, "pass")])
    out = ops.mul(one, glu, f"{layer}: experts' (up + 1) x glu")
    rp.drop(one, glu, uc, gc)
    return out


def experts(ops: Ops, x: T, scores: T, index: T, layer: str) -> T:
    """grouped_mm_experts_forward (integrations/moe.py) on GptOssExperts (transposed, biased, interleaved):
    the (token, expert) pairs sorted by expert, the tokens gathered in that order, the grouped matmul to 2 x
    the expert width plus each pair's expert's bias, the clamped SwiGLU, the grouped matmul back plus its
    bias, times the routing weights, back in token order, summed over the k. As in calc.parts.experts'
    moe_block, every tensor has k x tokens rows whatever the routing."""
    rp, st = ops.rp, ops.st
    sh = st.shape
    h, n, k, f = sh.hidden, st.tokens, sh.experts_per_token, sh.expert_width
    s, a, pb = n * k, x.unit, st.param_bytes
    ids, perm, rows, gathered, sample, counts = sorted_pairs(ops, x, scores, layer)
    name = f"{layer} mlp.experts"
    unit = max(a, pb if st.autocast else st.act)  # grouped_mm runs in the weights' dtype (not autocast's)
    up_weight, up_merged = expert_weight(ops, f"{name}.gate_up_proj", h, 2 * f, layer)
    label = f"{layer}: experts' gate and up"
    bias = expert_biases(ops, ids, f"{name}.gate_up_proj_bias", 2 * f, label)
    proj = ops.new(s * 2 * f, unit, label, "grouped_mm: k x tokens x 2 x expert width")
    saved = [gathered, up_merged] if up_merged else for_weight(ops, up_weight[0], gathered)
    rp.node("grouped_mm", proj, saved=saved, inputs=[up_weight, (gathered, gathered.nbytes, "new")])
    proj = biased(ops, proj, bias, label)
    inner = clamped_swiglu(ops, proj, layer)
    rp.drop(proj)
    down_weight, down_merged = expert_weight(ops, f"{name}.down_proj", f, h, layer)
    down_bias = expert_biases(ops, ids, f"{name}.down_proj_bias", h, f"{layer}: experts' output")
    rp.drop(bias)  # selected_biases is rebound to the down projection's, before its grouped matmul
    down = ops.new(s * h, unit, f"{layer}: experts' output", "grouped_mm: k x tokens x h")
    saved = [inner, down_merged] if down_merged else for_weight(ops, down_weight[0], inner)
    rp.node("grouped_mm", down, saved=saved, inputs=[down_weight, (inner, inner.nbytes, "new")])
    rp.drop(inner)
    down = biased(ops, down, down_bias, f"{layer}: experts' output")
    moe, ordered, inverse = summed_back(ops, routing_weighted(ops, down, sample, layer), layer)
    rp.drop(ids, counts, ordered, inverse, perm, rows, sample, gathered, down_bias,
            why="grouped_mm_experts_forward returns")  # fmt: skip
    rp.drop(up_merged, down_merged, why="the LoRA wrappers' parametrize cache is cleared")
    if moe.unit != a:
        cast = ops.unary(f"{layer}: experts' output in the input's dtype", moe, [], a)
        rp.drop(moe)
        moe = cast
    return moe


def layer(ops: Ops, x: T, cos: T, sin: T, mask: T) -> T:
    """GptOssDecoderLayer: norm, attention with sinks, the residual; norm, GptOssMLP (the router, the
    experts), the residual. The layer holds the attention weights, then the router's scores, until it
    returns; GptOssMLP holds the router's logits until it returns."""
    rp, sh = ops.rp, ops.st.shape
    layer = "layer {layer}"
    normed = ops.rms_norm(x, f"{layer} input_layernorm")
    q, k, v = states(ops, normed, cos, sin, layer)
    attn, weights = ops.eager_attention(q, k, v, mask, layer, weigh=sinks)
    o = ops.linear(attn, sh.q_width, sh.hidden, f"{layer} o_proj", sh.bias, f"{layer}: attention projection")
    rp.drop(attn, q, k, v, normed)
    mid = ops.add(x, o, f"{layer}: residual after attention")
    rp.drop(o)
    normed = ops.rms_norm(mid, f"{layer} post_attention_layernorm")
    logits, scores, index = router(ops, normed, layer)
    moe = experts(ops, normed, scores, index, layer)
    rp.drop(logits, index, normed, weights, why="GptOssMLP returns")
    out = ops.add(mid, moe, f"{layer}: residual after the experts")
    rp.drop(mid, moe, scores)
    return out


def window_mask(shape: Shape) -> bool:
    """GptOssModel.forward makes the causal mask and the sliding-window one, whatever its layer types."""
    return True


def problem(shape: Shape) -> tuple[str, str] | None:
    """Where GPT-OSS's code cannot have this shape: every MLP is its experts (gated, no shared one), RMSNorm,
    rotary positions."""
    if not shape.experts or shape.dense_layers:
        return "experts", "GPT-OSS's every MLP is a mixture of experts: give --experts and no --dense-layers"
    if shape.shared_expert_ffn or not shape.gated_ffn:
        return "shared-expert-ffn", "GPT-OSS's experts are gated (SwiGLU), with no shared expert"
    if shape.norm != "rms" or shape.positions != "rope":
        return "norm", "GPT-OSS's code has RMSNorm and rotary positions"
    return None


def half_head(shape: Shape) -> int:
    """GptOssRotaryEmbedding's cos and sin: the frequencies alone, head_dim / 2 a position (no cat)."""
    return shape.head_dim // 2


def sliding(shape: Shape, layer: int) -> bool:
    """GptOssConfig's layer_types: sliding_attention on every other layer from the first (its default, and
    what gpt-oss-20b and gpt-oss-120b publish)."""
    return layer % 2 == 1


MODEL_TYPES = (ModelType("gpt_oss", read_gpt_oss, "gpt_oss", (("num_experts", "num_local_experts"),)),)  # attribute_map
FAMILY = Family("gpt_oss", ("GPT-OSS",), layer, experts=True, window_mask=window_mask, tensors=tensors,
                expert_bias=True, rotary_width=half_head, window_layer=sliding, attentions=("eager",),
                problem=problem, expert_lora=("GPT-OSS",), all_linear_experts=False)  # fmt: skip
FAMILIES = (FAMILY,)
ORDER = 120  # where the registry lists it (calc.families)
# calc/configs/NAME.json -> its group in the list. gpt-oss-20b.json: the config.json of the EchoCog/gpt-oss-20b
# mirror (commit 52971a1) as found, which has openai/gpt-oss-20b's every field but quantization_config's
# quant_method (gptq there, mxfp4 in OpenAI's release); no count reads that block.
PRESETS = {"gpt-oss-20b": "GPT"}
