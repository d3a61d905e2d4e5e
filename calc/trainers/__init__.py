"""Trainer configs read as their tools mean them (issue 32): one module a tool, each reading its keys into
calc's fields (the CLI's flags) with its own defaults, from its source.

- hf_args: transformers' TrainingArguments and TRL's SFTConfig (JSON or YAML, as HfArgumentParser reads them).
- axolotl, llamafactory: their YAML.
- deepspeed: a DeepSpeed JSON, alone or named by another file.
- accelerate: `accelerate launch`'s config YAML (processes, FSDP, DeepSpeed).

`read(texts)` parses each text (JSON, TOML, or YAML through PyYAML, imported only then; a text may hold several
YAML documents between `---` lines), tells each document's tool by its keys, and gives one Reading. `apply`
puts its fields under the flags given (a flag wins), matches the model to a preset, and says which key an
error's field came from (`blame`).
"""

from __future__ import annotations

import json
import re
import tomllib  # at the top, so the page's cut standard library keeps it (tests/site/test_site_startup.py)
from collections.abc import Mapping

from . import accelerate, axolotl, deepspeed, hf_args, llamafactory, torchtitan
from .models import preset_of
from .reading import Reading, Refused, shown

__all__ = ["MAX_CHARS", "TOOLS", "Reading", "Refused", "apply", "blame", "checked", "moe_targets", "parse", "read"]

MAX_CHARS = 200_000  # a trainer config is a few kB
NAMES = {"axolotl": "axolotl", "llamafactory": "LLaMA-Factory", "hf_args": "TrainingArguments or SFTConfig",
         "deepspeed": "DeepSpeed", "accelerate": "accelerate", "torchtitan": "torchtitan"}  # each reader's tool
TOOLS = tuple(NAMES.values())
KNOWN = f"a trainer config calc reads ({', '.join(TOOLS)})"
# Fields the eager walk's loop presets set, which DeepSpeed's engine replaces (its own optimizer step)
LOOP_FIELDS = ("loop", "adamw-impl", "loss")


def parse(text: str) -> list[dict]:
    """The documents of one file's text: a JSON object, a TOML table, or YAML mappings."""
    if not isinstance(text, str):
        raise Refused("trainer-config", "not the text of a file")
    if len(text) > MAX_CHARS:
        raise Refused("trainer-config", f"{len(text):,} characters is not a trainer config (at most {MAX_CHARS:,})")
    text = text.removeprefix("\ufeff")
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except RecursionError:
            raise Refused("trainer-config", "not JSON: nested too deeply") from None
        except ValueError:  # not JSON: a YAML flow mapping ({output_dir: x}) is YAML's
            return _yaml(text)
        if isinstance(doc, dict):
            return [doc]
    if TOML_TABLE.search(text):  # a [table] line: torchtitan's TOML (YAML would read it as a list)
        try:
            return [tomllib.loads(text)]
        except tomllib.TOMLDecodeError as e:
            raise Refused("trainer-config", f"not TOML: {e}") from None
    return _yaml(text)


TOML_TABLE = re.compile(r"^\s*\[[A-Za-z_][A-Za-z0-9_.]*\]\s*(#.*)?$", re.MULTILINE)


def _yaml(text: str) -> list[dict]:
    try:
        import yaml  # PyYAML: axolotl's and LLaMA-Factory's own parser (yaml.safe_load)
    except ImportError:
        raise Refused("trainer-config", "reading YAML needs PyYAML (pip install pyyaml)") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        said = " ".join(str(getattr(e, "problem", None) or e).split())  # one line: a ReaderError's has two
        raise Refused("trainer-config", f"not YAML: {said}{where}") from None
    except RecursionError:
        raise Refused("trainer-config", "not YAML: nested too deeply") from None
    if not docs or not all(isinstance(d, dict) and all(isinstance(k, str) for k in d) for d in docs):
        raise Refused("trainer-config", f"not {KNOWN}: it must be a mapping of keys")
    if _expands(docs):
        raise Refused("trainer-config", f"not {KNOWN}: its aliases repeat more than {MAX_VALUES:,} values (a trainer "
                                        "config holds a few hundred)")  # fmt: skip
    return docs


MAX_VALUES = 100_000  # values a YAML's documents may hold, its aliases expanded: safe_load shares an aliased node,
# so a few hundred characters can make a value whose text (a reader's message, shown()) would never end


