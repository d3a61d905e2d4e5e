"""MkDocs hook: every number in the prose comes from calc at build time.

In a page's Markdown:

    {{ calc:PRESET [FIELD=VALUE ...] PATH [FORMAT] }}

asks ``calc.web.handle`` (the browser's entry point too) for PRESET with the
given inputs (CLI flag names: seq=8 micro-batch=16 recipe=fp32 ...) and prints
the value at PATH in its answer, e.g. ``step.peak``, ``step.bytes.activations``,
``table.mixed-full.peak`` (a list of rows is indexed by their "id"),
``step.config.shape.layers``; ``recipes.mixed.per_param`` reads calc.RECIPES and
``layer_bytes`` is calc.layer_bytes for the inputs. A list is indexed by its
rows' "id" or by position (``plan.0.devices``: ``plan`` is the planner's answer,
as `--plan --json` prints it). ``zero_state.PARAMS.DP.STAGE`` is the state
(weights, gradients, Adam, master copy) one of DP data-parallel workers holds for
a model of PARAMS parameters at that ZeRO stage (calc.recipes.state_bytes). PATH
may add values with ``+``. FORMAT is ``GB`` (calc.format_gb + " GB", the default),
``card`` (a device's memory, calc.units.format_capacity: "80 GB" where whole), ``MB``
(10^6 bytes, one decimal, thousands separators), ``int`` (thousands separators),
``values`` (16-bit bytes as a count of values), ``percent`` (one decimal) or
``text``.

Claims about the numbers (``{{ calc-claim: A > B }}``, ``{{ calc-if: A > B }} ... {{ calc-else }} ...
{{ calc-end }}``, ``{{ calc-ratio: A / B }}``) are checked or resolved first (hooks/claims.py).

``{{ calc-replayed }}`` lists the models whose code the eager walk replays (calc.families' registry).
``{{ calc-widget }}`` places the live calculator (hooks/calculator.html), filled
in with the build-time answer so the page reads completely without JavaScript.

A placeholder that does not parse or resolve raises, so a typo fails the build.
Headings that start with a section number (``### 10.1 ...``) get the stable
anchor ``sec-10-1``, so a section of results.md can be cited.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File
from mkdocs.utils import get_relative_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: hooks/ and calc/
from hooks import claims, deck, figures, wheel

PLACEHOLDER = re.compile(r"\{\{\s*(calc[^}]*?)\s*\}\}")
LEFTOVER = re.compile(r"\{\{[^}]*\}\}")
WIDGET_SLOT = '<div data-calc-slot="widget"></div>'
NUMBERED_HEADING = re.compile(r"^(#{1,6}) (\d+(?:\.\d+)*)\.? (?!.*\{\s*#)(.*)$", re.MULTILINE)
FORMATS = ("GB", "card", "MB", "int", "values", "percent", "text")

_templates = Environment(
    loader=FileSystemLoader(str(deck.ROOT / "hooks")), autoescape=True, undefined=StrictUndefined,
    trim_blocks=True, lstrip_blocks=True,
)


def on_config(config):
    deck.reload_calc()  # `mkdocs serve` rebuilds on a change to calc/: use the new code
    return config


def _lookup(data: object, path: str) -> object:
    value = data
    for key in path.split("."):
        if isinstance(value, list) and key.isdigit():
            if int(key) >= len(value):
                raise KeyError(f"no row {key} (the list has {len(value)})")
            value = value[int(key)]
        elif isinstance(value, list):
            matches = [row for row in value if isinstance(row, dict) and row.get("id") == key]
            if len(matches) != 1:
                raise KeyError(f"no row with id {key!r}")
            value = matches[0]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            raise KeyError(f"{key!r} not found")
    return value


def _format(value: object, fmt: str) -> str:
    if fmt == "text":
        return str(value)
    if fmt == "percent":
        if not isinstance(value, float):
            raise TypeError(f"format percent needs a fraction, got {value!r}")
        return f"{value:.1%}"
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"format {fmt} needs a whole number, got {value!r}")
    if fmt == "GB":
        return f"{deck.calc.format_gb(value)} GB"
    if fmt == "card":  # a device's memory: "80 GB", as the page's capacity reads
        return deck.calc.units.format_capacity(value)
    if fmt == "int":
        return f"{value:,}"
    if fmt == "MB":  # rounded half up with separators, as calc.format_gb
        return f"{deck.calc.units.format_unit(value, 10**6)} MB"
    if value % 2:  # "values": bytes of 16-bit activations, 2 bytes per value
        raise ValueError(f"{value} bytes is not a whole number of 16-bit values")
    return f"{value // 2:,}"


def _zero_state(path: str, recipe: str) -> int:
    """``zero_state.PARAMS.DP.STAGE``: the state bytes one data-parallel worker holds (ZeRO's Figure 1)."""
    numbers = path.split(".")[1:]
    if len(numbers) != 3 or not all(n.isdigit() for n in numbers) or numbers[2] not in ("0", "1", "2", "3"):
        raise ValueError(f"expected zero_state.PARAMS.DP.STAGE, got {path!r}")
    params, dp, stage = map(int, numbers)
    par = deck.calc.Parallel(dp=dp, zero=stage)
    return sum(deck.calc.recipes.state_bytes(params, recipe, par).values())


def resolve(spec: str) -> str:
    """The text for one placeholder body, e.g. ``calc:llama-7b step.peak GB``."""
    number, fmt = _value_and_format(spec)
    return _format(number, fmt)


def value(spec: str) -> object:
    """The value one placeholder body stands for, unformatted: ``calc:llama-7b step.peak`` gives bytes."""
    return _value_and_format(spec)[0]


def _value_and_format(spec: str) -> tuple[object, str]:
    head, *words = spec.split()
    if not head.startswith("calc:") or not words:
        raise ValueError("expected `calc:PRESET [FIELD=VALUE ...] PATH [FORMAT]`")
    inputs = {"preset": head.removeprefix("calc:")}
    while words and "=" in words[0]:
        field, _, value = words.pop(0).partition("=")
        inputs[field] = value
    if not words or len(words) > 2:
        raise ValueError("expected one PATH and at most one FORMAT after the inputs")
    path, fmt = words[0], (words[1] if len(words) == 2 else "GB")
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    parts = path.split("+")
    answer = deck.compute(inputs, sweep=False, plan=any(p.split(".")[0] == "plan" for p in parts))
    parsed = deck.calc.parse_inputs(inputs)
    data = {
        **answer,
        "recipes": deck.recipes(),
        "layer_bytes": deck.calc.layer_bytes(parsed.shape, parsed.seq, parsed.micro_batch),
    }
    values = [_zero_state(p, parsed.recipe) if p.startswith("zero_state.") else _lookup(data, p) for p in parts]
    return (values[0] if len(values) == 1 else sum(values)), fmt


def on_page_markdown(markdown: str, page, config, files) -> str:
    def replace(match: re.Match) -> str:
        spec = match[1]
        if spec == "calc-widget":
            return WIDGET_SLOT
        if spec == "calc-replayed":  # the model code the eager walk replays, from calc's registry
            return deck.calc.families.listing(
                [m for f in deck.calc.families.FAMILIES.values() if f.layer is not None for m in f.models])
        try:
            return resolve(spec)
        except (ValueError, KeyError, TypeError) as error:
            raise PluginError(f"{page.file.src_uri}: bad placeholder {match[0]!r}: {error}") from None

    markdown = NUMBERED_HEADING.sub(
        lambda m: f"{m[1]} {m[2]} {m[3]} {{ #sec-{m[2].replace('.', '-')} }}", markdown
    )
    try:
        markdown = claims.apply(markdown, value)
    except (ValueError, KeyError, TypeError) as error:  # claims.ClaimError is a ValueError
        raise PluginError(f"{page.file.src_uri}: {error}") from None
    markdown = PLACEHOLDER.sub(replace, markdown)
    leftover = LEFTOVER.search(markdown)
    if leftover:  # e.g. "{{ clac:...": a misspelt placeholder must not reach the page
        raise PluginError(f"{page.file.src_uri}: unknown placeholder {leftover[0]!r}")
    return markdown


def form(shape: dict, unread: tuple[str, ...] = ()) -> list[tuple[str, list[dict]]]:
    """The page's form from calc.fields' table: each fieldset (its legend) with its items in place order. An
    item is {"field", "control", "value"} (the control "text", "select" with its "options", "check",
    "presets" or "config"; the value the model's, else the field's default), {"shown_for", "items"} (fields
    the page shows for these --finetune modes only, data-show-for) or {"block"} (the page's own, not a field).
    The fields in `unread` (calc.fields.page_unread: the model's numbers do not read them) start hidden."""
    fields = deck.calc.fields
    kinds = {"bool": "check", "choice": "select"}
    sections: dict[str, list] = {name: [] for name in fields.SECTIONS}
    for f in fields.TABLE:
        if f.page is None:
            continue
        value = shape[f.attr] if f.sets == "shape" else fields.page_value(f)
        item = {"field": f, "control": f.page.control or kinds.get(f.kind, "text"), "value": value,
                "hidden": f.name in unread}
        if item["control"] == "select":
            item["options"] = fields.page_options(f)
        sections[f.page.section].append((f.page.at, item))
    for name, (section, at) in fields.PAGE_BLOCKS.items():
        sections[section].append((at, {"block": name}))
    out = []
    for legend, items in sections.items():
        grouped: list[dict] = []
        for _, item in sorted(items, key=lambda pair: pair[0]):
            shown = " ".join(item["field"].finetune) if "field" in item else ""
            if not shown:
                grouped.append(item)
            elif grouped and grouped[-1].get("shown_for") == shown:
                grouped[-1]["items"].append(item)
            else:
                grouped.append({"shown_for": shown, "items": [item]})
        out.append((legend, grouped))
    return out


def form_defaults(shape: dict) -> dict[str, str]:
    """The form's starting values of the run's fields, keyed by field name (the CLI's flags), from calc.fields'
    defaults ("" where calc derives the value: grad-accum's as many micro-batches as pipeline stages,
    attention's each walk's own, the device's AdamW, the loop's loss), and the preset's name."""
    fields = deck.calc.fields
    run = {f.name: fields.page_value(f) for f in fields.TABLE if f.page and f not in fields.MODEL}
    return {"preset": shape["name"], **run}


def preset_groups() -> list[tuple[str, list[dict]]]:
    """The preset list by family (calc.presets.catalog), each labelled with its parameters: total, and
    active as well for a mixture of experts."""
    groups: dict[str, list[dict]] = {}
    for row in deck.calc.presets.catalog():
        label = f"{row['name']} — {deck.calc.units.params_label(row['params'], row['active'])}"
        groups.setdefault(row["group"], []).append({**row, "label": label})
    return list(groups.items())


# a band's section -> its file (deck.MEASURED)
BAND_FILES = {"10.8": "transformers", "10.6": "decoder", "12.4": "lora", "12.5": "qlora", "13.1": "families",
              "13.2": "loops", "14": "engines"}
DEVICE_NAMES = {"cpu": "CPU", "cuda": "GPU"}


def measured_on(section: str) -> str:
    """Where the steps behind an error band ran, in words: "measured on a CPU only: no GPU run yet" until one
    exists."""
    runs = json.loads(deck.MEASURED[BAND_FILES[section]].read_text())["runs"]
    devices = sorted({DEVICE_NAMES.get(d, d) for d in map(_device, runs) if d})
    if devices == ["CPU"]:
        return "measured on a CPU only: no GPU run yet"
    return f"measured on {' and '.join(devices)}"


def _device(run: dict) -> str | None:
    """The device a measured row ran on (None: not measured): its own, or for the engines' rows (§14, which
    measure every rank's step with gloo's processes on the CPU, measure_engines.py) the CPU."""
    if run.get("ranks"):
        return "cpu" if run["backend"] == "gloo" else run["backend"]
    return run["device"] if run.get("measured_peak") else None


def bands_with_devices(bands: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """deck.eager_bands() with the device its steps were measured on added to each band's setting, which
    the widget prints beside the band (issue 20: the figure is for a GPU, the band from CPU steps)."""
    def with_device(band: dict) -> dict:
        setting = ", ".join(part for part in (band.get("setting"), measured_on(band["section"])) if part)
        return {**band, "setting": setting}

    return {name: [with_device(band) for band in kind] for name, kind in bands.items()}


def widget_html(page_url: str) -> str:
    """The calculator's HTML, filled in with the build-time answer for the deck's inputs."""
    answer = deck.compute(deck.DEFAULT_INPUTS, plan=True, fit=True)
    config = answer["step"]["config"]
    shape = config["shape"]
    defaults = form_defaults(shape)
    state = {
        "initial": {k: v for k, v in answer.items() if k not in ("plan", "fit")},  # both are drawn in the HTML
        "defaults": defaults,
        "presets": deck.presets(),
        "recipeLabels": {name: r["label"] for name, r in deck.recipes().items()},
        "optimizerLabels": {name: o.label for name, o in deck.calc.optimizers.OPTIMIZERS.items()},
        "categories": list(deck.calc.CATEGORIES),
        "categoryLabels": deck.calc.CATEGORY_LABELS,
        "eagerBands": bands_with_devices(deck.eager_bands()),
        "loopPresets": deck.calc.loops.LOOP_PRESETS,  # the fields "as Trainer runs it" sets (calc.loops)
        "resultsUrl": get_relative_url("results/", page_url),
        "hfMaxChars": deck.calc.hf.MAX_CHARS,  # a longer paste is refused before it reaches the worker
        "fields": deck.page_fields(),  # every field name the page knows, from calc
        "planLimit": deck.PLAN_LIMIT,  # the planner lists at most this many layouts
    }

    def url(path: str) -> str:
        return get_relative_url(path, page_url)

    return _templates.get_template("calculator.html").render(
        state_json=json.dumps(state, separators=(",", ":")).replace("</", "<\\/"),
        answer=answer, shape=shape, defaults=defaults, form=form(shape, answer["unread"]), recipes=deck.recipes(),
        preset_groups=preset_groups(), fit=answer["fit"], lora_targets=", ".join(deck.calc.finetune.TARGETS),
        lora_shown=" ".join(deck.calc.fields.LORA),
        capacity_presets=deck.capacity_presets(), plan_max_devices=deck.PLAN_MAX_DEVICES,
        tp_max=max(deck.calc.TP_DEGREES), plan_limit=deck.PLAN_LIMIT,
        fit_micro_batches=deck.calc.families.listing([f"{m:,}" for m in FIT_MICRO_BATCHES()]),
        categories=deck.calc.CATEGORIES,
        category_names=deck.calc.CATEGORY_LABELS,
        category_labels={c: label[0].upper() + label[1:] for c, label in deck.calc.CATEGORY_LABELS.items()},
        format_gb=deck.calc.format_gb, format_size=deck.calc.units.format_size,
        worker_url=url("javascripts/calc-worker.mjs"), wheel_url=url(f"assets/wheels/{wheel.filename()}"),
        figure_url=lambda name: url(f"figures/{name}"), figure_alt=figures.ALT,
        eager_bands=state["eagerBands"], band_for=deck.band_for, results_url=state["resultsUrl"],
    )


def FIT_MICRO_BATCHES() -> tuple[int, ...]:
    return importlib.import_module("calc.plan").FIT_MICRO_BATCHES


def on_files(files, config):
    """Adds the phone-width variants of the static figures (hooks/figures.py) beside the wide ones."""
    for name, svg in figures.narrow_files(deck.compute(deck.DEFAULT_INPUTS)).items():
        files.append(File.generated(config, f"figures/{name}", content=svg))
    return files


FIGURE_IMG = re.compile(r'<img (?P<attrs>[^>]*?)src="(?P<src>[^"]*figures/(?P<name>[a-z-]+)\.svg)"(?P<rest>[^>]*)>')


def _narrow_figures(html: str) -> str:
    """Each static figure as a <picture> whose phone-width source a narrow screen takes."""
    def picture(m: re.Match) -> str:
        narrow = m["src"].removesuffix(".svg") + "-narrow.svg"
        return f'<picture><source media="{figures.NARROW_MEDIA}" srcset="{narrow}">{m[0]}</picture>'

    return FIGURE_IMG.sub(picture, html)


def on_page_content(html: str, page, config, files) -> str:
    if WIDGET_SLOT in html:
        page.meta["calculator"] = True  # site_overrides/main.html adds the calculator's script
        html = html.replace(f"<p>{WIDGET_SLOT}</p>", WIDGET_SLOT).replace(WIDGET_SLOT, widget_html(page.url), 1)
    return _narrow_figures(html)
