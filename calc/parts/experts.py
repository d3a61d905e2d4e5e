"""A mixture of experts as transformers runs it: MixtralSparseMoeBlock and Qwen2MoeSparseMoeBlock."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..replay import T
from .linear import AUTOCAST
from .mlp import activation, mlp

if TYPE_CHECKING:  # the ops import nothing of the parts built on them
    from .ops import Ops


def moe_tail(ops: Ops, mid: T, normed: T, weights: T | None, layer: str, block: Callable | None = None) -> T:
    """The rest of a decoder layer whose feed-forward layer is a mixture of experts: the sparse `block`
    (ops, x, layer) -> x (moe_block where None) on the post-attention norm's output, then the residual
    (MixtralDecoderLayer, Qwen2MoeDecoderLayer, Qwen3MoeDecoderLayer)."""
    rp = ops.rp
    moe = (block or moe_block)(ops, normed, layer)
    rp.drop(normed)  # the layer's hidden_states is rebound to the block's output
    out = ops.add(mid, moe, f"{layer}: residual after the experts")
    rp.drop(mid, moe, weights)
    return out


def moe_block(ops: Ops, x: T, layer: str, renorm: bool | None = None, cast: bool | None = None) -> T:
    """MixtralSparseMoeBlock, or Qwen2MoeSparseMoeBlock where the shape has a shared expert's gate;
    Qwen3MoeSparseMoeBlock with `renorm` (its norm_topk_prob) and `cast` given (None: Mixtral's or Qwen2-MoE's):
    the shared expert (Qwen2-MoE's, before the router), the router (topk_router), the experts
    (grouped_experts), the gated shared expert added (gated_shared)."""
    rp, sh = ops.rp, ops.st.shape
    qwen = sh.shared_expert_gate
    renorm = not qwen if renorm is None else renorm
    cast = qwen if cast is None else cast
    shared = None
    if sh.shared_expert_ffn:  # Qwen2MoeMLP: down(act(gate(x)) * up(x))
        name, label = f"{layer} mlp.shared_expert.", f"{layer}: shared expert's "
        shared = mlp(ops, x, sh.shared_expert_ffn, name, label, False, True, "output")
    logits, weights, index = topk_router(ops, x, layer, renorm, cast)
    moe = grouped_experts(ops, x, weights, layer)
    if shared is not None:
        moe = gated_shared(ops, x, moe, shared, layer)
    rp.drop(logits, weights, index, why="the sparse block returns")
    return moe


def topk_router(ops: Ops, x: T, layer: str, renorm: bool, cast: bool) -> tuple[T, T, T]:
    """The router (MixtralTopKRouter, Qwen2MoeTopKRouter, Qwen3MoeTopKRouter): F.linear to E logits, softmax
    in fp32, topk; Mixtral renormalises the k weights (`renorm`: an in-place division, which clones its input
    for backward); Qwen2-MoE (norm_topk_prob false, its default) casts them to the logits' dtype (`cast`);
    Qwen3-MoE renormalises them where norm_topk_prob is on, then casts them. (logits, weights, indices)."""
    rp, st = ops.rp, ops.st
    n, e, k = st.tokens, st.shape.experts, st.shape.experts_per_token
    held: tuple[T, ...] = ()
    if "gate.weight" in dict(st.wrapped):
        logits, held = adapted_router(ops, x, layer)
    else:
        logits = ops.linear(x, st.shape.hidden, e, f"{layer} mlp.gate", False, f"{layer}: router logits")
    wide = logits if logits.unit == 4 else ops.unary(f"{layer}: router logits in fp32", logits, [], 4)
    probs = ops.new(n * e, 4, f"{layer}: router probabilities", "softmax saves its result")
    rp.node("softmax", probs, saved=[probs], inputs=[(wide, wide.nbytes, "new")])
    if wide is not logits:
        rp.drop(wide)
    top = ops.new(n * k, 4, f"{layer}: top-k probabilities", "topk: tokens x k values")
    index = ops.new(n * k, 8, f"{layer}: top-k experts", "topk: tokens x k int64 indices")
    index.requires_grad = False
    rp.node("topk", top, saved=[index], inputs=[(probs, probs.nbytes, "new")])
    rp.drop(probs)
    weights = top
    if renorm:  # router_top_value /= router_top_value.sum(-1, keepdim=True)
        total = ops.new(n, 4, f"{layer}: sum of the top-k probabilities", "sum(-1)")
        rp.node("sum", total, inputs=[(top, top.nbytes, "new")])
        weights = ops.new(n * k, 4, f"{layer}: renormalised routing weights", "an in-place div_ clones its input")
        rp.node("div", weights, saved=[top, total], inputs=[(top, top.nbytes, "new"), (total, total.nbytes, "new")],
                work=[top.nbytes, top.nbytes])  # fmt: skip
        rp.drop(total, top)
    if cast and logits.unit != 4:  # .to(router_logits.dtype)
        wide_weights = weights
        weights = ops.unary(f"{layer}: routing weights in 16 bits", wide_weights, [], logits.unit)
        rp.drop(wide_weights)
    rp.drop(*held, why="the router's LoRA wrapper returns: its cache and proxy go")
    return logits, weights, index


def gated_shared(ops: Ops, x: T, moe: T, shared: T, layer: str) -> T:
    """Qwen2MoeSparseMoeBlock's shared expert scaled by sigmoid(shared_expert_gate(x)) and added to the
    experts' output, which is let go (and the shared expert's)."""
    rp, st = ops.rp, ops.st
    n, h = st.tokens, st.shape.hidden
    score = ops.linear(x, h, 1, f"{layer} mlp.shared_expert_gate", False, f"{layer}: shared expert's gate score")
    sig = ops.new(n, score.unit, f"{layer}: sigmoid of the gate score", "sigmoid saves its result")
    rp.node("sigmoid", sig, saved=[sig], inputs=[(score, score.nbytes, "new")])
    rp.drop(score)
    unit = max(sig.unit, shared.unit)
    scaled = ops.new(n * h, unit, f"{layer}: gated shared expert", "mul saves both operands")
    rp.node("mul", scaled, saved=ops.pair(sig, shared),
            inputs=[(sig, sig.nbytes, "new"), (shared, shared.nbytes, "new")], work=[n * h * unit])  # fmt: skip
    rp.drop(sig, shared)
    total = ops.add(moe, scaled, f"{layer}: experts + shared expert")
    rp.drop(moe, scaled)
    return total


def sorted_pairs(ops: Ops, x: T, weights: T, layer: str) -> tuple[T, T, T, T, T, T]:
    """grouped_mm_experts_forward's first part: the k x tokens (token, expert) pairs sorted by expert
    (torch.sort's values and indices, its buffer freed), each pair's token, the tokens gathered in that order
    and the routing `weights` too, the expert ids as floats for histc: (ids, perm, rows, gathered, sample,
    counts)."""
    rp, st = ops.rp, ops.st
    s, h = st.tokens * st.shape.experts_per_token, st.shape.hidden
    ids = ops.new(s, 8, f"{layer}: expert ids, sorted", "torch.sort: values")
    perm = ops.new(s, 8, f"{layer}: sort permutation", "torch.sort: indices")
    rp.drop(ops.new(s, 8, f"{layer}: sort's buffer", "torch.sort"))
    rows = ops.new(s, 8, f"{layer}: token of each pair", "perm // k")
    for t in (ids, perm, rows):
        t.requires_grad = False
    gathered = ops.new(s * h, x.unit, f"{layer}: tokens in expert order", "hidden_states[perm // k]")
    rp.node("index", gathered, saved=[rows], inputs=[(x, x.nbytes, "new")])
    sample = ops.new(s, weights.unit, f"{layer}: routing weights in expert order", "sample_weights[perm]")
    rp.node("index", sample, saved=[perm], inputs=[(weights, weights.nbytes, "new")])
    counts = ops.new(s, 4, f"{layer}: expert ids as float for histc", "expert_ids_g.float()")
    counts.requires_grad = False
    return ids, perm, rows, gathered, sample, counts


def routing_weighted(ops: Ops, down: T, sample: T, layer: str) -> T:
    """grouped_mm_experts_forward's proj_out * sample_weights_g.unsqueeze(-1): each pair's output times its
    routing weight (the mul saves both); `down` is let go. Where the two differ in dtype, the product is the
    wider one's, and on the CPU TensorIterator copies the narrower input to it first (TensorIteratorBase::
    compute_types), alive beside the product until the kernel returns; in backward MulBackward0's two products
    (mul_tensor_backward) again copy the narrower input, each product in the wider dtype:
    - weights narrower than the output (a 16-bit router's under autocast, where grouped_mm runs in the fp32
      weights' dtype: Qwen2-MoE's cast weights, GPT-OSS's softmax in the logits' dtype): grad x the weights
      (the copy of the weights beside it) and grad x the output, before its sum to one value a pair;
    - the output narrower than the weights (Mixtral's router keeps its renormalised weights in fp32 while the
      experts run in bf16): grad x the weights is made in fp32 and cast to the output's dtype once the node
      returns (the engine's validate_outputs), and grad x the output beside its fp32 copy."""
    rp, st = ops.rp, ops.st
    s, h = sample.nbytes // sample.unit, st.shape.hidden
    unit = max(down.unit, sample.unit)
    narrow = down if down.unit != unit else sample if sample.unit != unit else None
    what = "experts' output" if narrow is down else "routing weights"
    copy = narrow and ops.new(narrow.nbytes // narrow.unit, unit, f"{layer}: {what} promoted", "type promotion")
    weighted = ops.new(s * h, unit, f"{layer}: experts' output x routing weight", "mul saves both operands")
    rp.drop(copy)
    # backward: grad x the weights and grad x the output (before its sum), with the narrower input promoted
    if narrow is down:  # the output's gradient in fp32 beyond the 16-bit one counted, its copy, grad x it
        work = [s * h * (unit - down.unit), s * h * unit, s * h * unit]
    else:
        work = [s * h * unit] + ([s * unit] if narrow is sample else [])
    rp.node("mul", weighted, saved=ops.pair(down, sample),
            inputs=[(down, down.nbytes, "new"), (sample, sample.nbytes, "new")], work=work)  # fmt: skip
    rp.drop(down)
    return weighted


def summed_back(ops: Ops, weighted: T, layer: str) -> tuple[T, T, T]:
    """grouped_mm_experts_forward's last part: the weighted k x tokens rows back in token order (an inverse
    permutation, torch.arange's buffer freed) and summed over the k; `weighted` is let go. (moe, ordered,
    inverse): the caller drops the last two with the rest as the forward returns."""
    rp, st = ops.rp, ops.st
    s, n, h, unit = st.tokens * st.shape.experts_per_token, st.tokens, st.shape.hidden, weighted.unit
    inverse = ops.new(s, 8, f"{layer}: inverse permutation", "torch.empty_like(perm)")
    inverse.requires_grad = False
    rp.drop(ops.new(s, 8, f"{layer}: arange", "torch.arange(S)"))
    ordered = ops.new(s * h, unit, f"{layer}: experts' output in token order", "weighted_out[inv_perm]")
    rp.node("index", ordered, saved=[inverse], inputs=[(weighted, weighted.nbytes, "new")])
    rp.drop(weighted)
    moe = ops.new(n * h, unit, f"{layer}: experts' output summed over k", "view(tokens, k, h).sum(1)")
    # its gradient: SumBackward0's expand, which ViewBackward0 reshapes to k x tokens rows (a copy)
    rp.node("sum", moe, inputs=[(ordered, ordered.nbytes, "new")])
    return moe, ordered, inverse


def adapted_router(ops: Ops, x: T, layer: str) -> tuple[T, tuple[T, T]]:
    """The router's logits where peft's LoRA adapts its weight through target_parameters (all-linear's conversion,
    calc.finetune.expert_adapted): a ParamWrapper with one adapter on a 2-D weight. Its _activate_lora makes
    delta = (lora_B @ lora_A) x scaling (Linear.get_delta_weight: in the adapters' dtype, autocast's 16 bits
    within the step's autocast, fp32 for 16-bit adapters on the CPU; then cast to the weight's) and registers
    W + delta as the weight's parametrization (_LoraParameterProxy, which holds delta until the wrapper returns;
    registering runs it once to check its dtype and shape). Under parametrize.cached() F.linear reads W + delta,
    made once; it requires grad, so the linear saves it (its 16-bit cast under autocast, not cached: not a
    leaf) beside its input. E x h values each. (The logits, and W + delta and delta, which the router's caller
    drops as the wrapper returns.)"""
    rp, st = ops.rp, ops.st
    h, e, a, w = st.shape.hidden, st.shape.experts, st.adapter, st.act
    r, name = dict(st.wrapped)["gate.weight"], f"{layer} mlp.gate.weight"
    factors = [(f"{name}.lora_A", r * h * a, "param"), (f"{name}.lora_B", e * r * a, "param")]
    saved, unit, copies = [], a, []
    if ops.autocast:  # the matmul is autocast's: A and B cast to 16 bits, cached (leaves that require grad)
        for what, n in (("lora_A", r * h), ("lora_B", e * r)):
            cast = rp.new(n * AUTOCAST, f"16-bit copy of {name}.{what}", "autocast caches a weight's cast", "weights")
            ops.casts.append((rp.layer, cast))
            saved.append(cast)
        unit = AUTOCAST
    elif st.device == "cpu" and a != 4:  # get_delta_weight's cast_to_fp32: 16-bit adapters multiplied in fp32
        copies = saved = [ops.new(n, 4, f"{layer}: router's {what} in fp32", "weight.float()") for what, n in
                          (("lora_A", r * h), ("lora_B", e * r))]  # fmt: skip
        unit = 4
    product = ops.new(e * h, unit, f"{layer}: router's B A", "peft Linear.get_delta_weight: lora_B @ lora_A")
    rp.node("mm", product, saved=saved, inputs=factors)  # A and B (parameters, or their casts)
    rp.drop(*copies)
    delta = ops.unary(f"{layer}: router's B A x scaling", product, [])
    rp.drop(product)
    if copies:  # output_tensor.to(dtype=dtype)
        back = ops.unary(f"{layer}: router's delta in the adapters' dtype", delta, [], a)
        rp.drop(delta)
        delta = back
    if delta.unit != w:  # delta_weight.to(param.dtype)
        cast = ops.unary(f"{layer}: router's delta in the weight's dtype", delta, [], w)
        rp.drop(delta)
        delta = cast
    weight = (f"{layer} mlp.gate.weight", e * h * w, "param")  # frozen: no gradient
    check = ops.new(e * h, w, f"{layer}: router's W + delta (registering the parametrization runs it once)",
                    "register_parametrization: _LoraParameterProxy's forward, to check its dtype and shape")
    rp.node("add", check, inputs=[weight, (delta, delta.nbytes, "new")])
    rp.drop(check, why="register_parametrization's check")
    merged = ops.new(e * h, w, f"{layer}: router's W + delta (parametrize.cached())",
                     "_LoraParameterProxy: made once, read by F.linear")
    rp.node("add", merged, inputs=[weight, (delta, delta.nbytes, "new")])
    x_in = ops.cast16(x, x.label) if ops.autocast and x.unit != AUTOCAST else x
    w_in = merged
    if ops.autocast:
        w_in = ops.new(e * h, AUTOCAST, f"{layer}: 16-bit copy of the router's W + delta", "autocast: not a leaf")
        rp.node("to(bfloat16)", w_in, inputs=[(merged, merged.nbytes, "new")])
    logits = ops.new(st.tokens * e, ops.mm, f"{layer}: router logits", f"{layer} mlp.gate: s x b x {e} values")
    rp.node(f"{layer} mlp.gate", logits, saved=[x_in, w_in], inputs=[(x_in, x_in.nbytes, "new"),
                                                                     (w_in, w_in.nbytes, "new")])  # fmt: skip
    rp.drop(*[t for t in (x_in, w_in) if t is not x and t is not merged])
    return logits, (merged, delta)


def for_weight(ops: Ops, weight: str, x: T) -> list[T]:
    """What a grouped matmul of `x` by the experts' `weight` saves: GroupedMmBackward0 keeps x only for the
    weight's gradient, so frozen experts (LoRA on the attention) keep none (the weight, a parameter, is
    resident)."""
    return [x] if ops.rp.needs(weight) else []


def expert_weight(ops: Ops, name: str, d_in: int, d_out: int, layer: str) -> tuple[tuple, T | None]:
    """The experts' weight `name` (E x d_in x d_out values) as their grouped matmul reads it: the parameter, or,
    where peft's LoRA adapts it through target_parameters (calc.finetune.expert_adapted: a ParamWrapper),
    W + scaling x (B A of each expert), which nn.utils.parametrize makes when the experts' forward first reads
    the weight: torch.baddbmm(W, lhs, rhs) outside autocast (_LoraFactorsProxy), in the weight's dtype, from
    views of lora_A and lora_B (copies where the adapters are wider). It is cached until the wrappers' forward
    returns (the caller drops it then) and, as it requires grad, the matmul saves it beside its input; backward
    makes its full-size gradient, from which baddbmm's makes the adapters'. (The matmul's input entry, the
    merged weight or None.)"""
    rp, st = ops.rp, ops.st
    e, module = st.shape.experts, name.rsplit(" mlp.", 1)[-1]
    if module not in st.lora_targets:
        return (name, e * d_in * d_out * st.param_bytes, "param"), None
    ranks, w = dict(st.wrapped)[module], st.act  # A's rows (r E, or 2 r E: all-linear's gate_up); the weights' dtype
    factors = [(f"{name}.lora_A", ranks * d_in * st.adapter, "param"), (f"{name}.lora_B", d_out * ranks * st.adapter,
                                                                         "param")]  # fmt: skip
    copies = []
    if st.adapter != w:  # get_delta_factors: lhs.to(param.dtype), rhs.to(param.dtype)
        copies = [ops.new(n // st.adapter, w, f"{layer}: {module}'s LoRA factor in the weight's dtype", "to(dtype)")
                  for _, n, _ in factors]  # fmt: skip
    merged = ops.new(e * d_in * d_out, w, f"{layer}: {module} + LoRA", "peft ParamWrapper: torch.baddbmm(W, B, A)")
    rp.node("baddbmm", merged, saved=copies, inputs=factors, work=[ranks * (d_in + d_out) * w])  # fmt: skip
    rp.drop(*copies)
    return (merged, merged.nbytes, "new"), merged


def grouped_experts(ops: Ops, x: T, weights: T, layer: str) -> T:
    """transformers' default experts implementation, "grouped_mm" (integrations/moe.py,
    grouped_mm_experts_forward), on the tokens `x` and their k routing `weights` (tokens x k): the k x tokens
    (token, expert) pairs sorted by expert, the tokens gathered in that order, one grouped matmul to 2 x the
    expert width over every expert's weights, act(gate) * up, one grouped matmul back, times the routing
    weights, scattered back and summed over the k, cast to x's dtype. Every tensor has k x tokens rows, however
    the router spreads them. grouped_mm is not autocast's: it runs in the weights' dtype."""
    rp, st = ops.rp, ops.st
    sh = st.shape
    h, n, k, f = sh.hidden, st.tokens, sh.experts_per_token, sh.expert_width
    s, a = n * k, x.unit
    ids, perm, rows, gathered, sample, counts = sorted_pairs(ops, x, weights, layer)
    name = f"{layer} mlp.experts"
    up_weight, up_merged = expert_weight(ops, f"{name}.gate_up_proj", h, 2 * f, layer)
    proj = ops.new(s * 2 * f, a, f"{layer}: experts' gate and up", "grouped_mm: k x tokens x 2 x expert width")
    saved = [gathered, up_merged] if up_merged else for_weight(ops, up_weight[0], gathered)
    rp.node("grouped_mm", proj, saved=saved, inputs=[up_weight, (gathered, gathered.nbytes, "new")])
    gate, up = (rp.view(proj, s * f, f"{layer}: experts' {what}") for what in ("gate", "up"))
    rp.node("split", None, inputs=[(proj, proj.nbytes, "new")], outs=(gate, up))
    rp.drop(proj)
    act = activation(ops, gate, f"{layer}: experts' act(gate)")
    inner = ops.mul(act, up, f"{layer}: experts' act(gate) * up")
    rp.drop(act, gate, up)
    down_weight, down_merged = expert_weight(ops, f"{name}.down_proj", f, h, layer)
    down = ops.new(s * h, a, f"{layer}: experts' output", "grouped_mm: k x tokens x h")
    saved = [inner, down_merged] if down_merged else for_weight(ops, down_weight[0], inner)
    rp.node("grouped_mm", down, saved=saved, inputs=[down_weight, (inner, inner.nbytes, "new")])
    rp.drop(inner)
    moe, ordered, inverse = summed_back(ops, routing_weighted(ops, down, sample, layer), layer)
    rp.drop(ids, counts, ordered, inverse, perm, rows, sample, gathered, why="grouped_mm_experts_forward returns")
    rp.drop(up_merged, down_merged, why="the LoRA wrappers' parametrize cache is cleared")
    if moe.unit != a:
        cast = ops.unary(f"{layer}: experts' output in the input's dtype", moe, [], a)
        rp.drop(moe)
        moe = cast
    return moe
