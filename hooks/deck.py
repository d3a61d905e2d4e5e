"""The deck's configuration and the one way the build asks calc for numbers.

Both the prose placeholders and the calculator's build-time state go through
``calc.web.handle``, the same entry point the browser's worker calls, so the page
shows the same JSON before and after Pyodide is ready.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import calc  # noqa: E402

# What the deck shows: LLaMA 7B at sequence 4,096, one sequence per step, on calc's default device.
DEFAULT_INPUTS: dict[str, str] = {}  # calc's own defaults: llama-7b, seq 4096, micro-batch 1, mixed, none
PLAN_MAX_DEVICES = inspect.signature(calc.plan).parameters["max_devices"].default
PLAN_LIMIT = inspect.signature(calc.plan).parameters["limit"].default


def reload_calc() -> None:
    """Import calc afresh (``mkdocs serve`` rebuilds when calc/ changes)."""
    global calc
    if str(ROOT) not in sys.path:  # MkDocs restores sys.path after loading each hook
        sys.path.insert(0, str(ROOT))
    for name in [m for m in sys.modules if m == "calc" or m.startswith("calc.")]:
        del sys.modules[name]
    calc = importlib.import_module("calc")
    _compute.cache_clear()


@cache
def _compute(key: str) -> dict:
    result = json.loads(calc.web.handle(key))
    if not result["ok"]:
        raise ValueError(f"{result['field']}: {result['message']}")
    return result


def compute(inputs: dict[str, str] | None = None, sweep: bool = True, plan: bool = False, fit: bool = False) -> dict:
    """calc.web.handle's answer for these inputs (CLI flag names, string values); with plan=True
    it includes the planner's layouts (what `--plan --json` prints), with fit=True what fits one card."""
    return _compute(json.dumps({"inputs": inputs or {}, "sweep": sweep, "plan": plan, "fit": fit}, sort_keys=True))


# Measured steps against the eager walk, by what speaks for a step (calc.web.eager_beside's "band"):
# full training of each family's code (scripts/training/measure_transformers.py, measure.py; results §10.6,
# §10.8), fine-tuning with peft (measure_lora.py, §12.4) and QLoRA (measure_qlora.py, §12.5).
DATA = ROOT / "docs" / "data"
MEASURED = {
    "transformers": DATA / "transformers.json",
    "decoder": DATA / "measurements.json",
    "lora": DATA / "lora.json",
    "qlora": DATA / "qlora.json",
    "families": DATA / "families.json",
    "loops": DATA / "loops.json",
    "engines": DATA / "engines.json",
}
MOE_TYPES = ("mixtral", "qwen2_moe")  # the mixtures of experts among transformers.json's model types


def family_classes() -> dict[str, tuple[str, ...]]:
    """calc.web.eager_band's keys -> the model types measured for each: a dense model type speaks for the
    family whose code runs it (calc.families' registry), a mixture of experts for "moe"."""
    out: dict[str, tuple[str, ...]] = {"moe": MOE_TYPES}
    for t in calc.families.MODEL_TYPES.values():
        if t.name not in MOE_TYPES:
            out[t.family] = (*out.get(t.family, ()), t.name)
    return out


def _band(ratios: list[float], models, section: str, setting: str = "", commands=None, runs: int = 0) -> dict:
    """A band; `commands`: the eager walk's commands of its steps, whose settings (setting_of) it speaks for
    (None: any); `runs`: its steps, where a step gives more than one ratio (else one a ratio)."""
    settings = sorted({setting_of(c) for c in commands}) if commands is not None else None
    return {"low": min(ratios), "high": max(ratios), "runs": runs or len(ratios), "models": sorted(set(models)),
            "section": section, "anchor": "sec-" + section.replace(".", "-"), "setting": setting,
            "settings": settings}


def setting_of(command: str) -> str:
    """What a measured step ran, as calc.web.eager_beside's "setting" says it, from its `--walk eager` command:
    recipe, optimizer, loop (accumulating or not) and loss, with the CLI's defaults where not given (the band
    names the device its steps ran on)."""
    flags = command.split()[3:]  # after "python -m calc"
    given = {flag: value for flag, value in zip(flags, [*flags[1:], ""], strict=True) if flag.startswith("--")}
    loop = given.get("--loop", "bare")
    accum = " accum" if int(given.get("--grad-accum", "1")) > 1 else ""
    loss = given.get("--loss") or ("trl-chunked" if loop == "sft" else "transformers")
    return f"{given.get('--recipe', 'mixed')} {given.get('--optimizer', 'adamw')} {loop}{accum} {loss}"


def against_tensors(row: dict, predicted: str, ratio: str) -> float:
    """A measured row's eager ratio as results.md prints it: against the step's tensors (the measured peak less
    the matrix library's workspace, scripts/training/profile_step.py) where the row records them."""
    return row[predicted] / row["measured_peak_tensors"] if "measured_peak_tensors" in row else row[ratio]


