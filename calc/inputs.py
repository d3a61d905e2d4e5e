"""Validation of user input (CLI flags, URL parameters, form fields), one message per field."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from . import families, fields, finetune, loops
from .activations import layer_bytes
from .counts import param_counts
from .engines import pipeline, tensor
from .engines.pipeline import SCHEDULES
from .families import listing
from .fields import ATTENTIONS, CARDS, DEVICES, ENGINES, FIELD, TABLE, ZERO_STAGES
from .hf import ConfigError, compact, parse, shape_from_text
from .parallel import OFFLOADS, SINGLE, Parallel, check, lone_problem
from .presets import PRESETS
from .recipes import OFFLOAD_RECIPES, RECIPES
from .run import Run
from .shape import Shape
from .units import GB

# Results travel to the browser as JSON numbers: keep every byte count exact there (< 2^53).
MAX_BYTES = 2**53 - 1

# ASCII digits only, optionally signed (a sign gets its own message below), with thousands separators.
WHOLE = re.compile(r"[+-]?(?:[0-9]+|[0-9]{1,3}(?:[,_][0-9]{3})+)")
CAPACITY_DECIMALS = 3  # a capacity in GB to the MB: 94.5, 0.512
DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]{1,2})?")
# Python refuses int() of more than 4,300 digits (sys.set_int_max_str_digits): count them first.
MAX_DIGITS = 30
# A message quotes at most this much of what was typed (a 10,000-character value is not echoed whole).
MAX_QUOTE = 40

# The fields (calc.fields' table, where each is declared once) in the groups this module reads them by.
# Model fields: name -> (Shape attribute, largest accepted value), or the attribute (a switch), or its choices.
INT_FIELDS = {f.name: (f.attr, f.largest) for f in fields.MODEL if f.kind == "int"}
# Whole numbers where 0 means none (or, for head-size and expert-ffn, the value derived from the others).
COUNT_FIELDS = {f.name: (f.attr, f.largest) for f in fields.MODEL if f.kind == "count"}
MOE_FIELDS = fields.names(moe=True)  # the mixture-of-experts fields that mean nothing without experts
MAX_CAPACITY_FACTOR = 64
BOOL_FIELDS = {f.name: f.attr for f in fields.MODEL if f.kind == "bool"}
CHOICE_FIELDS = {f.name: (f.attr, f.choices) for f in fields.MODEL if f.kind == "choice"}
PARALLEL_LIMITS = {f.name: f.largest for f in fields.PARALLEL if f.kind == "int" and f.attr}  # dp, tp, pp, ep
PARALLEL_BOOLS = {f.name: f.attr for f in fields.PARALLEL if f.kind == "bool"}
DEFAULT_PRESET = FIELD["preset"].default
DEFAULT_SEQ = FIELD["seq"].default
DEFAULT_CAPACITY_GB = FIELD["capacity-gb"].default
MAX_CAPACITY_GB = 100_000
CAPACITY_MESSAGE = f"must be a number of GB above 0 and at most {MAX_CAPACITY_GB:,}, like 80 or 94.5 (3 decimals)"
# Fine-tuning (calc.finetune): the fields of LoRA's adapters (the rest: which parameters train, the optimizer).
LORA_FIELDS = fields.names(finetune=fields.LORA)
LOOP_FIELDS = fields.names(fields.LOOP)  # issue 19: the loop around the eager walk's step (calc.loops)
# Fields the deck walk does not read (issue 19), each with why: its activations are Korthikanti et al. 2022's
# (§4, 34sbh + 5as^2b a layer: a GELU MLP and dropout masks whatever the model has; s x s scores, or none under
# FlashAttention, whatever the window) and its accounting is the same on every device. The eager walk reads
# each, and so does the page's eager figure beside the deck's (calc.web.eager_beside).
DECK_UNREAD = {f.name: f.why for f in TABLE if "deck" not in f.walks and f.name not in LOOP_FIELDS}
BESIDE_FIELDS = (*DECK_UNREAD, *LOOP_FIELDS)  # what the deck walk's step answers with the eager walk's figure
FIELDS = tuple(FIELD)


class InputError(ValueError):
    """Bad input, with the field it came from."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def quote(raw: object) -> str:
    """What the reader typed, in quotes, cut to MAX_QUOTE characters with its length said."""
    text = str(raw)
    if len(text) <= MAX_QUOTE:
        return repr(text)
    return f"{text[:MAX_QUOTE]!r}... ({len(text):,} characters)"


def plain_number(text: str, decimals: int = 0) -> str | None:
    """The one form of every number field (WHOLE: a sign, "1,000" or "1_000"), with up to `decimals` decimals,
    as plain digits ("+1,000.5" -> "1000.5", a minus kept), or None where the text is not one."""
    whole, dot, frac = text.partition(".")
    if not WHOLE.fullmatch(whole) or (dot and not (0 < len(frac) <= decimals and frac.isascii() and frac.isdigit())):
        return None
    return whole.lstrip("+").replace(",", "").replace("_", "") + dot + frac


def canonical_numbers(raw: Mapping[str, object]) -> dict[str, str]:
    """The number fields of accepted inputs as calc read them, where the text was another form of the number
    ("1,000" or "1_000" -> "1000", "+8" -> "8", a capacity "94.50" -> "94.5"): the page's address carries these,
    so a link reopens the same answer in calc's one form. A text that is no number (a preset, a choice) is left."""
    out = {}
    for field, value in raw.items():
        decimals = CAPACITY_DECIMALS if field == "capacity-gb" else 0
        plain = isinstance(value, str) and plain_number(value.strip(), decimals)
        if not plain:
            continue
        whole, _, frac = plain.partition(".")
        number = str(int(whole)) + (f".{frac.rstrip('0')}" if frac.rstrip("0") else "")
        if number != value:
            out[field] = number
    return out


