"""Two losses that never hold the b x s x V logits in fp32 at once (issue 19, `--loss`): torchtune's chunked
cross-entropy and Liger's fused linear cross-entropy. Both score every position (the labels are shifted and
padded with -100, as torchtune's recipes and Liger's LigerForCausalLMLoss do): N = b x s tokens.

torchtune-chunked: CEWithChunkedOutputLoss (torchtune/modules/loss/ce_chunked_output_loss.py) with the
model's chunked_output (torchtune/modules/transformer.py, TransformerDecoder.chunked_output): the final hidden
state is split into `CHUNKS` pieces along the sequence (tensor_split, views) and the head is applied to each,
so the 16-bit logits are still all built (a list of chunks, alive until the loss returns), but each is upcast
and put through cross_entropy(reduction="sum") one at a time: only one chunk's fp32 copy exists at once.
log_softmax saves its fp32 result, so every chunk's log-probabilities stay until backward. Plain PyTorch:
measured on CPU steps (scripts/training/measure_loops.py, loop "trainer-torchtune-ce", which patches the
model's forward with a re-implementation of these two functions, since torchtune is not installed here).

liger-fused: LigerFusedLinearCrossEntropyFunction (liger_kernel/ops/fused_linear_cross_entropy.py) as
apply_liger_kernel_to_*(fused_linear_cross_entropy=True) calls it through LigerForCausalLMLoss
(liger_kernel/transformers/model/loss_utils.py): an autograd Function whose forward walks the tokens in
chunks of `liger_chunk` rows, builds one chunk x V tile of logits, lets a Triton kernel turn it into its
gradient in place, and accumulates the gradients of the hidden state (grad_input, N x H) and of the head
(grad_weight, V x H, the weight's dtype) in the forward; its backward hands them back. Triton runs on CUDA
only: modelled from its source (the torch >= 2.8, compute capability >= 8 path: addmm into an fp32
grad_weight), not measured.
"""

from __future__ import annotations

from .parts.linear import AUTOCAST
from .parts.ops import Ops
from .replay import T

CHUNKS = 8  # CEWithChunkedOutputLoss(num_output_chunks=8), torchtune's default and its recipes' setting
LIGER_MEMORY = 1  # _CHUNK_MEM_CONST: the transient logits are bounded by about N x H values


