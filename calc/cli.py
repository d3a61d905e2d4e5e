"""Command line: parse flags, call the core, print. Bad input: one line on stderr, exit 2."""

from __future__ import annotations

import argparse
import json
import sys

from .api import step, table
from .finetune import ADAPTER_DTYPES, MODES, TARGETS
from .hf import MAX_CHARS, READERS
from .inputs import (
    BESIDE_FIELDS,
    BOOL_FIELDS,
    CARDS,
    CHOICE_FIELDS,
    COUNT_FIELDS,
    INT_FIELDS,
    WALKS,
    InputError,
    parse_inputs,
)
from .loops import ADAMW_IMPLS, LOOPS, LOSSES
from .optimizers import OPTIMIZERS
from .plan import fit_card, plan, plan_problem
from .presets import PRESETS
from .recipes import RECIPES, RECOMPUTE
from .units import format_gb, format_gib
from .walk import CATEGORIES
from .web import eager_beside

HEADERS = ("Recipe", "Weights", "Gradients", "Optimiser", "Master", "Activations", "Logits", "Peak")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        self.exit(2, f"{self.prog}: error: {message}\n")


COUNT_HELP = {
    "head-size": "0: width / heads",
    # calc.shape.Shape.sliding_window: the deck's terms do not change with it; the eager walk counts the masks
    "sliding-window": "0: none; the eager walk counts the masks Gemma 2's and 3's code builds for it",
}

def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser: the model's fields, the step's, the layout's, the fine-tuning's, the loop's, and how to
    print the answer (each group a function below, in --help's order)."""
    p = _Parser(prog=prog, description="Memory needed to train a transformer on one device.")
    for add in (_model_options, _step_options, _parallel_options, _tuning_options, _loop_options, _output_options):
        add(p)
    return p


def _model_options(p: argparse.ArgumentParser) -> None:
    """The model: a preset or a config.json, and the shape fields that override it."""
    p.add_argument("--preset", help=f"start from a published shape: {', '.join(PRESETS)} (default llama-7b)")
    p.add_argument(
        "--hf-config",
        metavar="PATH",
        help=f"start from a transformers config.json instead (model_type {', '.join(READERS)}); flags override it",
    )
    for field in INT_FIELDS:
        p.add_argument(f"--{field}", metavar="N")
    for field in COUNT_FIELDS:
        p.add_argument(f"--{field}", metavar="N", help=COUNT_HELP.get(field, "0: none"))
    for field in BOOL_FIELDS:
        p.add_argument(f"--{field}", action=argparse.BooleanOptionalAction, default=None)
    for field, (_, choices) in CHOICE_FIELDS.items():
        p.add_argument(f"--{field}", metavar="|".join(choices))
    p.add_argument(
        "--capacity-factor", metavar="C", help="each expert takes at most C k tokens / E (default 0: dropless)"
    )


def _step_options(p: argparse.ArgumentParser) -> None:
    """The step: its sequence, micro-batch, recipe, recomputation, walk, attention and device."""
    p.add_argument("--seq", metavar="N", help="sequence length s (default 4096)")
    p.add_argument("--micro-batch", metavar="N", help="sequences per step b (default 1)")
    p.add_argument("--recipe", metavar="|".join(RECIPES), help="precision/optimiser recipe (default mixed)")
    p.add_argument("--recompute", metavar="|".join(RECOMPUTE), help="activation recomputation (default none)")
    p.add_argument(
        "--walk",
        metavar="|".join(WALKS),
        help="deck: the deck's walk (default); eager: what PyTorch eager autograd allocates (one device)",
    )
    p.add_argument(
        "--attention",
        metavar="sdpa|eager",
        help="transformers' attn_implementation, in every walk: sdpa, a fused kernel that keeps no s x s scores "
        "(the eager walk's default), or eager, which keeps them (the deck walk's default)",
    )
    p.add_argument("--device", metavar="cuda|cpu", help="the eager walk: where the step runs (AdamW foreach or not)")


def _parallel_options(p: argparse.ArgumentParser) -> None:
    """The layout over devices, and the planner's and fit list's global batch and capacity."""
    par = p.add_argument_group("several devices (bytes and peak become per device)")
    par.add_argument("--dp", metavar="N", help="data-parallel workers (default 1)")
    par.add_argument("--tp", metavar="N", help="tensor-parallel ranks (default 1)")
    par.add_argument("--pp", metavar="N", help="pipeline stages (default 1)")
    par.add_argument("--ep", metavar="N", help="expert-parallel ranks among the dp workers, E/ep experts each")
    par.add_argument("--zero", metavar="0|1|2|3", help="ZeRO stage over the dp workers (default 0)")
    par.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=None)
    par.add_argument(
        "--flash",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="FlashAttention: the same as --attention sdpa (--no-flash: --attention eager)",
    )
    par.add_argument("--grad-accum", metavar="N", help="micro-batches per step and worker (default: pp)")
    par.add_argument("--global-batch", metavar="N", help="sequences per optimizer step, for --plan (default 1024)")
    par.add_argument("--capacity-gb", metavar="GB", help="device memory, for --plan and --fit-card (default 80)")
    par.add_argument("--card", metavar="NAME", help=f"a card's memory instead of --capacity-gb: {', '.join(CARDS)}")


