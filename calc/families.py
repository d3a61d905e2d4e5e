"""The forward pass of the implementations people train, op by op, for the eager walk (calc.eager).

Each function below follows one model's code in transformers 5 (the modeling_*.py file named), calling a
Replay (calc.replay) once per op that makes a tensor as large as the tokens or the parameters: its output's
size, what its autograd node saves (PyTorch's tools/autograd/derivatives.yaml), and the gradients its
backward makes. Python variables are dropped where the real code lets them go. Sizes are bytes.

Precision: a model computes in `act` bytes a value (4: fp32; 2: a 16-bit model). Under
torch.autocast(bfloat16) over fp32 weights, every Linear and matmul casts its inputs to 16 bits (a new
tensor each time, saved for backward; a weight's cast is cached until the autocast region ends) and
returns 16 bits; everything else follows type promotion, so the residual stream, the norms, rotary
positions and softmax stay fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

from .replay import Replay, T
from .shape import Shape

# bitsandbytes' 4-bit layers (QLoRA): transformers quantizes the block linears, not the head
QUANTIZED = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
NF4_BLOCK, ABSMAX_BLOCK = 64, 256  # weights per absmax; absmax values per fp32 scale of the double quant
COMPUTE = 2  # bnb_4bit_compute_dtype: bfloat16, as QLoRA runs it
CUDA_FUSED_ROWS = 4  # backends/cuda/ops.py: _GEMM_4BIT_CUSTOM_FLOOR_M, rows its fused 4-bit kernel always takes


@dataclass(frozen=True)
class Step:
    """What the forward of one step needs to know."""

    shape: Shape
    seq: int
    micro_batch: int
    act: int  # bytes of an activation value outside autocast (and of its gradient)
    autocast: bool  # torch.autocast(bfloat16) over fp32 weights
    attention: str  # "eager" or "sdpa"
    param_bytes: int  # bytes of a parameter's gradient
    device: str = "cuda"  # "cuda" or "cpu": dropout's mask and sdpa's kernels differ
    lora_rank: int = 0  # peft's LoRA: the adapters' rank (0: none)
    lora_targets: frozenset[str] = frozenset()  # the module names that carry an adapter (q_proj, ...)
    adapter: int = 4  # bytes a value of the adapters' weights: the recipe's weights (peft keeps the model's dtype
    # with autocast_adapter_dtype=False; its default upcasts 16-bit adapters to fp32, calc's fp32 recipes)
    qlora: bool = False  # the block linears are bitsandbytes' Linear4bit (NF4), computing in bf16

    @property
    def tokens(self) -> int:
        return self.seq * self.micro_batch


class Ops:
    """The ops the models are made of, each as PyTorch's eager autograd runs it."""

    def __init__(self, rp: Replay, step: Step):
        self.rp, self.st = rp, step
        self.autocast = step.autocast  # off inside a kernel that works in fp32 (sdpa's math fallback)
        self.casts: list[tuple[int, T]] = []  # autocast's cached 16-bit weights (by layer), freed when it ends

    @property
    def mm(self) -> int:
        """Bytes a value of a Linear's or matmul's output: 16 bits under autocast."""
        return 2 if self.autocast else self.st.act

    def new(self, values: int, unit: int, label: str, source: str, category: str = "activations") -> T:
        return self.rp.new(values * unit, label, source, category, unit)

    def cast16(self, x: T, what: str) -> T:
        """autocast's 16-bit copy of a wider input (ToCopyBackward0 saves nothing)."""
        y = self.new(x.nbytes // x.unit, 2, f"16-bit copy of {what}", "torch.autocast casts each input")
        self.rp.node("to(bfloat16)", y, inputs=[(x, x.nbytes, "new")])
        return y

    def linear(
        self, x: T, width_in: int, width_out: int, name: str, bias: bool, label: str, category: str = "activations"
    ) -> T:
        """nn.Linear (and GPT-2's Conv1D, an addmm), with peft's LoRA adapter where the step targets it;
        under QLoRA a block linear is bitsandbytes' Linear4bit, and peft's wrapper of it (tuners/lora/bnb.py,
        Linear4bit.forward) clones the base layer's result before adding the adapter's."""
        module = name.rsplit(" ", 1)[-1]
        four = self.st.qlora and module in QUANTIZED
        y = (self._linear4bit if four else self._linear)(x, width_in, width_out, name, bias, label, category)
        if self.st.lora_rank and module in self.st.lora_targets:
            if four:  # result = result.clone(): CloneBackward0 saves nothing and passes the gradient on
                c = self.new(y.nbytes // y.unit, y.unit, f"{label} (cloned)", "peft bnb: result.clone()", category)
                self.rp.node("clone", c, inputs=[(y, y.nbytes, "pass")])
                self.rp.drop(y)
                y = c
            y = self.lora(x, y, width_in, width_out, name, label, category, four)
        return y

    def _linear4bit(
        self, x: T, width_in: int, width_out: int, name: str, bias: bool, label: str, category: str = "activations"
    ) -> T:
        """bitsandbytes 0.50's Linear4bit (nn/modules.py) on an NF4 weight with double-quantized absmax:
        x.to(compute dtype); matmul_4bit, a MatMul4Bit autograd Function (autograd/_functions.py) whose forward
        runs the gemm_4bit op and saves only the packed weight (a parameter: nothing new); .to(x's dtype).

        gemm_4bit with no fused kernel (the CPU: backends/default/ops.py, _gemm_4bit_default_impl; CUDA's
        _dequant_linear_fallback past its fused kernel's rows): the absmax decoded from its 8-bit code to fp32
        (dequantize_blockwise, one value per 64 weights) plus the offset (a second fp32 tensor, the first then
        freed), the whole weight dequantized to the compute dtype (dequantize_4bit: the CPU's C kernel writes
        the output directly), F.linear, and both freed as the op returns. On CUDA a batch of at most
        CUDA_FUSED_ROWS rows takes the fused kernel, which dequantizes nothing; between that and 1,536 rows
        CUDA picks by the GPU's architecture (_gemm_4bit_use_custom_cuda), and the replay follows the
        fallback, the larger. Backward (needs only x's gradient; the weight is frozen): F.dequantize_4bit
        again (absmax decoded and offset in place, freed as it returns), matmul(grad_output, weight): the
        dequantized weight is the node's working memory beside the input's gradient."""
        rp, st = self.rp, self.st
        params = width_in * width_out
        absmax = 4 * -(-params // NF4_BLOCK)  # fp32
        inp, cast = x, None
        if x.unit != COMPUTE:  # Linear4bit.forward: x = x.to(self.compute_dtype)
            x = cast = self.unary(f"{label}: input in the 4-bit layer's compute dtype", x, [], COMPUTE)
        fused = st.device == "cuda" and st.tokens <= CUDA_FUSED_ROWS
        if not fused:
            code = rp.new(absmax, f"{name}: absmax decoded (fp32)", "dequantize_blockwise(absmax_8bit)", "weights")
            scale = rp.new(absmax, f"{name}: absmax + offset", "gemm_4bit: + absmax_offset", "weights")
            rp.drop(code, why="a temporary of the expression")
            w = rp.new(params * COMPUTE, f"{name}.weight dequantized", "dequantize_4bit: the whole weight", "weights")
        y = self.new(st.tokens * width_out, COMPUTE, label, f"{name} (4-bit): s x b x {width_out} values", category)
        inputs = [(x, x.nbytes, "new")]
        if bias:
            inputs.append((f"{name}.bias", width_out * st.param_bytes, "param"))
        rp.node(f"{name} (MatMul4Bit)", y, inputs=inputs, work=[params * COMPUTE])
        if not fused:
            rp.drop(w, scale, why="gemm_4bit returns")
        rp.drop(cast)
        if inp.unit != COMPUTE:  # .to(inp_dtype)
            back = self.unary(f"{label}: back in the input's dtype", y, [], inp.unit)
            rp.drop(y)
            y = back
        return y

    def _linear(
        self,
        x: T,
        width_in: int,
        width_out: int,
        name: str,
        bias: bool,
        label: str,
        category: str = "activations",
        weight: int = 0,
    ) -> T:
        """mm (addmm with a bias): it saves its input only for the weight's gradient and the weight only for
        the input's (derivatives.yaml: mm_mat1_backward needs mat2, mm_mat2_backward needs self). Under
        autocast the weight's 16-bit cast is cached until the region ends only for a weight that requires
        grad (autocast_mode.cpp, cached_cast: arg.requires_grad() && arg.is_leaf()); a frozen weight is cast
        anew at each call and freed unless the node saves it. `weight`: bytes a value of the weight where it
        differs from the model's (peft's fp32 adapters): outside autocast the output has the input's dtype."""
        rp, st = self.rp, self.st
        params = width_in * width_out
        trains = rp.needs(f"{name}.weight")
        work = []
        cast = w16 = None
        if self.autocast:
            if x.unit != 2:
                x = cast = self.cast16(x, x.label)
            how = "autocast caches a weight's cast" if trains else "autocast casts a frozen weight at each call"
            w16 = rp.new(params * 2, f"16-bit copy of {name}.weight", how, "weights")
            if trains:
                self.casts.append((rp.layer, w16))
                work = [params * 2]  # the weight's gradient in 16 bits, before ToCopyBackward0 makes it fp32
        saved = ([x] if trains else []) + ([w16] if w16 is not None and x.requires_grad else [])
        inputs = [(x, x.nbytes, "new"), (f"{name}.weight", params * st.param_bytes, "param")]
        if bias:
            inputs.append((f"{name}.bias", width_out * st.param_bytes, "param"))
        unit = self.mm if self.autocast or not weight else x.unit
        y = self.new(st.tokens * width_out, unit, label, f"{name}: s x b x {width_out} values", category)
        rp.node(name, y, saved=saved, inputs=inputs, work=work)
        rp.drop(cast)
        if w16 is not None and not trains:
            rp.drop(w16, why="an uncached cast of a frozen weight")
        return y

    def lora(
        self, x: T, y: T, width_in: int, width_out: int, name: str, label: str, category: str, four: bool = False
    ) -> T:
        """peft's lora.Linear.forward (peft/tuners/lora/layer.py): result = base_layer(x); x cast to
        lora_A's dtype where it differs (_cast_input_dtype; the adapters' dtype is the recipe's weights, Step.adapter:
        fp32 for calc's fp32 recipes, as peft's default keeps them; the copy lives in forward's `x` until it
        returns); lora_dropout (nn.Identity at 0, peft's
        default); result = result + lora_B(lora_A(x)) * scaling; result.to(the base output's dtype). lora_A
        (r x d_in) saves x, lora_B (d_out x r) the rank-r intermediate; times a Python float saves nothing;
        the sum passes its gradient to both sides. peft's wrapper of a 4-bit
        layer (`four`, tuners/lora/bnb.py) casts the adapter's output to the result's dtype before the sum
        (outside autocast), where lora.Linear casts the sum after it."""
        rp, r, unit = self.rp, self.st.lora_rank, self.st.adapter
        x32 = x if x.unit == unit else self.unary(f"{label}: adapter input in the adapters' dtype", x, [], unit)
        a = self._linear(x32, width_in, r, f"{name}.lora_A", False, f"{label}: x A (rank {r})", category, unit)
        b = self._linear(a, r, width_out, f"{name}.lora_B", False, f"{label}: x A B", category, unit)
        rp.drop(a)
        scaled = self.unary(f"{label}: x A B x scaling", b, [])
        rp.drop(b)
        if four and not self.autocast and scaled.unit != y.unit:  # output.to(expected_dtype)
            cast = self.unary(f"{label}: adapter output in the result's dtype", scaled, [], y.unit)
            rp.drop(scaled)
            scaled = cast
        out = self.add(y, scaled, f"{label} with its adapter")
        rp.drop(y, scaled)
        if out.unit != y.unit:
            back = self.unary(f"{label} with its adapter, in the base output's dtype", out, [], y.unit)
            rp.drop(out)
            out = back
        if x32 is not x:
            rp.drop(x32, why="lora.Linear.forward returns")
        return out

    def end_autocast(self) -> None:
        """The autocast region ends: its cache lets go of every layer's weight casts, layer by layer."""
        rp, here = self.rp, self.rp.layer
        for layer, cast in self.casts:
            rp.layer = layer
            rp.drop(cast, why="autocast's weight cache is cleared when the region ends")
        rp.layer, self.casts = here, []

    def unary(self, label: str, x: T, saved: list[T], unit: int | None = None, category: str = "activations") -> T:
        """An elementwise op of one input whose gradient is as large as the input."""
        y = self.new(x.nbytes // x.unit, unit or x.unit, label, "elementwise", category)
        self.rp.node(label, y, saved=saved, inputs=[(x, x.nbytes, "new")])
        return y

    def add(self, a: T, b: T, label: str) -> T:
        """a + b: AddBackward0 saves nothing and passes the gradient to both inputs (promoting dtypes)."""
        unit = max(a.unit, b.unit)
        y = self.new(max(a.nbytes // a.unit, b.nbytes // b.unit), unit, label, "add saves nothing")
        self.rp.node("add", y, inputs=[(a, a.nbytes, "pass" if a.unit == unit else "new"),
                                        (b, b.nbytes, "pass" if b.unit == unit else "new")])  # fmt: skip
        return y

    def mul(self, a: T, b: T, label: str) -> T:
        """a * b of one shape: each side's gradient needs the other, so each is saved where the other
        requires grad."""
        unit = max(a.unit, b.unit)
        y = self.new(a.nbytes // a.unit, unit, label, "mul saves both operands")
        self.rp.node("mul", y, saved=self.pair(a, b), inputs=[(a, a.nbytes, "new"), (b, b.nbytes, "new")])
        return y

    @staticmethod
    def pair(a: T, b: T) -> list[T]:
        """What a product of two tensors (mul, bmm) saves: a for b's gradient, b for a's."""
        return ([a] if b.requires_grad else []) + ([b] if a.requires_grad else [])

    def rms_norm(self, x: T, name: str) -> T:
        """LlamaRMSNorm: x.to(fp32); x * rsqrt(x.pow(2).mean(-1) + eps); weight * x.to(input dtype)."""
        rp, st = self.rp, self.st
        h, n = st.shape.hidden, st.tokens
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
        out = self.new(n * h, normed.unit, f"{name} output", "weight * x: mul saves x for the weight's gradient")
        trains = rp.needs(f"{name}.weight")  # weight * x saves x, and works, only for the weight's gradient
        rp.node("mul", out, saved=[normed] if trains else [], work=[normed.nbytes] if trains else [],
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

    def dropout(self, x: T, label: str) -> T:
        """Dropout in training: a new output, and a mask that backward keeps: on CUDA native_dropout's
        1-byte mask; on the CPU a scaled noise tensor of the input's dtype (aten::dropout's _dropout_impl,
        input * noise). Without dropout the input itself (a new reference)."""
        rp = self.rp
        if not self.st.shape.dropout:
            return rp.keep(x)
        n, cpu = x.nbytes // x.unit, self.st.device == "cpu"
        how = "_dropout_impl: noise of the input's dtype" if cpu else "native_dropout: a 1-byte mask"
        mask = self.new(n, x.unit if cpu else 1, f"{label}: dropout mask", how)
        y = self.new(n, x.unit, f"{label} after dropout", "dropout's output")
        rp.node("dropout", y, saved=[mask], inputs=[(x, x.nbytes, "new")])
        rp.drop(mask)
        return y

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

    def operand(self, x: T, what: str, contiguous: bool = False) -> T:
        """What matmul saves of a head-split input (b, heads, s, d): autocast's 16-bit cast (strided like its
        input), and the copy matmul's reshape to (b x heads, s, d) makes where that cannot be a view: a
        head-split view of a (b, s, heads, d) layout folds into one batch dimension only when b is 1."""
        rp = self.rp
        cast = self.cast16(x, what) if self.autocast and x.unit != 2 else None
        src = cast or x
        if contiguous or self.st.micro_batch == 1:
            return src if cast else rp.keep(x)
        n = self.st.tokens * self.st.shape.heads * self.st.shape.head_dim
        out = self.new(n, src.unit, f"contiguous copy of {what}", "matmul's reshape copies a head-split view")
        rp.node("clone", out, inputs=[(src, src.nbytes, "new")])
        rp.drop(cast)
        return out

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

    def eager_attention(self, q: T, k: T, v: T, mask: T | None, layer: str) -> T:
        """transformers' eager_attention_forward (modeling_llama.py): repeat_kv, Q K^T, scale, add the mask,
        softmax in fp32, dropout, times V, transpose(1, 2).contiguous()."""
        rp, st = self.rp, self.st
        sh = st.shape
        scores = sh.heads * st.seq * st.tokens
        (kr, k_contiguous), (vr, v_contiguous) = self.repeat_kv(k, "K"), self.repeat_kv(v, "V")
        qc, kc = self.operand(q, "Q"), self.operand(kr, "K", k_contiguous)
        raw = self.new(scores, self.mm, f"{layer}: scores QK^T", "bmm: heads x s x s values a sequence")
        rp.node("bmm", raw, saved=self.pair(qc, kc), inputs=[(qc, qc.nbytes, "new"), (kc, kc.nbytes, "new")])
        rp.drop(qc, kc)
        x = self.unary(f"{layer}: scaled scores", raw, [])  # times a Python float saves nothing
        rp.drop(raw)
        if mask is not None:
            masked = self.add(x, mask, f"{layer}: masked scores")
            rp.drop(x)
            x = masked
        probs = self.new(scores, 4, f"{layer}: softmax (fp32)", "softmax saves its result")
        rp.node("softmax", probs, saved=[probs], inputs=[(x, x.nbytes, "new")])
        rp.drop(x)
        if q.unit != 4:  # .to(query.dtype)
            cast = self.unary(f"{layer}: softmax in 16 bits", probs, [], q.unit)
            rp.drop(probs)
            probs = cast
        dropped = self.dropout(probs, f"{layer}: attention probabilities")
        rp.drop(probs)
        pc, vc = self.operand(dropped, "attention probabilities", True), self.operand(vr, "V", v_contiguous)
        out = self.new(st.tokens * sh.heads * sh.head_dim, self.mm, f"{layer}: attention output", "bmm")
        rp.node("bmm", out, saved=self.pair(pc, vc), inputs=[(pc, pc.nbytes, "new"), (vc, vc.nbytes, "new")])
        rp.drop(pc, vc)
        y = self.unary(f"{layer}: attention output, contiguous", out, [])
        rp.drop(out, kr, vr)
        return y, dropped  # the layer holds the returned weights (`hidden_states, _ = ...`) until it returns

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

    def sdpa(self, q: T, k: T, v: T, layer: str) -> T:
        """F.scaled_dot_product_attention(is_causal=True, enable_gqa for grouped heads), PyTorch's flash
        kernel for the CPU: it saves q, k, v (16-bit casts under autocast), its output, laid out so that
        transpose(1, 2) is contiguous, and the log-sum-exp (fp32, heads x s a sequence); no s x s scores.
        Its backward makes the three gradients and a working buffer the size of the output."""
        rp, st = self.rp, self.st
        sh = st.shape
        q, k, v = (self.operand(t, what, True) for t, what in ((q, "Q"), (k, "K"), (v, "V")))
        out = self.new(st.tokens * sh.heads * sh.head_dim, self.mm, f"{layer}: attention output", "sdpa output")
        lse = self.new(sh.heads * st.tokens, 4, f"{layer}: log-sum-exp", "sdpa saves logsumexp")
        # the CPU kernel's backward writes all three gradients; autograd frees those nothing needs at once
        unused = [t.nbytes for t in (q, k, v) if not t.requires_grad]
        rp.node("sdpa", out, saved=[q, k, v, out, lse],
                inputs=[(q, q.nbytes, "new"), (k, k.nbytes, "new"), (v, v.nbytes, "new")],
                work=[out.nbytes, *unused])  # fmt: skip
        rp.drop(lse, q, k, v)
        return out, None


def llama_layer(ops: Ops, x: T, cos: T | None, sin: T | None, mask: T | None) -> T:
    """LlamaDecoderLayer (modeling_llama.py); Mistral and Qwen2 run the same code (Qwen2 with q/k/v biases).
    A shape's other choices (LayerNorm, a plain feed-forward layer, learned positions) swap in the op
    transformers uses for them."""
    rp, sh = ops.rp, ops.st.shape
    h, f = sh.hidden, sh.ffn
    qw, kw = sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim
    qkv_bias = sh.bias or sh.qkv_bias
    norm = ops.rms_norm if sh.norm == "rms" else ops.layer_norm
    layer = "layer {layer}"
    normed = norm(x, f"{layer} input_layernorm")
    q = ops.linear(normed, h, qw, f"{layer} q_proj", qkv_bias, f"{layer}: Q")
    k = ops.linear(normed, h, kw, f"{layer} k_proj", qkv_bias, f"{layer}: K")
    v = ops.linear(normed, h, kw, f"{layer} v_proj", qkv_bias, f"{layer}: V")
    if cos is not None:
        qr, kr = ops.rotary(q, cos, sin, f"{layer}: Q"), ops.rotary(k, cos, sin, f"{layer}: K")
        rp.drop(q, k)
        q, k = qr, kr
    if ops.st.attention == "sdpa":
        attn, weights = ops.sdpa(q, k, v, layer)
    else:
        attn, weights = ops.eager_attention(q, k, v, mask, layer)
    o = ops.linear(attn, qw, h, f"{layer} o_proj", sh.bias, f"{layer}: attention projection")
    # LlamaAttention.forward's query_states, key_states, value_states and the layer's hidden_states (the
    # norm's output) live until the attention returns, after o_proj
    rp.drop(attn, q, k, v, normed)
    mid = ops.add(x, o, f"{layer}: residual after attention")
    rp.drop(o)
    normed = norm(mid, f"{layer} post_attention_layernorm")
    if sh.experts:
        return moe_tail(ops, mid, normed, weights, layer)
    if sh.gated_ffn:
        gate = ops.linear(normed, h, f, f"{layer} gate_proj", sh.bias, f"{layer}: gate")
        act = activation(ops, gate, f"{layer}: act(gate)")
        up = ops.linear(normed, h, f, f"{layer} up_proj", sh.bias, f"{layer}: up")
        rp.drop(gate)
        inner = ops.mul(act, up, f"{layer}: act(gate) * up")
        rp.drop(act, up)
    else:
        up = ops.linear(normed, h, f, f"{layer} up_proj", sh.bias, f"{layer}: up")
        inner = activation(ops, up, f"{layer}: act(up)")
        rp.drop(up)
    down = ops.linear(inner, f, h, f"{layer} down_proj", sh.bias, f"{layer}: down")
    rp.drop(inner, normed)  # LlamaMLP.forward's x (the norm's output) lives until it returns
    out = ops.add(mid, down, f"{layer}: residual after the feed-forward layer")
    rp.drop(mid, down, weights)
    return out


def gpt2_layer(ops: Ops, x: T, cos: T, sin: T, mask: T | None) -> T:
    """GPT2Block (modeling_gpt2.py): LayerNorm, one fused QKV Conv1D whose output the head-split views of
    Q, K and V keep alive, attention, projection, dropout, residual; LayerNorm, Conv1D, GELU, Conv1D,
    dropout, residual."""
    rp, sh = ops.rp, ops.st.shape
    h, f = sh.hidden, sh.ffn
    layer = "layer {layer}"
    normed = ops.layer_norm(x, f"{layer} ln_1")
    qkv = ops.linear(normed, h, 3 * h, f"{layer} attn.c_attn", sh.bias, f"{layer}: Q, K and V")
    rp.drop(normed)
    # .split(h, dim=2): three views of the one buffer, whose gradients SplitBackward concatenates
    n = ops.st.tokens
    q, k, v = (rp.view(qkv, n * h, f"{layer}: {what}") for what in ("Q", "K", "V"))
    rp.node("split", None, inputs=[(qkv, qkv.nbytes, "new")], outs=(q, k, v))
    rp.drop(qkv)
    if ops.st.attention == "eager":
        attn, weights = ops.eager_attention(q, k, v, mask, layer)
    elif sh.dropout and ops.st.device == "cpu":
        attn, weights = ops.sdpa_math(q, k, v, layer)
    else:
        attn, weights = ops.sdpa(q, k, v, layer)
    rp.drop(q, k, v)
    o = ops.linear(attn, h, h, f"{layer} attn.c_proj", sh.bias, f"{layer}: attention projection")
    rp.drop(attn)
    od = ops.dropout(o, f"{layer}: attention projection")
    rp.drop(o)
    mid = ops.add(od, x, f"{layer}: residual after attention")
    rp.drop(od)
    normed = ops.layer_norm(mid, f"{layer} ln_2")
    up = ops.linear(normed, h, f, f"{layer} mlp.c_fc", sh.bias, f"{layer}: c_fc")
    rp.drop(normed)
    act = activation(ops, up, f"{layer}: GELU")
    rp.drop(up)
    down = ops.linear(act, f, h, f"{layer} mlp.c_proj", sh.bias, f"{layer}: c_proj")
    rp.drop(act)
    dd = ops.dropout(down, f"{layer}: feed-forward output")
    rp.drop(down)
    out = ops.add(mid, dd, f"{layer}: residual after the feed-forward layer")
    rp.drop(mid, dd, weights)
    return out


def activation(ops: Ops, x: T, label: str) -> T:
    """The feed-forward activation. gelu_new (GPT-2's NewGELUActivation) is written in Python:
    0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), each op a tensor, four of them saved;
    the others (silu, gelu, gelu_pytorch_tanh, relu) are one fused op that saves its input."""
    rp = ops.rp
    if ops.st.shape.activation != "gelu_new":
        return ops.unary(label, x, [x])
    half = ops.unary(f"{label}: 0.5 x", x, [])  # Python evaluates 0.5 * input first
    cube = ops.unary(f"{label}: x^3", x, [x])
    scaled = ops.unary(f"{label}: 0.044715 x^3", cube, [])
    rp.drop(cube)
    inner = ops.add(x, scaled, f"{label}: x + 0.044715 x^3")
    rp.drop(scaled)
    arg = ops.unary(f"{label}: sqrt(2/pi) (...)", inner, [])
    rp.drop(inner)
    th = ops.new(arg.nbytes // arg.unit, arg.unit, f"{label}: tanh", "tanh saves its result")
    rp.node("tanh", th, saved=[th], inputs=[(arg, arg.nbytes, "new")])
    rp.drop(arg)
    one = ops.unary(f"{label}: 1 + tanh", th, [])
    rp.drop(th)
    y = ops.mul(half, one, label)
    rp.drop(half, one)
    return y


def moe_tail(ops: Ops, mid: T, normed: T, weights: T | None, layer: str) -> T:
    """The rest of a decoder layer whose feed-forward layer is a mixture of experts: the sparse block on the
    post-attention norm's output, then the residual (MixtralDecoderLayer, Qwen2MoeDecoderLayer)."""
    rp = ops.rp
    moe = moe_block(ops, normed, layer)
    rp.drop(normed)  # the layer's hidden_states is rebound to the block's output
    out = ops.add(mid, moe, f"{layer}: residual after the experts")
    rp.drop(mid, moe, weights)
    return out


def moe_block(ops: Ops, x: T, layer: str) -> T:
    """MixtralSparseMoeBlock, or Qwen2MoeSparseMoeBlock where the shape has a shared expert's gate.

    Router (MixtralTopKRouter, Qwen2MoeTopKRouter): F.linear to E logits, softmax in fp32, topk; Mixtral
    renormalises the k weights (an in-place division, which clones its input for backward); Qwen2-MoE
    (norm_topk_prob false, its default) casts them to the logits' dtype. Experts: transformers' default
    experts implementation, "grouped_mm" (integrations/moe.py, grouped_mm_experts_forward): the k x tokens
    (token, expert) pairs sorted by expert, the tokens gathered in that order, one grouped matmul to 2 x the
    expert width over every expert's weights, act(gate) * up, one grouped matmul back, times the routing
    weights, scattered back and summed over the k. Every tensor has k x tokens rows, however the router
    spreads them: the memory does not depend on the routing (the per-expert counts only set the offsets).
    grouped_mm is not autocast's: it runs in the weights' dtype (fp32 under autocast). Qwen2-MoE adds the
    shared expert (a gated MLP, before the router) scaled by sigmoid(shared_expert_gate(x))."""
    rp, st = ops.rp, ops.st
    sh = st.shape
    h, n, e, k, f = sh.hidden, st.tokens, sh.experts, sh.experts_per_token, sh.expert_width
    s, a, pb = n * k, x.unit, st.param_bytes
    qwen = sh.shared_expert_gate
    shared = None
    if sh.shared_expert_ffn:  # Qwen2MoeMLP: down(act(gate(x)) * up(x))
        sf, name = sh.shared_expert_ffn, f"{layer} mlp.shared_expert"
        gate = ops.linear(x, h, sf, f"{name}.gate_proj", False, f"{layer}: shared expert's gate")
        act = activation(ops, gate, f"{layer}: shared expert's act(gate)")
        up = ops.linear(x, h, sf, f"{name}.up_proj", False, f"{layer}: shared expert's up")
        rp.drop(gate)
        inner = ops.mul(act, up, f"{layer}: shared expert's act(gate) * up")
        rp.drop(act, up)
        shared = ops.linear(inner, sf, h, f"{name}.down_proj", False, f"{layer}: shared expert's output")
        rp.drop(inner)
    # the router
    logits = ops.linear(x, h, e, f"{layer} mlp.gate", False, f"{layer}: router logits")
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
    if not qwen:  # router_top_value /= router_top_value.sum(-1, keepdim=True)
        total = ops.new(n, 4, f"{layer}: sum of the top-k probabilities", "sum(-1)")
        rp.node("sum", total, inputs=[(top, top.nbytes, "new")])
        weights = ops.new(n * k, 4, f"{layer}: renormalised routing weights", "an in-place div_ clones its input")
        rp.node("div", weights, saved=[top, total], inputs=[(top, top.nbytes, "new"), (total, total.nbytes, "new")],
                work=[top.nbytes, top.nbytes])  # fmt: skip
        rp.drop(total, top)
    elif logits.unit != 4:  # .to(router_logits.dtype)
        weights = ops.unary(f"{layer}: routing weights in 16 bits", top, [], logits.unit)
        rp.drop(top)
    else:
        weights = top
    # the experts (grouped_mm_experts_forward)
    ids = ops.new(s, 8, f"{layer}: expert ids, sorted", "torch.sort: values")
    perm = ops.new(s, 8, f"{layer}: sort permutation", "torch.sort: indices")
    rp.drop(ops.new(s, 8, f"{layer}: sort's buffer", "torch.sort"))
    rows = ops.new(s, 8, f"{layer}: token of each pair", "perm // k")
    for t in (ids, perm, rows):
        t.requires_grad = False
    gathered = ops.new(s * h, a, f"{layer}: tokens in expert order", "hidden_states[perm // k]")
    rp.node("index", gathered, saved=[rows], inputs=[(x, x.nbytes, "new")])
    wu = weights.unit
    sample = ops.new(s, wu, f"{layer}: routing weights in expert order", "sample_weights[perm]")
    rp.node("index", sample, saved=[perm], inputs=[(weights, weights.nbytes, "new")])
    counts = ops.new(s, 4, f"{layer}: expert ids as float for histc", "expert_ids_g.float()")
    counts.requires_grad = False
    name = f"{layer} mlp.experts"
    proj = ops.new(s * 2 * f, a, f"{layer}: experts' gate and up", "grouped_mm: k x tokens x 2 x expert width")
    up_weight = (f"{name}.gate_up_proj", e * 2 * f * h * pb, "param")
    rp.node("grouped_mm", proj, saved=[gathered], inputs=[up_weight, (gathered, gathered.nbytes, "new")])
    gate, up = (rp.view(proj, s * f, f"{layer}: experts' {what}") for what in ("gate", "up"))
    rp.node("split", None, inputs=[(proj, proj.nbytes, "new")], outs=(gate, up))
    rp.drop(proj)
    act = activation(ops, gate, f"{layer}: experts' act(gate)")
    inner = ops.mul(act, up, f"{layer}: experts' act(gate) * up")
    rp.drop(act, gate, up)
    down = ops.new(s * h, a, f"{layer}: experts' output", "grouped_mm: k x tokens x h")
    rp.node("grouped_mm", down, saved=[inner],
            inputs=[(f"{name}.down_proj", e * h * f * pb, "param"), (inner, inner.nbytes, "new")])  # fmt: skip
    rp.drop(inner)
    unit = max(a, wu)
    if wu != unit:  # the 16-bit weights promoted for the product
        rp.drop(ops.new(s, unit, f"{layer}: routing weights promoted", "type promotion"))
    weighted = ops.new(s * h, unit, f"{layer}: experts' output x routing weight", "mul saves both operands")
    rp.node("mul", weighted, saved=ops.pair(down, sample),
            inputs=[(down, down.nbytes, "new"), (sample, sample.nbytes, "new")], work=[s * h * unit])  # fmt: skip
    rp.drop(down)
    inverse = ops.new(s, 8, f"{layer}: inverse permutation", "torch.empty_like(perm)")
    inverse.requires_grad = False
    rp.drop(ops.new(s, 8, f"{layer}: arange", "torch.arange(S)"))
    ordered = ops.new(s * h, unit, f"{layer}: experts' output in token order", "weighted_out[inv_perm]")
    rp.node("index", ordered, saved=[inverse], inputs=[(weighted, weighted.nbytes, "new")])
    rp.drop(weighted)
    moe = ops.new(n * h, unit, f"{layer}: experts' output summed over k", "view(tokens, k, h).sum(1)")
    rp.node("sum", moe, inputs=[(ordered, ordered.nbytes, "pass")])  # its gradient is an expand: a view
    rp.drop(ids, counts, ordered, inverse, perm, rows, sample, gathered, why="grouped_mm_experts_forward returns")
    if moe.unit != a:
        cast = ops.unary(f"{layer}: experts' output in the input's dtype", moe, [], a)
        rp.drop(moe)
        moe = cast
    if shared is not None:
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
        moe = total
    rp.drop(logits, weights, index, why="the sparse block returns")
    return moe