def split(n: int, k: int) -> list[int]:
    """torch.tensor_split(n items, k): the first n % k pieces get one more."""
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def liger_chunk(tokens: int, hidden: int, vocab: int) -> int:
    """Rows of Liger's logits tile: next_power_of_2(ceil(N / ceil(V / H))), at most N
    (fused_linear_cross_entropy_forward's inc_factor and chunk_size)."""
    inc = -(-vocab // (LIGER_MEMORY * hidden))
    rows = -(-tokens // inc)
    return min(1 << (rows - 1).bit_length(), tokens)


def _labels(ops: Ops, tokens: int) -> T:
    """The shifted labels: pad(labels, (0, 1), -100)[..., 1:] made contiguous (int64), no gradient."""
    t = ops.new(tokens, 8, "shifted labels (int64)", "labels shifted left, padded with -100")
    t.requires_grad = False
    return t


def torchtune_head(ops: Ops, final: T, head: str) -> T:
    """chunked_output and CEWithChunkedOutputLoss.forward, and their backward; returns the loss."""
    rp, st = ops.rp, ops.st
    h, b = st.shape.hidden, st.micro_batch
    labels = _labels(ops, st.tokens)
    pieces = [b * s for s in split(st.seq, CHUNKS)]
    chunks = tuple(rp.view(final, n * h, f"hidden states, chunk {i + 1} of {CHUNKS}") for i, n in enumerate(pieces))
    rp.node("split", None, inputs=[(final, final.nbytes, "new")], outs=chunks)
    trains = rp.needs(f"{head}.weight")
    w16 = _weight(ops, head) if trains else None
    logits = [_chunk_logits(ops, x, n, head, trains, w16) for x, n in zip(chunks, pieces, strict=True)]
    rp.drop(*chunks, why="tensor_split's views: chunked_output returns")
    # labels.tensor_split(8, dim=1), each .reshape(-1): a copy of a non-contiguous slice where b > 1
    targets = [ops.new(n if b > 1 else 0, 8, "labels chunk", "reshape(-1) of a slice") for n in pieces]
    losses = []
    for i, (y, target) in enumerate(zip(logits, targets, strict=True)):
        target.requires_grad = False
        up = y if y.unit == 4 else ops.unary(f"logits chunk {i + 1} in fp32", y, [], 4, "logits")
        logp = ops.new(up.nbytes // 4, 4, f"log-probabilities, chunk {i + 1}", "log_softmax saves its result", "logits")
        rp.node("log_softmax", logp, saved=[logp], inputs=[(up, up.nbytes, "new")])
        loss = T(0, f"loss of chunk {i + 1}")
        rp.node("nll_loss", loss, saved=[target], inputs=[(logp, logp.nbytes, "new")])
        rp.drop(logp, *([up] if up is not y else []), why="cross_entropy returns")
        losses.append(loss)
    total = T(0, "loss")
    rp.node("sum of the chunks' losses", total, inputs=[(t, 0, "pass") for t in losses])
    rp.drop(*logits, *targets, labels, why="the loss returns")
    return total


def _weight(ops: Ops, head: str) -> T:
    """What the chunks' matmuls take the trainable head weight's gradient into, before its .grad exists: its
    gradients from the 8 chunks meet in one autograd InputBuffer (summed out of place as each arrives, by
    calc.replay) and reach AccumulateGrad once all have. Under autocast that is the weight's cached 16-bit
    cast, whose ToCopyBackward0 then makes the fp32 .grad; otherwise the weight itself, whose AccumulateGrad
    takes the sum as .grad without a copy (recorded as the sum freed, then the .grad made)."""
    rp, st = ops.rp, ops.st
    params = st.shape.hidden * st.shape.vocab
    grad = params * st.param_bytes
    if ops.autocast:
        w16 = rp.new(params * AUTOCAST, f"16-bit copy of {head}.weight", "autocast caches a weight's cast", "weights")
        w16.unit = AUTOCAST
        ops.casts.append((rp.layer, w16))
        rp.node("to(bfloat16)", w16, inputs=[(f"{head}.weight", grad, "param")])
        return w16
    taken = T(0, f"{head}.weight's gradient, taken")
    rp.node("AccumulateGrad", taken, inputs=[(f"{head}.weight", grad, "param")])
    w = T(0, f"{head}.weight", unit=st.param_bytes)
    rp.node("AccumulateGrad (the sum becomes .grad)", w, inputs=[(taken, 0, "new")])
    return w


def _chunk_logits(ops: Ops, x: T, n: int, head: str, trains: bool, w16: T | None) -> T:
    """The head on one chunk (b, s / 8, h): under autocast a 16-bit copy of the chunk; in full precision
    matmul's fold reshapes a non-contiguous chunk (b > 1) into a copy. mm saves its input for the weight's
    gradient and the (cast) weight for the input's."""
    rp, st = ops.rp, ops.st
    h, v = st.shape.hidden, st.shape.vocab
    params = v * h
    if ops.autocast and x.unit != AUTOCAST:
        x_in = ops.cast16(x, x.label)
    elif st.micro_batch > 1:
        x_in = ops.new(n * h, x.unit, f"{x.label} (a copy)", "matmul folds a non-contiguous input: reshape copies")
        rp.node("reshape", x_in, inputs=[(x, x.nbytes, "pass")])
    else:
        x_in = rp.keep(x)
    cast = w16 if ops.autocast else None
    if ops.autocast and not trains:  # a frozen weight is cast anew at each call
        cast = rp.new(params * AUTOCAST, f"16-bit copy of {head}.weight", "autocast casts a frozen weight", "weights")
    saved = ([x_in] if trains else []) + ([cast] if cast is not None and x_in.requires_grad else [])
    unit = AUTOCAST if ops.autocast else x.unit
    y = ops.new(n * v, unit, "logits chunk", f"{head}: chunk x {v} values", "logits")
    inputs = [(x_in, x_in.nbytes, "new")]
    if trains:  # the weight's gradient goes to where the chunks' gradients meet (_weight)
        inputs.append((w16, params * w16.unit, "new"))
    rp.node(head, y, saved=saved, inputs=inputs)
    rp.drop(x_in)
    if ops.autocast and not trains:
        rp.drop(cast, why="an uncached cast of a frozen weight")
    return y


def _chunk_temporary(ops: Ops, rows: int, weight_grad: bool) -> int:
    """Bytes alive beside one chunk's tile. Under autocast (no `out=` matmuls): a 16-bit chunk x H at a time
    (the matmul's cast of the hidden chunk, then grad_logits @ weight before its copy into grad_input, then the
    chunk cast again for addmm into the fp32 grad_weight). A full-precision model takes the legacy
    accumulation, grad_weight += torch.mm(grad_logits.t(), chunk).float(): a V x H temporary. A 16-bit model
    computes into grad_input and grad_weight in place (mm and addmm with out=)."""
    st = ops.st
    h, v = st.shape.hidden, st.shape.vocab
    if ops.autocast:
        return rows * h * AUTOCAST
    return v * h * st.param_bytes if weight_grad and st.act == 4 else 0


def liger_head(ops: Ops, final: T, head: str) -> T:
    """LigerForCausalLMLoss and LigerFusedLinearCrossEntropyFunction's forward and backward; returns the loss.
    The Function's backward returns the grad_input and grad_weight it saved (grad_output is 1: no scaling);
    autograd's AccumulateGrad takes grad_weight as the head's .grad without a copy (the saved tensors are
    released first), recorded as the saved one freed and the .grad made."""
    rp, st = ops.rp, ops.st
    h, v, n = st.shape.hidden, st.shape.vocab, st.tokens
    labels = _labels(ops, n)
    trains = rp.needs(f"{head}.weight")
    needs_input = final.requires_grad
    grad_input = ops.new(n * h if needs_input else 0, final.unit, "grad_input (made in the forward)",
                         "torch.zeros_like(_input)")  # fmt: skip
    grad_weight = rp.new(v * h * st.param_bytes if trains and needs_input else 0, f"grad_weight of {head}",
                         "torch.zeros_like(weight), the weight's dtype", "gradients")  # fmt: skip
    loss_1d = ops.new(n, 4, "per-token losses (fp32)", "loss_1d = torch.zeros(BT, float32)")
    mask = ops.new(n, 1, "target != ignore_index", "target_mask")
    w16 = None
    if ops.autocast:  # `_input_chunk @ weight.t()` under autocast: a trainable weight's cast is cached
        w16 = rp.new(v * h * AUTOCAST, f"16-bit copy of {head}.weight", "autocast's cast of the weight", "weights")
        if trains:
            ops.casts.append((rp.layer, w16))
    rows = liger_chunk(n, h, v)
    c = AUTOCAST if ops.autocast else final.unit  # the tile's dtype
    tile = ops.new(rows * v, c, "logits tile, chunk x V (its gradient in place)", "_input_chunk @ weight.t()", "logits")
    temp = ops.new(_chunk_temporary(ops, rows, trains and needs_input), 1, "the chunk's temporary",
                   "fused_linear_cross_entropy_forward's loop")  # fmt: skip
    rp.drop(temp, tile, why="the chunk is done (the first, the largest)")
    if w16 is not None and not trains:
        rp.drop(w16, why="an uncached cast of a frozen weight")
    rp.drop(loss_1d, mask, why="the forward returns the summed loss")
    # two nodes: the Function's (ctx lets go of its saved gradients), then where they go
    given = T(0, "the Function's returned gradients")
    if needs_input:
        rp.grads[id(final)] = grad_input  # the hidden state's gradient is the grad_input made in the forward
    loss = T(0, "loss")
    rp.node("LigerFusedLinearCrossEntropyFunction", given, inputs=[(f"{head}.weight", v * h * st.param_bytes,
                                                                    "param")])  # fmt: skip
    rp.node("LigerFusedLinearCrossEntropyFunction (ctx)", loss, saved=[grad_weight], inputs=[(given, 0, "pass")])
    rp.drop(grad_weight, labels, why="the loss returns; ctx keeps the gradients")
    return loss
