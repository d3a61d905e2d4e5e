"""Every field in one table (issue 17: a field is declared once): its name (the CLI's flag without dashes,
calc.inputs' key, the page's input name), how it is read (its kind, bounds, choices, default, the Shape or
Parallel attribute it sets), which walks, fine-tunings and output modes read it, the CLI's metavar and help,
and the page's label and place in the form. Derived from it: calc.cli's parser and its per-mode refusals,
calc.inputs' limits and field groups (calc.web parses through calc.inputs), and the page's form and starting
values (hooks/placeholders.py). tests/calc/test_fields.py checks that each name is written once here and that the
page's template names none; tests/calc/test_every_flag.py runs every field through every walk and output mode."""

from __future__ import annotations

from dataclasses import dataclass

from . import families
from .engines.pipeline import SCHEDULES
from .engines.tensor import PLANS as TP_PLANS
from .finetune import ADAPTER_DTYPES, MODES, TARGETS, Tuning
from .hf import READERS
from .loops import ADAMW_IMPLS, LOOPS, LOSSES
from .optimizers import OPTIMIZERS
from .parallel import OFFLOADS
from .presets import PRESETS
from .recipes import RECIPES, RECOMPUTE
from .shape import ACTIVATIONS, NORMS, POSITIONS

WALKS = ("deck", "eager")  # calc.walk (the default) or calc.eager (PyTorch eager autograd, one device)
ATTENTIONS = ("sdpa", "eager")  # transformers' attn_implementation (its default first); the deck walk: sdpa is
# FlashAttention (no s x s scores kept), eager keeps them (calc.inputs.attention_fields)
DEVICES = ("cuda", "cpu")  # where the eager walk's step runs: PyTorch picks foreach AdamW on CUDA
ZERO_STAGES = ("0", "1", "2", "3")
# The eager walk's engines over data-parallel processes (calc.engines): DDP (ZeRO 0, or 1 beside torch's
# ZeroRedundancyOptimizer) and FSDP2's fully_shard (ZeRO 2: reshard_after_forward=False, 3: True, its default)
ENGINES = {"ddp": ("0", "1"), "fsdp2": ("2", "3")}  # each engine's ZeRO stages
# Common cards by their memory in GB (10^9 bytes), for --card: the planner's capacity.
CARDS = {
    "rtx-3090": "24",  # GeForce RTX 3090 and 4090: 24 GB GDDR6X
    "rtx-4090": "24",
    "a100-40gb": "40",
    "a6000": "48",  # RTX A6000 and L40S: 48 GB GDDR6
    "l40s": "48",
    "a100-80gb": "80",
    "h100-80gb": "80",
    "h100-nvl": "94",
    "h200": "141",
    "b200": "180",  # DGX B200: 1,440 GB over 8 GPUs
    "mi300x": "192",
}
TUNED = Tuning()  # the fine-tuning fields' defaults are calc.finetune.Tuning's
# The output modes (the CLI's --table, --plan, --fit-card; "step" is none of them) and the page's fieldsets.
OUTPUTS = ("step", "table", "plan", "fit-card")
PLANNERS = ("plan", "fit-card")  # the output modes that choose a layout themselves
SECTIONS = ("Model", "Training step", "Several devices", "Fine-tuning", "Device and planner")
# The page's blocks that are no field (hooks/calculator.html draws each): their fieldset and place in it.
PAGE_BLOCKS = {"trainer-config": ("Model", 3), "loop-preset": ("Training step", 8), "targets-note": ("Fine-tuning", 9),
               "capacity-presets": ("Device and planner", 3)}  # fmt: skip


@dataclass(frozen=True)
class Page:
    """How the page's form (hooks/calculator.html) shows a field: its label (the page's name for the field,
    which the page's messages put for calc's --flag), its fieldset and place there, and its control: "" is
    the kind's own (a text box for a number or a text, a select for a choice, a checkbox for a switch), or
    "presets" (the preset list) or "config" (the config.json box)."""

    label: str
    section: str  # one of SECTIONS
    at: int  # its place in the fieldset, among the others and PAGE_BLOCKS
    control: str = ""
    keys: str = "numeric"  # a text box's inputmode
    placeholder: str = ""
    options: tuple[tuple[str, str], ...] = ()  # a select's (value, text) in order ("": calc's default); () : names


