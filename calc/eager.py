"""The "eager" walk: one training step on one device as PyTorch's eager autograd allocates it.

Opt-in (`calc.step(..., walk="eager")`, `--walk eager`); the deck's walk (calc.walk) stays the default.
Where the deck walk counts Korthikanti et al.'s activations and two logit tensors, this one counts what
autograd saves for a pre-norm block without dropout (an unfused attention core, a GELU or SwiGLU
feed-forward layer), the head's input, cross-entropy's fp32 working memory, the gradient flowing down
the residual stream, and each layer's backward working memory in the order PyTorch runs it. Sizes follow
what each op saves in PyTorch's tools/autograd/derivatives.yaml, and were checked against the CPU
allocator's trace of the reference trainer (scripts/training/measure.py, docs/results.md §10.6).

Notation: p bytes per activation value, g bytes per gradient value, s x b tokens, width h, key/value
width k (kv_heads x head_dim), feed-forward width f, a heads, vocabulary V.

Not counted: the token batch (16sb bytes of int64 ids and targets), model buffers such as a causal mask,
Adam's step counters, short-lived forward temporaries (the QKV projection's output, the unscaled and
masked scores), and the optimizer's working memory: PyTorch's single-tensor Adam (its CPU default) needs
at most two temporaries the size of the largest parameter, while the foreach Adam (its CUDA default) makes
a temporary of every moment at once (about 4 bytes a parameter), unmeasured here.
"""

from __future__ import annotations

from . import counts, eager_step, finetune, loops, phases
from .counts import param_counts
from .recipes import RECIPES
from .shape import Shape
from .walk import Event, Reps, Segment, resident_state

SAVED = "derivatives.yaml"
MEASURED = "measured, see docs/results.md §10.6"


def _stats(shape: Shape) -> int:
    """A norm's saved statistics per token, fp32: LayerNorm keeps mean and 1/std, RMSNorm only 1/std."""
    return 8 if shape.norm == "layer" else 4  # RMSNorm: a fused rms_norm's rstd; unmeasured


def _kv(shape: Shape) -> int:
    return shape.kv_heads * shape.head_dim


def layer_parts(shape: Shape, seq: int, micro_batch: int, p: int = 2) -> tuple[int, int, int]:
    """(attention, scores, feed-forward): the bytes one layer saves for backward with nothing recomputed.

    attention  p sb (4h + 2k) + stats: norm 1's input, the QKV projection's input, the copies of Q, K and V
               that matmul makes of the head-split views (K and V k wide: grouped-query attention as
               sdpa's enable_gqa keeps it; a repeat_kv implementation keeps them h wide; unmeasured),
               the output projection's input, and norm 1's statistics
    scores     p a s^2 b: the softmax output
    feed-forward p sb (2h + 2f) + stats: norm 2's input, the up projection's input, GELU's input and
               output; SwiGLU keeps 4f (gate output, SiLU output, up output, their product; unmeasured)
    """
    sb, h = seq * micro_batch, shape.hidden
    attention = p * sb * (4 * h + 2 * _kv(shape)) + _stats(shape) * sb
    scores = p * shape.heads * seq * sb
    mlp = p * sb * (2 * h + (4 if shape.gated_ffn else 2) * shape.ffn) + _stats(shape) * sb
    return attention, scores, mlp


def kept_bytes(shape: Shape, seq: int, micro_batch: int, recompute: str, p: int = 2) -> int:
    """What a layer keeps through the forward pass: all; all but the softmax output (selective: the
    checkpointed core keeps its inputs, views of the QKV output as large as the copies it drops); or
    only the layer's input (full)."""
    attention, scores, mlp = layer_parts(shape, seq, micro_batch, p)
    if recompute == "none":
        return attention + scores + mlp
    if recompute == "selective":
        return attention + mlp
    if recompute == "full":
        return p * seq * micro_batch * shape.hidden
    raise ValueError(f"unknown recomputation {recompute!r}")


def _layer_params(shape: Shape) -> tuple[int, int]:
    """(attention and norm 1, feed-forward and norm 2) parameters of one layer (calc.inventory)."""
    tensors = counts.layer_tensors(shape)
    attention = sum(t.numel for t in tensors if t.attention)
    return attention, sum(t.numel for t in tensors) - attention


def _forward_layer(shape: Shape, seq: int, b: int, recompute: str, p: int) -> list[Event]:
    kept = kept_bytes(shape, seq, b, recompute, p)
    source = {
        "none": f"{SAVED}: what each op of the block saves; {MEASURED}",
        "selective": f"{SAVED}, less the softmax output (torch.utils.checkpoint around the core); {MEASURED}",
        "full": "torch.utils.checkpoint around the block keeps its input",
    }[recompute]
    return [Event("forward", "forward layer {layer}: keep activations for backward", "activations", kept, source)]


