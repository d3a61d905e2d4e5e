"""TRL's chunked log-prob head (issue 19, `--loss trl-chunked`, set by `--loop sft`): the b x s x V logits are
never built.

SFTTrainer patches the model's forward (add_fused_lm_head, trl/trainer/sft_trainer.py:1144 and
trl/trainer/utils.py:1548-1680; trl 1.16): the backbone's last hidden state goes to ChunkedLogProbFunction
(trl/kernels/chunked_logprob.py), which multiplies it into a fixed tile buffer min(N, 4096) x 32768 in the
compute dtype, whatever the vocabulary, and folds each tile into per-token statistics. The loss is
-log_probs summed over the tokens, divided by their number (sft_trainer.py:1611-1618). On the CPU the fold is
PyTorch code whose fp32 n x v temporaries are measured (docs/data/loops.json's sft-lora rows); on CUDA the
Triton kernels fold in place (from TRL's source: no n x v temporaries; not measured on a GPU).
Notation: N = b (s - 1) scored tokens, n = min(N, 4096), v = min(V, 32768), c the compute dtype's bytes.
"""

from __future__ import annotations

from .parts.ops import Ops
from .replay import T

TOKEN_CHUNK = 4096  # TOKEN_CHUNK_SIZE, trl/kernels/chunked_logprob.py:31
VOCAB_CHUNK = 32768  # _CHUNKED_LOGPROB_CHUNK_SIZE, trl/trainer/utils.py:1506: the tile's width
STATS = 7  # running_max, sum_exp, x_sum_exp, sq_sum_exp, z_sum, max_before_target, target_logit (340-346)
FORWARD_TILE = 3  # _forward_tile on the CPU (211-254): z x scale, z x inv_t, e = exp(z - m), e x z: three fp32
# n x v at once, and one bool n x v (is_top1's mask)
BACKWARD_TILE = 7  # _backward_tile on the CPU (257-296): y, z, log_p, p, grad, is_target.float() and their
# difference, fp32 n x v each, beside the bool is_target: where the step's peak is (all four traced steps)


def head(ops: Ops, final: T, head_name: str, compute: int, device: str) -> T:
    """The patched forward from the last hidden state to the loss, and its backward (recorded as two nodes:
    the chunked function, then the slice-and-reshape copy of the hidden state). Returns the loss."""
    rp, st = ops.rp, ops.st
    h, v_all = st.shape.hidden, st.shape.vocab
    big = st.micro_batch * (st.seq - 1)
    n, v = min(big, TOKEN_CHUNK), min(v_all, VOCAB_CHUNK)
    cpu = device == "cpu"
    mask = ops.new(big, 1, "labels != -100", "utils.py:1627: bool, one a scored token")
    mask.requires_grad = False
    # hidden_states[:, :-1].reshape(-1, h): a copy of a non-contiguous slice, saved (on CUDA with Triton the
    # valid positions are gathered instead: every position here is valid)
    hidden = ops.new(big * h, final.unit, "hidden states, shifted (a copy)", "utils.py:1618, reshape of a slice")
    rp.node("SliceBackward0", hidden, inputs=[(final, final.nbytes, "new")])
    targets = ops.new(big, 8, "targets (labels.clamp, int64)", "utils.py:1645")
    targets.requires_grad = False
    stats = ops.new(STATS * big, 4, "chunked log-prob statistics (fp32)", "chunked_logprob.py:340-346")
    buf = ops.new(n * VOCAB_CHUNK, compute, "tile buffer, min(N, 4096) x 32768", "chunked_logprob.py:347")
    copies = _copies(n, v, h, final.unit, compute)
    work = ops.new((FORWARD_TILE * 4 + 1) * n * v if cpu else 0, 1, "tile fold temporaries (fp32)",
                   "_forward_tile, chunked_logprob.py:211-254 (the CPU path)")  # fmt: skip
    copy = ops.new(copies, 1, "16-bit copies of the hidden chunk and weight tile", "chunked_logprob.py:352-353")
    rp.drop(copy, work, buf, stats, why="the chunked forward returns")
    log_z = ops.new(2 * big, 4, "log_z and entropy (fp32, saved)", "chunked_logprob.py:378-386")
    logprobs = ops.new(big, 4, "per-token log-probabilities", "chunked_logprob.py:378; the loss keeps them")
    grad_copies = [copies, (BACKWARD_TILE * 4 + 1) * n * v if cpu else 0]
    loss = T(0, "loss")
    rp.node("ChunkedLogProbFunction", loss, saved=[hidden, targets, log_z, logprobs], work=[n * VOCAB_CHUNK * compute,
            *grad_copies], inputs=[(hidden, hidden.nbytes // final.unit * 4, "new"),
                                   (f"{head_name}.weight", v_all * h * st.param_bytes, "param")])  # fmt: skip
    rp.drop(mask, targets, log_z, logprobs, hidden, why="the patched forward returns")
    return loss


def _copies(n: int, v: int, h: int, unit: int, compute: int) -> int:
    """The 16-bit copies of a token chunk of the hidden state and of a weight tile (a view at the same width)."""
    return (n * h * compute if unit != compute else 0) + (v * h * compute if compute != 4 else 0)