def eager_bands() -> dict[str, list[dict]]:
    """For each kind of step the eager walk follows (calc.web.eager_band), the measured steps that speak for
    it, one band a table of results: the lowest and highest ratio of predicted to measured peak over its
    steps, how many, on which model types, its section and the settings its steps ran (calc.web.eager_beside's
    "setting"): {band: [{"low", "high", "runs", "models", "section", "anchor", "setting", "settings"}, ...]}.
    The page quotes the first band whose settings hold the step's (issue 33: a Trainer step measured in §13.2
    read as unmeasured, the bare loop's §10.8 being the only band it knew)."""
    out: dict[str, list[dict]] = {}
    for band, found in _bands():
        out.setdefault(band, []).append(found)
    return out


def band_for(bands: dict[str, list[dict]], band: str, setting: str) -> dict | None:
    """The band the page quotes for a step (view.js's eagerBand does the same): the first of its kind whose
    steps ran its setting (a band without settings speaks for any), or None."""
    return next((b for b in bands.get(band, []) if b["settings"] is None or setting in b["settings"]), None)


def _bands():
    """(band, band dict) for each table of measured steps, in the order the page prefers them."""
    bands = {}
    if MEASURED["transformers"].exists():
        runs = json.loads(MEASURED["transformers"].read_text())["runs"]
        for family, classes in family_classes().items():
            rows = [r for r in runs if r["model_type"] in classes and r["measured_peak"]]
            if rows:
                commands = [r["command"] for r in rows]
                bands[family] = _band([r["ratio"] for r in rows], classes, "10.8", commands=commands)
                yield family, bands[family]
    if MEASURED["families"].exists():  # the families people train now (§13.1), where §10.8 has none of theirs
        runs = [r for r in json.loads(MEASURED["families"].read_text())["runs"] if "ratio" in r.get("eager", {})]
        by_family: dict[str, list[dict]] = {}
        for r in runs:
            by_family.setdefault(calc.families.MODEL_TYPES[r["model_type"]].family, []).append(r)
        for family, rows in by_family.items():
            if family not in bands:
                ratios = [r["eager"]["peak"] / r["measured_peak"] for r in rows]
                yield family, _band(ratios, [r["model_type"] for r in rows], "13.1",
                                    commands=[r["eager"]["command"] for r in rows])
    if MEASURED["decoder"].exists():
        runs = json.loads(MEASURED["decoder"].read_text())["runs"]
        ratios = [against_tensors(r, "predicted_peak_eager", "ratio_eager") for r in runs
                  if r.get("measured_peak") and r.get("ratio_eager")]
        if ratios:
            yield "decoder", _band(ratios, ["decoder"], "10.6")
    if MEASURED["lora"].exists():
        runs = [r for r in json.loads(MEASURED["lora"].read_text())["runs"] if r["measured_peak"]]
        if runs:
            ratios = [against_tensors(r, "predicted_peak", "ratio") for r in runs]
            yield "lora", _band(ratios, [r["model_type"] for r in runs], "12.4",
                                "fine-tuned with peft's LoRA or with frozen layers", [r["command"] for r in runs])
    if MEASURED["qlora"].exists():
        runs = [r for r in json.loads(MEASURED["qlora"].read_text())["runs"] if r["measured_peak"]]
        if runs:
            ratios = [against_tensors(r, "eager_predicted_peak", "eager_ratio") for r in runs]
            yield "qlora", _band(ratios, [r["model_type"] for r in runs], "12.5",
                                 "with bitsandbytes' 4-bit layers and peft's LoRA", [r["eager_command"] for r in runs])
    if MEASURED["loops"].exists():  # Trainer's and TRL's loops (§13.2), one band a kind of step and a setting
        yield from _loop_bands(json.loads(MEASURED["loops"].read_text())["runs"])
    if MEASURED["engines"].exists():  # DDP, FSDP2 and tensor parallelism, rank by rank (§14)
        yield from _engine_bands(json.loads(MEASURED["engines"].read_text())["runs"])


def _loop_bands(runs: list[dict]):
    """(band, band dict) for the loops' steps (§13.2): those of one kind of step (a LoRA step speaks for
    "lora", a full one for its family's code) and one setting make one band, so that each quotes the steps
    that ran what the page shows."""
    classes = family_classes()
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        if "peak" not in r["eager"]:
            continue
        command = r["eager"]["command"]
        family = next(k for k, c in classes.items() if r["model_type"] in c)
        kind = "lora" if "--finetune" in command.split() else family
        groups.setdefault((kind, setting_of(command)), []).append(r)
    for (kind, _), rows in groups.items():
        ratios = [r["eager"]["peak"] / r["measured_peak"] for r in rows]
        words = "run by Trainer or TRL's SFTTrainer" + (", fine-tuned with peft's LoRA" if kind == "lora" else "")
        yield kind, _band(ratios, [r["model_type"] for r in rows], "13.2", words, [r["eager"]["command"] for r in rows])


