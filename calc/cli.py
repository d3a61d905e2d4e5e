"""Command line: parse flags, call the core, print. Bad input: one line on stderr, exit 2."""

from __future__ import annotations

import argparse
import sys

from . import trainers
from .api import run_step, table
from .engines.pipeline import PipelineStage, stages_a_rank
from .fields import GROUPS, TABLE, Field
from .hf import MAX_CHARS
from .inputs import BESIDE_FIELDS, InputError, late_problem, parse_inputs
from .json_text import dumps as json_text
from .optimizers import OPTIMIZERS
from .plan import fit_card, fit_problem, plan, plan_problem
from .recipes import RECIPES
from .run import Run
from .units import format_gb, format_gib
from .walk import CATEGORIES
from .web import beside_refusal, eager_beside, engine_text, host_text

HEADERS = ("Recipe", "Weights", "Gradients", "Optimiser", "Master", "Activations", "Logits", "Peak")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser: every field of calc.fields' table in its group, then how to print the answer."""
    p = _Parser(prog=prog, description="Memory needed to train a transformer on one device.")
    for title, fields in GROUPS:
        group = p.add_argument_group(title) if title else p
        for field in fields:
            add_field(group, field)
    _output_options(p)
    return p


def add_field(group, field: Field) -> None:
    """One field of calc.fields as an option: a switch (--x, --no-x) or --x VALUE."""
    if field.switch:
        group.add_argument(f"--{field.name}", action=argparse.BooleanOptionalAction, default=None, help=field.cli_help)
    else:
        group.add_argument(f"--{field.name}", metavar=field.cli_metavar, help=field.cli_help)


def _output_options(p: argparse.ArgumentParser) -> None:
    """Where the fields come from besides the flags, then what is printed: JSON, the table, the events, the plan
    or the fit list."""
    p.add_argument("--trainer-config", metavar="FILE", action="append",
                   help="read the fields from a trainer's config (repeatable: axolotl, LLaMA-Factory, "
                   "TrainingArguments or SFTConfig as JSON or YAML, a DeepSpeed JSON, accelerate's config); flags "
                   "override it")
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
    return "\n".join([*lines, *eager_lines(result)])


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
            f"pipeline {_stage(result)}: {result['device_params']:,} parameters"
        )
    if "engine" in result:
        p = result["config"]["parallel"]  # a rank a stage (none looped, none beside it): named as its stage
        alone = stages_a_rank(p["pp_schedule"]) == 1 and p["dp"] * p["tp"] == 1
        unit = "stage" if result["engine"] == "pipeline" and alone else "rank"
        lines.append(f"  engine: {engine_text(result)}; the figures below are that {unit}'s")
    if "finetune" in cfg:
        t = cfg["finetune"]
        lines.append(
            f"fine-tuning: {t['mode']}"
            + (f" rank {t['rank']} on {','.join(t['targets'])}" + (MOE_ALL_LINEAR if t["moe_all_linear"] else "")
               + f", {ADAPTER_WORDS[t['adapter_dtype']]}" if t["mode"] in ("lora", "qlora") else "")
            + (f", first {t['freeze_layers']} layers frozen" if t["mode"] == "freeze" else "")
            + (", the embedding trains" if t["mode"] == "freeze" and not t["freeze_embedding"] else "")
            + (", the final norm" + ("" if cfg["shape"]["tied"] and not t["freeze_embedding"] else " and head")
               + " frozen too" if t["mode"] == "freeze" and t["freeze_head"] else "")
            + f", {OPTIMIZERS[t['optimizer']].label}" + (" (paged: state off the device)" if t["paged"] else "")
            + f"; {result['trainable_params']:,} trainable parameters"
        )
    for c in CATEGORIES:
        n = result["bytes"][c]
        lines.append(f"  {c:<12} {n:>20,} bytes  {format_gb(n):>8} GB")
    n = result["peak"]
    lines.append(f"  {'peak':<12} {n:>20,} bytes  {format_gb(n):>8} GB  {format_gib(n)} GiB")
    lines.append(f"  peak event:  {result['peak_event']}")
    lines += [f"  host: {host_text(result)}"] if "host" in result else []
    return "\n".join([*lines, *eager_lines(result), *reading_lines(result)])


def _stage(result: dict) -> str:
    """The pipeline position the figures are for: "stage N", or under interleaved 1F1B "rank N (stages ...)"."""
    par = result["config"]["parallel"]
    rank = PipelineStage(par["pp"], result["stage"], par["pp_schedule"], 1)
    if not rank.looped:
        return f"stage {result['stage']}"
    return f"rank {result['stage']} (stages {' and '.join(str(s) for s in rank.stages)} of {rank.count})"


