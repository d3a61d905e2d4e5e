"""One rank of tensor parallelism: torch's styles over the decoder layers' linears (the "layers" plan), or
transformers' own plan, which splits the embedding and the head by vocabulary too (the "transformers" plan).

The plan most hand-written `parallelize_module` calls give a transformers model, one call a decoder layer on a
one-dimensional device mesh of `tp` processes: `ColwiseParallel()` on q_proj, k_proj, v_proj, gate_proj and
up_proj, `RowwiseParallel()` on o_proj and down_proj, torch's defaults throughout. The embedding, the norms,
the final norm and the head stay whole on every rank, so every rank computes the full logits. What a rank does,
from the installed torch 2.13's source (torch/distributed/tensor/parallel/style.py, _redistribute.py,
_functional_collectives.py) and traced CPU steps:

- Its weights: a column-wise linear keeps `out / tp` rows of its weight (Shard(0)) and of its bias, a row-wise
  one `in / tp` columns (Shard(1)) and the whole bias. Its attention works on `heads / tp` query heads and
  `kv_heads / tp` key/value heads, its MLP on `ffn / tp` of the inner width: one rank is the model of that
  narrower shape (`local`), its norms, embedding and head as they are. AdamW's moments and step temporaries
  are those of the rank's local tensors (DTensor runs each op on them).
- A column-wise linear's input is the replicated hidden state, wrapped as a DTensor (`from_local`, no copy).
  In backward the gradient it gets from the matmul is partial (each rank's share of the sum): the wrapper's
  backward (_FromTorchTensor) all-reduces it into a new tensor of the same size, and the partial one is freed.
  The gradients of the one input that feeds q, k and v (or gate and up) so each come new, owned by autograd,
  and are added in place (InputBuffer::accumulate).
- A row-wise linear's matmul gives a partial sum of the whole output; `RowwiseParallel`'s output
  redistribution (Partial to Replicate) all-reduces it with a functional collective, which returns a new tensor
  of the same size (funcol's all_reduce clones its input), and the partial one is freed. Its backward passes
  the gradient on (Replicate to Partial moves nothing).

The transformers plan is what `from_pretrained(..., tp_plan="auto")` applies under torchrun (transformers 5.23,
distributed/tensor_parallel.py and mixin.py, init_parallel_plans): the model's `base_model_tp_plan` on the
layers' linears (the same split, by transformers' own ColwiseParallel and RowwiseParallel hooks over DTensor
weights), "embedding_rowwise" on the input embedding and "colwise_gather_output" on the head. From traced CPU
steps (gloo, torch 2.13):

- The embedding keeps `vocab / tp` rows (Shard(0)). Its lookup is DTensor's vocabulary-parallel embedding: the
  ids outside the rank's rows masked (two comparisons and their or, b x s bools, the mask kept until the
  output's reduction), the ids copied and shifted (b x s int64 each), the local lookup (rows out of range set to
  zero), then the partial output all-reduced into a new tensor and the local one freed. Its backward runs on the
  replicated ids and gradient, so the table's gradient is whole, vocab x h, on every rank until zero_grad;
  AdamW then cuts a local copy of it for each op that meets the sharded moments (three, each freed before the
  moments' sqrt and division, which are as large: they raise no peak and are not listed).
- The head keeps `vocab / tp` rows too. It is a column-wise linear (its input wrapped, all-reduced in backward)
  whose b x s x vocab/tp output is all-gathered: funcol's all_gather_into_tensor makes the gathered buffer, gloo
  a flat copy of the input (freed) and a receive buffer as large as the gathered one (freed), and DTensor's
  redistribution concatenates the shards into the whole logits, b x s x vocab, a new tensor; then the buffer and
  the local logits go. In backward the whole logits' gradient is cut to this rank's columns (a new, contiguous
  tensor) and freed. The loss sees the whole logits, as on one device.
- Qwen3's q_norm and k_norm stay whole; their gradients are all-reduced in place by a hook (no new tensor).

Sequence parallelism (`--sequence-parallel`, the layers plan only) is torchtitan's plan over a transformers
model (Korthikanti et al. 2022, §4.2.2, as DTensor runs it): each decoder layer's two norms `SequenceParallel()`,
the attention's and the MLP's input gathered (`PrepareModuleInput`, Shard(1) to Replicate), q, k, v, gate and up
`ColwiseParallel()` on that replicated DTensor, o_proj and down_proj `RowwiseParallel(output_layouts=Shard(1))`;
the first layer's input cut to the rank's s / tp positions (`PrepareModuleInput`, Replicate to Shard(1), a
contiguous copy), the final norm `SequenceParallel()` and the head's input gathered again. The embedding, the
rotary tables and the mask see the whole sequence, as the model's forward makes them. From traced CPU steps
(gloo, torch 2.13):

- The residual stream, the norms and the residual sums hold s / tp positions of every value.
- A gather is funcol's all_gather_into_tensor: its gathered buffer, gloo's flat copy of the input (freed) and its
  receive buffer (freed), then DTensor's concatenation along the sequence into a new tensor, the buffer freed.
  The gathered input of the attention and of the MLP is what q, k and v (gate and up) save for backward: the
  whole sequence, where Megatron-LM saves the rank's part and gathers it again in backward. Their gradients
  are partial sums, added out of place, then reduce-scattered back to s / tp positions (the concatenation into
  the scatter's layout, the scatter's output and gloo's clone of its input).
- A row-wise linear's partial output is reduce-scattered likewise in forward (the same three tensors, the partial
  one freed), and its gradient gathered in backward.
- Each norm's weight stays whole on every rank; its gradient is a partial sum, which AdamW's ops all-reduce into
  temporaries of one norm's width (not listed).

Every rank holds the same: the ranks of one step are alike. Qwen3's q_norm and k_norm (one head wide) stay whole
on every rank; under the layers plan each rank keeps its own gradient of them, where transformers' plan
all-reduces it (the bytes are the same). Not counted: gloo's scratch memory outside PyTorch's allocator, and a
few bytes of scalars a rank keeps per process of its mesh.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..shape import Shape

COLWISE = frozenset({"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"})  # ColwiseParallel(): Shard(0)
ROWWISE = frozenset({"o_proj", "down_proj"})  # RowwiseParallel(): Shard(1), its output all-reduced
SOURCE = "torch 2.13: tensor/parallel/style.py ColwiseParallel, RowwiseParallel (the layers plan)"
FAMILIES = ("llama", "qwen3")  # the families whose layers the plan has been measured on
PLANS = ("layers", "transformers")  # --tp-plan, the default first
PLAN_NAMES = {"layers": "torch's ColwiseParallel and RowwiseParallel on the layers' linears",
              "transformers": 'transformers\' own plan (tp_plan="auto"), the embedding and head split by vocabulary'}
HF_SOURCE = "transformers 5.23: distributed/tensor_parallel.py EmbeddingParallel, ColwiseParallel (gather output)"
SP_SOURCE = "torch 2.13: tensor/parallel/style.py SequenceParallel, PrepareModuleInput; _functional_collectives.py"


def sequence_problem(seq: int | None, tp: int, plan: str) -> tuple[str, str] | None:
    """(field, what is not measured) where sequence parallelism over `tp` ranks is not walked, or None: it splits
    the layers plan's sequence (transformers' plan has no sequence-parallel styles for its norms), in equal parts
    (`seq`: None, not checked)."""
    if tp == 1:
        return "sequence-parallel", ("splits the sequence over tensor-parallel ranks, and there is one rank: give --tp "
                                     "2 or more, or leave --sequence-parallel unset")  # fmt: skip
    if plan != PLANS[0]:
        return "sequence-parallel", (f"is replayed under the {PLANS[0]} plan (transformers' has no sequence-parallel "
                                     f"styles for its norms): --tp-plan {PLANS[0]}, or leave --sequence-parallel "
                                     "unset")  # fmt: skip
    if seq is not None and seq % tp:
        return "sequence-parallel", (f"is measured where the ranks divide the sequence ({seq:,}) evenly: a --seq that "
                                     f"{tp} divides, or leave --sequence-parallel unset")  # fmt: skip
    return None


def plan_problem(shape: Shape, tp: int, plan: str) -> tuple[str, str] | None:
    """(field, what is not measured) where `plan` over `tp` ranks is not walked for this shape, or None: transformers'
    plan on a vocabulary the ranks do not divide (DTensor pads it). A tied head is walked: the embedding's split
    table, its head the gathered one (measured, llama-tied). The CLI's and the page's check (calc.inputs) and
    calc.step's (calc.api) alike."""
    if plan != "transformers":
        return None
    if shape.vocab % tp:
        return "tp", (f"is measured where the ranks divide the vocabulary ({shape.vocab:,}) evenly: a --tp that "
                      "divides it, or --tp-plan layers")  # fmt: skip
    return None


@dataclass(frozen=True)
class TensorParallel:
    """One rank of tensor parallelism over `tp` processes, under the layers plan or transformers' plan."""

    tp: int
    plan: str = PLANS[0]
    sequence: bool = False  # sequence parallelism: the norms and the residual stream hold s / tp positions

    @property
    def vocab_split(self) -> bool:
        """Whether the embedding and the head keep vocab / tp rows (transformers' plan)."""
        return self.plan == "transformers"

    def stored(self, shape: Shape) -> Shape:
        """The shape whose parameters are the rank's as stored: `local`, with vocab / tp rows of the embedding and
        the head under transformers' plan (calc.inputs checks that tp divides the vocabulary)."""
        local = self.local(shape)
        return replace(local, vocab=shape.vocab // self.tp) if self.vocab_split else local

    def local(self, shape: Shape) -> Shape:
        """The model one rank runs: its share of the heads and of the MLP's inner width, each head as wide
        (calc.parallel checks that tp divides them: transformers' attention needs whole heads)."""
        tp = self.tp
        return replace(shape, heads=shape.heads // tp, kv_heads=shape.kv_heads // tp, ffn=shape.ffn // tp,
                       head_size=shape.head_dim)  # fmt: skip