@dataclass(frozen=True)
class Field:
    """One field: `--name VALUE` (metavar None: "N" for a number, the choices for a choice, else argparse's
    own), or a switch (--name / --no-name)."""

    name: str  # the flag without dashes, calc.inputs' key, the page's input name
    metavar: str | None = None
    help: str | None = None  # --help's line; "{default}" stands for the default
    switch: bool = False  # --name / --no-name (argparse.BooleanOptionalAction); its kind is bool
    kind: str = "text"  # int (1 to largest), count (0 to largest), bool, choice, text (read by its own code)
    largest: int = 0
    choices: tuple[str, ...] = ()
    default: object = None  # the value where not given (None: none, or one calc.inputs derives)
    sets: str = ""  # "shape" or "parallel": the calc.shape.Shape or calc.parallel.Parallel attribute it sets
    moe: bool = False  # means nothing without experts
    walks: tuple[str, ...] = WALKS  # the walks that read it
    why: str = ""  # why the walks (or output modes) that do not read it do not, said in the refusal
    finetune: tuple[str, ...] = ()  # the --finetune modes it applies to (none: every one)
    outputs: tuple[str, ...] = OUTPUTS  # the output modes that read it
    chosen: tuple[str, ...] = ()  # the output modes that choose it themselves (their rows are its values)
    walk_default: tuple[tuple[str, str], ...] = ()  # (walk, value) where the walks' defaults differ
    page: Page | None = None

    @property
    def attr(self) -> str:
        """The attribute it sets (Field.sets), its name in Python's spelling, or ""."""
        return self.name.replace("-", "_") if self.sets else ""

    @property
    def cli_help(self) -> str | None:
        return self.help and self.help.replace("{default}", page_value(self))

    @property
    def cli_metavar(self) -> str | None:
        if self.metavar is not None or self.switch:
            return self.metavar
        if self.kind in ("int", "count"):
            return "N"
        return one_of(self.choices) if self.kind == "choice" else None


def page_unread(shape) -> list[str]:
    """The page's model fields that this model's numbers do not read, which the form hides: the experts' fields
    for a dense model, the dense FFN's width where every layer is a mixture of experts, the context where
    positions are rotary (calc.inputs refuses each of them there). calc.web's answer carries them;
    hooks/placeholders.py hides them in the built form."""
    unread = [f.name for f in MODEL if f.page and f.moe and not shape.experts]
    unread += [] if shape.ffn_read else ["ffn"]
    return unread + ([] if shape.positions == "learned" else ["context"])  # rotary positions keep no table


def one_of(choices) -> str:
    """A metavar listing the values a field takes."""
    return "|".join(choices)


def _int(name: str, largest: int, sets: str = "", **more) -> Field:
    return Field(name, kind="int", largest=largest, sets=sets, **more)


def _count(name: str, largest: int, help: str = "0: none", **more) -> Field:
    """A whole number where 0 means none (or, for head-size and expert-ffn, the value derived from the others)."""
    return Field(name, help=help, kind="count", largest=largest, sets="shape", **more)


def _switch(name: str, sets: str = "", **more) -> Field:
    return Field(name, switch=True, kind="bool", sets=sets, **more)


def _choice(name: str, choices, **more) -> Field:
    return Field(name, kind="choice", choices=tuple(choices), **more)


def _model_page(label: str, at: int) -> Page:
    return Page(label, "Model", at)