def _expands(docs: list) -> bool:
    """Whether the documents hold more than MAX_VALUES values, each alias counted as often as it is used (a
    recursive alias, endlessly): counted without recursion, stopping at the bound."""
    stack, seen = list(docs), 0
    while stack:
        value = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            return True
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, (list, tuple, set)):
            stack.extend(value)
    return False


def tool_of(doc: dict) -> str:
    """Which tool's file a document is, by keys only that tool writes."""
    if any(k in doc for k in ("zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size")):
        return "deepspeed"
    if "distributed_type" in doc or "compute_environment" in doc:
        return "accelerate"
    if torchtitan.is_torchtitan(doc):
        return "torchtitan"
    if any(k in doc for k in ("finetuning_type", "cutoff_len", "template", "stage", "lora_target")):
        return "llamafactory"
    if any(k in doc for k in ("base_model", "sequence_len", "micro_batch_size", "adapter", "datasets")):
        return "axolotl"
    if any(k in doc for k in ("per_device_train_batch_size", "output_dir", "optim", *hf_args.SFT_ONLY)):
        return "hf_args"
    raise Refused("trainer-config", f"not {KNOWN}: none of the keys that tell one ({', '.join(list(doc)[:5])}...)")


# a DeepSpeed JSON after what names it
ORDER = ("axolotl", "llamafactory", "hf_args", "torchtitan", "accelerate", "deepspeed")


def read(texts: list[str], device: str = "cuda") -> Reading:
    """One Reading of every document in `texts` (at most one of each tool)."""
    docs = [(tool_of(d), d) for text in texts for d in parse(text)]
    docs += [("deepspeed", d["deepspeed"]) for t, d in docs if t == "hf_args" and isinstance(d.get("deepspeed"), dict)]
    tools = [t for t, _ in docs]
    twice = next((t for t in tools if tools.count(t) > 1), None)
    if twice:
        raise Refused("trainer-config", f"two {NAMES[twice]} files: give one of each tool")
    r = Reading()
    for tool, doc in sorted(docs, key=lambda td: ORDER.index(td[0])):
        if tool == "deepspeed":
            _before_deepspeed(r)
            deepspeed.read(doc, r)
        elif tool == "accelerate" and doc.get("distributed_type") == "DEEPSPEED":
            _before_deepspeed(r)
            accelerate.read(doc, r, device)
        elif tool == "hf_args":
            hf_args.read(doc, r, device)
        else:
            modules = {"axolotl": axolotl, "llamafactory": llamafactory, "accelerate": accelerate,
                       "torchtitan": torchtitan}  # fmt: skip
            modules[tool].read(doc, r, device)
    _after(r)
    return r


def _before_deepspeed(r: Reading) -> None:
    """DeepSpeed's engine steps the model itself: it decides the precision (its bf16 block, or TrainingArguments'
    through "auto") and replaces the Trainer's optimizer step, so what the trainer's file set for those goes."""
    for name in ("recipe", *LOOP_FIELDS):
        r.drop(name, "DeepSpeed's engine decides")


def _after(r: Reading) -> None:
    missing = [(key, what) for key, what in r.needs if "deepspeed" not in r.tools]
    if missing:
        key, what = missing[0]
        raise Refused(key, f"names {shown(what)}: give that DeepSpeed JSON too (--trainer-config again)")
    if r.engine == "deepspeed" and "recipe" not in r.fields:
        r.default("DeepSpeed's bf16/fp16 \"auto\" takes TrainingArguments' (bf16: mixed-precision Adam)",
                  recipe="mixed" if r.sixteen else "fp32")  # fmt: skip