def reading_lines(result: dict) -> list[str]:
    """What a trainer config gave, where one was read: its keys read, the tools' defaults, the keys ignored."""
    if "trainer_config" not in result:
        return []
    t = result["trainer_config"]
    lines = [f"trainer config ({', '.join(t['tools'])}):"]
    lines += [f"  read     {e['key']}: {e['value']} -> {e['gives']}" for e in t["read"]]
    lines += [f"  default  {e['gives']} ({e['why']})" for e in t["defaults"]]
    n = len(t["ignored"])
    lines.append(f"  ignored  {n} key{'' if n == 1 else 's'} that change{'s' if n == 1 else ''} nothing calc counts "
                 "(--json lists them)")
    return lines


def eager_lines(result: dict) -> list[str]:
    """The eager walk's figure beside the deck walk's step, where the answer has it (calc.web.eager_beside, as
    the page shows it), in one line; else none."""
    if "eager" not in result:
        return []
    e = result["eager"]
    return [f"  eager walk:  {e['peak']:>20,} bytes  {e['display']['gb']:>8} GB  ({e['how']}), at {e['peak_event']}"]


def format_plan(rows: list[dict], capacity: int) -> str:
    """--plan's table: the page's planner's columns, ep among them for a dense model too (1: no expert
    parallelism), so a table's columns do not change with the model."""
    if not rows:
        return f"nothing fits in {format_gb(capacity)} GB"
    lines = [
        "devices | dp | tp | pp | ep | ZeRO | recompute | micro-batch | peak GB | extra compute",
        "---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---:",
    ]
    for r in rows:
        lines.append(
            f"{r['devices']} | {r['dp']} | {r['tp']} | {r['pp']} | {r['ep']} | {r['zero']} | {r['recompute']} | "
            f"{r['micro_batch']} | {format_gb(r['peak'])} | {r['extra_compute']:.1%}"
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
MOE_ALL_LINEAR = " (peft's all-linear: the router too, the experts' gate_up_proj at twice the rank)"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    try:
        return _main(argv, prog)
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly
        sys.stderr.close()
        return 0


def read_config(path: str, field: str = "hf-config") -> str:
    """The text of the file --hf-config (or --trainer-config) names, or InputError saying why it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_CHARS + 1)  # a longer file is refused by calc.hf without reading it all
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise InputError(field, f"cannot read {path}: {reason}") from None
    if len(text) <= MAX_CHARS and not text.strip():  # empty is "not given": the preset would answer for it
        raise InputError(field, f"{path} is empty: give " + ("a model's config.json" if field == "hf-config" else
                                                             "a trainer's config"))
    return text


# Fields an output mode does not read, each with the reason it is refused there (issue 19: no flag is accepted
# and ignored; tests/calc/test_every_flag.py runs every field through every mode), from calc.fields' table: the
# fields a mode chooses itself, and those it does not read (Field.outputs).
CHOOSES = {"plan": "--plan chooses it itself (its rows are the layouts): leave it unset",
           "fit-card": "--fit-card chooses it itself, on one card: leave it unset"}  # fmt: skip
TABLE_SHOWS = "--table shows every recipe and recomputation: leave it unset"


def unread(mode: str) -> dict[str, str]:
    """{field: why} for the fields output mode `mode` (calc.fields.OUTPUTS) does not read."""
    out = {}
    for f in TABLE:
        if mode in f.chosen:
            out[f.name] = CHOOSES[mode]
        elif mode not in f.outputs:
            out[f.name] = TABLE_SHOWS if mode == "table" and "step" in f.outputs and not f.why else (
                "applies to " + " and ".join(f"--{m}" for m in f.outputs) + (f" ({f.why})" if f.why else ""))
    return out


UNREAD = {mode.replace("-", "_"): unread(mode) for mode in ("step", "table", "plan", "fit-card")}


def mode_problem(args: argparse.Namespace, raw: dict) -> tuple[str, str] | None:
    """(field, message) for a given field the chosen output mode does not read, or None."""
    mode = next((m for m in ("plan", "fit_card", "table") if getattr(args, m)), "step")
    given = {k for k, v in raw.items() if v is not None}
    field = next((f for f in UNREAD[mode] if f in given), None)
    return (field, UNREAD[mode][field]) if field else None


def eager_figure(inputs: Run, raw: dict) -> tuple[dict | None, tuple[str, str] | None]:
    """(the eager walk's figure beside the deck walk's step, as the page shows it: calc.web.eager_beside, or
    None where no field given only it reads; a problem (field, message) where these inputs have none)."""
    field = inputs.walk == "deck" and next((f for f in BESIDE_FIELDS if raw.get(f) is not None), None)
    if not field:
        return None, None
    figure = eager_beside(inputs)
    return (figure, None) if figure["available"] else (None, beside_refusal(field, figure["reason"]))


def _main(argv: list[str] | None, prog: str | None) -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        inputs, beside = validated(args)
    except InputError as e:
        print(f"error: --{e.field}: {e.message}", file=sys.stderr)
        return 2
    reading = getattr(args, "reading", None)
    if args.fit_card or args.plan or args.table:
        print(rows_text(args, inputs) + ("" if args.json or not reading else
                                         "\n" + "\n".join(reading_lines({"trainer_config": reading.as_dict()}))))
        return 0
    result = run_step(inputs)
    if beside:
        result["eager"] = beside
    if reading:
        result["trainer_config"] = reading.as_dict()
    if args.json:
        print(json_text(result))
    elif args.events:
        print("\n".join([format_events(result), *reading_lines(result)]))
    else:
        print(format_summary(result))
    return 0


def validated(args: argparse.Namespace) -> tuple[Run, dict | None]:
    """(calc.inputs.parse_inputs' answer for the flags, the eager walk's figure beside the deck walk's step or
    None), or InputError naming the field the chosen output mode cannot use."""
    modes = ("json", "table", "events", "plan", "fit_card", "trainer_config")
    raw = {k.replace("_", "-"): v for k, v in vars(args).items() if k not in modes}
    if raw["hf-config"] is not None:
        raw["hf-config"] = read_config(raw["hf-config"])
    if not args.trainer_config:
        return _validated(args, raw)
    mode = next((m for m in ("plan", "fit_card", "table") if getattr(args, m)), "step")
    unread = dict(UNREAD[mode])
    if mode != "step":  # the rows show no eager figure beside them: the loop's fields go
        why = f"--{mode.replace('_', '-')} shows no eager figure"
        unread.update({f: why for f in BESIDE_FIELDS if f not in unread})
    if mode == "fit_card":  # it chooses the fine-tuning, and so what only a fine-tuning reads
        unread.update({f.name: CHOOSES["fit-card"] for f in TABLE if f.finetune and f.name not in unread})
    _, reading, (inputs, beside) = trainers.checked(
        raw, [read_config(path, "trainer-config") for path in args.trainer_config],
        lambda given: _validated(args, given, raw), unread=unread)
    args.reading = reading
    return inputs, beside


def _validated(args: argparse.Namespace, raw: dict, flags: dict | None = None) -> tuple[Run, dict | None]:
    """validated's work on the fields `raw` (the flags, with a trainer config's under them: `flags` are the
    flags alone, which the output mode's refusals read)."""
    rows, given = args.plan or args.table or args.fit_card, raw if flags is None else flags
    # the rows' own refusals come before the fields are read: a field they choose themselves, or a walk they do not
    # run (--walk eager beside --table, whose step refuses the table's recipes), fails another field's check first
    walk = str(raw.get("walk") or "deck").strip().lower()  # as parse_inputs reads it; the walk alone decides here
    problem = rows and (mode_problem(args, given) or ((args.plan or args.table) and walk == "eager"
                                                      and plan_problem(walk, None)))  # fmt: skip
    if problem:
        raise InputError(*problem)
    # the step (not --table, --plan, --fit-card) answers the loop's fields as the page does: the eager walk's
    # figure beside the deck walk's (eager_figure)
    inputs = parse_inputs(raw, eager_beside=not rows)
    problem = (not rows and mode_problem(args, given)) or (
        (args.plan or args.table) and plan_problem(inputs.walk, inputs.tune))  # fmt: skip
    problem = problem or late_problem(inputs, args.plan)  # after the modes' own (--plan chooses --zero), before
    beside, refused = (None, None) if problem or rows else eager_figure(inputs, raw)  # the figure walks the step
    problem = problem or refused
    if problem:
        raise InputError(*problem)
    problem = args.fit_card and fit_problem(inputs.shape, inputs.walk)
    if problem:
        raise InputError(*problem)
    return inputs, beside


def rows_text(args: argparse.Namespace, inputs: Run) -> str:
    """What --fit-card, --plan or --table prints: its rows, as JSON or as a table."""
    shape, seq, par, tune, capacity = inputs.shape, inputs.seq, inputs.par, inputs.tune, inputs.capacity
    if args.fit_card:
        rows = fit_card(shape, seq, capacity, inputs.recipe, tune.optimizer, tune.paged, par.flash,
                        adapter_dtype=tune.adapter_dtype)  # fmt: skip
        return json_text(rows) if args.json else format_fit(rows, capacity)
    if args.plan:
        rows = plan(shape, seq, inputs.global_batch, capacity, inputs.recipe, par.sequence_parallel, par.flash)
        return json_text(rows) if args.json else format_plan(rows, capacity)
    rows = table(shape, seq, inputs.micro_batch, par, inputs.grad_accum)
    return json_text(rows) if args.json else format_table(rows)
