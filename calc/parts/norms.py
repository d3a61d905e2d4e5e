"""The norms as transformers writes them: LlamaRMSNorm (and its kin) and nn.LayerNorm."""

from __future__ import annotations

from ..replay import T


class Norms:
    """Ops mixin (calc.parts.ops.Ops): norms."""

    def rms_norm(self, x: T, name: str, width: int = 0, weight_first: bool = False) -> T:
        """LlamaRMSNorm: x.to(fp32); x * rsqrt(x.pow(2).mean(-1) + eps); weight * x.to(input dtype). Over the
        last `width` values (0: the model's width; Qwen3's q_norm and k_norm: each head's). `weight_first`:
        Olmo2RMSNorm's (weight * x).to(input dtype), the weight's product in fp32, then the cast."""
        h = width or self.st.shape.hidden
        normed = self._normalized(x, name, h)
        if weight_first:
            out = self._times_weight(normed, name, h)
            if x.unit == 4:
                return out
            cast = self.unary(f"{name} output in the input's dtype", out, [], x.unit)  # .to(input_dtype)
            self.rp.drop(out)
            return cast
        if x.unit != 4:  # .to(input_dtype) back to 16 bits, then the 16-bit weight
            cast = self.unary(f"{name}: back to 16 bits", normed, [], x.unit)
            self.rp.drop(normed)
            normed = cast
        return self._times_weight(normed, name, h)

    def gemma_rms_norm(self, x: T, name: str, width: int = 0) -> T:
        """GemmaRMSNorm (Gemma2RMSNorm, Gemma3RMSNorm): x.float() normalised as LlamaRMSNorm does, then
        output * (1.0 + weight.float()) in fp32, and output.type_as(x) last (Llama casts before the weight).
        1 + weight is a new fp32 tensor of the norm's width that the product saves for x's gradient; the product
        saves the normalised x for the weight's gradient, whose backward works at the full size before summing."""
        rp, st = self.rp, self.st
        h = width or st.shape.hidden
        normed = self._normalized(x, name, h)
        trains = rp.needs(f"{name}.weight")
        gain = self.new(h, 4, f"{name}: 1 + weight", "1.0 + self.weight.float()")
        gain.requires_grad = trains
        out = self.new(normed.nbytes // 4, 4, f"{name}: x * (1 + weight)", "mul saves both operands")
        rp.node("mul", out, saved=([normed] if trains else []) + [gain], work=[normed.nbytes] if trains else [],
                inputs=[(normed, normed.nbytes, "new"), (f"{name}.weight", h * st.param_bytes, "param")])  # fmt: skip
        rp.drop(normed, gain)
        if x.unit != 4:  # output.type_as(x)
            cast = self.unary(f"{name} output", out, [], x.unit)
            rp.drop(out)
            out = cast
        return out

    def _normalized(self, x: T, name: str, h: int) -> T:
        """x.to(fp32) * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) over the last h values: the fp32 product
        (LlamaRMSNorm's and GemmaRMSNorm's _norm); x's fp32 copy lives on only as what the ops save."""
        rp = self.rp
        n = x.nbytes // x.unit // h  # rows normalised, each with its own 1/std
        x32 = x if x.unit == 4 else self.unary(f"{name}: input in fp32", x, [], 4)
        sq = self.new(n * h, 4, f"{name}: x^2", "pow(2) saves its input")
        # pow_backward: grad * (exponent * self.pow(exponent - 1)), two temporaries of x's size alive together
        rp.node("pow", sq, saved=[x32], inputs=[(x32, x32.nbytes, "new")], work=[x32.nbytes, x32.nbytes])
        mean = self.new(n, 4, f"{name}: mean of x^2", "mean(-1)")
        rp.node("mean", mean, inputs=[(sq, sq.nbytes, "new")])
        rp.drop(sq)
        var = self.new(n, 4, f"{name}: variance + eps", "add")
        rp.node("add", var, inputs=[(mean, mean.nbytes, "pass")])
        rstd = self.new(n, 4, f"{name}: 1/std", "rsqrt saves its result")
        rp.node("rsqrt", rstd, saved=[rstd], inputs=[(var, var.nbytes, "new")])
        rp.drop(var)
        normed = self.new(n * h, 4, f"{name}: x * 1/std", "mul saves both operands")
        # 1/std's gradient is an s x b x h product summed over the width
        rp.node("mul", normed, saved=[x32, rstd], inputs=[(x32, x32.nbytes, "new"), (rstd, rstd.nbytes, "new")],
                work=[n * h * 4])  # fmt: skip
        rp.drop(mean, rstd)
        if x32 is not x:
            rp.drop(x32)
        return normed

    def _times_weight(self, normed: T, name: str, h: int) -> T:
        """weight * x; it saves x, and works, only for the weight's gradient. The weight has the model's dtype
        (st.act): a 16-bit x times an fp32 weight promotes to fp32 (the mul converts x into an fp32 temporary
        first, and x's gradient is made in fp32, then cast to x's dtype)."""
        rp = self.rp
        unit = max(normed.unit, self.st.act)
        promoted = unit != normed.unit
        out = self.new(normed.nbytes // normed.unit, unit, f"{name} output",
                       "weight * x: mul saves x for the weight's gradient")  # fmt: skip
        if promoted:
            rp.drop(self.new(normed.nbytes // normed.unit, unit, f"{name}: x in the weight's dtype",
                             "the mul's promoted copy"))  # fmt: skip
        trains = rp.needs(f"{name}.weight")
        n = normed.nbytes // normed.unit
        work = ([n * unit] if trains else []) + ([n * unit] if promoted else [])
        weight = (f"{name}.weight", h * self.st.param_bytes, "param")
        rp.node("mul", out, saved=[normed] if trains else [], work=work,
                inputs=[(normed, normed.nbytes, "new"), weight])  # fmt: skip
        rp.drop(normed)
        return out

    def layer_norm(self, x: T, name: str) -> T:
        """nn.LayerNorm: native_layer_norm saves its input, mean and 1/std (fp32 under autocast too)."""
        rp, st = self.rp, self.st
        n, h = st.tokens, st.shape.hidden
        mean = self.new(n, 4, f"{name}: mean", "native_layer_norm saves mean")
        rstd = self.new(n, 4, f"{name}: 1/std", "native_layer_norm saves rstd")
        out = self.new(n * h, x.unit, f"{name} output", "native_layer_norm")
        rp.node(name, out, saved=[x, mean, rstd],
                inputs=[(x, x.nbytes, "new"), (f"{name}.weight", h * st.param_bytes, "param"),
                        (f"{name}.bias", h * st.param_bytes, "param")])  # fmt: skip
        rp.drop(mean, rstd)
        return out

