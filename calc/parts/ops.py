"""The op library of the eager walk: each op as PyTorch's eager autograd runs it, on a Replay (calc.replay).

Every model's forward (calc.families) calls these once per op that makes a tensor as large as the tokens or
the parameters: its output's size, what its autograd node saves (PyTorch's tools/autograd/derivatives.yaml),
and the gradients its backward makes. Python variables are dropped where the real code lets them go. Sizes
are bytes.

Precision: a model computes in `act` bytes a value (4: fp32; 2: a 16-bit model). Under
torch.autocast(bfloat16) over fp32 weights, every Linear and matmul casts its inputs to 16 bits (a new
tensor each time, saved for backward; a weight's cast is cached until the autocast region ends) and
returns 16 bits; everything else follows type promotion, so the residual stream, the norms, rotary
positions and softmax stay fp32.

The ops live in mixins by kind: calc.parts.linear (nn.Linear, peft's LoRA, bitsandbytes' 4-bit layers),
calc.parts.norms, calc.parts.attention; the elementwise ones are here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..replay import Replay, T
from ..shape import Shape
from .attention import Attention
from .linear import AUTOCAST, Linears
from .norms import Norms


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
    tp: int = 1  # tensor-parallel processes splitting the layers' linears (calc.engines.tensor; 1: none)
    vocab_split: bool = False  # and the embedding and head by vocabulary (transformers' plan, calc.engines.tensor)
    sp: bool = False  # and the sequence outside the attention and the MLP (sequence parallelism, calc.engines.tensor)
    wrapped: tuple[tuple[str, int], ...] = ()  # peft's ParamWrappers: (parameter, rows of its A), from
    # calc.finetune.expert_adapted

    @property
    def tokens(self) -> int:
        return self.seq * self.micro_batch


class Base:
    """The ops every model is made of: new tensors, elementwise ops, autocast's casts, dropout."""

    def __init__(self, rp: Replay, step: Step):
        self.rp, self.st = rp, step
        self.autocast = step.autocast  # off inside a kernel that works in fp32 (sdpa's math fallback)
        self.casts: list[tuple[int, T]] = []  # autocast's cached 16-bit weights (by layer), freed when it ends

    @property
    def mm(self) -> int:
        """Bytes a value of a Linear's or matmul's output: 16 bits under autocast."""
        return AUTOCAST if self.autocast else self.st.act

    def new(self, values: int, unit: int, label: str, source: str, category: str = "activations") -> T:
        return self.rp.new(values * unit, label, source, category, unit)

    def cast16(self, x: T, what: str) -> T:
        """autocast's 16-bit copy of a wider input (ToCopyBackward0 saves nothing)."""
        y = self.new(x.nbytes // x.unit, AUTOCAST, f"16-bit copy of {what}", "torch.autocast casts each input")
        y.heads_first = x.heads_first  # a copy keeps its input's layout (preserve_format)
        self.rp.node("to(bfloat16)", y, inputs=[(x, x.nbytes, "new")])
        return y


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
        y.heads_first = x.heads_first  # an elementwise op's output is laid out as its input
        self.rp.node(label, y, saved=saved, inputs=[(x, x.nbytes, "new")])
        return y

    def softcap(self, x: T, label: str, category: str = "activations") -> T:
        """Gemma 2's soft-cap, x = x / cap; x = tanh(x); x = x * cap, each a new tensor that rebinds x (so the
        input goes once the first is made); tanh saves its result, the products with a Python float nothing."""
        rp = self.rp
        div = self.unary(f"{label} / cap", x, [], category=category)
        rp.drop(x)
        th = self.new(div.nbytes // div.unit, div.unit, f"tanh({label} / cap)", "tanh saves its result", category)
        rp.node("tanh", th, saved=[th], inputs=[(div, div.nbytes, "new")])
        rp.drop(div)
        y = self.unary(f"{label}, soft-capped", th, [], category=category)
        rp.drop(th)
        return y

    def add(self, a: T, b: T, label: str) -> T:
        """a + b: AddBackward0 saves nothing and passes the gradient to both inputs (promoting dtypes). Of
        inputs of two dtypes, the CPU's TensorIterator first copies the narrower one to the common dtype, a
        temporary freed as the op returns (TensorIteratorBase::compute_types, promote_inputs_to_common_dtype;
        CUDA kernels cast as they read)."""
        unit = max(a.unit, b.unit)
        narrow = next((t for t in (a, b) if t.unit != unit), None)
        cast = None
        if narrow is not None and self.st.device == "cpu":
            cast = self.new(narrow.nbytes // narrow.unit, unit, f"{label}: {narrow.label} in the common dtype",
                            "TensorIterator promotes a CPU op's inputs to the common dtype")  # fmt: skip
        y = self.new(max(a.nbytes // a.unit, b.nbytes // b.unit), unit, label, "add saves nothing")
        self.rp.node("add", y, inputs=[(a, a.nbytes, "pass" if a.unit == unit else "new"),
                                        (b, b.nbytes, "pass" if b.unit == unit else "new")])  # fmt: skip
        if cast is not None:
            self.rp.drop(cast, why="the op returns")
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


    def operand(self, x: T, what: str, contiguous: bool = False) -> T:
        """What matmul saves of a head-split input (b, heads, s, d): autocast's 16-bit cast (strided like its
        input), and the copy matmul's reshape to (b x heads, s, d) makes where that cannot be a view: a
        head-split view of a (b, s, heads, d) layout folds into one batch dimension only when b is 1."""
        rp = self.rp
        cast = self.cast16(x, what) if self.autocast and x.unit != AUTOCAST else None
        src = cast or x
        if contiguous or self.st.micro_batch == 1 or x.heads_first:
            return src if cast else rp.keep(x)
        n = src.nbytes // src.unit
        out = self.new(n, src.unit, f"contiguous copy of {what}", "matmul's reshape copies a head-split view")
        rp.node("clone", out, inputs=[(src, src.nbytes, "new")])
        rp.drop(cast)
        return out



class Ops(Linears, Norms, Attention, Base):
    """The ops the models are made of, each as PyTorch's eager autograd runs it."""