def apply(raw: Mapping[str, object], texts: list[str], unread: Mapping[str, str] | None = None
          ) -> tuple[dict, Reading]:
    """The fields `raw` (the flags given) with the trainer configs' under them, and the Reading. `unread`:
    {field: why} for the fields the output mode does not read (--plan chooses the layout itself), left out."""
    device = str(raw.get("device") or "cuda")
    try:
        r = read(texts, device)
    except (TypeError, AttributeError, ValueError) as e:  # a value of a kind no reader expects: said, not raised
        if isinstance(e, Refused):
            raise
        raise Refused("trainer-config", f"a value calc cannot read ({type(e).__name__}): check the file's types"
                      ) from None
    walk = str(raw.get("walk") or "deck")
    several = _several(r, raw)
    if "preset" in r.fields and raw.get("hf-config") not in (None, ""):
        r.drop("preset", "the flag's config.json instead")
    for name, value in list(r.fields.items()):
        if unread and name in unread:
            r.drop(name, unread[name])
        elif name in EAGER_ONLY and walk != "eager" and several:
            r.drop(name, "the eager walk's, per rank: the deck walk counts the papers' accounting over several "
                         "devices (--walk eager for the engine's)")  # fmt: skip
        elif raw.get(name) not in (None, "") and str(raw[name]) != value:
            r.drop(name, f"the flag's {raw[name]} instead")
    out = dict(raw)
    for name, value in r.fields.items():
        if out.get(name) in (None, ""):
            out[name] = value
    if r.engine == "deepspeed" and out.get("walk") == "eager":
        raise Refused(r.engine_key, "DeepSpeed's engine is not in the eager walk yet: the deck walk counts ZeRO's "
                                    "accounting for it")  # fmt: skip
    if r.model and any(out.get(k) not in (None, "") for k in ("preset", "hf-config")):
        r.read.append({"key": r.model_key, "value": shown(r.model), "gives": "(the model given by flag instead)"})
    elif r.model:
        preset = preset_of(r.model)
        if preset is None:
            raise Refused(r.model_key, f"{shown(r.model)} is not a model calc has a preset for: give its config.json "
                                       "(--hf-config) or a --preset of the same shape")  # fmt: skip
        out["preset"] = preset
        r.read.append({"key": r.model_key, "value": shown(r.model), "gives": f"--preset {preset}"})
    return out, r


EAGER_ONLY = ("engine", "loop", "adamw-impl", "loss")  # fields the deck walk reads only as the eager figure
# beside its one-device step


def _several(r: Reading, raw: Mapping[str, object]) -> bool:
    """Whether the step runs on several devices, by the flags given or the configs' fields."""
    return any(str(raw.get(k) or r.fields.get(k) or "1") != "1" for k in ("dp", "tp", "pp"))


def moe_targets(r: Reading, raw: Mapping[str, object], experts: bool) -> str | None:
    """Why a trainer config's LoRA targets on a model with `experts` are not what calc's --lora-targets of the same
    names count, or None. The tools name linear modules (peft's target_modules); in transformers 5 the experts are
    fused parameters, and peft 0.21 reads gate_proj, up_proj and down_proj by model type
    (utils/transformers_weight_conversion.py: on Qwen3-MoE as the experts' weights, gate_up_proj at twice the rank;
    on GPT-OSS as nothing), where calc's gate, up and down are target_parameters at the rank given."""
    if not experts or not from_file("lora-targets", r, raw):
        return None
    if {"gate", "up", "down"} & set(r.fields["lora-targets"].split(",")):
        return ("on a mixture of experts peft reads gate_proj, up_proj and down_proj by model type (Qwen3-MoE's as "
                "the experts' weights, gate_up_proj at twice the rank; GPT-OSS's as nothing): not modelled yet; name "
                "the attention's q_proj, k_proj, v_proj and o_proj, or give --lora-targets (gate,up,down: peft's "
                "target_parameters at the rank given)")
    return None


def from_file(field: str, r: Reading, raw: Mapping[str, object]) -> bool:
    """Whether the trainer config set `field`, no flag given for it."""
    return field in r.origin and raw.get(field) in (None, "")


def checked(raw: dict, texts: list[str], validate, unread: Mapping[str, str] | None = None
            ) -> tuple[dict, Reading, tuple]:  # fmt: skip
    """(the fields, the Reading, validate's answer) for the flags `raw` with the trainer configs `texts` under
    them, as the CLI's --trainer-config and the page's trainer box both read them; or calc.inputs.InputError,
    naming the file's key where the file set the field refused. `validate(fields)` checks the fields and gives a
    tuple whose first member is the Run (calc.run.Run)."""
    from ..inputs import InputError

    try:
        given, reading = apply(raw, texts, unread=unread)
    except Refused as e:
        raise InputError("trainer-config", e.why if e.key == "trainer-config" else f"{e.key}: {e.why}") from None
    return _checked(raw, given, reading, validate)


