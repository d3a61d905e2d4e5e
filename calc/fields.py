"""The CLI's fields in one table: for each, the group --help lists it in, its metavar (or a switch, --x and
--no-x) and its help. calc.cli builds its parser from it, and calc.inputs validates the same names (its
FIELDS; tests/test_every_flag.py checks the two agree, and runs every field through every walk)."""

from __future__ import annotations

from dataclasses import dataclass

from .finetune import ADAPTER_DTYPES, MODES, TARGETS
from .hf import READERS
from .inputs import ATTENTIONS, BOOL_FIELDS, CARDS, CHOICE_FIELDS, COUNT_FIELDS, DEVICES, INT_FIELDS, WALKS
from .loops import ADAMW_IMPLS, LOOPS, LOSSES
from .optimizers import OPTIMIZERS
from .presets import PRESETS
from .recipes import RECIPES, RECOMPUTE


@dataclass(frozen=True)
class Field:
    """One field as the CLI takes it: `--name VALUE` (metavar None: argparse's own), or a switch."""

    name: str  # the flag without dashes, calc.inputs' key
    metavar: str | None = None
    help: str | None = None
    switch: bool = False  # --name / --no-name (argparse.BooleanOptionalAction)


def one_of(choices) -> str:
    """A metavar listing the values a field takes."""
    return "|".join(choices)


COUNT_HELP = {
    "head-size": "0: width / heads",
    # calc.shape.Shape.sliding_window: the deck's terms do not change with it; the eager walk counts the masks
    "sliding-window": "0: none; the eager walk counts the masks Gemma 2's and 3's code builds for it",
}
MODEL = (
    Field("preset", help=f"start from a published shape: {', '.join(PRESETS)} (default llama-7b)"),
    Field("hf-config", "PATH", f"start from a transformers config.json instead (model_type {', '.join(READERS)}); "
          "flags override it"),
    *(Field(name, "N") for name in INT_FIELDS),
    *(Field(name, "N", COUNT_HELP.get(name, "0: none")) for name in COUNT_FIELDS),
    *(Field(name, switch=True) for name in BOOL_FIELDS),
    *(Field(name, one_of(choices)) for name, (_, choices) in CHOICE_FIELDS.items()),
    Field("capacity-factor", "C", "each expert takes at most C k tokens / E (default 0: dropless)"),
)
STEP = (
    Field("seq", "N", "sequence length s (default 4096)"),
    Field("micro-batch", "N", "sequences per step b (default 1)"),
    Field("recipe", one_of(RECIPES), "precision/optimiser recipe (default mixed)"),
    Field("recompute", one_of(RECOMPUTE), "activation recomputation (default none)"),
    Field("walk", one_of(WALKS), "deck: the deck's walk (default); eager: what PyTorch eager autograd allocates "
          "(one device)"),
    Field("attention", one_of(ATTENTIONS), "transformers' attn_implementation, in every walk: sdpa, a fused kernel "
          "that keeps no s x s scores (the eager walk's default where the family's code runs it), or eager, "
          "which keeps them (the deck walk's default)"),
    Field("device", one_of(DEVICES), "the eager walk: where the step runs (AdamW foreach or not)"),
)
PARALLEL = (
    Field("dp", "N", "data-parallel workers (default 1)"),
    Field("tp", "N", "tensor-parallel ranks (default 1)"),
    Field("pp", "N", "pipeline stages (default 1)"),
    Field("ep", "N", "expert-parallel ranks among the dp workers, E/ep experts each"),
    Field("zero", "0|1|2|3", "ZeRO stage over the dp workers (default 0)"),
    Field("sequence-parallel", switch=True),
    Field("flash", help="FlashAttention: the same as --attention sdpa (--no-flash: --attention eager)", switch=True),
    Field("grad-accum", "N", "micro-batches per step and worker (default: pp)"),
    Field("global-batch", "N", "sequences per optimizer step, for --plan (default 1024)"),
    Field("capacity-gb", "GB", "device memory, for --plan and --fit-card (default 80)"),
    Field("card", "NAME", f"a card's memory instead of --capacity-gb: {', '.join(CARDS)}"),
)
TUNING = (
    Field("finetune", one_of(MODES), "full (default): every parameter trains; lora, qlora: adapters on a frozen "
          "(NF4) base; freeze: the first --freeze-layers blocks and the embedding frozen"),
    Field("optimizer", one_of(OPTIMIZERS), "default adamw"),
    Field("lora-rank", "R", "LoRA's rank r (default 8)"),
    Field("lora-alpha", "A", "LoRA's alpha (default 16; scales the update, no memory)"),
    Field("lora-targets", "LIST", f"comma list of {','.join(TARGETS)}, or all-linear (default q,v)"),
    Field("adapter-dtype", one_of(ADAPTER_DTYPES), "lora, qlora: the adapters' dtype; fp32 (default, peft's "
          "get_peft_model upcasts 16-bit adapters), model: the model's dtype "
          "(autocast_adapter_dtype=False)"),
    Field("freeze-layers", "N", "--finetune freeze: the first N blocks (default 0)"),
    Field("paged-optimizer", help="the optimizer state lives in CPU-pageable memory (bitsandbytes' paged "
          "optimizers): not counted", switch=True),
)
LOOP = (
    Field("loop", one_of(LOOPS), "bare (default): loss.backward(), optimizer.step(), zero_grad(); trainer: "
          "transformers' Trainer as it comes (its labels tensor, all micro-batches fetched first, fused AdamW); sft: "
          "TRL's SFTTrainer (its collator and chunked head)"),
    Field("adamw-impl", one_of(ADAMW_IMPLS), "AdamW's implementation (default PyTorch's pick: foreach on cuda, "
          "single on cpu; Trainer and TRL pick fused, optim adamw_torch_fused)"),
    Field("loss", one_of(LOSSES), "transformers: ForCausalLMLoss on the logits (default); trl-chunked: TRL's "
          "chunked log-prob head, no logits (the default with --loop sft); torchtune-chunked: torchtune's "
          "CEWithChunkedOutputLoss, the head and the fp32 upcast one of 8 chunks at a time; liger-fused: Liger's "
          "fused linear cross-entropy, the gradients made in the forward, one tile at a time (--device cuda; from "
          "source, not measured)"),
)
# --help's groups in order: (title, fields); None: the parser's own options
GROUPS = (
    (None, MODEL + STEP),
    ("several devices (bytes and peak become per device)", PARALLEL),
    ("fine-tuning (one device)", TUNING),
    ("the loop around the step (--walk eager)", LOOP),
)
