"""The norms as transformers writes them: LlamaRMSNorm (and its kin) and nn.LayerNorm."""

from __future__ import annotations

from ..replay import T


class Norms:
    """Ops mixin (calc.parts.ops.Ops): norms."""

    def rms_norm(self, x: T, name: str, width: int = 0) -> T:
        """LlamaRMSNorm: x.to(fp32); x * rsqrt(x.pow(2).mean(-1) + eps); weight * x.to(input dtype). Over the
        last `width` values (0: the model's width; Qwen3's q_norm and k_norm: each head's)."""
        rp, st = self.rp, self.st
        h = width or st.shape.hidden
        n = x.nbytes // x.unit // h  # rows normalised, each with its own 1/std
        x32 = x if x.unit == 4 else self.unary(f"{name}: input in fp32", x, [], 4)
        sq = self.new(n * h, 4, f"{name}: x^2", "pow(2) saves its input")
        rp.node("pow", sq, saved=[x32], inputs=[(x32, x32.nbytes, "new")])
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
        if x.unit != 4:  # .to(input_dtype) back to 16 bits, then the 16-bit weight
            cast = self.unary(f"{name}: back to 16 bits", normed, [], x.unit)
            rp.drop(normed)
            normed = cast
        # the weight has the model's dtype (st.act): a 16-bit x times an fp32 weight promotes to fp32 (the mul
        # converts x into an fp32 temporary first, and x's gradient is made in fp32, then cast to x's dtype)
        unit = max(normed.unit, st.act)
        promoted = unit != normed.unit
        out = self.new(n * h, unit, f"{name} output", "weight * x: mul saves x for the weight's gradient")
        if promoted:
            rp.drop(self.new(n * h, unit, f"{name}: x in the weight's dtype", "the mul's promoted copy"))
        trains = rp.needs(f"{name}.weight")  # weight * x saves x, and works, only for the weight's gradient
        work = ([n * h * unit] if trains else []) + ([n * h * unit] if promoted else [])
        rp.node("mul", out, saved=[normed] if trains else [], work=work,
                inputs=[(normed, normed.nbytes, "new"), (f"{name}.weight", h * st.param_bytes, "param")])  # fmt: skip
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