def _head_forward(shape: Shape, seq: int, b: int, p: int) -> list[Event]:
    sbh = seq * b * shape.hidden
    out = [
        Event(
            "forward",
            "head: keep its input for the weight gradient",
            "activations",
            p * sbh,
            f"{SAVED}: mm saves self for the weight's gradient; {MEASURED}",
        )
    ]
    if shape.final_norm:
        out.insert(
            0,
            Event(
                "forward",
                "final norm: keep its input and statistics",
                "activations",
                p * sbh + _stats(shape) * seq * b,
                f"{SAVED}: native_layer_norm saves input, mean, rstd",
            ),
        )
    return out


def _loss_forward(shape: Shape, seq: int, b: int, p: int) -> list[Event]:
    """The loop holds the logits; cross-entropy is log_softmax (saves its fp32 result) then nll_loss."""
    sbv = seq * b * shape.vocab
    out = [Event("forward", "head: logits", "logits", p * sbv, "s x b x V values; the loop holds them")]
    if p != 4:  # 16-bit logits: cross-entropy works on an fp32 copy, dropped once log_softmax is done
        out.append(Event("forward", "loss: fp32 copy of the logits", "logits", 4 * sbv, "to(float32); unmeasured"))
    out.append(
        Event("forward", "loss: fp32 log-probabilities", "logits", 4 * sbv, f"{SAVED}: _log_softmax saves result")
    )
    if p != 4:
        out.append(Event("forward", "loss: drop the fp32 copy", "logits", -4 * sbv, "nothing saves it; unmeasured"))
    return out


def _loss_backward(shape: Shape, seq: int, b: int, p: int) -> list[Event]:
    sbv = seq * b * shape.vocab
    out = [
        Event("backward", "loss backward: gradient of the log-probabilities", "logits", 4 * sbv, MEASURED),
        Event("backward", "log_softmax backward: gradient of the logits", "logits", 4 * sbv, MEASURED),
        Event(
            "backward",
            "log_softmax backward: free the log-probabilities and their gradient",
            "logits",
            -8 * sbv,
            f"released after the node runs; {MEASURED}",
        ),
    ]
    if p != 4:
        out += [
            Event("backward", "cast the logits' gradient to 16 bits", "logits", p * sbv, "ToCopyBackward0; unmeasured"),
            Event("backward", "free the fp32 gradient of the logits", "logits", -4 * sbv, "unmeasured"),
        ]
    return out


def _head_backward(shape: Shape, seq: int, b: int, p: int, g: int) -> list[Event]:
    n, sb = param_counts(shape), seq * b
    sbh = sb * shape.hidden
    head = n["head"] or n["embedding"]  # a tied head's gradient is the embedding's, summed at its end
    out = [
        Event(
            "backward", "head backward: write its weight gradients", "gradients", g * head, f"parameters x {g} bytes"
        ),
        Event(
            "backward",
            "head backward: gradient of the residual stream, held down to the embedding",
            "activations",
            p * sbh,
            MEASURED,
        ),
        Event("backward", "head backward: free the logits' gradient", "logits", -p * sb * shape.vocab, MEASURED),
        Event("backward", "head backward: release its input", "activations", -p * sbh, MEASURED),
    ]
    if shape.final_norm:
        out += [
            Event(
                "backward",
                "final norm backward: write its weight gradients",
                "gradients",
                g * n["final_norm"],
                f"parameters x {g} bytes",
            ),
            Event(
                "backward",
                "final norm backward: release its input and statistics",
                "activations",
                -(p * sbh + _stats(shape) * sb),
                SAVED,
            ),
        ]
    return out


def _backward_layer(shape: Shape, seq: int, b: int, recompute: str, p: int, g: int) -> list[Event]:
    """One layer's backward in autograd's order: the feed-forward half, then attention."""
    sb, h, k = seq * b, shape.hidden, _kv(shape)
    attention, scores, mlp = layer_parts(shape, seq, b, p)
    attention_params, mlp_params = _layer_params(shape)
    layer = "backward layer {layer}"
    out = []
    if recompute == "full":
        out.append(
            Event(
                "backward",
                f"{layer}: recompute the layer's forward",
                "activations",
                attention + scores + mlp - p * sb * h,
                f"non-reentrant checkpoint recomputes the block at its first unpack; {MEASURED}",
            )
        )
    # SwiGLU's mul backward holds the gradients of two f-wide values at once (unmeasured).
    working = (2 if shape.gated_ffn else 1) * p * sb * shape.ffn
    out += [
        Event("backward", f"{layer}: write feed-forward weight gradients", "gradients", g * mlp_params, f"x {g} bytes"),
        Event("backward", f"{layer}: gradients of the feed-forward's inner values", "activations", working, MEASURED),
        Event("backward", f"{layer}: free them", "activations", -working, MEASURED),
        Event("backward", f"{layer}: release the feed-forward's activations", "activations", -mlp, SAVED),
        Event(
            "backward", f"{layer}: write attention weight gradients", "gradients", g * attention_params, f"x {g} bytes"
        ),
    ]
    held = attention + (scores if recompute != "selective" else 0)
    if recompute == "selective":  # the core's inputs stay held; Q, K, V copies and softmax come back
        again = scores + p * sb * (h + 2 * k)
        held += again
        out.append(
            Event(
                "backward",
                f"{layer}: recompute the attention core",
                "activations",
                again,
                f"checkpoint re-creates the softmax output and the Q, K, V copies; {MEASURED}",
            )
        )
    core = [
        (f"{layer}: gradients of the softmax output and of V", scores + p * sb * k),
        (f"{layer}: release the output projection's input and V", -p * sb * (h + k)),
        (f"{layer}: softmax backward: gradient of the scores", scores),
    ]
    out += [Event("backward", label, "activations", n, f"{SAVED}; {MEASURED}") for label, n in core]
    held += sum(n for _, n in core)
    out.append(
        Event("backward", f"{layer}: release attention's activations and gradients", "activations", -held, SAVED)
    )
    return out