def _checked(raw: dict, given: dict, reading: Reading, validate) -> tuple[dict, Reading, tuple]:
    """checked's work on the fields the files gave. The file's loop fields ask the deck walk for the eager figure
    beside it; where that figure cannot be had (a paged optimizer, say), the step is answered without it and the
    reading says why."""
    from ..inputs import BESIDE_FIELDS, InputError

    if reading.linear_names and from_file("lora-targets", reading, raw):
        given = _linear_names(raw, given, reading)
    if reading.trainable_last and given.get("finetune") == "freeze":
        given = _last_blocks(raw, given, reading)
    try:
        answer = validate(given)
    except InputError as e:
        loop = [f for f in BESIDE_FIELDS if f in reading.fields and raw.get(f) in (None, "")]
        if e.field not in loop or given.get("walk") == "eager":
            raise InputError(*blame(e.field, e.message, reading, raw)) from None
        for name in loop:
            reading.drop(name, f"no eager figure beside the deck walk's: {e.message}")
            given.pop(name)
        try:
            answer = validate(given)
        except InputError as again:
            raise InputError(*blame(again.field, again.message, reading, raw)) from None
    problem = moe_targets(reading, raw, bool(answer[0].shape.moe_layers))
    if problem:
        raise InputError(*blame("lora-targets", problem, reading, raw))
    return given, reading, answer


ATTENTION_LINEARS = "q,k,v,o"  # what the tools' search for every nn.Linear finds in a sparse layer (transformers 5)


def _linear_names(raw: dict, given: dict, reading: Reading) -> dict:
    """The fields where the tool's own search for every nn.Linear by name (Reading.linear_names) gave
    --lora-targets all-linear: on a dense model that is peft's all-linear; on a mixture of experts it is not
    (peft converts its all-linear by model type, calc.finetune.all_linear), as in transformers 5 the experts are
    fused parameters and the router no nn.Linear, so on a model with experts in every layer and no shared
    expert the search finds the attention's q_proj, k_proj, v_proj and o_proj only. A dense layer or a shared
    expert adds gate_proj, up_proj and down_proj, which peft then reads by model type: refused."""
    from ..inputs import InputError, parse_shape

    try:
        shape = parse_shape({k: v for k, v in given.items() if v not in (None, "")})
    except InputError:
        return given  # the fields' own check names what is wrong
    if not shape.experts:
        return given
    if shape.moe_layers < shape.layers or shape.shared_expert_ffn:
        raise InputError(*blame("lora-targets", "the tool names every nn.Linear, which on this mixture of experts (a "
                                "shared expert, or dense layers among the experts) includes gate_proj, up_proj and "
                                "down_proj, which peft reads by model type: not modelled yet; name q_proj, k_proj, "
                                "v_proj and o_proj", reading, raw))  # fmt: skip
    reading.retarget(ATTENTION_LINEARS, "every nn.Linear's name: on this mixture of experts, the attention's")
    reading.linear_names = False
    return {**given, "lora-targets": ATTENTION_LINEARS}


def _last_blocks(raw: dict, given: dict, reading: Reading) -> dict:
    """The fields with --freeze-layers the model's layers less the last blocks the file trains
    (Reading.trainable_last: LLaMA-Factory's freeze_trainable_layers), none frozen where it names as many; the
    fields as given where the model cannot be read (its own check names what is wrong) or a flag gives the
    frozen layers (the reading says so)."""
    from ..inputs import InputError, parse_shape

    entry = next(e for e in reading.read if e["key"] == "freeze_trainable_layers")
    if raw.get("freeze-layers") not in (None, ""):
        entry["gives"] = f"(--freeze-layers: the flag's {raw['freeze-layers']} instead)"
        return given
    try:
        shape = parse_shape({k: v for k, v in given.items() if v not in (None, "")})
    except InputError:
        return given
    frozen = max(0, shape.layers - reading.trainable_last)
    reading.fields["freeze-layers"], reading.origin["freeze-layers"] = str(frozen), "freeze_trainable_layers"
    entry["gives"] = (f"--freeze-layers {frozen} (the model's {shape.layers} layers less the last "
                      f"{reading.trainable_last})")
    return {**given, "freeze-layers": str(frozen)}


def blame(field: str, message: str, r: Reading, raw: Mapping[str, object]) -> tuple[str, str]:
    """(field, message) for an error about `field`: the trainer config's key where the config set it."""
    if from_file(field, r, raw):
        return "trainer-config", f"{r.origin[field]} gives --{field} {r.fields[field]}: {message}"
    return field, message
