"""Feed-forward parts: the activation, and the gated MLP (LlamaMLP and its kin)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..replay import T

if TYPE_CHECKING:  # the ops import nothing of the parts built on them
    from .ops import Ops


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




def mlp(ops: Ops, x: T, width: int, name: str, label: str, bias: bool, gated: bool, down: str = "down") -> T:
    """LlamaMLP (and Qwen2MoeMLP, a shared expert): down(act(gate(x)) * up(x)); without a gate (a plain
    feed-forward layer in Llama's code) down(act(up(x))). `name` and `label` prefix each projection's module
    name (q_proj ...) and its tensors' labels; the caller drops x."""
    rp, h = ops.rp, ops.st.shape.hidden
    if gated:
        gate = ops.linear(x, h, width, f"{name}gate_proj", bias, f"{label}gate")
        act = activation(ops, gate, f"{label}act(gate)")
        up = ops.linear(x, h, width, f"{name}up_proj", bias, f"{label}up")
        rp.drop(gate)
        inner = ops.mul(act, up, f"{label}act(gate) * up")
        rp.drop(act, up)
    else:
        up = ops.linear(x, h, width, f"{name}up_proj", bias, f"{label}up")
        inner = activation(ops, up, f"{label}act(up)")
        rp.drop(up)
    out = ops.linear(inner, width, h, f"{name}down_proj", bias, f"{label}{down}")
    rp.drop(inner)
    return out