MODEL = (
    Field("preset", help=f"start from a published shape: {', '.join(PRESETS)} (default {{default}})",
          choices=tuple(PRESETS), default="llama-7b", page=Page("Preset", "Model", 1, control="presets")),
    Field("hf-config", "PATH", f"start from a transformers config.json instead (model_type {', '.join(READERS)}); "
          "flags override it", page=Page("config.json", "Model", 2, control="config")),
    _int("layers", 10_000, "shape", page=_model_page("Layers (L)", 3)),
    _int("hidden", 1 << 20, "shape", page=_model_page("Width (h)", 4)),
    _int("heads", 1 << 16, "shape", page=_model_page("Heads (a)", 5)),
    _int("kv-heads", 1 << 16, "shape", page=_model_page("Key/value heads", 6)),
    _int("ffn", 1 << 24, "shape", page=_model_page("FFN width", 7)),
    _int("vocab", 1 << 24, "shape", page=_model_page("Vocabulary (V)", 8)),
    _int("context", 1 << 24, "shape", page=_model_page("Context", 9)),
    _int("norms-per-layer", 16, "shape"),
    _count("head-size", 1 << 16, "0: width / heads"),
    # calc.shape.Shape.sliding_window: the deck's terms do not change with it; the eager walk counts the masks
    _count("sliding-window", 1 << 24, "0: none; the eager walk counts the masks Gemma 2's and "
           "3's code builds for it", walks=("eager",),
           why="the deck walk's attention has no window: Korthikanti et al.'s s x s scores"),
    _count("experts", 1 << 16),
    _count("experts-per-token", 1 << 16, moe=True),
    _count("expert-ffn", 1 << 24, moe=True, page=_model_page("Experts' FFN width", 7)),
    _count("shared-expert-ffn", 1 << 24, moe=True),
    _count("dense-layers", 10_000, moe=True),
    _switch("gated-ffn", "shape", page=_model_page("Gated FFN (SwiGLU)", 12)),
    _switch("tied", "shape", page=_model_page("Head tied to embedding", 13)),
    _switch("bias", "shape", page=_model_page("Biases", 14)),
    _switch("final-norm", "shape", page=_model_page("Final norm", 15)),
    _switch("qkv-bias", "shape"),
    _switch("dropout", "shape", walks=("eager",),
            why="the deck walk counts Korthikanti et al.'s dropout masks whatever the model does"),
    _switch("head-bias", "shape"),
    _switch("shared-expert-gate", "shape", moe=True),
    _choice("norm", NORMS, sets="shape", page=Page("Norm", "Model", 10, options=(
        ("layer", "LayerNorm"), ("rms", "RMSNorm")))),
    _choice("positions", POSITIONS, sets="shape", page=Page("Positions", "Model", 11, options=(
        ("learned", "learned"), ("rope", "rotary (RoPE)")))),
    _choice("activation", ACTIVATIONS, sets="shape", walks=("eager",),
            why="the deck walk's MLP is Korthikanti et al.'s, whatever its activation"),
    _choice("family", families.FAMILIES, sets="shape"),
    Field("capacity-factor", "C", "each expert takes at most C k tokens / E (default 0: dropless)", moe=True,
          sets="shape"),
)
STEP = (
    _int("seq", 1 << 24, help="sequence length s (default {default})", default=4096,
         page=Page("Sequence (s)", "Training step", 1)),
    _int("micro-batch", 1 << 16, help="sequences per step b (default {default})", default=1, chosen=PLANNERS,
         page=Page("Micro-batch (b)", "Training step", 2)),
    _choice("recipe", RECIPES, help="precision/optimiser recipe (default {default})", default="mixed",
            outputs=("step", "plan", "fit-card"), page=Page("Recipe", "Training step", 4, options=tuple(
                (name, r.label) for name, r in RECIPES.items()))),
    _choice("recompute", RECOMPUTE, help="activation recomputation (default {default})", default="none",
            outputs=("step", "plan", "fit-card"), chosen=PLANNERS,
            page=Page("Recomputation", "Training step", 5)),
    _choice("walk", WALKS, help="deck: the deck's walk (default); eager: what PyTorch eager autograd allocates "
            "(one device, or each rank of --dp or --tp processes)", default="deck", chosen=("fit-card",),
            page=Page("Walk", "Training step", 8, options=(
                ("deck", "the deck's accounting"), ("eager", "what PyTorch allocates")))),
    _choice("attention", ATTENTIONS, help="transformers' attn_implementation, in every walk: sdpa, a fused "
            "kernel that keeps no s x s scores (the eager walk's default where the family's code runs it), or "
            "eager, which keeps them (the deck walk's default)",
            # the deck's accounting keeps Korthikanti et al.'s 5as^2b scores; transformers' default is sdpa
            walk_default=(("deck", "eager"), ("eager", "sdpa")),
            page=Page("Attention", "Training step", 6, options=(  # "": each walk's own (attention_fields)
                ("", "each walk's default"), ("sdpa", "sdpa (fused, no scores kept)"),
                ("eager", "eager (scores kept)")))),
    _choice("device", DEVICES, help="the eager walk: where the step runs (AdamW foreach or not)", default="cuda",
            walks=("eager",), why="the deck's accounting is the same on every device",
            page=Page("Runs on (PyTorch)", "Training step", 7, options=(("cuda", "GPU (CUDA)"), ("cpu", "CPU")))),
)
PARALLEL = (
    _int("dp", 1 << 20, "parallel", help="data-parallel workers (default {default})", default=1,
         chosen=PLANNERS, page=Page("Data parallel", "Several devices", 1)),
    _int("tp", 1 << 10, "parallel", help="tensor-parallel ranks (default {default})", default=1,
         chosen=PLANNERS, page=Page("Tensor parallel", "Several devices", 3)),
    _choice("tp-plan", TP_PLANS, help="the eager walk's tensor-parallel plan over the --tp ranks (default {default}): "
            "layers (torch's ColwiseParallel and RowwiseParallel on the decoder layers' linears, the embedding and "
            "head whole on every rank) or transformers (from_pretrained's tp_plan=\"auto\": the same split, and the "
            "embedding and head split by vocabulary, the logits gathered)", default=TP_PLANS[0], sets="parallel",
            walks=("eager",), why="the deck walk's tensor parallelism is Megatron-LM's accounting, the embedding, the "
            "head and the logits split by vocabulary",
            page=Page("Tensor-parallel plan", "Several devices", 4, options=tuple(zip(
                TP_PLANS, ("Layers' linears (torch)", "transformers' tp_plan=\"auto\""), strict=True)))),
    _int("pp", 10_000, "parallel", help="pipeline stages (default {default})", default=1,
         chosen=PLANNERS, page=Page("Pipeline stages", "Several devices", 5)),
    _choice("pp-schedule", SCHEDULES, help="the pipeline's schedule over the --pp stages (default {default}): 1f1b "
            "(a stage holds at most pp - stage micro-batches at once: torch's Schedule1F1B), gpipe (every "
            "micro-batch's forward before any backward: ScheduleGPipe) or interleaved-1f1b (2 stages a rank, "
            "rank r running stages r and r + pp: ScheduleInterleaved1F1B; the eager walk only)",
            default=SCHEDULES[0], sets="parallel", chosen=PLANNERS, page=Page("Pipeline schedule", "Several devices", 6,
            options=(("1f1b", "1F1B"), ("gpipe", "GPipe"),
                     ("interleaved-1f1b", "Interleaved 1F1B (2 stages a rank)")))),
    _int("ep", 1 << 16, "parallel", help="expert-parallel ranks among the dp workers, E/ep experts each", default=1,
         chosen=("fit-card",), page=Page("Expert parallel", "Several devices", 7)),
    _choice("zero", ZERO_STAGES, help="ZeRO stage over the dp workers (default {default})", default=0, sets="parallel",
            chosen=PLANNERS, page=Page("ZeRO stage", "Several devices", 2, options=(
                ("0", "0 (none)"), ("1", "1: optimiser state"), ("2", "2: + gradients"), ("3", "3: + weights")))),
    _choice("engine", ENGINES, help="the eager walk's engine over the --dp processes, as --zero picks it (a "
            "check of that): ddp (--zero 0, or 1: ZeroRedundancyOptimizer) or fsdp2 (fully_shard: --zero 3, "
            "reshard_after_forward=True, torch's default, or 2: False)", walks=("eager",),
            why="the deck walk counts ZeRO as its paper does, whatever engine runs it: give --zero"),
    _choice("offload", OFFLOADS, help="ZeRO's state kept in the host's memory, as DeepSpeed offloads it (default "
            "{default}): optimizer (offload_optimizer: the fp32 master copy, Adam and the fp32 gradients of the "
            "rank's partition), optimizer+params (and offload_param, ZeRO 3: the 16-bit weights)", default="none",
            sets="parallel", walks=("deck",), outputs=("step",),
            why="the deck walk's step counts ZeRO-Offload's device and host figures; the table, the planner and the "
                "fit list lay out devices without it",
            page=Page("Offload to the host", "Several devices", 9, options=tuple(zip(
                OFFLOADS, ("None", "Optimizer (ZeRO-Offload)", "Optimizer and weights (ZeRO 3)"), strict=True)))),
    _switch("sequence-parallel", "parallel", default=False, chosen=("fit-card",),
            page=Page("Sequence parallel", "Several devices", 8)),
    _switch("flash", "parallel", help="FlashAttention: the same as --attention sdpa (--no-flash: --attention eager)"),
    _int("grad-accum", 1 << 20, help="micro-batches per step and worker (default: pp)", chosen=PLANNERS,
         page=Page("Micro-batches per step", "Training step", 3, placeholder="auto")),
    _int("global-batch", 1 << 20, help="sequences per optimizer step, for --plan (default {default})", default=1024,
         outputs=("plan",), page=Page("Global batch", "Device and planner", 2)),
    Field("capacity-gb", "GB", "device memory, for --plan and --fit-card (default {default})", default=80,
          outputs=("plan", "fit-card"), why="the memory they fit",
          page=Page("Capacity (GB)", "Device and planner", 1, keys="decimal")),
    _choice("card", CARDS, metavar="NAME", help=f"a card's memory instead of --capacity-gb: {', '.join(CARDS)}",
            outputs=("plan", "fit-card"), why="the memory they fit"),
)
LORA = ("lora", "qlora")
TUNE = (
    _choice("finetune", MODES, help="full (default): every parameter trains; lora, qlora: adapters on a frozen "
            "(NF4) base; freeze: the first --freeze-layers blocks and the embedding frozen", default=TUNED.mode,
            chosen=("fit-card",), page=Page("Trains", "Fine-tuning", 1, options=(
                ("full", "full (every parameter)"), ("lora", "LoRA"), ("qlora", "QLoRA (4-bit base)"),
                ("freeze", "freeze the first layers")))),
    _choice("optimizer", OPTIMIZERS, help="default {default}", default=TUNED.optimizer,
            page=Page("Optimizer", "Fine-tuning", 2)),
    _int("lora-rank", 1 << 16, metavar="R", help="LoRA's rank r (default {default})", default=TUNED.rank, finetune=LORA,
         chosen=("fit-card",), page=Page("LoRA rank (r)", "Fine-tuning", 3)),
    _int("lora-alpha", 1 << 16, metavar="A", help="LoRA's alpha (default {default}; scales the update, no memory)",
         default=TUNED.alpha, finetune=LORA, chosen=("fit-card",)),
    Field("lora-targets", "LIST", f"comma list of {','.join(TARGETS)}, or all-linear (default {{default}})",
          default=",".join(TUNED.targets), finetune=LORA, chosen=("fit-card",),
          page=Page("LoRA targets", "Fine-tuning", 4, keys="text", placeholder="q,v")),
    _choice("adapter-dtype", ADAPTER_DTYPES, help="lora, qlora: the adapters' dtype; fp32 (default, peft's "
            "get_peft_model upcasts 16-bit adapters), model: the model's dtype (autocast_adapter_dtype=False)",
            default=TUNED.adapter_dtype, finetune=LORA, page=Page("Adapters' dtype (peft)", "Fine-tuning", 5, options=(
                ("fp32", "fp32 (peft's default)"), ("model", "the model's dtype")))),
    Field("freeze-layers", "N", "--finetune freeze: the first N blocks (default {default})", kind="count",
          largest=10_000, default=TUNED.freeze_layers, finetune=("freeze",), chosen=("fit-card",),
          page=Page("Frozen layers", "Fine-tuning", 6)),
    _switch("freeze-embedding", help="--finetune freeze: the embedding (and a head tied to it) frozen with the "
            "blocks (default); --no-freeze-embedding trains it, backward reaching it through the frozen blocks "
            "(the eager walk)", default=TUNED.freeze_embedding, finetune=("freeze",), chosen=("fit-card",),
            page=Page("Embedding frozen too", "Fine-tuning", 7)),
    _switch("freeze-head", help="--finetune freeze: the final norm and an untied head frozen too (LLaMA-Factory's "
            "freeze; a tied head is the embedding's, which --no-freeze-embedding trains); default: they train",
            default=TUNED.freeze_head,
            finetune=("freeze",), chosen=("fit-card",), page=Page("Head and final norm frozen too", "Fine-tuning", 8)),
    _switch("paged-optimizer", help="the optimizer state lives in CPU-pageable memory (bitsandbytes' paged "
            "optimizers): not counted", default=TUNED.paged, page=Page("Paged optimizer state", "Fine-tuning", 9)),
)
LOOP_WHY = "the deck walk has no loop around its step"
LOOP = (
    _choice("loop", LOOPS, help="bare (default): loss.backward(), optimizer.step(), zero_grad(); trainer: "
            "transformers' Trainer as it comes (its labels tensor, all micro-batches fetched first, fused AdamW); "
            "sft: TRL's SFTTrainer (its collator and chunked head)", default="bare", walks=("eager",), why=LOOP_WHY,
            page=Page("Training loop (PyTorch)", "Training step", 9, options=(
                ("bare", "a bare PyTorch loop"), ("trainer", "transformers' Trainer"), ("sft", "TRL's SFTTrainer")))),
    _choice("adamw-impl", ADAMW_IMPLS, help="AdamW's implementation (default PyTorch's pick: foreach on cuda, "
            "single on cpu; Trainer and TRL pick fused, optim adamw_torch_fused)", walks=("eager",), why=LOOP_WHY,
            page=Page("AdamW implementation (PyTorch)", "Training step", 10, options=(
                ("", "as PyTorch picks"), *((name, name) for name in ADAMW_IMPLS)))),
    _choice("loss", LOSSES, help="transformers: ForCausalLMLoss on the logits (default); trl-chunked: TRL's "
            "chunked log-prob head, no logits (the default with --loop sft); torchtune-chunked: torchtune's "
            "CEWithChunkedOutputLoss, the head and the fp32 upcast one of 8 chunks at a time; liger-fused: Liger's "
            "fused linear cross-entropy, the gradients made in the forward, one tile at a time (--device cuda; "
            "from source, not measured)", walks=("eager",), why=LOOP_WHY,
            page=Page("Loss (PyTorch)", "Training step", 11, options=(
                ("", "as the loop computes it"), ("transformers", "transformers' cross-entropy"),
                ("trl-chunked", "TRL's chunked log-probs"), ("torchtune-chunked", "torchtune's chunked cross-entropy"),
                ("liger-fused", "Liger's fused linear cross-entropy (CUDA; from source, not measured)")))),
)
# --help's groups in order: (title, fields); None: the parser's own options
GROUPS = (
    (None, MODEL + STEP),
    ("several devices (bytes and peak become per device)", PARALLEL),
    ("fine-tuning (one device)", TUNE),
    ("the loop around the step (--walk eager)", LOOP),
)
TABLE = tuple(f for _, fields in GROUPS for f in fields)
FIELD = {f.name: f for f in TABLE}


def names(fields=TABLE, **where) -> tuple[str, ...]:
    """The names of the fields whose attributes have the values given (moe=True, kind="int"), in order."""
    return tuple(f.name for f in fields if all(getattr(f, k) == v for k, v in where.items()))


def page_options(field: Field) -> list[tuple[str, str]]:
    """A select's options, (value, text): the page's texts where it has them (each of calc's choices, or the
    build fails: a choice calc gains gets its text here), else the choices' names."""
    if not field.page.options:
        return [(c, c) for c in field.choices]
    shown = {value for value, _ in field.page.options} - {""}
    if shown != set(field.choices):
        raise ValueError(f"calc.fields: the page's options for {field.name} are not its choices {field.choices}")
    return list(field.page.options)


def page_value(field: Field) -> str:
    """A field's starting value on the page, as its control holds it ("" where calc derives it)."""
    value = field.default
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)
