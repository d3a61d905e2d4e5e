"""transformers' DeepseekV3ForCausalLM (modeling_deepseek_v3.py, transformers 5.23): multi-head latent attention,
the first first_k_dense_replace layers dense (DeepseekV3MLP), the others a mixture of routed experts with its
grouped top-k router and a shared expert (DeepseekV3MoE).

Latent attention (DeepseekV3Attention): the queries through q_a_proj (h -> q_lora_rank), q_a_layernorm and
q_b_proj (-> heads x (qk_nope_head_dim + qk_rope_head_dim)), or one q_proj without q_lora_rank; the keys and
values from kv_a_proj_with_mqa (h -> kv_lora_rank + qk_rope_head_dim): the latent through kv_a_layernorm and
kv_b_proj (-> heads x (qk_nope_head_dim + v_head_dim)), the last qk_rope_head_dim values one rotary key that
every head shares. Rotary positions on the rope part of Q and of that key, interleaved pairs by default
(rope_interleave); the query is cat(q_pass, q_rot), the key a new tensor into which k_nope and the expanded
k_rot are copied (expand_kv), each value head a view of kv_b_proj's output. Q and K heads are
qk_nope + qk_rope wide, V heads v_head_dim wide: PyTorch's CPU flash kernel needs one head size for all three
(sdp_utils_cpp: check_head_dim_size_cpp), so sdpa on the CPU runs its math kernel, which keeps the s x s
softmax as eager attention does (calc.parts.attention.sdpa_math).

The deck walk counts this attention by its own terms (calc.activations.attention_bytes): Q and K heads x
(qk_nope + qk_rope) wide, V and attention's output heads x v_head_dim, 2 bytes a value each, and its 5 a s^2 b
scores; the low-rank latents, their norms and the rotary key shared by the heads are none of its terms. Its
mixture of experts counts the routed experts' k x tokens (calc.activations.moe_parts) and the shared expert.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..inventory import Tensor, experts, mlp, norm
from ..parts.experts import grouped_experts
from ..parts.mlp import mlp as mlp_block
from ..parts.ops import Ops
from ..replay import T
from ..shape import Shape
from . import config as c
from .family import Family, ModelType
from .llama import add

ROUTED_SCALING = "topk_weights * routed_scaling_factor: times a Python float saves nothing"


def read_deepseek_v3(cfg: Mapping) -> dict:
    """DeepseekV3Config's keys with its defaults (configuration_deepseek_v3.py): head_dim is always
    qk_rope_head_dim there (the rotary tables' width); every head of the latent attention has its own keys and
    values, so num_key_value_heads, where given, must be the heads (its repeat_kv would not fit otherwise)."""
    heads = c.whole(cfg, "num_attention_heads")
    if c.whole(cfg, "num_key_value_heads", heads) != heads:
        raise c.ConfigError("num_key_value_heads must equal num_attention_heads: latent attention has a key and a "
                            "value for every head (DeepseekV3Attention)")  # fmt: skip
    if c.flag(cfg, "attention_bias", False):
        raise c.ConfigError("attention_bias true is not supported: calc counts DeepSeek-V3's attention without biases")
    nope, rope = c.whole(cfg, "qk_nope_head_dim", 128), c.whole(cfg, "qk_rope_head_dim", 64)
    if rope % 2:
        raise c.ConfigError(f"qk_rope_head_dim must be even (the rotary pairs), got {rope}")
    q_rank = cfg.get("q_lora_rank", 1536)  # null: one q_proj
    out = {
        "layers": c.whole(cfg, "num_hidden_layers", 61),
        "hidden": c.whole(cfg, "hidden_size", 7168),
        "heads": heads,
        "kv_heads": heads,
        "head_size": nope + rope,
        "q_rank": 0 if q_rank is None else c.whole(cfg, "q_lora_rank"),
        "kv_rank": c.whole(cfg, "kv_lora_rank", 512),
        "rope_dim": rope,
        "v_head_size": c.whole(cfg, "v_head_dim", 128),
        "rope_interleave": c.flag(cfg, "rope_interleave", True),
        "ffn": c.whole(cfg, "intermediate_size", 18432),
        "vocab": c.whole(cfg, "vocab_size", 129280),
        "gated_ffn": True,
        "tied": c.flag(cfg, "tie_word_embeddings", False),
        "norm": "rms",
        "bias": False,
        "head_bias": False,
        "positions": "rope",
        "context": c.whole(cfg, "max_position_embeddings", 4096),
        "final_norm": True,
        "activation": c.activation_of(cfg, "hidden_act", "silu"),
        "dropout": c.rate(cfg, "attention_dropout"),
    }
    out.update(_experts(cfg, out["layers"]))
    return out


def _experts(cfg: Mapping, layers: int) -> dict:
    """The mixture of experts: n_routed_experts of moe_intermediate_size, num_experts_per_tok of them for each
    token, chosen among the topk_group best of n_group groups; n_shared_experts x moe_intermediate_size wide
    shared expert; the first first_k_dense_replace layers dense (intermediate_size)."""
    experts = c.whole(cfg, "n_routed_experts", 256)
    k = c.whole(cfg, "num_experts_per_tok", 8)
    groups, best = c.whole(cfg, "n_group", 8), c.whole(cfg, "topk_group", 4)
    if experts % groups:
        raise c.ConfigError(f"n_group ({groups}) does not divide {c.written(cfg, 'n_routed_experts')} ({experts})")
    if experts // groups < 2:
        raise c.ConfigError(
            f"n_group ({groups}) leaves fewer than 2 experts a group: the router takes each group's best 2"
        )
    if best > groups:
        raise c.ConfigError(f"topk_group ({best}) is more than n_group ({groups})")
    if k > experts // groups * best:
        raise c.ConfigError(f"num_experts_per_tok ({k}) is more than the experts of topk_group ({best}) groups")
    dense = cfg.get("first_k_dense_replace", 3)
    dense = 0 if dense is None else c.whole(cfg, "first_k_dense_replace", smallest=0)
    width = c.whole(cfg, "moe_intermediate_size", 2048)
    shared = c.whole(cfg, "n_shared_experts", 1)
    norm_topk = cfg.get("norm_topk_prob", True)
    if not isinstance(norm_topk, bool):
        raise c.ConfigError(f"norm_topk_prob must be true or false, got {json.dumps(norm_topk)}")
    return {"experts": experts, "experts_per_token": k, "expert_ffn": width, "shared_expert_ffn": width * shared,
            "dense_layers": min(dense, layers), "expert_groups": groups, "group_topk": best,
            "topk_norm": norm_topk}  # fmt: skip


def tensors(shape: Shape, moe: bool) -> list[Tensor]:
    """One DeepseekV3DecoderLayer's parameters: the latent attention, its two norms, a dense MLP or the routed
    experts (their router: E x h; its e_score_correction_bias is a buffer, not a parameter) and the shared
    expert. Under tensor parallelism (DeepseekV3Config's base_model_tp_plan splits only the FFNs) every
    attention tensor is replicated, q_b_proj and kv_b_proj split by heads (column), o_proj by rows."""
    h, heads, dq, dv, r = shape.hidden, shape.heads, shape.head_dim, shape.v_head_dim, shape.rope_dim
    if shape.q_rank:
        q = [Tensor("self_attn.q_a_proj.weight", h, shape.q_rank, attention=True),
             Tensor("self_attn.q_a_layernorm.weight", shape.q_rank, attention=True),
             Tensor("self_attn.q_b_proj.weight", shape.q_rank, heads * dq, tp="column", attention=True)]  # fmt: skip
    else:
        q = [Tensor("self_attn.q_proj.weight", h, heads * dq, tp="column", attention=True)]
    kv = [Tensor("self_attn.kv_a_proj_with_mqa.weight", h, shape.kv_rank + r, attention=True),
          Tensor("self_attn.kv_a_layernorm.weight", shape.kv_rank, attention=True),
          Tensor("self_attn.kv_b_proj.weight", shape.kv_rank, heads * (dq - r + dv), tp="column", attention=True),
          Tensor("self_attn.o_proj.weight", heads * dv, h, tp="row", attention=True)]  # fmt: skip
    out = [*q, *kv, *norm(shape, "input_layernorm", attention=True)]
    if moe:  # the routed experts (each of gate_up_proj and down_proj one E x ... tensor) and the router, as
        # Mixtral's (calc.inventory.experts); the shared expert as DeepseekV3MoE names it
        out += [t for t in experts(shape) if not t.name.startswith("mlp.shared_expert")]
        out += mlp(shape, shape.shared_expert_ffn, "mlp.shared_experts.", targets=False)
    else:
        out += mlp(shape, shape.ffn)
    return out + norm(shape, "post_attention_layernorm")


def rotate(ops: Ops, x: T, cos: T, sin: T, label: str) -> T:
    """apply_rotary_pos_emb_interleave on one of Q's or K's rotary parts: x1, x2 = x[..., 0::2], x[..., 1::2]
    (strided views); cat([x1 cos - x2 sin, x2 cos + x1 sin]). Each mul saves the table (cos and sin need no
    gradient); each strided view's backward (SliceBackward0) makes a zeroed gradient of x's full size. Without
    rope_interleave, Llama's apply_rotary_pos_emb (calc.parts.attention.rotary)."""
    if not ops.st.shape.rope_interleave:
        return ops.rotary(x, cos, sin, label)
    rp = ops.rp
    n, unit = x.nbytes // x.unit, max(x.unit, cos.unit)
    halves = []
    for i in (1, 2):
        half = rp.view(x, n // 2, f"{label}{i}")
        rp.node("slice", half, inputs=[(x, x.nbytes, "new")])
        halves.append(half)
    x1, x2 = halves
    parts = []
    for a, b, what in ((x1, x2, "x1 cos - x2 sin"), (x2, x1, "x2 cos + x1 sin")):
        p = ops.new(n // 2, unit, f"{label}: {a.label} * cos", "mul")
        rp.node("mul", p, saved=[cos], inputs=[(a, a.nbytes, "new")])
        q = ops.new(n // 2, unit, f"{label}: {b.label} * sin", "mul")
        rp.node("mul", q, saved=[sin], inputs=[(b, b.nbytes, "new")])
        y = ops.new(n // 2, unit, f"{label}: {what}", "sub" if a is x1 else "add")
        # sub passes the gradient to its left side and negates it (a new tensor) for its right
        rp.node(
            "sub" if a is x1 else "add", y, inputs=[(p, p.nbytes, "pass"), (q, q.nbytes, "new" if a is x1 else "pass")]
        )
        rp.drop(p, q)
        parts.append(y)
    out = ops.new(n, unit, f"rotated {label}", "torch.cat")
    rp.node("cat", out, inputs=[(y, y.nbytes, "pass") for y in parts])
    rp.drop(*parts, x1, x2)
    return out


def queries(ops: Ops, normed: T, layer: str) -> T:
    """q_b_proj(q_a_layernorm(q_a_proj(x))), or q_proj(x) without q_lora_rank: heads x (nope + rope) a token."""
    rp, sh = ops.rp, ops.st.shape
    h, width = sh.hidden, sh.q_width
    if not sh.q_rank:
        return ops.linear(normed, h, width, f"{layer} q_proj", False, f"{layer}: Q")
    qa = ops.linear(normed, h, sh.q_rank, f"{layer} q_a_proj", False, f"{layer}: Q latent")
    qn = ops.rms_norm(qa, f"{layer} q_a_layernorm", sh.q_rank)
    rp.drop(qa)
    q = ops.linear(qn, sh.q_rank, width, f"{layer} q_b_proj", False, f"{layer}: Q")
    rp.drop(qn)
    return q


def states(ops: Ops, normed: T, cos: T, sin: T, layer: str) -> tuple[T, T, T, list[T]]:
    """DeepseekV3Attention.forward up to the attention: (query, key, value states, the forward's other locals,
    which live until it returns). q_pass and q_rot are views of the queries; the latent and the rotary key are
    views of kv_a_proj_with_mqa's output; query_states = cat(q_pass, rotated q_rot); expand_kv: kv_b_proj of the
    normed latent, k_nope and the values views of it, the key a new tensor (new_empty) into which k_nope and the
    rotary key expanded to every head are copied (two CopySlices: each backward copies the key's whole gradient
    and clones its slice)."""
    rp, sh, n = ops.rp, ops.st.shape, ops.st.tokens
    heads, dq, r, dv, kv = sh.heads, sh.head_dim, sh.rope_dim, sh.v_head_dim, sh.kv_rank
    q = queries(ops, normed, layer)
    q_pass, q_rot = (rp.view(q, n * heads * w, f"{layer}: Q's {what}") for w, what in ((dq - r, "nope"), (r, "rope")))
    rp.node("split", None, inputs=[(q, q.nbytes, "new")], outs=(q_pass, q_rot))
    ckv = ops.linear(normed, sh.hidden, kv + r, f"{layer} kv_a_proj_with_mqa", False, f"{layer}: compressed KV")
    latent, k_rot = rp.view(ckv, n * kv, f"{layer}: KV latent"), rp.view(ckv, n * r, f"{layer}: K's rope")
    rp.node("split", None, inputs=[(ckv, ckv.nbytes, "new")], outs=(latent, k_rot))
    latent_n = ops.rms_norm(latent, f"{layer} kv_a_layernorm", kv)
    rp.drop(latent)
    q_rope = rotate(ops, q_rot, cos, sin, f"{layer}: Q rope")
    k_rope = rotate(ops, k_rot, cos, sin, f"{layer}: K rope")
    rp.drop(q_rot, k_rot)
    query = ops.new(n * heads * dq, max(q_pass.unit, q_rope.unit), f"{layer}: query states", "torch.cat")
    rp.node("cat", query, inputs=[(q_pass, q_pass.nbytes, "new" if q_pass.unit != query.unit else "pass"),
                                  (q_rope, q_rope.nbytes, "pass")])  # fmt: skip
    kvb = ops.linear(latent_n, kv, heads * (dq - r + dv), f"{layer} kv_b_proj", False, f"{layer}: K nope and V")
    k_nope, value = rp.view(kvb, n * heads * (dq - r), f"{layer}: K nope"), rp.view(kvb, n * heads * dv, f"{layer}: V")
    rp.node("split", None, inputs=[(kvb, kvb.nbytes, "new")], outs=(k_nope, value))
    key = ops.new(n * heads * dq, kvb.unit, f"{layer}: key states", "kv_nope.new_empty, k_nope and k_rot copied in")
    # key_states[..., :nope].copy_(k_nope): CopySlices; its backward copies the key's whole gradient (freed: the
    # new_empty base needs none) and clones k_nope's slice of it, which is k_nope's gradient
    rp.node("copy_ (k_nope)", key, inputs=[(k_nope, k_nope.nbytes, "new")], work=[key.nbytes])
    k_all = rp.view(key, n * heads * dq, f"{layer}: key states, k_rot copied in")
    rp.drop(key)  # key_states is the one tensor: the view, rebound by the second copy_, keeps it
    expanded = rp.view(k_rope, n * heads * r, f"{layer}: K's rope expanded to every head")
    rp.node("expand", expanded, inputs=[(k_rope, k_rope.nbytes, "new")])  # ExpandBackward0: a sum over the heads
    # key_states[..., nope:].copy_(k_rot): its backward copies the whole gradient for the key below, clones the
    # rope slice (k_rot's gradient, cast to its dtype where it differs) and zeroes that slice (zeros_like)
    cast = [n * heads * r * kvb.unit] if expanded.unit != kvb.unit else []
    rp.node("copy_ (k_rot)", k_all, inputs=[(key, key.nbytes, "new"), (expanded, expanded.nbytes, "new")],
            work=[n * heads * r * kvb.unit, *cast])  # fmt: skip
    return query, k_all, value, [q, q_pass, latent_n, k_rope, expanded, k_nope, kvb, ckv, q_rope]


def attention(ops: Ops, normed: T, cos: T, sin: T, mask: T | None, layer: str) -> tuple[T, T | None]:
    """DeepseekV3Attention.forward: the states, eager attention or sdpa (on the CPU its math kernel: the heads'
    sizes differ), o_proj; (its output, the attention weights the layer holds)."""
    rp, st, sh = ops.rp, ops.st, ops.st.shape
    q, k, v, held = states(ops, normed, cos, sin, layer)
    if st.attention == "eager":
        attn, weights = ops.eager_attention(q, k, v, mask, layer, contiguous="QK")
    elif st.device == "cpu" and sh.head_dim != sh.v_head_dim:
        attn, weights = math_attention(ops, q, k, v, layer), None
    else:  # one head size on the CPU: its flash kernel; CUDA's memory-efficient kernel takes a value head size
        # apart from the query's (unmeasured here: the checks ran on the CPU)
        attn, weights = ops.sdpa(q, k, v, layer)
    o = ops.linear(
        attn, sh.heads * sh.v_head_dim, sh.hidden, f"{layer} o_proj", False, f"{layer}: attention projection"
    )
    rp.drop(attn, q, k, v, *held, why="DeepseekV3Attention.forward returns")
    return o, weights


def math_attention(ops: Ops, q: T, k: T, v: T, layer: str) -> T:
    """F.scaled_dot_product_attention(is_causal=True) in PyTorch 2.13's math kernel
    (aten/src/ATen/native/transformers/attention.cpp, _scaled_dot_product_attention_math), then transformers'
    transpose(1, 2).contiguous(). Autocast casts Q, K and V to 16 bits (each cast lives until sdpa returns);
    on the CPU the kernel computes 16-bit inputs in fp32 (query_acc, key_acc, value_acc: new, strided like
    them, alive until it returns); Q x sqrt(scale); the causal mask: ones(s, s) of bools, tril, then a float
    mask (where); K^T x sqrt(scale); their bmm, the mask added in place; _safe_softmax (its isneginf and all
    are temporaries); the weights returned in the input's dtype (a 16-bit copy, unused, freed as sdpa returns);
    bmm with V (copied contiguous where the batch is several sequences); the output in the input's dtype."""
    rp, st, sh = ops.rp, ops.st, ops.st.shape
    seq, scores = st.seq, sh.heads * st.seq * st.tokens
    low = ops.autocast
    ins = [ops.cast16(t, what) if low and t.unit != 2 else rp.keep(t) for t, what in ((q, "Q"), (k, "K"), (v, "V"))]
    origin, ops.autocast = ins[0].unit, False
    acc = [
        rp.keep(t) if t.unit == 4 else ops.unary(f"{layer}: {w} in fp32", t, [], 4)
        for t, w in zip(ins, "QKV", strict=True)
    ]
    qs = ops.unary(f"{layer}: Q x sqrt(scale)", acc[0], [])
    mask = _causal_mask(ops, seq, layer)
    ks = ops.unary(f"{layer}: K^T x sqrt(scale)", acc[1], [])
    raw = ops.new(scores, 4, f"{layer}: scores QK^T", "bmm: heads x s x s values a sequence")
    rp.node("bmm", raw, saved=ops.pair(qs, ks), inputs=[(qs, qs.nbytes, "new"), (ks, ks.nbytes, "new")])
    masked = rp.view(raw, scores, f"{layer}: masked scores")  # attn.add_(mask): in place
    rp.node("add_", masked, inputs=[(raw, raw.nbytes, "pass")])
    probs = ops.new(scores, 4, f"{layer}: softmax (fp32)", "_safe_softmax saves its result")
    rp.node("softmax", probs, saved=[probs], inputs=[(masked, masked.nbytes, "new")])
    rp.drop(
        ops.new(scores, 1, f"{layer}: isneginf", "_safe_softmax"), ops.new(scores // seq, 1, f"{layer}: all", "all")
    )
    rp.drop(masked, raw)
    unused = (
        ops.new(scores, origin, f"{layer}: weights in the input's dtype", "attn.to(origin_dtype)")
        if origin != 4
        else None
    )
    vc = ops.operand(acc[2], "V")
    out = ops.new(st.tokens * sh.heads * sh.v_head_dim, 4, f"{layer}: attention output", "bmm")
    rp.node("bmm", out, saved=ops.pair(probs, vc), inputs=[(probs, probs.nbytes, "new"), (vc, vc.nbytes, "new")])
    if origin != 4:
        back = ops.unary(f"{layer}: attention output in the input's dtype", out, [], origin)
        rp.drop(out)
        out = back
    rp.drop(vc, probs, qs, ks, mask, *acc, why="the math kernel returns")
    ops.autocast = low
    rp.drop(unused, *ins, why="scaled_dot_product_attention returns")
    y = ops.unary(f"{layer}: attention output, contiguous", out, [])
    rp.drop(out)
    return y


def _causal_mask(ops: Ops, seq: int, layer: str) -> T:
    """The math kernel's causal mask: at::ones({s, s}, bool).tril(), then convert_boolean_attn_mask: a float
    s x s (0 or -inf) in the query's dtype (fp32 here), alive until the kernel returns."""
    ones = ops.new(seq * seq, 1, f"{layer}: ones(s, s)", "at::ones(bool)")
    tril = ops.new(seq * seq, 1, f"{layer}: tril", "tril")
    ops.rp.drop(ones)
    mask = ops.new(seq * seq, 4, f"{layer}: causal mask (float)", "where(mask, 0, -inf)")
    ops.rp.drop(tril)
    for t in (mask,):
        t.requires_grad = False
    return mask


def router(ops: Ops, x: T, layer: str) -> tuple[T, T, list[T]]:
    """DeepseekV3TopkRouter.forward: F.linear to E logits (autocast's: 16 bits), sigmoid; the choice of the
    experts (choose), then the k scores gathered (gather saves the indices), renormalised (norm_topk_prob) and
    times routed_scaling_factor. (router logits, the k weights, what the MoE block's forward holds until it
    returns: the indices.)"""
    rp, st, sh = ops.rp, ops.st, ops.st.shape
    n, e, k = st.tokens, sh.experts, sh.experts_per_token
    logits = ops.linear(x, sh.hidden, e, f"{layer} mlp.gate", False, f"{layer}: router logits")
    scores = ops.new(n * e, logits.unit, f"{layer}: router scores", "sigmoid saves its result")
    rp.node("sigmoid", scores, saved=[scores], inputs=[(logits, logits.nbytes, "new")])
    index, locals_ = choose(ops, layer)
    weights = ops.new(n * k, scores.unit, f"{layer}: top-k weights", "gather saves its index")
    rp.node("gather", weights, saved=[index], inputs=[(scores, scores.nbytes, "new")])
    if sh.topk_norm:
        weights = _renormalised(ops, weights, layer)
    scaled = ops.unary(f"{layer}: routing weights", weights, [])
    rp.drop(weights, scores, *locals_, why="DeepseekV3TopkRouter.forward returns")
    return logits, scaled, [index]


def choose(ops: Ops, layer: str) -> tuple[T, list[T]]:
    """Which experts: scores + the fp32 e_score_correction_bias; each group's best two summed (topk(2), sum);
    the topk_group best groups; a zeros_like mask scattered, expanded to the experts and reshaped (a copy
    where there are several groups), .bool(), ~; masked_fill with -inf; topk of k. No gradient reaches the
    loss through any of them (only the indices are used): their nodes go as their outputs do, and what the
    locals hold (scores_for_choice, group_scores, group_idx, group_mask, the masks) lives until the router
    returns. (the top-k indices, those locals.)"""
    rp, st, sh = ops.rp, ops.st, ops.st.shape
    n, e, g, k = st.tokens, sh.experts, sh.expert_groups, sh.experts_per_token

    def new(values: int, unit: int, what: str, how: str) -> T:
        t = ops.new(values, unit, f"{layer}: {what}", how)
        t.requires_grad = False
        return t

    biased = new(n * e, 4, "scores + correction bias", "add (the fp32 buffer)")
    two, two_at = new(n * g * 2, 4, "each group's best two", "topk(2)"), new(n * g * 2, 8, "their indices", "topk(2)")
    group = new(n * g, 4, "group scores", "sum(-1)")
    rp.drop(two)
    best = new(n * sh.group_topk, 4, "best groups' scores", "topk: values, unused")
    picked = new(n * sh.group_topk, 8, "best groups", "topk: int64 indices")
    rp.drop(best)
    gmask = new(n * g, 4, "group mask", "zeros_like(group_scores), scatter_")
    # unsqueeze(-1).expand(...).reshape: a view for one group, a copy for several
    smask = new(n * e, 4, "score mask", "reshape of an expand copies") if g > 1 else None
    as_bool = new(n * e, 1, "score mask as bool", ".bool()")
    keep = new(n * e, 1, "~score mask", "~")
    rp.drop(as_bool)
    masked = new(n * e, 4, "scores of the best groups", "masked_fill")
    rp.drop(biased)
    top = new(n * k, 4, "top-k scores", "topk: values, unused")
    index = new(n * k, 8, "top-k experts", "topk: int64 indices")
    rp.drop(top)
    return index, [group, two_at, masked, keep, picked, gmask, smask]


def _renormalised(ops: Ops, weights: T, layer: str) -> T:
    """topk_weights /= topk_weights.sum(dim=-1, keepdim=True) + 1e-20: the in-place div_ saves a clone of its
    input and the denominator; its backward's second gradient works on two products of the weights' size."""
    rp, n = ops.rp, ops.st.tokens
    total = ops.new(n, weights.unit, f"{layer}: sum of the top-k weights", "sum(-1)")
    rp.node("sum", total, inputs=[(weights, weights.nbytes, "new")])
    denom = ops.unary(f"{layer}: sum + 1e-20", total, [])
    rp.drop(total)
    out = ops.new(n * ops.st.shape.experts_per_token, weights.unit, f"{layer}: renormalised weights",
                  "an in-place div_ clones its input")  # fmt: skip
    rp.node("div", out, saved=[weights, denom], inputs=[(weights, weights.nbytes, "new"), (denom, denom.nbytes, "new")],
            work=[weights.nbytes, weights.nbytes])  # fmt: skip
    rp.drop(weights, denom)
    return out


def moe(ops: Ops, x: T, layer: str) -> T:
    """DeepseekV3MoE.forward: the router, the routed experts (grouped_mm), then the shared expert on the
    block's input, added; the router's logits (`_`) live until it returns."""
    rp = ops.rp
    logits, weights, held = router(ops, x, layer)
    routed = grouped_experts(ops, x, weights, layer)
    name, label = f"{layer} mlp.shared_experts.", f"{layer}: shared expert's "
    shared = mlp_block(ops, x, ops.st.shape.shared_expert_ffn, name, label, False, True, "output")
    out = ops.add(routed, shared, f"{layer}: experts + shared expert")
    rp.drop(routed, shared, logits, weights, *held, why="DeepseekV3MoE.forward returns")
    return out


def layer(ops: Ops, x: T, cos: T | None, sin: T | None, mask: T | None) -> T:
    """DeepseekV3DecoderLayer: norm, latent attention, residual; norm, the dense MLP (the first
    first_k_dense_replace layers) or the mixture of experts, residual."""
    rp, sh = ops.rp, ops.st.shape
    name = "layer {layer}"
    normed = ops.rms_norm(x, f"{name} input_layernorm")
    o, weights = attention(ops, normed, cos, sin, mask, name)
    rp.drop(normed)
    mid = add(ops, x, o, f"{name}: residual after attention")
    rp.drop(o)
    normed = ops.rms_norm(mid, f"{name} post_attention_layernorm")
    if sh.moe_layer(rp.layer):
        down = moe(ops, normed, name)
    else:
        down = mlp_block(ops, normed, sh.ffn, f"{name} ", f"{name}: ", False, True)
    rp.drop(normed)
    out = add(ops, mid, down, f"{name}: residual after the feed-forward layer")
    rp.drop(mid, down, weights)
    return out


def moe_lacks(shape: Shape) -> str | None:
    """What of DeepSeek-V3's mixture of experts the eager walk does not replay (it replays its own)."""
    if shape.capacity_factor:
        return "an expert capacity (transformers' DeepSeek-V3 drops no tokens)"
    return None


def problem(shape: Shape) -> tuple[str, str] | None:
    """DeepSeek-V3's code runs latent attention and its grouped router only."""
    if not shape.kv_rank or not shape.expert_groups:
        return "family", "deepseek_v3 needs a DeepSeek-V3 config.json (--hf-config or its preset)"
    if shape.qkv_bias:  # as its config's attention_bias is (read_deepseek_v3)
        return "qkv-bias", "DeepSeek-V3's latent attention has no q, k and v projections to bias"
    return None


# DeepseekV3Config.attribute_map (its num_mtp_layers alias names a key calc does not read)
MODEL_TYPES = (ModelType("deepseek_v3", read_deepseek_v3, "deepseek_v3", (("num_local_experts", "n_routed_experts"),)),)
FAMILIES = (Family("deepseek_v3", ("DeepSeek-V3",), layer, experts=True, tensors=tensors, problem=problem,
                   moe_lacks=moe_lacks),)  # fmt: skip
ORDER = 170  # where the registry lists it (calc.families)
PRESETS = {"deepseek-v3": "DeepSeek"}  # calc/configs/NAME.json -> its group in the list
