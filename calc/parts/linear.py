"""nn.Linear as eager autograd runs it, with peft's LoRA adapters and bitsandbytes' 4-bit (NF4) layers."""

from __future__ import annotations

from ..engines import tensor
from ..replay import T

# bitsandbytes' NF4 (Dettmers et al. 2023, QLoRA §3; bitsandbytes/functional.py, quantize_4bit): two 4-bit
# codes a byte; one absmax per block of 64 weights; with double quantization (compress_statistics=True,
# transformers' bnb_4bit_use_double_quant) the absmax values, less their mean, are quantized again to one
# byte each (quantize_blockwise, blocksize=256), with one fp32 absmax per 256 of them. That is
# 0.5 + 1/64 + 4/(64 x 256) bytes a weight, 4.127 bits (the paper's 4 + 0.127). The shared 16- and 256-entry
# code books and the mean (a Python float in current releases) are left out.
NF4_BLOCK = 64
NF4_DQ_BLOCK = 256
AUTOCAST = 2  # bytes a value of torch.autocast(bfloat16)'s casts and of its matmuls' outputs
# bitsandbytes' 4-bit layers (QLoRA): transformers quantizes the block linears, not the head
QUANTIZED = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "qkv_proj",
                       "gate_up_proj"})  # Phi-3's fused stores: one Linear4bit each  # fmt: skip
COMPUTE = 2  # bnb_4bit_compute_dtype: bfloat16, as QLoRA runs it
CUDA_FUSED_ROWS = 4  # backends/cuda/ops.py: _GEMM_4BIT_CUSTOM_FLOOR_M, rows its fused 4-bit kernel always takes