def _tuning_options(p: argparse.ArgumentParser) -> None:
    """Fine-tuning: which parameters train, the optimizer, LoRA's fields."""
    tune = p.add_argument_group("fine-tuning (one device)")
    tune.add_argument(
        "--finetune",
        metavar="|".join(MODES),
        help="full (default): every parameter trains; lora, qlora: adapters on a frozen (NF4) base; freeze: the "
        "first --freeze-layers blocks and the embedding frozen",
    )
    tune.add_argument("--optimizer", metavar="|".join(OPTIMIZERS), help="default adamw")
    tune.add_argument("--lora-rank", metavar="R", help="LoRA's rank r (default 8)")
    tune.add_argument("--lora-alpha", metavar="A", help="LoRA's alpha (default 16; scales the update, no memory)")
    tune.add_argument(
        "--lora-targets", metavar="LIST", help=f"comma list of {','.join(TARGETS)}, or all-linear (default q,v)"
    )
    tune.add_argument(
        "--adapter-dtype",
        metavar="|".join(ADAPTER_DTYPES),
        help="lora, qlora: the adapters' dtype; fp32 (default, peft's get_peft_model upcasts 16-bit adapters), "
        "model: the model's dtype (autocast_adapter_dtype=False)",
    )
    tune.add_argument("--freeze-layers", metavar="N", help="--finetune freeze: the first N blocks (default 0)")
    tune.add_argument(
        "--paged-optimizer",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the optimizer state lives in CPU-pageable memory (bitsandbytes' paged optimizers): not counted",
    )


def _loop_options(p: argparse.ArgumentParser) -> None:
    """The loop around the eager walk's step (calc.loops)."""
    loop = p.add_argument_group("the loop around the step (--walk eager)")
    loop.add_argument(
        "--loop",
        metavar="|".join(LOOPS),
        help="bare (default): loss.backward(), optimizer.step(), zero_grad(); trainer: transformers' Trainer as it "
        "comes (its labels tensor, all micro-batches fetched first, fused AdamW); sft: TRL's SFTTrainer (its "
        "collator and chunked head)",
    )
    loop.add_argument(
        "--adamw-impl",
        metavar="|".join(ADAMW_IMPLS),
        help="AdamW's implementation (default PyTorch's pick: foreach on cuda, single on cpu; Trainer and TRL pick "
        "fused, optim adamw_torch_fused)",
    )
    loop.add_argument(
        "--loss",
        metavar="|".join(LOSSES),
        help="transformers: ForCausalLMLoss on the logits (default); trl-chunked: TRL's chunked log-prob head, no "
        "logits (the default with --loop sft); torchtune-chunked: torchtune's CEWithChunkedOutputLoss, the head "
        "and the fp32 upcast one of 8 chunks at a time; liger-fused: Liger's fused linear cross-entropy, the "
        "gradients made in the forward, one tile at a time (--device cuda; from source, not measured)",
    )


def _output_options(p: argparse.ArgumentParser) -> None:
    """What is printed: JSON, the table, the events, the plan or the fit list."""
    p.add_argument("--json", action="store_true", help="print the result (or the plan) as JSON")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--table", action="store_true", help="print the deck's four-recipe table in GB")
    out.add_argument("--events", action="store_true", help="print the step event by event")
    out.add_argument(
        "--plan",
        action="store_true",
        help="list the layouts that fit --capacity-gb, fewest devices first (it chooses dp, tp, pp, ZeRO, "
        "recomputation and micro-batch itself)",
    )
    out.add_argument(
        "--fit-card",
        action="store_true",
        help="list the fine-tunings (full, LoRA, QLoRA; ranks, targets, recomputation, micro-batch) that fit one "
        "card of --capacity-gb or --card, cheapest first",
    )


def format_table(rows: list[dict]) -> str:
    lines = [" | ".join(HEADERS), " | ".join("---" for _ in HEADERS)]
    for row in rows:
        cells = [format_gb(row["bytes"][c]) + " GB" for c in CATEGORIES] + [format_gb(row["peak"]) + " GB"]
        lines.append(" | ".join([row["label"], *cells]))
    return "\n".join(lines)


def format_events(result: dict) -> str:
    lines = [f"{'#':>4}  {'phase':<9} {'category':<11} {'change (bytes)':>18} {'total (bytes)':>18}  event"]
    for i, e in enumerate(result["events"]):
        mark = "  <- peak" if i == result["peak_index"] else ""
        lines.append(
            f"{i:>4}  {e['phase']:<9} {e['category']:<11} {e['bytes']:>+18,} {e['total']:>18,}  {e['label']}{mark}"
        )
    return "\n".join(lines)


def format_summary(result: dict) -> str:
    cfg = result["config"]
    lines = [
        f"{cfg['shape']['name']}: {result['params']:,} parameters; seq {cfg['seq']:,}, "
        f"micro-batch {cfg['micro_batch']}, {RECIPES[cfg['recipe']].label}, recompute {cfg['recompute']}"
        + (f", {cfg['walk']} walk" if "walk" in cfg else "")
    ]
    if result["devices"] > 1:
        p = cfg["parallel"]
        lines.append(
            f"per device of {result['devices']} (dp {p['dp']}, tp {p['tp']}, pp {p['pp']}, "
            + (f"ep {p['ep']}, " if p["ep"] > 1 else "")
            + f"ZeRO {p['zero']}), "
            f"pipeline stage {result['stage']}: {result['device_params']:,} parameters"
        )
    if "finetune" in cfg:
        t = cfg["finetune"]
        lines.append(
            f"fine-tuning: {t['mode']}"
            + (f" rank {t['rank']} on {','.join(t['targets'])}, {ADAPTER_WORDS[t['adapter_dtype']]}"
               if t["mode"] in ("lora", "qlora") else "")
            + (f", first {t['freeze_layers']} layers frozen" if t["mode"] == "freeze" else "")
            + f", {OPTIMIZERS[t['optimizer']].label}" + (" (paged: state off the device)" if t["paged"] else "")
            + f"; {result['trainable_params']:,} trainable parameters"
        )
    for c in CATEGORIES:
        n = result["bytes"][c]
        lines.append(f"  {c:<12} {n:>20,} bytes  {format_gb(n):>8} GB")
    n = result["peak"]
    lines.append(f"  {'peak':<12} {n:>20,} bytes  {format_gb(n):>8} GB  {format_gib(n)} GiB")
    lines.append(f"  peak event:  {result['peak_event']}")
    if "eager" in result:  # the page's figure beside the deck's (calc.web.eager_beside)
        e = result["eager"]
        lines.append(f"  eager walk:  {e['peak']:>20,} bytes  {e['display']['gb']:>8} GB  ({e['how']}), at "
                     f"{e['peak_event']}")  # fmt: skip
    return "\n".join(lines)


def format_plan(rows: list[dict], capacity: int) -> str:
    if not rows:
        return f"nothing fits in {format_gb(capacity)} GB"
    experts = any(r["ep"] > 1 for r in rows)  # an ep column only where expert parallelism is among the layouts
    lines = [
        "devices | dp | tp | pp | " + ("ep | " if experts else "") + "ZeRO | recompute | micro-batch | peak GB | "
        "extra compute",
        "---: | ---: | ---: | ---: | " + ("---: | " if experts else "") + "---: | --- | ---: | ---: | ---:",
    ]
    for r in rows:
        lines.append(
            f"{r['devices']} | {r['dp']} | {r['tp']} | {r['pp']} | " + (f"{r['ep']} | " if experts else "")
            + f"{r['zero']} | {r['recompute']} | {r['micro_batch']} | {format_gb(r['peak'])} | "
            f"{r['extra_compute']:.1%}"
        )
    return "\n".join(lines)


def format_fit(rows: list[dict], capacity: int) -> str:
    if not rows:
        return f"no fine-tuning fits in {format_gb(capacity)} GB"
    lines = [
        "finetune | rank | targets | recompute | micro-batch | trainable params | peak GB | extra compute | peak event",
        "--- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---",
    ]
    for r in rows:
        lines.append(
            f"{r['finetune']} | {r['rank'] or '-'} | {','.join(r['targets']) or '-'} | {r['recompute']} | "
            f"{r['micro_batch']} | {r['trainable_params']:,} | {format_gb(r['peak'])} | {r['extra_compute']:.1%} | "
            f"{r['peak_event']}"
        )
    return "\n".join(lines)


ADAPTER_WORDS = {"fp32": "fp32 adapters", "model": "adapters in the model's dtype"}


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    try:
        return _main(argv, prog)
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly
        sys.stderr.close()
        return 0


def read_config(path: str) -> str:
    """The text of the file --hf-config names, or InputError saying why it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_CHARS + 1)  # a longer file is refused by calc.hf without reading it all
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise InputError("hf-config", f"cannot read {path}: {reason}") from None
    return text


# Fields an output mode does not read, each with the reason it is refused there (issue 19: no flag is accepted
# and ignored; tests/test_every_flag.py runs every field through every mode).
PLAN_CHOOSES = ("dp", "tp", "pp", "zero", "recompute", "micro-batch", "grad-accum")
FIT_CHOOSES = (*PLAN_CHOOSES, "ep", "sequence-parallel", "walk", "finetune", "lora-rank", "lora-alpha",
               "lora-targets", "freeze-layers")  # fmt: skip
UNREAD = {
    "plan": dict.fromkeys(PLAN_CHOOSES, "--plan chooses it itself (its rows are the layouts): leave it unset"),
    "fit_card": {
        **dict.fromkeys(FIT_CHOOSES, "--fit-card chooses it itself, on one card: leave it unset"),
        "global-batch": "applies to --plan",
    },
    "table": dict.fromkeys(("recipe", "recompute"), "--table shows every recipe and recomputation: leave it unset"),
    "step": {
        **dict.fromkeys(("capacity-gb", "card"), "applies to --plan and --fit-card (the memory they fit)"),
        "global-batch": "applies to --plan",
    },
}


def mode_problem(args: argparse.Namespace, raw: dict) -> tuple[str, str] | None:
    """(field, message) for a given field the chosen output mode does not read, or None."""
    mode = next((m for m in ("plan", "fit_card", "table") if getattr(args, m)), "step")
    given = {k for k, v in raw.items() if v is not None}
    unread = {**UNREAD[mode], **({} if mode == "step" else UNREAD["step"])} if mode == "table" else UNREAD[mode]
    field = next((f for f in unread if f in given), None)
    return (field, unread[field]) if field else None


def eager_figure(inputs: dict, raw: dict) -> tuple[dict | None, tuple[str, str] | None]:
    """(the eager walk's figure beside the deck walk's step, as the page shows it: calc.web.eager_beside, or
    None where no field given only it reads; a problem (field, message) where these inputs have none)."""
    field = inputs["walk"] == "deck" and next((f for f in BESIDE_FIELDS if raw.get(f) is not None), None)
    if not field:
        return None, None
    figure = eager_beside(inputs)
    if not figure["available"]:
        return None, (field, f"applies to the eager walk's figure beside the deck's, which these inputs lack: "
                             f"{figure['reason']}")  # fmt: skip
    return figure, None


def _main(argv: list[str] | None, prog: str | None) -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        inputs, beside = validated(args)
    except InputError as e:
        print(f"error: --{e.field}: {e.message}", file=sys.stderr)
        return 2
    if args.fit_card or args.plan or args.table:
        print(rows_text(args, inputs))
        return 0
    result = step(
        inputs["shape"],
        inputs["seq"],
        inputs["micro_batch"],
        inputs["recipe"],
        inputs["recompute"],
        par=inputs["par"],
        walk=inputs["walk"],
        grad_accum=inputs["grad_accum"],
        attention=inputs["attention"],
        device=inputs["device"],
        tune=inputs["tune"],
        loop=inputs["loop"],
    )
    if beside:
        result["eager"] = beside
    if args.json:
        print(json.dumps(result, indent=1))
    elif args.events:
        print(format_events(result))
    else:
        print(format_summary(result))
    return 0


def validated(args: argparse.Namespace) -> tuple[dict, dict | None]:
    """(calc.inputs.parse_inputs' answer for the flags, the eager walk's figure beside the deck walk's step or
    None), or InputError naming the field the chosen output mode cannot use."""
    modes = ("json", "table", "events", "plan", "fit_card")
    raw = {k.replace("_", "-"): v for k, v in vars(args).items() if k not in modes}
    if raw["hf-config"] is not None:
        raw["hf-config"] = read_config(raw["hf-config"])
    rows = args.plan or args.table or args.fit_card
    # the step (not --table, --plan, --fit-card) answers the loop's fields as the page does: the eager walk's
    # figure beside the deck walk's (eager_figure)
    inputs = parse_inputs(raw, eager_beside=not rows)
    problem = mode_problem(args, raw)
    problem = problem or ((args.plan or args.table) and plan_problem(inputs["walk"], inputs["tune"]))
    beside, refused = (None, None) if problem or rows else eager_figure(inputs, raw)
    problem = problem or refused
    if problem:
        raise InputError(*problem)
    if args.fit_card and inputs["shape"].moe_layers:
        raise InputError("fit-card", "fine-tuning a mixture of experts is not modelled yet")
    return inputs, beside


def rows_text(args: argparse.Namespace, inputs: dict) -> str:
    """What --fit-card, --plan or --table prints: its rows, as JSON or as a table."""
    shape, seq, par, tune, capacity = inputs["shape"], inputs["seq"], inputs["par"], inputs["tune"], inputs["capacity"]
    if args.fit_card:
        rows = fit_card(shape, seq, capacity, inputs["recipe"], tune.optimizer, tune.paged, par.flash,
                        adapter_dtype=tune.adapter_dtype)  # fmt: skip
        return json.dumps(rows, indent=1) if args.json else format_fit(rows, capacity)
    if args.plan:
        rows = plan(shape, seq, inputs["global_batch"], capacity, inputs["recipe"], par.sequence_parallel, par.flash)
        return json.dumps(rows, indent=1) if args.json else format_plan(rows, capacity)
    rows = table(shape, seq, inputs["micro_batch"], par, inputs["grad_accum"])
    return json.dumps(rows, indent=1) if args.json else format_table(rows)
