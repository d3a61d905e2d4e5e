"""Attention as transformers runs it: rotary positions, repeat_kv, the eager path, and PyTorch's sdpa kernels."""

from __future__ import annotations

from collections.abc import Callable

from ..replay import T


class Attention:
    """Ops mixin (calc.parts.ops.Ops): attention."""

    def rotary(self, x: T, cos: T, sin: T, label: str) -> T:
        """apply_rotary_pos_emb: x * cos + rotate_half(x) * sin; the muls save cos and sin (fp32)."""
        rp = self.rp
        unit = max(x.unit, cos.unit)
        n = x.nbytes // x.unit
        a = self.new(n, unit, f"{label} * cos", "mul")
        rp.node("mul", a, saved=[cos], inputs=[(x, x.nbytes, "new")])
        neg = self.new(n // 2, x.unit, f"-(second half of {label})", "neg")
        rp.node("neg", neg, inputs=[(x, x.nbytes, "new")])  # slice_backward: a full-size zeroed gradient
        half = self.new(n, x.unit, f"rotate_half({label})", "cat")
        rp.node("cat", half, inputs=[(neg, neg.nbytes, "new"), (x, x.nbytes, "new")])
        rp.drop(neg)
        b = self.new(n, unit, f"rotate_half({label}) * sin", "mul")
        rp.node("mul", b, saved=[sin], inputs=[(half, half.nbytes, "new")])
        rp.drop(half)
        y = self.new(n, unit, f"rotated {label}", "add")
        rp.node("add", y, inputs=[(a, a.nbytes, "pass"), (b, b.nbytes, "pass")])
        rp.drop(a, b)
        return y


    def repeat_kv(self, x: T, what: str) -> tuple[T, bool]:
        """repeat_kv: key/value heads expanded to every query head; reshape copies them (contiguous) when
        there are several key/value heads, and is a view (stride 0) for one. (tensor, contiguous)."""
        sh = self.st.shape
        groups = sh.heads // sh.kv_heads
        if groups == 1:
            return self.rp.keep(x), False
        n = groups * x.nbytes // x.unit
        if sh.kv_heads == 1:
            y = self.rp.view(x, n, f"{what} expanded to every head")
        else:
            y = self.new(n, x.unit, f"{what} repeated to every head", "repeat_kv: reshape of an expand copies")
        self.rp.node("repeat_kv", y, inputs=[(x, x.nbytes, "new")], work=[n * x.unit])  # expand's sum
        return y, sh.kv_heads > 1

    def eager_attention(self, q: T, k: T, v: T, mask: T | None, layer: str, softcap: bool = False,
                        contiguous: str = "", weigh: Callable | None = None) -> T:  # fmt: skip
        """transformers' eager_attention_forward (modeling_llama.py): repeat_kv, Q K^T, scale, add the mask,
        softmax in fp32, dropout, times V, transpose(1, 2).contiguous(). With `softcap` (modeling_gemma2.py)
        the scaled scores are soft-capped before the mask (Base.softcap: one more s x s tensor saved).
        `contiguous`: which of "QK" are laid out (b, heads, s, d) already (DeepSeek-V3's query and key states),
        where matmul copies no head-split view. `weigh` (ops, scores, V, layer) -> weights: what a model's
        own eager_attention_forward makes of the masked scores in place of probabilities' softmax and dropout
        (GPT-OSS's sinks), letting the scores go where its code does."""
        rp, st = self.rp, self.st
        sh = st.shape
        scores = sh.heads * st.seq * st.tokens
        (kr, k_contiguous), (vr, v_contiguous) = self.repeat_kv(k, "K"), self.repeat_kv(v, "V")
        qc, kc = self.operand(q, "Q", "Q" in contiguous), self.operand(kr, "K", k_contiguous or "K" in contiguous)
        raw = self.new(scores, self.mm, f"{layer}: scores QK^T", "bmm: heads x s x s values a sequence")
        rp.node("bmm", raw, saved=self.pair(qc, kc), inputs=[(qc, qc.nbytes, "new"), (kc, kc.nbytes, "new")])
        rp.drop(qc, kc)
        x = self.unary(f"{layer}: scaled scores", raw, [])  # times a Python float saves nothing
        rp.drop(raw)
        if softcap:
            x = self.softcap(x, f"{layer}: scores")
        if mask is not None:
            masked = self.add(x, mask, f"{layer}: masked scores")
            rp.drop(x)
            x = masked
        dropped = weigh(self, x, vr, layer) if weigh else self.probabilities(x, q.unit, layer)
        pc, vc = self.operand(dropped, "attention probabilities", True), self.operand(vr, "V", v_contiguous)
        out = self.new(st.tokens * sh.heads * sh.v_head_dim, self.mm, f"{layer}: attention output", "bmm")
        rp.node("bmm", out, saved=self.pair(pc, vc), inputs=[(pc, pc.nbytes, "new"), (vc, vc.nbytes, "new")])
        rp.drop(pc, vc)
        y = self.unary(f"{layer}: attention output, contiguous", out, [])
        rp.drop(out, kr, vr)
        return y, dropped  # the layer holds the returned weights (`hidden_states, _ = ...`) until it returns

    def probabilities(self, x: T, unit: int, layer: str) -> T:
        """eager_attention_forward's softmax of the scores `x` in fp32 (which lets them go), .to(query.dtype)
        (`unit`), and dropout: the attention weights. Scores in 16 bits are first copied to fp32: ATen's
        softmax(x, dtype=float32) is _softmax(x.toType(float32)) on the CPU and for bf16 on CUDA too (its fused
        half_to_float path takes fp16 on CUDA only), the copy freed once _softmax returns (it saves its result, not
        its input); in backward, _softmax_backward_data gives the fp32 gradient of the copy, and the copy's
        ToCopyBackward0 the scores' in 16 bits."""
        rp = self.rp
        if x.unit != 4:
            wide = self.unary(f"{layer}: scores in fp32 for softmax", x, [], 4)
            rp.drop(x)
            x = wide
        probs = self.new(x.nbytes // x.unit, 4, f"{layer}: softmax (fp32)", "softmax saves its result")
        rp.node("softmax", probs, saved=[probs], inputs=[(x, x.nbytes, "new")])
        rp.drop(x)
        if unit != 4:  # .to(query.dtype)
            cast = self.unary(f"{layer}: softmax in 16 bits", probs, [], unit)
            rp.drop(probs)
            probs = cast
        dropped = self.dropout(probs, f"{layer}: attention probabilities")
        rp.drop(probs)
        return dropped

    def sdpa_math(self, q: T, k: T, v: T, layer: str):
        """PyTorch's math fallback for scaled_dot_product_attention (dropout in training on the CPU): the
        tensors of the eager path, with Q and K scaled first and no mask tensor. It computes 16-bit inputs in
        fp32 on the CPU (and autocast does not reach inside it), then casts its output back."""
        rp = self.rp
        wide = [
            rp.keep(t) if t.unit == 4 else self.unary(f"{layer}: {what} in fp32", t, [], 4)
            for t, what in ((q, "Q"), (k, "K"), (v, "V"))
        ]
        low, self.autocast = self.autocast, False
        # Q and K^T are each scaled by sqrt(scale) before their product (new tensors, strided like them)
        qs, ks = (self.unary(f"{layer}: {w} x sqrt(scale)", t, []) for w, t in (("Q", wide[0]), ("K", wide[1])))
        out, weights = self.eager_attention(qs, ks, wide[2], None, layer)
        self.autocast = low
        rp.drop(qs, ks, weights, *wide)
        if q.unit != 4:
            back = self.unary(f"{layer}: attention output in 16 bits", out, [], q.unit)
            rp.drop(out)
            out = back
        return out, None

    def sdpa(self, q: T, k: T, v: T, layer: str, mask: T | None = None, repeated: bool = False) -> T:
        """F.scaled_dot_product_attention(is_causal=True, enable_gqa for grouped heads), PyTorch's flash
        kernel for the CPU: it saves q, k, v (16-bit casts under autocast), its output, laid out so that
        transpose(1, 2) is contiguous, and the log-sum-exp (fp32, heads x s a sequence); no s x s scores.
        Its backward makes the three gradients and a working buffer the size of the output.

        With a boolean `mask` (a sliding window no longer than the sequence, Llama 4's chunks) transformers'
        sdpa_attention_forward repeats K and V itself (repeat_kv; use_gqa_in_sdpa is false with a mask) and
        passes attn_mask, is_causal False; the CPU kernel takes it as a float mask of the query's dtype
        (convert_boolean_attn_mask_cpu: zeros_like, contiguous b x 1 x s x s, the expanded batch made whole,
        masked_fill_ where logical_not(mask), a boolean temporary) and saves it for backward, each layer its
        own. A `mask` given `repeated`: the caller repeated K and V already (Llama 4's chunked layers)."""
        rp, st = self.rp, self.st
        sh = st.shape
        copies = []
        if mask is not None and not repeated:
            copies = [self.repeat_kv(k, "K")[0], self.repeat_kv(v, "V")[0]]
            k, v = copies
        q, k, v = (self.operand(t, what, True) for t, what in ((q, "Q"), (k, "K"), (v, "V")))
        bias = []
        if mask is not None:
            values = st.micro_batch * st.seq * st.seq
            bias = [self.new(values, q.unit, f"{layer}: the mask as floats", "convert_boolean_attn_mask: zeros_like")]
            bias[0].requires_grad = False
            why = "convert_boolean_attn_mask: masked_fill_'s mask"
            rp.drop(self.new(values, 1, f"{layer}: logical_not(mask)", why))
        out = self.new(st.tokens * sh.heads * sh.v_head_dim, self.mm, f"{layer}: attention output", "sdpa output")
        lse = self.new(sh.heads * st.tokens, 4, f"{layer}: log-sum-exp", "sdpa saves logsumexp")
        # the CPU kernel's backward writes all three gradients; autograd frees those nothing needs at once
        unused = [t.nbytes for t in (q, k, v) if not t.requires_grad]
        rp.node("sdpa", out, saved=[q, k, v, out, lse, *bias],
                inputs=[(q, q.nbytes, "new"), (k, k.nbytes, "new"), (v, v.nbytes, "new")],
                work=[out.nbytes, *unused])  # fmt: skip
        rp.drop(lse, q, k, v, *bias, *copies)
        return self.sdpa_output(out, q, layer), None

    def sdpa_output(self, out: T, q: T, layer: str) -> T:
        """sdpa_attention_forward's attn_output.transpose(1, 2).contiguous(): the kernel's output follows the
        query's layout, so a query laid out heads first (Phi-3's concatenated one) makes it copy."""
        if not q.heads_first:
            return out
        y = self.unary(f"{layer}: attention output, contiguous", out, [])
        self.rp.drop(out)
        return y