class Linears:
    """Ops mixin (calc.parts.ops.Ops): linear layers."""

    def linear(
        self, x: T, width_in: int, width_out: int, name: str, bias: bool, label: str, category: str = "activations"
    ) -> T:
        """nn.Linear (and GPT-2's Conv1D, an addmm), with peft's LoRA adapter where the step targets it;
        under QLoRA a block linear is bitsandbytes' Linear4bit, and peft's wrapper of it (tuners/lora/bnb.py,
        Linear4bit.forward) clones the base layer's result before adding the adapter's."""
        module = name.rsplit(" ", 1)[-1].rsplit(".", 1)[-1]  # "q_proj", Phi-3's "gate_up_proj"
        split = self.st.tp > 1
        if split and self.st.vocab_split and module in ("lm_head", "embedding"):  # a tied head: the embedding
            return self._gathered_head(x, width_in, width_out, name, bias, label, category)
        wrapped = self._from_local(x, name) if split and module in tensor.COLWISE and not self.st.sp else None
        four = self.st.qlora and module in QUANTIZED
        linear = self._linear4bit if four else self._linear
        y = linear(x if wrapped is None else wrapped, width_in, width_out, name, bias, label, category)
        self.rp.drop(wrapped, why="the DTensor goes as the linear returns (its node may keep it)")
        if split and module in tensor.ROWWISE:
            y = (self._reduce_scattered if self.st.sp else self._all_reduced)(y, name, label, category)
        if self.st.lora_rank and module in self.st.lora_targets:
            if four:  # result = result.clone(): CloneBackward0 saves nothing and passes the gradient on
                c = self.new(y.nbytes // y.unit, y.unit, f"{label} (cloned)", "peft bnb: result.clone()", category)
                self.rp.node("clone", c, inputs=[(y, y.nbytes, "pass")])
                self.rp.drop(y)
                y = c
            y = self.lora(x, y, width_in, width_out, name, label, category, four)
        return y

    def _from_local(self, x: T, name: str) -> T:
        """ColwiseParallel's input: the replicated input wrapped as a DTensor (no copy). Its backward
        (_FromTorchTensor) all-reduces the partial gradient into a new tensor and frees the partial one; the
        input's gradients, each so made, are summed in place (calc.engines.tensor)."""
        rp = self.rp
        wrapped = rp.view(x, x.nbytes // x.unit, x.label)  # it keeps x while the linear's node saves it
        x.sum_in_place = True
        rp.node(f"{name} input (DTensor.from_local, all-reduced in backward)", wrapped, inputs=[(x, x.nbytes, "new")])
        return wrapped

    def _gathered_head(self, x: T, width_in: int, width_out: int, name: str, bias: bool, label: str,
                       category: str) -> T:  # fmt: skip
        """transformers' "colwise_gather_output" head: a column-wise linear to this rank's vocab / tp columns,
        all-gathered into the whole logits (calc.engines.tensor). funcol's gathered buffer, gloo's flat copy of
        the input and its receive buffer, then DTensor's concatenation into a new tensor; the buffer and the
        local logits go as the redistribution returns. In backward the whole gradient is cut to this rank's
        columns, a new tensor."""
        rp, tp = self.rp, self.st.tp
        wrapped = self._from_local(x, name)
        y = self._linear(wrapped, width_in, width_out // tp, name, bias, f"{label} (this rank's columns)", category)
        rp.drop(wrapped, why="the DTensor goes as the linear returns (its node may keep it)")
        out = self._gather(y, label, f"{name}: DTensor Shard(-1) to Replicate; {tensor.HF_SOURCE}", category)
        rp.node(f"{name} output (all-gather)", out, inputs=[(y, y.nbytes, "new")])
        rp.drop(y, why="the redistribution returns")
        return out

    def _gather(self, x: T, label: str, source: str, category: str = "activations") -> T:
        """funcol's all_gather_into_tensor of `x` over the tensor-parallel ranks, and DTensor's concatenation of the
        shards (calc.engines.tensor): the gathered buffer, gloo's flat copy of the input (freed) and its receive
        buffer (freed), the concatenation, a new tensor; then the buffer goes. The caller records the node."""
        rp, tp, n, unit = self.rp, self.st.tp, x.nbytes // x.unit, x.unit
        buffer = self.new(n * tp, unit, f"{label}: all-gather buffer", "funcol all_gather_into_tensor", category)
        flat = self.new(n, unit, f"{label}: gloo's flat copy of the input", "gloo: allgather_into_tensor_coalesced_",
                        category)  # fmt: skip
        rp.drop(flat)
        receive = self.new(n * tp, unit, f"{label}: gloo's receive buffer", "gloo: all_gather", category)
        rp.drop(receive)
        out = self.new(n * tp, unit, f"{label} (gathered)", source, category)
        rp.drop(buffer, why="the redistribution returns")
        return out

    def seq_gathered(self, x: T, module: str) -> T:
        """Sequence parallelism's PrepareModuleInput (calc.engines.tensor): the rank's s / tp positions of `module`'s
        input gathered into the whole sequence, the input of its column-wise linears (which save it). In backward
        their partial gradients, summed out of place, are reduce-scattered back to s / tp positions: the
        concatenation into the scatter's layout, the scatter's output and gloo's clone of its input."""
        out = self._gather(x, f"{module} input", f"{module}: PrepareModuleInput, Shard(1) to Replicate; "
                           f"{tensor.SP_SOURCE}")  # fmt: skip
        self.rp.node(f"{module} input (all-gather, reduce-scattered in backward)", out,
                     inputs=[(x, x.nbytes, "new")], work=[out.nbytes, out.nbytes])  # fmt: skip
        return out

    def seq_split(self, x: T) -> T:
        """Sequence parallelism's cut of the first layer's input to the rank's s / tp positions (PrepareModuleInput,
        Replicate to Shard(1)): a contiguous copy. Its gradient is gathered in backward into the whole sequence's."""
        part = self.new(x.nbytes // x.unit // self.st.tp, x.unit, "layer 1 input (this rank's positions)",
                        f"PrepareModuleInput, Replicate to Shard(1): a contiguous chunk; {tensor.SP_SOURCE}")
        self.rp.node("layer 1 input (cut, all-gathered in backward)", part, inputs=[(x, x.nbytes, "new")],
                     work=[x.nbytes])
        return part

    def seq_head_input(self, x: T) -> T:
        """Sequence parallelism's gather of the final norm's s / tp positions for the head, which is whole on every
        rank; in backward the head's input gradient, replicated, is cut to the rank's positions (a new tensor)."""
        out = self._gather(x, "head input", f"lm_head: PrepareModuleInput, Shard(1) to Replicate; {tensor.SP_SOURCE}")
        self.rp.node("head input (all-gather, cut in backward)", out, inputs=[(x, x.nbytes, "new")])
        return out

    def _reduce_scattered(self, y: T, name: str, label: str, category: str) -> T:
        """RowwiseParallel(output_layouts=Shard(1)) under sequence parallelism: the partial sum reduce-scattered to
        the rank's s / tp positions. funcol's reduce_scatter_tensor along the sequence: the partial output's
        shards concatenated into the scatter's layout, the scatter's output, gloo's clone of its input; then all
        but the output go. Its backward gathers the gradient into the whole sequence's."""
        rp, n, unit = self.rp, y.nbytes // y.unit, y.unit
        src = f"{name}: funcol reduce_scatter_tensor; {tensor.SP_SOURCE}"
        laid = self.new(n, unit, f"{label}: shards concatenated for the scatter", src + " (cat)", category)
        out = self.new(n // self.st.tp, unit, f"{label} (reduce-scattered)", src, category)
        clone = self.new(n, unit, f"{label}: gloo's clone of the input", "gloo: reduce_scatter_tensor_coalesced_",
                         category)  # fmt: skip
        rp.node(f"{name} output (reduce-scatter, all-gathered in backward)", out, inputs=[(y, y.nbytes, "new")],
                work=[y.nbytes])  # fmt: skip
        rp.drop(laid, why="the redistribution returns")
        rp.drop(y, why="reduce-scattered into a new tensor")
        rp.drop(clone, why="gloo's work is waited on")
        return out

    def _all_reduced(self, y: T, name: str, label: str, category: str) -> T:
        """RowwiseParallel's output: the partial sum all-reduced by a functional collective into a new tensor,
        the partial one freed; the gradient passes back unchanged (calc.engines.tensor)."""
        rp = self.rp
        out = self.new(y.nbytes // y.unit, y.unit, f"{label} (all-reduced)", f"{name}: {tensor.SOURCE}", category)
        rp.node(f"{name} output (all-reduce)", out, inputs=[(y, y.nbytes, "pass")])
        rp.drop(y, why="all-reduced into a new tensor")
        return out

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
        rp.node(f"{name} (MatMul4Bit)", y, inputs=inputs, work=[params * COMPUTE], unpacks=True)  # it saves B
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
            if x.unit != AUTOCAST:
                x = cast = self.cast16(x, x.label)
            how = "autocast caches a weight's cast" if trains else "autocast casts a frozen weight at each call"
            w16 = rp.new(params * AUTOCAST, f"16-bit copy of {name}.weight", how, "weights")
            if trains:
                self.casts.append((rp.layer, w16))
                work = [params * AUTOCAST]  # the weight's gradient in 16 bits, before ToCopyBackward0 makes it fp32
        saved = ([x] if trains else []) + ([w16] if w16 is not None and x.requires_grad else [])
        inputs = [(x, x.nbytes, "new"), (f"{name}.weight", params * st.param_bytes, "param")]
        if bias:
            inputs.append((f"{name}.bias", width_out * st.param_bytes, "param"))
        unit = self.mm if self.autocast or not weight else x.unit
        y = self.new(st.tokens * width_out, unit, label, f"{name}: s x b x {width_out} values", category)
        rp.node(name, y, saved=saved, inputs=inputs, work=work, unpacks=True, cast=bool(work))  # mm saves x or w
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