def _int(field: str, raw: object, largest: int, smallest: int = 1) -> int:
    if isinstance(raw, bool):
        raise InputError(field, f"must be a whole number, got {raw!r}")
    if isinstance(raw, int):
        value = raw
    else:
        text = str(raw).strip()
        plain = plain_number(text)
        if plain is None:
            raise InputError(field, f"must be a whole number, got {quote(text)}")
        digits = plain.lstrip("-").lstrip("0")
        if len(digits) > MAX_DIGITS:  # before int(): no ValueError from Python's digit limit
            raise InputError(field, f"must be at most {largest:,}, got a number of {len(digits):,} digits")
        value = int(plain)
    if value < smallest:
        raise InputError(field, f"must be at least {smallest}, got {value}")
    if value > largest:
        raise InputError(field, f"must be at most {largest:,}, got {value:,}")
    return value


def _bool(field: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise InputError(field, f"must be true or false, got {str(raw)!r}")


def _choice(field: str, raw: object, choices) -> str:
    text = str(raw).strip().lower()
    if text not in choices:
        raise InputError(field, f"must be one of {', '.join(choices)}, got {quote(raw)}")
    return text


def _number(given: Mapping[str, object], name: str, default: object = None) -> int:
    """A whole-number field of calc.fields' table: given, else `default` or its own, within its bounds."""
    f = FIELD[name]
    raw = given.get(name, f.default if default is None else default)
    return _int(name, raw, f.largest, smallest=0 if f.kind == "count" else 1)


def _picked(given: Mapping[str, object], name: str) -> str:
    """A choice field of calc.fields' table: given, else its default, one of its choices."""
    f = FIELD[name]
    return _choice(name, given.get(name, f.default), f.choices)


def _capacity_factor(raw: object) -> float:
    """A mixture of experts' capacity factor (Fedus et al. 2022): 0 (dropless), or up to two decimals like 1.25."""
    text = str(raw).strip()
    if not DECIMAL.fullmatch(text) or float(text) > MAX_CAPACITY_FACTOR:
        raise InputError(
            "capacity-factor", f"must be 0 (dropless) or a number like 1.25 up to {MAX_CAPACITY_FACTOR}, got {text!r}"
        )
    return float(text)


def _base(given: Mapping[str, object]) -> Shape:
    """The shape the fields change: a preset's, or a transformers config's (the text of a config.json)."""
    if "hf-config" not in given:
        return PRESETS[_picked(given, "preset")]
    if "preset" in given:
        raise InputError("preset", "give a preset or hf-config, not both")
    try:
        return shape_from_text(given["hf-config"])
    except ConfigError as e:
        raise InputError("hf-config", str(e)) from None


def _capacity(raw: object) -> int:
    """Device capacity in GB (10^9 bytes), written as every number field is (plain_number: "1,000", "+8") with
    up to three decimals, as exact bytes. Anything else (a minus, 0, a fourth decimal, over 100,000 GB) gets the
    one message CAPACITY_MESSAGE."""
    text = str(raw).strip()
    plain = plain_number(text, CAPACITY_DECIMALS) or "-"
    whole, _, frac = plain.partition(".")
    if plain.startswith("-") or len(whole.lstrip("0")) > MAX_DIGITS:
        raise InputError("capacity-gb", f"{CAPACITY_MESSAGE}, got {quote(text)}")
    capacity = int(whole) * GB + int(frac.ljust(CAPACITY_DECIMALS, "0")) * GB // 10**CAPACITY_DECIMALS
    if not 0 < capacity <= MAX_CAPACITY_GB * GB:
        raise InputError("capacity-gb", f"{CAPACITY_MESSAGE}, got {quote(text)}")
    return capacity


def parse_inputs(raw: Mapping[str, object], eager_beside: bool = False) -> Run:
    """Validated inputs, one frozen calc.run.Run: shape, seq, micro_batch, recipe, recompute, walk, attention,
    device, par, grad_accum (None: as many micro-batches as pipeline stages), global_batch, capacity, tune,
    hf_config (a given config.json in calc.hf.compact's short form, or None) and loop.

    Keys are the CLI's flag names without dashes; missing keys take the preset's (or the
    default's) value. `eager_beside`: the answer carries the eager walk's figure beside the deck's (the
    page's, calc.web), which the loop's fields change, so the deck walk accepts them there. Raises
    InputError naming the first bad field."""
    given = _given(raw)
    shape = parse_shape(given)
    run = _parse_run(given, shape)
    walk, attention = run["walk"], run["attention"]
    par = _parse_parallel(given, shape, run["flash"] and walk == "deck")
    check_size(shape, run["seq"], run["micro_batch"], par)
    grad_accum = _number(given, "grad-accum") if "grad-accum" in given else None
    problem = walk == "eager" and eager_problem(shape, run["recompute"], par, grad_accum, attention, run["seq"])
    problem = problem or given_problem(given, shape, walk, eager_beside)
    problem = problem or ("engine" in given and engine_field_problem(_picked(given, "engine"), par))
    if problem:
        raise InputError(*problem)
    global_batch = _number(given, "global-batch")
    capacity = parse_capacity(given)
    tune = parse_tuning(given, shape)
    problem = not tune.default and tuning_problem(tune, walk, par, shape)
    if problem and problem[1] == DECK_MOE:  # named only where the eager walk answers these inputs
        eager = eager_problem(shape, run["recompute"], par, grad_accum, attention, run["seq"]) or engine_problem(
            shape, par, run["recipe"], run["device"], tune, loops.BARE)
        if eager:
            why = DECK_SUGGESTED.sub("", eager[1])  # it would send the reader back to the deck walk
            problem = eager[0] if eager[0] != "walk" else problem[0], (
                f"no walk fine-tunes a mixture of experts with these inputs: the deck walk fine-tunes none, and the "
                f"eager walk, which replays peft's LoRA on one, refuses them ({why})")
    if problem:
        raise InputError(*problem)
    loop = parse_loop(given, "eager" if eager_beside else walk, shape, tune, grad_accum)
    problem = walk == "eager" and engine_problem(shape, par, run["recipe"], run["device"], tune, loop)
    if problem:
        raise InputError(*problem)
    return Run(
        shape=shape,
        **{k: run[k] for k in ("seq", "micro_batch", "recipe", "recompute", "walk", "attention", "device")},
        par=par,
        grad_accum=grad_accum,
        global_batch=global_batch,
        capacity=capacity,
        tune=tune,
        # The given config reduced to what calc reads, for a link that reproduces it (None: a preset).
        hf_config=compact(parse(given["hf-config"])) if "hf-config" in given else None,
        loop=loop,
    )


def _given(raw: Mapping[str, object]) -> dict:
    """The fields given (an empty or None value is not given), each a known field."""
    given = {k: v for k, v in raw.items() if v is not None and v != ""}
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        raise InputError(unknown[0], "is not a known field")
    return given


def parse_shape(given: Mapping[str, object]) -> Shape:
    """The model: a preset's or a config's shape with the shape fields given, checked (check_shape)."""
    base = _base(given)
    changes: dict[str, object] = {}
    for field, (attr, largest) in INT_FIELDS.items():
        if field in given:
            changes[attr] = _int(field, given[field], largest)
    for field, (attr, largest) in COUNT_FIELDS.items():
        if field in given:
            changes[attr] = _int(field, given[field], largest, smallest=0)
    for field, attr in BOOL_FIELDS.items():
        if field in given:
            changes[attr] = _bool(field, given[field])
    for field, (attr, choices) in CHOICE_FIELDS.items():
        if field in given:
            changes[attr] = _choice(field, given[field], choices)
    if "capacity-factor" in given:
        changes["capacity_factor"] = _capacity_factor(given["capacity-factor"])
    if changes.get("experts") == 0:  # a dense model: the preset's other expert fields go too
        dense = Shape()
        changes.update({a: getattr(dense, a) for a in (FIELD[f].attr for f in MOE_FIELDS) if a not in changes})
        changes["dense_at"] = ()  # and where its dense layers lay among the experts
    if base.dense_at and changes.get("layers", base.layers) != base.layers and changes.get("experts") != 0:
        raise InputError("layers", f"the config places its {len(base.dense_at)} dense layers among the experts' "
                         f"({_layer_list(base.dense_at)}), which another layer count would not keep: change the config "
                         "instead")  # fmt: skip
    if "heads" in changes and "kv_heads" not in changes and base.kv_heads == base.heads:
        changes["kv_heads"] = changes["heads"]  # keep multi-head attention multi-head
    shape = base.replace(name=base.name if not changes else "custom", **changes)
    check_shape(shape)
    return shape


def _parse_run(given: Mapping[str, object], shape: Shape) -> dict:
    """The step's own fields: {"seq", "micro_batch", "recipe", "recompute", "walk", "attention", "flash",
    "device"} (flash: the deck walk keeps no s x s scores, attention_fields)."""
    default_seq = min(DEFAULT_SEQ, shape.context) if shape.positions == "learned" else DEFAULT_SEQ
    seq = _number(given, "seq", default_seq)
    micro_batch = _number(given, "micro-batch")
    if shape.positions == "learned" and seq > shape.context:
        raise InputError("seq", f"must be at most the context of {shape.context:,} (learned positions)")
    recipe, recompute, walk = _picked(given, "recipe"), _picked(given, "recompute"), _picked(given, "walk")
    attention, flash = attention_fields(given, families.FAMILIES[shape.family].attentions)
    device = _picked(given, "device")
    return {"seq": seq, "micro_batch": micro_batch, "recipe": recipe, "recompute": recompute, "walk": walk,
            "attention": attention, "flash": flash, "device": device}  # fmt: skip


def _parse_parallel(given: Mapping[str, object], shape: Shape, flash: bool) -> Parallel:
    """The layout over devices (calc.parallel.Parallel), checked against the shape; `flash`: the deck walk's
    FlashAttention (the eager walk's attention is its own field, not a layout)."""
    degrees = {FIELD[f].attr: _number(given, f) for f in PARALLEL_LIMITS}
    zero = given.get("zero", FIELD["zero"].default)
    if str(zero).strip() not in ZERO_STAGES:
        raise InputError("zero", f"must be a ZeRO stage 0, 1, 2 or 3, got {quote(zero)}")
    flags = {attr: _bool(f, given[f]) for f, attr in PARALLEL_BOOLS.items() if f in given}
    flags["flash"] = flash
    schedule = _choice("pp-schedule", given["pp-schedule"], SCHEDULES) if "pp-schedule" in given else SCHEDULES[0]
    plan = _choice("tp-plan", given["tp-plan"], tensor.PLANS) if "tp-plan" in given else tensor.PLANS[0]
    offload = _choice("offload", given["offload"], OFFLOADS) if "offload" in given else OFFLOADS[0]
    par = Parallel(**degrees, zero=int(str(zero).strip()), **flags, pp_schedule=schedule, tp_plan=plan,
                   offload=offload)  # fmt: skip
    problem = check(shape, par)
    if problem:
        raise InputError(*problem)
    return par


def parse_capacity(given: Mapping[str, object]) -> int:
    """The device's memory in bytes, for the planner and the fit list: a card's (--card) or --capacity-gb."""
    if "card" in given and "capacity-gb" in given:
        raise InputError("card", "give a card or capacity-gb, not both")
    card = _picked(given, "card") if "card" in given else None
    return _capacity(CARDS[card] if card else given.get("capacity-gb", DEFAULT_CAPACITY_GB))


def given_problem(given: Mapping[str, object], shape: Shape, walk: str, eager_beside: bool = False
                  ) -> tuple[str, str] | None:  # fmt: skip
    """(field, message) for a field given (a flag typed, a page field the reader set, a link's parameter) that
    nothing these inputs answer reads (issue 19: no field accepted and ignored), or None. A preset's or a
    config.json's own values are never refused: every config has an activation, most a window. The eager
    walk reads what the deck walk does not (DECK_UNREAD), and so does the page's eager figure beside the
    deck's (`eager_beside`)."""
    eager = walk == "eager" or eager_beside
    field = not eager and next((f for f in DECK_UNREAD if f in given), None)
    if field:
        return field, f"applies to --walk eager ({DECK_UNREAD[field]})"
    if "context" in given and shape.positions != "learned":
        return "context", "applies to learned positions (a context x hidden table); rotary ones keep nothing for it"
    if "head-bias" in given and (shape.tied or not shape.bias):
        return "head-bias", "applies to an untied head with biases: give --no-tied and --bias too"
    if "ffn" in given and not shape.ffn_read:
        return "ffn", (f"sizes the dense layers' FFN, and every layer of this model is a mixture of experts, each "
                       f"expert {shape.expert_ffn:,} wide: give --expert-ffn instead")  # fmt: skip
    if "shared-expert-gate" in given and not shape.shared_expert_ffn:
        return "shared-expert-gate", "applies to a shared expert (Qwen2-MoE's): give --shared-expert-ffn too"
    fam = families.FAMILIES[shape.family]
    if "norms-per-layer" in given and walk == "eager":
        return "norms-per-layer", (f"the eager walk replays {fam.models[0]}'s code, whose blocks have their own norms: "
                                   "leave it unset (the deck walk reads it)")  # fmt: skip
    if "sliding-window" in given and eager and not window_read(shape):
        return "sliding-window", (f"the eager walk replays no sliding window in {listing(fam.models)}'s code, and "
                                  "the deck walk has none: leave it unset")  # fmt: skip
    return None


def window_read(shape: Shape) -> bool:
    """Whether the eager walk reads the sliding window in this family's code: Gemma 2's and 3's masks for their
    sliding layers (Family.layer_inputs), or a hook whose answer the window changes (the mask Phi-3's or
    SmolLM3's model passes sdpa, the window mask Qwen3's or OLMo 3's makes beside the causal one)."""
    fam = families.FAMILIES[shape.family]
    if fam.layer_inputs:
        return True
    layers = range(1, shape.layers + 1)
    probes = [
        fam.sdpa_mask and (lambda s: fam.sdpa_mask(s, 1)),
        fam.window_mask,
        fam.window_layer and (lambda s: [fam.window_layer(s, i) for i in layers]),
    ]
    none, some = shape.replace(sliding_window=0), shape.replace(sliding_window=1)
    return any(probe(none) != probe(some) for probe in probes if probe)


def late_problem(run, planning: bool = False) -> tuple[str, str] | None:
    """(field, message) for a step neither walk answers as given, checked after the output modes' own refusals
    (calc.cli.validated, calc.web.accepted: --plan and --fit-card choose these fields themselves), or None:
    a ZeRO stage over one data-parallel worker, with nothing to shard it over (issue 33: the deck walk
    "gathered" from nobody and raised the peak); sequence parallelism over one tensor-parallel rank, which splits
    nothing (issue 31: the deck walk took it and changed nothing), but where `planning` (--plan, the page's
    planner: it reads the switch for the layouts it picks with tp 2 or more);
    a pipeline's schedule with one stage, which schedules nothing, or other than 1F1B in the deck walk, whose
    accounting is the papers' 1F1B;
    a trained embedding under frozen blocks in the deck walk, whose frozen blocks keep nothing (issue 34: the
    eager walk replays the backward through them)."""
    par, tune = run.par, run.tune
    if par.offload != "none" and (problem := offload_problem(par, run.recipe)):
        return problem
    if problem := lone_problem(par):
        return problem
    if par.sequence_parallel and par.tp == 1 and not planning:
        field, message = tensor.sequence_problem(None, 1, par.tp_plan)
        return field, f"{message} (--plan reads it for the layouts it picks)"
    if par.pp_schedule != SCHEDULES[0] and par.pp == 1:
        return "pp-schedule", (f"schedules a pipeline's stages, and there is one stage: give --pp 2 or more, or "
                               f"{SCHEDULES[0]}")  # fmt: skip
    if par.pp_schedule != SCHEDULES[0] and run.walk == "deck":
        return "pp-schedule", (f"the deck walk's pipeline is the papers' 1F1B (Narayanan et al. 2021): --walk eager "
                               f"replays torch's {pipeline.SCHEDULE_NAMES[par.pp_schedule]}, or {SCHEDULES[0]}")
    if run.walk == "deck" and tune.embedding_under_frozen:
        eager = (eager_problem(run.shape, run.recompute, par, run.grad_accum, run.attention, run.seq)
                 or eager_tuning_problem(tune, run.shape)
                 or engine_problem(run.shape, par, run.recipe, run.device, tune, run.loop))
        where = (f", and the eager walk refuses --{eager[0]} here: no walk answers this step" if eager
                 else ": --walk eager")  # a refusal names a walk that answers, or says none does (issue 34)
        return "freeze-embedding", ("trains the embedding below frozen blocks, which only the eager walk replays "
                                    "(its backward reaches the embedding through them; the deck's frozen blocks "
                                    f"keep nothing){where}")  # fmt: skip
    return None


def attention_fields(given: Mapping[str, object], runs: tuple[str, ...] = ATTENTIONS) -> tuple[str, bool]:
    """(the eager walk's attention, whether the deck walk keeps no s x s scores) from --attention and --flash,
    which say one thing in every walk: sdpa (a fused kernel, as FlashAttention: no scores kept) or eager (the
    scores kept). --flash is --attention sdpa and --no-flash --attention eager. Neither given: each walk's
    default (calc.fields: Field.walk_default), the deck's accounting keeps the scores, the eager walk runs sdpa
    (transformers' default) where the family's code runs it (`runs`, calc.families: Gemma 2's and GPT-OSS's
    run eager only), else eager."""
    attention = _choice("attention", given["attention"], ATTENTIONS) if "attention" in given else None
    flash = _bool("flash", given["flash"]) if "flash" in given else None
    if attention is not None and flash is not None and flash != (attention == "sdpa"):
        raise InputError("flash", f"says the opposite of --attention {attention}: flash is the same as --attention "
                                  "sdpa, no flash as --attention eager; give one of the two")  # fmt: skip
    if attention is None and flash is not None:
        attention = "sdpa" if flash else "eager"
    defaults = dict(FIELD["attention"].walk_default)
    eager = defaults["eager"] if defaults["eager"] in runs else runs[0]
    return attention or eager, (attention or defaults["deck"]) == "sdpa"


def parse_loop(given: Mapping[str, object], walk: str, shape: Shape, tune: finetune.Tuning,
               grad_accum: int | None) -> loops.Loop:  # fmt: skip
    """The loop's fields (issue 19) as a calc.loops.Loop: the eager walk's only."""
    for field in LOOP_FIELDS:
        if field in given and walk != "eager":
            raise InputError(field, f"applies to --walk eager ({FIELD[field].why})")
    name = _picked(given, "loop")
    impl = _choice("adamw-impl", given["adamw-impl"], loops.ADAMW_IMPLS) if "adamw-impl" in given else ""
    if impl and tune.optimizer != "adamw":
        raise InputError("adamw-impl", "applies to --optimizer adamw")
    loss = _choice("loss", given["loss"], loops.LOSSES) if "loss" in given else ""
    if loss == "liger-fused" and given.get("device", DEVICES[0]) == "cpu":
        raise InputError("loss", "liger-fused runs Liger's Triton kernels: --device cuda (modelled from source)")
    loop = loops.Loop(name, impl, grad_accum or 1, loss)
    if walk == "eager" and shape.family == "decoder" and loop != loops.BARE:
        raise InputError("walk", "the eager walk runs the course's Decoder in a bare loop, one micro-batch, AdamW")
    return loop


def parse_tuning(given: Mapping[str, object], shape: Shape) -> finetune.Tuning:
    """The fine-tuning fields as a calc.finetune.Tuning (its defaults where not given)."""
    mode, optimizer = _picked(given, "finetune"), _picked(given, "optimizer")
    for field in fields.TUNE:  # the LoRA fields and the frozen layers apply to their modes only
        if field.finetune and mode not in field.finetune and field.name in given:
            raise InputError(field.name, f"applies to --finetune {' or '.join(field.finetune)}")
    tune = finetune.Tuning(
        mode=mode,
        optimizer=optimizer,
        rank=_number(given, "lora-rank"),
        alpha=_number(given, "lora-alpha"),
        **(_targets(given["lora-targets"], shape) if "lora-targets" in given else {}),
        freeze_layers=_number(given, "freeze-layers"),
        freeze_embedding=_bool("freeze-embedding", given.get("freeze-embedding", FIELD["freeze-embedding"].default)),
        freeze_head=_bool("freeze-head", given.get("freeze-head", FIELD["freeze-head"].default)),
        paged=_bool("paged-optimizer", given.get("paged-optimizer", FIELD["paged-optimizer"].default)),
        adapter_dtype=_picked(given, "adapter-dtype"),
    )
    problem = finetune.check(shape, tune)
    if problem:
        raise InputError(*problem)
    return tune


def _targets(raw: object, shape: Shape) -> dict[str, object]:
    """A comma list of q, k, v, o, gate, up, down, or all-linear (peft's: calc.finetune.all_linear), as the
    Tuning's targets (and, for all-linear on a mixture of experts, whether peft converts it)."""
    text = str(raw).strip().lower()
    if text == finetune.ALL_LINEAR:
        resolved = finetune.all_linear(shape)
        if isinstance(resolved, str):
            raise InputError("lora-targets", resolved)
        return {"targets": resolved[0], "moe_all_linear": resolved[1]}
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise InputError("lora-targets", "name at least one of q, k, v, o, gate, up, down, or all-linear")
    if finetune.ALL_LINEAR in names:  # it names every linear: alone, not in a list
        raise InputError("lora-targets", f"all-linear stands alone (peft's every linear), got {quote(raw)}")
    for name in names:
        if name not in finetune.TARGETS:
            raise InputError(
                "lora-targets", f"must be a comma list of {', '.join(finetune.TARGETS)}, or all-linear, got {name!r}"
            )
    return {"targets": tuple(t for t in finetune.TARGETS if t in names)}


DECK_MOE = "the deck walk does not fine-tune a mixture of experts: --walk eager replays this LoRA"
DECK_SUGGESTED = re.compile(r"(:|,|;)? (or )?(use )?the deck walk$")  # an eager refusal's pointer to the deck walk


def tuning_problem(tune: finetune.Tuning, walk: str, par: Parallel, shape: Shape | None = None
                   ) -> tuple[str, str] | None:
    """(field, message) where a fine-tuning step (anything but full AdamW) cannot be walked, or None."""
    field = "finetune" if tune.mode != "full" else "optimizer" if tune.optimizer != "adamw" else "paged-optimizer"
    if walk != "deck":
        return eager_tuning_problem(tune, shape)
    if shape is not None and shape.moe_layers:  # finetune.check let through only what the eager walk replays
        return field, DECK_MOE
    if par.tp > 1 or par.pp > 1 or par.zero or par.sequence_parallel:
        eager = tune.mode == "lora" and par.zero and par.tp == par.pp == 1 and not par.sequence_parallel
        where = (", or run the CLI's --walk eager --device cpu --recipe autocast, which replays peft's LoRA beside "
                 "ZeRO 1 (ZeroRedundancyOptimizer), 2 or 3 (FSDP2)") if eager else ""  # a walk that answers (issue 34)
        return field, ("is walked on one device (or plain dp): leave --tp, --pp, --zero and --sequence-parallel "
                       f"unset{where}")  # fmt: skip
    return None


def eager_tuning_problem(tune: finetune.Tuning, shape: Shape | None) -> tuple[str, str] | None:
    """(field, message) where the eager walk cannot replay this fine-tuning: it follows peft's LoRA and frozen
    layers with AdamW on the families that say so (calc.families), and QLoRA as bitsandbytes' NF4 Linear4bit
    (double-quantized, bf16 compute) runs under peft's LoRA."""
    if tune.paged:
        return "paged-optimizer", "the eager walk keeps the optimizer's state on the device: use the deck walk"
    if shape is not None and shape.family == "decoder" and tune.mode == "full":
        return "optimizer", "the eager walk steps the course's Decoder with AdamW only: use the deck walk"
    problem = shape is not None and tune.mode != "full" and families.tuning_lacks(shape, tune.mode)
    return ("finetune", problem) if problem else None


def engine_field_problem(engine: str, par: Parallel) -> tuple[str, str] | None:
    """(field, message) where --engine does not name the engine of this layout, or None: each ZeRO stage the
    eager walk runs has one engine in torch, which --engine names and --zero picks (the page's form always sends
    its ZeRO stage): DDP runs ZeRO 0 and 1 (ZeroRedundancyOptimizer beside it), FSDP2 ZeRO 2 and 3
    (reshard_after_forward False and True)."""
    if par.tp > 1 and engine == "ddp":
        return "engine", ("DDP beside tensor parallelism is not modelled: --engine fsdp2 with --dp 2 or more and "
                          "--zero 2 or 3 (FSDP2 over its ranks), or leave --engine unset")  # fmt: skip
    if (par.pp > 1 or par.tp > 1) and par.dp == 1:
        return "engine", ("names the engine over data-parallel processes: give --dp 2 or more (DDP or FSDP2 beside "
                          "--pp, FSDP2 beside --tp)")  # fmt: skip
    if par.dp == 1:
        return "engine", "names the engine over data-parallel processes: give --dp 2 or more"
    if str(par.zero) not in ENGINES[engine]:
        return "engine", {"ddp": "DDP keeps whole weights and gradients on every rank: --zero 0, or 1 "
                                 "(ZeroRedundancyOptimizer beside it); ZeRO 2 and 3 are FSDP2's",
                          "fsdp2": "FSDP2's fully_shard shards weights, gradients and the optimizer's state: "
                                   "--zero 3 (reshard_after_forward=True, its default) or 2 (False); ZeRO 0 and 1 "
                                   "are DDP's"}[engine]  # fmt: skip
    return None


def offload_problem(par: Parallel, recipe: str) -> tuple[str, str] | None:
    """(field, message) where --offload cannot be counted as DeepSpeed offloads (calc.recipes.OFFLOADED), or None:
    it moves ZeRO's partitions, so it needs a ZeRO stage (over one process too, as ZeRO-Offload trains on one
    GPU), the weights under ZeRO 3 only (offload_param), and DeepSpeed's optimizers: an fp32 partition and Adam."""
    if not par.zero:
        return "offload", ("moves ZeRO's partitioned optimizer state to the host (DeepSpeed's offload_optimizer): "
                           "give --zero 1, 2 or 3, or --offload none")  # fmt: skip
    if par.offload == "optimizer+params" and par.zero < 3:
        return "offload", ("offloads the weights under ZeRO 3 only (DeepSpeed's offload_param): give --zero 3, or "
                           "--offload optimizer")  # fmt: skip
    if recipe not in OFFLOAD_RECIPES:
        return "offload", (f"is counted for DeepSpeed's optimizers (an fp32 partition and Adam, over bf16/fp16 or fp32 "
                           f"weights): --recipe {' or '.join(OFFLOAD_RECIPES)}, not {recipe}")  # fmt: skip
    return None


def eager_problem(
    shape: Shape, recompute: str, par: Parallel, grad_accum: int | None, attention: str = "", seq: int | None = None
) -> tuple[str, str] | None:
    """(field, message) where the eager walk cannot answer for this step (with this attention, this sequence), or
    None."""
    if par.offload != "none":
        return "offload", ("the eager walk does not replay offload to the host yet: the deck walk counts it, on the "
                           "device and on the host")  # fmt: skip
    alone = replace(par, dp=1, zero=0, flash=False, tp=1, pp=1, pp_schedule=SCHEDULES[0], tp_plan=tensor.PLANS[0],
                    sequence_parallel=False)  # fmt: skip
    if alone != Parallel():
        # flash is the eager walk's sdpa
        return "walk", ("the eager walk runs data parallelism (--dp), tensor parallelism (--tp) or a pipeline (--pp): "
                        "leave --ep unset, or use the deck walk")  # fmt: skip
    if par.pp > 1 and (problem := pipeline.beside_problem(par)):
        return problem
    if par.tp > 1 and par.dp > 1 and par.tp_plan != tensor.PLANS[0]:
        return "tp-plan", ("the eager walk's FSDP2 over tensor parallelism runs the layers plan: --tp-plan layers, "
                           "or --dp 1 with --zero 0 and no --engine, or the deck walk")  # fmt: skip
    if par.sequence_parallel and (problem := tensor.sequence_problem(seq, par.tp, par.tp_plan)):
        return problem
    if par.pp > 1 and par.pp_schedule == "1f1b" and grad_accum is not None and grad_accum < par.pp:
        return "grad-accum", (f"torch's Schedule1F1B needs at least as many micro-batches as stages: --grad-accum "
                              f"{par.pp} or more (its default), or --pp-schedule gpipe")  # fmt: skip
    if par.pp > 1 and (problem := pipeline.schedule_problem(par.pp, par.pp_schedule, grad_accum, shape.layers)):
        return problem
    if par.tp > 1 and (par.dp > 1 or par.zero) and (par.zero < 2 or par.dp == 1):
        return "tp", ("the eager walk runs tensor parallelism alone, or beside FSDP2 over data-parallel processes "
                      "(DDP or ZeRO 1 beside it is not modelled yet): --dp 2 or more with --zero 2 or 3, or --dp 1 "
                      "and --zero 0, or the deck walk")  # fmt: skip
    if par.zero and par.dp == 1:
        return "zero", "ZeRO shards over data-parallel processes: give --dp 2 or more, or --zero 0"
    if par.dp > 1 and shape.family == "decoder":
        return "dp", "the eager walk runs the course's Decoder on one device: use the deck walk, or a model"
    if shape.family == "decoder" and (grad_accum or 1) > 1:
        return "grad-accum", "the eager walk runs the course's Decoder one micro-batch a step: use the deck walk"
    missing = eager_lacks(shape)
    if missing:
        return "walk", f"the eager walk does not follow {missing} yet: use the deck walk"
    if shape.family != "decoder" and recompute == "selective":
        return "recompute", "transformers checkpoints whole layers: none or full with the eager walk"
    lacks = attention and families.attention_lacks(shape, attention)
    return ("attention", lacks) if lacks else None


ZERO1_RANKS = 1024  # the eager walk's ZeRO 1 walks each distinct share (calc.api.eager_walk): a bound on its time
FSDP2_RANKS = 1024  # and FSDP2 each rank's rows (ranks differ where dp does not divide a parameter's rows)
FSDP2_RECIPES = ("fp32-full", "autocast", "fsdp-bf16")  # fully_shard of fp32 parameters, or its bf16 policy
TP_RECIPES = ("fp32-full", "autocast")  # tensor parallelism over fp32 parameters
FSDP2_EXPERTS = ("qwen3_moe",)  # the mixtures of experts whose FSDP2 steps were measured (calc.engines.fsdp)
TP_RANKS = 1024  # the ranks of tensor parallelism are alike: one rank walked, each listed


def engine_problem(shape: Shape, par: Parallel, recipe: str, device: str, tune: finetune.Tuning,
                   loop: loops.Loop) -> tuple[str, str] | None:  # fmt: skip
    """(field, message) where the eager walk's engine is not the step asked for, or None: its ZeRO 1 is torch's
    ZeroRedundancyOptimizer around AdamW beside DDP, in a bare loop (calc.engines.ddp); its ZeRO 2 and 3 are
    FSDP2's fully_shard on each layer and on the model (reshard_after_forward False and True) of a dense
    model's (or Qwen3-MoE's) fp32 parameters (calc.engines.fsdp); its --tp is torch's tensor parallelism over the
    decoder layers' linears of a Llama or Qwen3 (calc.engines.tensor). FSDP2 and tensor parallelism: full
    training with AdamW in a bare loop, on the CPU with gloo."""
    if RECIPES[recipe].computes and (par.dp == 1 or par.zero < 2):  # the engine casts: FSDP2's bf16 policy
        return "recipe", (f"{recipe} is FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): the eager "
                          "walk runs it with --dp 2 or more and --zero 2 or 3")  # fmt: skip
    if shape.moe_layers and tune.adapters and (par.dp > 1 or par.tp > 1 or par.pp > 1):
        return "finetune", ("LoRA on a mixture of experts is measured on one device only: no walk answers it over "
                            "several processes yet")  # fmt: skip
    if par.pp > 1:  # beside tensor parallelism, the layers plan's checks too
        if par.zero > 1 and par.dp * par.tp > FSDP2_RANKS:
            return "dp", f"the eager walk's FSDP2 beside a pipeline walks each rank's rows: at most {FSDP2_RANKS:,} "\
                "data- and tensor-parallel processes a stage"
        return pipeline_problem(shape, par, recipe, device, tune, loop) or (  # a pipeline's micro-batches
            tensor_problem(shape, par, recipe, device, tune, replace(loop, grad_accum=1)) if par.tp > 1 else None)
    if par.tp > 1 and par.dp > 1:  # FSDP2 x TP: the layers plan's checks, and FSDP2's full training
        problem = tensor_problem(shape, par, recipe, device, tune, loop)
        if not problem and par.dp * par.tp > FSDP2_RANKS:
            problem = "dp", f"the eager walk's FSDP2 x TP lists each rank: at most {FSDP2_RANKS:,} processes in all"
        return problem
    if par.tp > 1:
        return tensor_problem(shape, par, recipe, device, tune, loop)
    if par.dp == 1 or not par.zero:
        return None
    if par.zero == 1:
        if par.dp > ZERO1_RANKS:
            return "dp", f"the eager walk's --zero 1 walks each rank's share: at most {ZERO1_RANKS:,} processes"
        if RECIPES[recipe].master:
            return "recipe", ("ZeroRedundancyOptimizer steps the model's own parameters, with no fp32 master copy: "
                              "fp32-full, autocast or bf16 with the eager walk's --zero 1")  # fmt: skip
        if tune.optimizer != "adamw":
            return "optimizer", "the eager walk's --zero 1 is ZeroRedundancyOptimizer around AdamW"
        if loop.name != "bare":
            return "loop", "the eager walk's --zero 1 is ZeroRedundancyOptimizer in a bare loop, not Trainer's"
        return None
    fsdp2 = f"the eager walk's --zero {par.zero} (FSDP2's fully_shard, reshard_after_forward={par.zero == 3})"
    if par.dp > FSDP2_RANKS:
        return "dp", f"{fsdp2} walks each rank's rows: at most {FSDP2_RANKS:,} processes"
    if recipe not in FSDP2_RECIPES:
        return "recipe", (f"{fsdp2} shards fp32 parameters, computing in them (fp32-full, autocast) or under "
                          "MixedPrecisionPolicy(bf16, fp32) (fsdp-bf16)")  # fmt: skip
    if shape.experts and shape.family not in FSDP2_EXPERTS:
        return "walk", (f"{fsdp2} is measured on Qwen3-MoE's experts only among mixtures of experts: use the deck "
                        "walk")  # fmt: skip
    if tune.adapters and (tune.mode != "lora" or recipe == "fsdp-bf16"):  # the model's fp32: so are its adapters
        return "finetune", f"{fsdp2} fine-tunes with peft's LoRA over fp32-full or autocast"
    return _measured_step(fsdp2, device, replace(tune, mode="full") if tune.mode == "lora" else tune, loop)


def tensor_problem(shape: Shape, par: Parallel, recipe: str, device: str, tune: finetune.Tuning,
                   loop: loops.Loop) -> tuple[str, str] | None:  # fmt: skip
    """(field, message) where the eager walk's tensor parallelism (the layers plan, calc.engines.tensor) is not
    the step asked for, or None."""
    tp = f"the eager walk's --tp {par.tp} ({tensor.PLAN_NAMES[par.tp_plan]})"
    if par.tp > TP_RANKS:
        return "tp", f"{tp} lists each rank: at most {TP_RANKS:,} processes"
    if shape.family not in tensor.FAMILIES or shape.experts:
        return "walk", f"{tp} is measured on Llama's and Qwen3's dense layers only: use the deck walk"
    if recipe not in TP_RECIPES:
        return "recipe", f"{tp} is measured on fp32 parameters: fp32-full or autocast"
    if problem := tensor.plan_problem(shape, par.tp, par.tp_plan):
        return problem[0], f"{tp} {problem[1]}"
    return _measured_step(tp, device, tune, loop)


PP_STAGES = 128  # the eager walk replays each stage of a pipeline: a bound on its time
PP_PASSES = 4096  # and each micro-batch through it: a bound on its time (some 2 ms a layer passed)


def pipeline_problem(shape: Shape, par: Parallel, recipe: str, device: str, tune: finetune.Tuning,
                     loop: loops.Loop) -> tuple[str, str] | None:  # fmt: skip
    """(field, message) where the eager walk's pipeline (torch.distributed.pipelining's stages over consecutive
    layers, calc.engines.pipeline) is not the step asked for, or None. Its micro-batches are --grad-accum's."""
    pp = f"the eager walk's --pp {par.pp} (torch's PipelineStage under {pipeline.SCHEDULE_NAMES[par.pp_schedule]})"
    if par.pp > PP_STAGES:
        return "pp", f"{pp} walks each stage: at most {PP_STAGES} stages"
    passes = pipeline.layer_passes(shape.layers, par.pp, max(loop.grad_accum, par.pp))
    if passes > PP_PASSES:
        return "grad-accum", (f"{pp} walks each stage micro-batch by micro-batch: at most {PP_PASSES:,} layers a "
                              f"stage, counted once a micro-batch (here {passes:,}): fewer micro-batches or more "
                              "stages, or the deck walk")  # fmt: skip
    if shape.family not in pipeline.FAMILIES or shape.experts:
        return "walk", f"{pp} is measured on Llama's and Qwen3's dense layers only: use the deck walk"
    if shape.tied:
        return "tied", (f"{pp} is measured on untied heads (a tied head's last stage holds a copy of the embedding "
                        "that no process ties to it): use the deck walk")  # fmt: skip
    if recipe not in TP_RECIPES:
        return "recipe", f"{pp} is measured on fp32 parameters: fp32-full or autocast"
    return _measured_step(pp, device, tune, replace(loop, grad_accum=1))


def _measured_step(engine: str, device: str, tune: finetune.Tuning, loop: loops.Loop) -> tuple[str, str] | None:
    """(field, message) where a step under FSDP2 or tensor parallelism is not the one measured (full training
    with PyTorch's single-tensor AdamW, transformers' loss, in a bare loop of one micro-batch, on the CPU with
    gloo), or None."""
    if device != "cpu":
        return "device", (f"{engine} is measured on the CPU with gloo only (on CUDA its collectives run on streams "
                          "of their own): --device cpu, or the deck walk without --device")  # fmt: skip
    if tune.optimizer != "adamw":
        return "optimizer", f"{engine} steps AdamW"
    if not tune.default:
        lora = " (FSDP2: or --finetune lora)" if "FSDP2" in engine else ""
        return "finetune", f"{engine} trains every parameter{lora}: --finetune full"
    if loop.name != "bare":
        return "loop", f"{engine} runs in a bare loop, not Trainer's"
    if loop.grad_accum > 1:
        return "grad-accum", f"{engine} runs one micro-batch a step"
    if loop.impl(device) != "single" or loop.loss_kind != "transformers":
        field = "adamw-impl" if loop.impl(device) != "single" else "loss"
        return field, f"{engine} runs PyTorch's own AdamW and transformers' loss: leave --{field} unset"
    return None


eager_lacks = families.eager_lacks  # what the eager walk does not replay (the registry says)


def check_shape(shape: Shape) -> None:
    """Structural checks that the field ranges alone cannot make."""
    if not shape.head_size and shape.hidden % shape.heads:
        raise InputError("heads", f"{shape.heads} heads do not divide the width {shape.hidden} (or give --head-size)")
    if shape.heads % shape.kv_heads:
        raise InputError("kv-heads", f"{shape.kv_heads} key/value heads do not divide {shape.heads} heads")
    problem = family_problem(shape)
    if problem:
        raise InputError(*problem)
    if not shape.experts:
        dense = Shape()
        for field in MOE_FIELDS:
            if getattr(shape, FIELD[field].attr) != getattr(dense, FIELD[field].attr):
                raise InputError(field, "applies to a mixture of experts only: give --experts too")
        return
    if not 1 <= shape.experts_per_token <= shape.experts:
        raise InputError(
            "experts-per-token",
            f"each token goes to 1 to {shape.experts} experts (--experts), got {shape.experts_per_token}",
        )
    if shape.dense_layers > shape.layers:
        raise InputError("dense-layers", f"{shape.dense_layers} dense layers are more than the {shape.layers} layers")
    at = shape.dense_at
    if at and (len(at) != shape.dense_layers or max(at) > shape.layers):
        field = "dense-layers" if len(at) != shape.dense_layers else "layers"
        raise InputError(field, f"the config places its {len(at)} dense layers among the experts' ({_layer_list(at)}), "
                         f"which --{field} would move: change the config instead")  # fmt: skip


def _layer_list(layers: tuple[int, ...]) -> str:
    """Layer numbers as a message gives them: "layers 1, 3, 5, 7, 9, 11, ..." (the first six)."""
    return "layers " + ", ".join(map(str, layers[:6])) + (", ..." if len(layers) > 6 else "")


def family_problem(shape: Shape) -> tuple[str, str] | None:
    """(field, message) where a shape cannot be written with its family's code (calc.families), or None."""
    check = families.FAMILIES[shape.family].problem
    return check(shape) if check else None


def size_bound(shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE) -> int:
    """An upper bound on any byte count calc reports for these inputs, per device or in total: every
    recipe of the table (the page shows all four), whatever the recomputation, on any walk.

    Twice the 16 bytes a parameter of state (the eager walk's transient copies); each layer's saved
    activations (Korthikanti et al.'s sbh(34 + 5as/h), without the 5as/h scores under FlashAttention)
    at up to 4 bytes a value (fp32), for every layer and once more for the one being recomputed, with
    room for backward's working memory (x2); logits at 16 bytes a value (16-bit, fp32, fp32 gradients
    and the loss's working copy)."""
    state = 32 * param_counts(shape)["total"]
    one = Parallel(flash=par.flash)
    # a mixture of experts' layer (its routed tokens) where it keeps more than a dense one
    layer = max(layer_bytes(shape, seq, micro_batch, one), layer_bytes(shape, seq, micro_batch, one, moe=True))
    activations = 2 * (shape.layers + 1) * layer * 2
    logits = 16 * seq * micro_batch * shape.vocab
    return state + activations + logits


def check_size(shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE) -> None:
    """Refuse configurations whose byte counts would not stay exact in a browser (JSON numbers < 2^53)."""
    if size_bound(shape, seq, micro_batch, par) <= MAX_BYTES:
        return
    state = 32 * param_counts(shape)["total"]
    if state > MAX_BYTES // 2:
        field = "layers" if shape.layers > 1000 else "hidden"
        raise InputError(field, "makes the model too large to count exactly (over 9 PB)")
    hint = "" if par.flash else "; FlashAttention or a shorter sequence brings it down"
    raise InputError(
        "seq" if seq >= micro_batch else "micro-batch",
        f"makes the activations too large to count exactly (over 9 PB){hint}",
    )