def _engine_bands(runs: list[dict]):
    """(band, band dict) for the engines' steps (§14): those of one engine (calc.web.engine_band's names, which
    are measure_engines.py's) and one setting make one band, its ratios every rank's predicted peak over that
    rank's measured one, the worst ranks' (whose unseen frees results §14 explains) among them."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        if "rank_peaks" in r["eager"]:
            groups.setdefault((r["engine"], setting_of(r["eager"]["command"])), []).append(r)
    for (engine, _), rows in groups.items():
        ratios = [rank["predicted_peak"] / rank["measured_peak"] for r in rows for rank in r["ranks"]]
        worlds = [str(w) for w in sorted({r["world"] for r in rows})]
        over = worlds[0] if len(worlds) == 1 else f"{', '.join(worlds[:-1])} or {worlds[-1]}"
        words = f"over {over} gloo processes, each of their {len(ratios)} ranks"
        yield engine, _band(ratios, [r["family"] for r in rows], "14", words, [r["eager"]["command"] for r in rows],
                            len(rows))


def recipes() -> dict[str, dict]:
    """Bytes per parameter of each recipe, as plain data."""
    return {
        name: {"weights": r.weights, "gradients": r.gradients, "optimizer": r.optimizer,
               "master": r.master, "per_param": r.per_param(), "label": r.label}
        for name, r in calc.RECIPES.items()
    }


def presets() -> dict[str, dict]:
    """Each preset's shape, keyed by the form's field names (CLI flags)."""
    out = {}
    for name, shape in calc.PRESETS.items():
        d = shape.as_dict()  # the per-layer lists only where the model has some
        out[name] = {field.replace("_", "-"): d[field] for field in d if field != "name"}
    return out


def capacity_presets() -> list[dict]:
    """The page's capacity buttons: calc's cards (--card), one button per size, naming the cards it stands for."""
    sizes: dict[str, list[str]] = {}
    for card, gb in calc.inputs.CARDS.items():
        sizes.setdefault(gb, []).append(card)
    return [{"gb": gb, "cards": ", ".join(cards)} for gb, cards in sorted(sizes.items(), key=lambda kv: float(kv[0]))]


def page_fields() -> dict:
    """The field names the page knows, all from calc: the one place the widget learns them (the JS has no list).
    {"all": every field a link may carry, "shape": {field: Shape attribute}, "run": [the step's fields],
    "layout": [what a planner row sets], "row_also": [the planner's question's fields a row sets too],
    "fit_resets": [those a fit row sets to their defaults], "fit": {field: a fit row's key}, "switches": [the
    fields the CLI gives as --name or --no-name], "rows_only": [the fields only the planner and the fit list read,
    which the CLI's step refuses: its command leaves them out]}."""
    fields = calc.inputs.FIELDS
    attrs = {f.name for f in dataclasses.fields(calc.Shape)}
    shape = {f: f.replace("-", "_") for f in fields if f.replace("-", "_") in attrs}
    answer = compute(DEFAULT_INPUTS, plan=True, fit=True)
    asked_plan = inspect.signature(calc.plan).parameters  # the planner's question, not its layout
    asked_fit = inspect.signature(importlib.import_module("calc.plan").fit_card).parameters

    def row_fields(row: dict, asked) -> dict[str, str]:
        out = {}
        for key in row:
            name = key.replace("_", "-")
            name = name if name in fields else f"lora-{name}"  # a fit row's rank and targets
            if name in fields and key not in asked:
                out[name] = key
        return out

    # the question's fields a planner row gives its own value of, which a Load sets (its sequence parallelism is
    # off where its tp is 1: calc.plan), and of those the ones the fit list, on one card, does not ask (reset)
    also = [key.replace("_", "-") for key in answer["plan"][0] if key in asked_plan and key.replace("_", "-") in fields]
    return {
        "all": list(fields),
        "shape": shape,
        "run": [f for f in fields if f not in shape and f not in ("preset", "hf-config")],
        "layout": list(row_fields(answer["plan"][0], asked_plan)),
        "row_also": also,
        "fit_resets": [name for name in also if name.replace("-", "_") not in asked_fit],
        "fit": row_fields(answer["fit"][0], asked_fit),
        "switches": [f.name for f in calc.fields.TABLE if f.kind == "bool"],  # --name / --no-name in the CLI
        "rows_only": [f.name for f in calc.fields.TABLE if "step" not in f.outputs],
    }