def _embedding_backward(shape: Shape, g: int) -> list[Event]:
    n, source = param_counts(shape), f"parameters x {g} bytes"
    out = []
    if n["positions"]:
        out.append(Event("backward", "position embedding: write its gradient", "gradients", g * n["positions"], source))
    if shape.tied:
        table = g * n["embedding"]
        out += [
            Event(
                "backward",
                "token embedding: dense gradient of the table",
                "gradients",
                table,
                "embedding_dense_backward",
            ),
            Event("backward", "token embedding: summed into the head's gradient", "gradients", -table, "autograd sums"),
        ]
    else:
        out.append(Event("backward", "token embedding: write its gradient", "gradients", g * n["embedding"], source))
    return out


def segments(
    shape: Shape,
    seq: int,
    micro_batch: int,
    recipe: str,
    recompute: str,
    activation_bytes: int | None = None,
    attention: str = "sdpa",
    device: str = "cuda",
    tune=None,
    loop=None,
    engine=None,
) -> list[Segment]:
    """The step on a single device, every size in bytes. transformers' models (families "llama" and
    "gpt2") are replayed op by op (calc.eager_step); the course's Decoder follows the counts below, with
    activations at `activation_bytes` (p) and weights, gradients and Adam's state as `recipe` keeps them.
    `tune` (calc.finetune.Tuning: LoRA or frozen layers) is replayed for transformers' models only; so is
    `engine`, one rank of DDP (calc.engines.ddp.DataParallel)."""
    if shape.family != "decoder":
        if recompute == "selective":
            raise ValueError("transformers checkpoints whole layers: recompute none or full")
        if engine is not None:
            tune, loop = tune or finetune.DEFAULT, loop or loops.BARE
            return eager_step.segments(shape, seq, micro_batch, recipe, recompute, attention, device, tune, loop,
                                       engine)  # fmt: skip
        if tune is None and loop is None:
            return eager_step.segments(shape, seq, micro_batch, recipe, recompute, attention, device)
        if loop is None:
            return eager_step.segments(shape, seq, micro_batch, recipe, recompute, attention, device, tune)
        tune = finetune.DEFAULT if tune is None else tune  # issue 19: the loop around the step (calc.loops)
        return eager_step.segments(shape, seq, micro_batch, recipe, recompute, attention, device, tune, loop)
    if tune is not None and not tune.default:
        raise ValueError("the eager walk fine-tunes transformers' models only")
    if engine is not None:
        raise ValueError("the eager walk runs the course's Decoder on one device only")
    if loop is not None and loop != loops.BARE:
        raise ValueError("the course's Decoder is walked in a bare loop only")
    return _decoder_segments(shape, seq, micro_batch, recipe, recompute, activation_bytes)


def _decoder_segments(shape: Shape, seq: int, micro_batch: int, recipe: str, recompute: str,
                      activation_bytes: int | None) -> list[Segment]:  # fmt: skip
    """The course's Decoder's step, by the counts below."""
    if activation_bytes is None:
        activation_bytes = RECIPES[recipe].activations
    p, g, b, h = activation_bytes, RECIPES[recipe].gradients, micro_batch, shape.hidden
    layers = range(1, shape.layers + 1)
    residual = p * seq * b * h
    segs = [
        Segment(tuple(resident_state(param_counts(shape)["total"], recipe))),
        Segment(tuple(_forward_layer(shape, seq, b, recompute, p)), Reps(layers)),
        Segment(
            tuple(
                _head_forward(shape, seq, b, p)
                + _loss_forward(shape, seq, b, p)
                + _loss_backward(shape, seq, b, p)
                + _head_backward(shape, seq, b, p, g)
            )
        ),
        Segment(tuple(_backward_layer(shape, seq, b, recompute, p, g)), Reps(range(shape.layers, 0, -1))),
    ]
    end = _embedding_backward(shape, g)
    end.append(Event("backward", "free the residual stream's gradient", "activations", -residual, MEASURED))
    written = sum(s.repeats * e.bytes for s in segs for e in s.events if e.category == "gradients")
    written += sum(e.bytes for e in end if e.category == "gradients")
    end += [
        phases.optimizer_step("Adam", "single-tensor Adam: temporaries not counted"),
        phases.zero_grad(written),
        Event("optimizer", "training loop drops the logits", "logits", -p * seq * b * shape.vocab, "end of the step"),
    ]
    segs.append(Segment(tuple(end)))
    return segs
