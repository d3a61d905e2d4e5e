"""The training loop around the eager walk's step (issue 19): a bare PyTorch loop, or transformers' Trainer.

The eager walk (calc.eager_step) replays the step a bare loop runs: `loss = model(input_ids=x, labels=x).loss`,
`loss.backward()`, `optimizer.step()`, `optimizer.zero_grad()`. A loop adds tensors of its own, and picks the
optimizer's implementation. Sources below are the installed torch 2.13, transformers 5.23 and accelerate,
traced on CPU steps (docs/data/loops.json, scripts/training/measure_loops.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from .shape import Shape
from .walk import Event

# bare: the loop above (calc's step since the start). trainer: transformers' Trainer with its defaults
# (TrainingArguments.optim "adamw_torch_fused", max_grad_norm 1.0, default_data_collator). sft: TRL's
# SFTTrainer (a Trainer) with its collator and its chunked log-prob head (calc.trl_head).
LOOPS = ("bare", "trainer", "sft")
# The loss as it is computed: transformers' ForCausalLMLoss on the b x s x V logits, TRL's chunked head
# (calc.trl_head), torchtune's chunked cross-entropy or Liger's fused linear cross-entropy (calc.losses).
LOSSES = ("transformers", "trl-chunked", "torchtune-chunked", "liger-fused")
MEASURED_LOSSES = ("transformers", "trl-chunked", "torchtune-chunked")  # liger-fused: from its source, not measured
# torch.optim.AdamW's implementations: single-tensor (a Python for loop over the parameters), foreach
# (torch._foreach_* over each parameter group at once), fused (one torch._fused_adamw_ call, in place).
ADAMW_IMPLS = ("single", "foreach", "fused")
# The page's loop presets ("as Trainer runs it"): the fields (the CLI's flags) each loop sets when left to its
# defaults. Trainer: optim "adamw_torch_fused", bf16=False, gradient_checkpointing=False (TrainingArguments),
# ForCausalLMLoss. TRL's SFTTrainer: the same optimizer; SFTConfig turns bf16 and gradient_checkpointing on
# (autocast, every layer checkpointed) and patches in its chunked log-prob head (calc.trl_head).
LOOP_PRESETS = {
    "trainer": {"loop": "trainer", "adamw-impl": "fused", "loss": "transformers", "recipe": "fp32-full",
                "recompute": "none"},
    "sft": {"loop": "sft", "adamw-impl": "fused", "loss": "trl-chunked", "recipe": "autocast", "recompute": "full"},
}  # fmt: skip
INT64 = 8  # bytes of a token id
LOOP_SCALARS = 4  # Trainer's 0-dim fp32 scalars kept across steps, 4 bytes each: _tr_loss (trainer.py:1647),
# the last total norm (grad_norm, 1931) and two division results (tr_loss_step, 1909, and one more); traced
ROTARY_TABLES = 2  # inv_freq and original_inv_freq (LlamaRotaryEmbedding's buffers), head_dim / 2 fp32 each
COLLATED = {"bare": 1, "trainer": 2, "sft": 3}  # int64 b x s tensors per micro-batch: the bare loop passes one
# tensor as input_ids and labels; Trainer's default_data_collator stacks input_ids and labels as two
# (trainer.py:2291); TRL's collator adds attention_mask (trl/trainer/sft_trainer.py:195, 201, 224)


@dataclass(frozen=True)
class Loop:
    """The loop's fields: which loop, AdamW's implementation ("": the loop's pick), micro-batches a step, loss."""

    name: str = "bare"
    adamw_impl: str = ""
    grad_accum: int = 1
    loss: str = ""  # "": the loop's (TRL's chunked head under sft, else transformers')

    @property
    def loss_kind(self) -> str:
        return self.loss or ("trl-chunked" if self.name == "sft" else "transformers")

    def impl(self, device: str) -> str:
        """AdamW's implementation: the one given, else the loop's pick. Trainer and TRL's SFTTrainer default to
        optim="adamw_torch_fused" on torch >= 2.8 (transformers/training_args.py:806-811), which adds
        fused=True (trainer_optimizer.py:206-207). Left to itself PyTorch never picks fused:
        _default_to_fused_or_foreach (torch/optim/optimizer.py, called at adam.py:938) picks foreach on
        CUDA (torch/utils/_foreach_utils.py:8-10: cuda, xpu, mtia) and single-tensor on the CPU."""
        if self.adamw_impl:
            return self.adamw_impl
        if self.name != "bare":
            return "fused"
        return "foreach" if device == "cuda" else "single"


BARE = Loop()


def start_events(loop: Loop, shape: Shape, tokens: int, block: int) -> list[Event]:
    """What the loop holds as the step begins beyond the bare loop's token ids (calc.eager_step counts one
    int64 tensor): Trainer's second int64 tensor (labels), the other micro-batches of the step (Trainer's
    get_batch_samples, trainer.py:2291, fetches all of them before the first forward), the rotary tables
    and its kept scalars. Each in the allocator's blocks (`block`)."""
    if loop.name == "bare":
        return []
    n = COLLATED[loop.name]
    rounded = lambda nbytes: -(-nbytes // block) * block  # noqa: E731
    what = "labels (int64), a second tensor" if n == 2 else "labels and attention_mask (int64)"
    out = [Event("start", what, "activations", (n - 1) * rounded(INT64 * tokens),
                 "the loop's collator: b x s x 8 bytes each")]  # fmt: skip
    if loop.grad_accum > 1:
        fetched = (loop.grad_accum - 1) * n * rounded(INT64 * tokens)
        out.append(Event("start", "the step's other micro-batches (int64 ids and labels)", "activations", fetched,
                         "get_batch_samples fetches them first (trainer.py:2291)"))  # fmt: skip
    if shape.positions == "rope":
        tables = ROTARY_TABLES * rounded(4 * (shape.head_dim // 2))
        out.append(Event("start", "rotary buffers (inv_freq, original_inv_freq)", "weights", tables,
                         "LlamaRotaryEmbedding's buffers: head_dim / 2 fp32 each"))  # fmt: skip
    out.append(Event("start", "the loop's scalars", "optimizer", LOOP_SCALARS * rounded(4),
                     "Trainer's _tr_loss, grad_norm and last loss (0-dim fp32)"))  # fmt: skip
    return out


def clip_events(loop: Loop, tensors: int, block: int) -> list[Event]:
    """Trainer's gradient clipping (max_grad_norm 1.0, trainer.py:1931, through accelerate's clip_grad_norm_ to
    torch.nn.utils.clip_grad_norm_'s foreach path): a 0-dim fp32 norm per gradient (_foreach_norm,
    clip_grad.py:95), their stack (106) and the total norm (105), alive together; the norms and the stack are
    freed, the total norm stays as grad_norm (counted in the loop's scalars). Traced: 244 B for 30 tensors."""
    if loop.name == "bare":
        return []
    rounded = lambda nbytes: -(-nbytes // block) * block  # noqa: E731
    held = tensors * rounded(4) + rounded(4 * tensors) + rounded(4)
    how = "torch._foreach_norm of each gradient, torch.stack, linalg.vector_norm"
    return [Event("optimizer", "clip_grad_norm_: per-tensor norms, their stack and the total norm", "optimizer",
                  held, how),
            Event("optimizer", "clip_grad_norm_: norms freed", "optimizer", -held, how)]  # fmt: skip
