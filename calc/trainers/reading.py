"""What one trainer config says, as calc's fields: the builder each tool's module fills, and the rules they share.

A tool module reads its file key by key into a Reading: each key that changes memory sets calc fields (the
CLI's flags, as text), each key that changes nothing a training step holds is listed as ignored with why, and
each field the tool decides without a key (its own default) is listed as a default with its source. A key
that changes memory in a way calc does not model is refused: Refused names the key and says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class Refused(ValueError):
    """A key calc cannot read as the tool means it: the key (dotted where nested) and why, each one line of
    printable text (a file's own text in them is escaped: a newline or a terminal's escape stays visible)."""

    def __init__(self, key: str, why: str):
        key, why = printable(str(key)), printable(str(why))
        super().__init__(f"{key}: {why}")
        self.key, self.why = key, why


def printable(text: str) -> str:
    """`text` with control characters (newlines, escapes, NUL) written as Python escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@dataclass
class Reading:
    """calc's fields from one or more trainer configs, and where each came from."""

    tools: list[str] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)  # calc field -> value, as the CLI's flag takes it
    origin: dict[str, str] = field(default_factory=dict)  # calc field -> the key (or default) that set it
    read: list[dict] = field(default_factory=list)  # {"key", "value", "gives"}: keys mapped to fields
    ignored: list[dict] = field(default_factory=list)  # {"key", "why"}: keys that change nothing calc counts
    defaults: list[dict] = field(default_factory=list)  # {"gives", "why"}: the tool's defaults, no key given
    model: str | None = None  # the model the config names (a Hub id or a path)
    model_key: str = ""
    needs: list = field(default_factory=list)  # (key, what): another file a key names (a DeepSpeed JSON)
    engine: str = ""  # "deepspeed" where a DeepSpeed JSON is read (its engine is not the eager walk's)
    pending_global: int = 0  # torchtitan's global batch, read once the ranks are known
    engine_key: str = ""  # the key that names DeepSpeed's engine
    sixteen: str = ""  # the trainer's autocast: "bf16", "fp16" or "" (what DeepSpeed's "auto" takes)
    linear_names: bool = False  # --lora-targets all-linear is the tool's own search: the name of every nn.Linear
    # but the head (LLaMA-Factory's find_all_linear_modules, axolotl's find_all_linear_names), not peft's all-linear
    trainable_last: int = 0  # LLaMA-Factory's freeze: the last N blocks train (--freeze-layers: the model's less N)

    def set(self, key: str, value: object, **fields: object) -> None:
        """Key `key` (given as `value`) sets `fields` (calc names with _ for -)."""
        self._put(key, fields)
        self.read.append({"key": key, "value": shown(value), "gives": flags(fields)})

    def default(self, why: str, **fields: object) -> None:
        """The tool's own default (no key given) sets `fields`; `why` names its source."""
        tool = self.tools[-1]
        self._put(f"{tool}'{'' if tool.endswith('s') else 's'} default", fields, soft=True)
        self.defaults.append({"gives": flags(fields), "why": why})

    def drop(self, name: str, why: str) -> None:
        """Field `name` goes (another file decides it): the keys that gave it say so."""
        if self.fields.pop(name, None) is None:
            return
        self.origin.pop(name)
        for entry in (*self.read, *self.defaults):
            parts = entry["gives"].split(" --")  # "--a 1 --b 2" -> "--a 1", "b 2"
            kept = [p for p in parts if p.removeprefix("--").split(" ", 1)[0] != name]
            if len(kept) < len(parts):
                flags = " ".join("--" + p.removeprefix("--") for p in kept)
                entry["gives"] = (flags + " " if flags else "") + f"(--{name}: {why})"
        self.defaults = [d for d in self.defaults if not d["gives"].startswith("(")]

    def names_deepspeed(self, key: str, path: object) -> None:
        """Key `key` names a DeepSpeed JSON, which must be given as a file of its own (read checks it is)."""
        self.read.append({"key": key, "value": shown(path), "gives": "the DeepSpeed JSON it names"})
        self.needs.append((key, path))

    def retarget(self, value: str, why: str) -> None:
        """The tool's own search for every nn.Linear (linear_names) finds `value` on this model: --lora-targets
        becomes it, the key that gave all-linear says so."""
        self.fields["lora-targets"] = value
        for entry in (*self.read, *self.defaults):
            entry["gives"] = entry["gives"].replace("--lora-targets all-linear", f"--lora-targets {value} ({why})")

    def ignore(self, key: str, why: str) -> None:
        self.ignored.append({"key": key, "why": why})

    def _put(self, key: str, fields: dict, soft: bool = False) -> None:
        for name, value in fields.items():
            name, value = name.replace("_", "-"), str(value)
            old = self.fields.get(name)
            if old is not None and old != value:
                if soft:  # a default never overrides a key another file gives
                    continue
                if self.origin[name].endswith(" default"):
                    self.defaults = [d for d in self.defaults if f"--{name} " not in d["gives"] + " "]
                else:
                    raise Refused(key, f"gives --{name} {value}, where {self.origin[name]} gives {old}: "
                                       "the files disagree")  # fmt: skip
            self.fields[name], self.origin[name] = value, key

    def as_dict(self) -> dict:
        return {"tools": self.tools, "fields": dict(self.fields), "model": self.model, "read": self.read,
                "ignored": self.ignored, "defaults": self.defaults}  # fmt: skip


def flags(fields: dict) -> str:
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in fields.items())


def shown(value: object) -> str:
    """A value as a short line of text (a long one cut; a list or mapping by its size: YAML's aliases can make
    one whose text would never end)."""
    if isinstance(value, (list, dict)):
        small = len(value) <= 8 and all(isinstance(v, (str, int, float, bool)) for v in
                                        (value.values() if isinstance(value, dict) else value))
        if not small:
            return f"a {'list' if isinstance(value, list) else 'mapping'} of {len(value)}"
    text = "true" if value is True else "false" if value is False else "null" if value is None else str(value)
    text = printable(text)
    return text if len(text) <= 80 else text[:77] + "..."


def truth(key: str, value: object) -> bool:
    """A yes/no key: a bool (YAML's, JSON's), or the words HfArgumentParser and the tools accept."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "no", "0", ""):
        return False
    if value is None:
        return False
    raise Refused(key, f"must be true or false, got {shown(value)}")


def off(value: object) -> bool:
    """A key left at its neutral value: None, false (or its words), zero, empty."""
    if isinstance(value, str):
        return value.strip().lower() in ("", "false", "no", "0", "none", "null")
    return value is None or value is False or (not isinstance(value, bool) and value == 0) or value in ([], {})


def whole(key: str, value: object, smallest: int = 1) -> int:
    """A whole-number key (a bool is not one; "8" as HfArgumentParser reads text is)."""
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
        raise Refused(key, f"must be a whole number of at least {smallest}, got {shown(value)}")
    return value


def names(key: str, value: object) -> list[str]:
    """A list of names: a YAML or JSON list, or one comma-separated string."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise Refused(key, f"must be a list of module names, got {shown(value)}")


# peft's module names (and the short names calc's --lora-targets takes), for target_modules lists.
MODULES = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "gate_proj": "gate", "up_proj": "up",
           "down_proj": "down"}  # fmt: skip


def targets(key: str, value: object) -> str:
    """peft's target_modules (or a tool's list of them) as --lora-targets: "all-linear" stays itself."""
    listed = names(key, value)
    if listed in (["all-linear"], ["all"]):
        return "all-linear"
    unknown = [m for m in listed if m not in MODULES and m not in MODULES.values()]
    if unknown or not listed:
        raise Refused(key, f"{', '.join(unknown) or 'an empty list'}: calc puts adapters on "
                           f"{', '.join(MODULES)} (or all-linear)")  # fmt: skip
    return ",".join(MODULES.get(m, m) for m in listed)


def recipe(key: str, weights: str, autocast: str) -> str:
    """calc's recipe for a model held in `weights` ("fp32", "bf16", "fp16") under the Trainer's autocast
    `autocast` ("bf16", "fp16", ""): fp32 weights train under autocast (autocast) or without it (fp32-full);
    bf16 weights train in bf16 throughout, the Trainer's autocast changing no dtype (bf16). fp16 needs the
    GradScaler's unscale and inf checks, which calc does not model."""
    if "fp16" in (weights, autocast):
        raise Refused(key, "fp16 (GradScaler's unscaled copies and inf checks) is not modelled: calc counts bf16")
    if weights == "bf16":
        return "bf16"
    return "autocast" if autocast == "bf16" else "fp32-full"


# transformers' OptimizerNames -> calc's optimizer, its implementation ("": PyTorch's pick) and whether its state
# is paged (bitsandbytes' paged optimizers); None: not modelled. The Trainer's default is adamw_torch_fused.
OPTIMS = {
    "adamw_torch_fused": ("adamw", "fused", False), "adamw_torch": ("adamw", "", False),
    "adamw_bnb_8bit": ("adamw-8bit", "", False), "adamw_8bit": ("adamw-8bit", "", False),
    "paged_adamw_8bit": ("adamw-8bit", "", True), "paged_adamw_32bit": ("adamw", "", True),
    "paged_adamw": ("adamw", "", True), "adafactor": ("adafactor", "", False), "sgd": ("sgd", "", False),
    "lion_32bit": ("lion", "", False), "paged_lion_32bit": ("lion", "", True),
}  # fmt: skip
TRAINER_OPTIM = "adamw_torch_fused"


def optimizer(r: Reading, key: str, optim: object, device: str) -> None:
    """A trainer's optimizer name (None: the Trainer's default) as --optimizer, --adamw-impl and
    --paged-optimizer. torch's AdamW left to itself picks foreach on CUDA and single-tensor on the CPU."""
    name = TRAINER_OPTIM if optim is None else str(optim)
    if name not in OPTIMS:
        raise Refused(key, f"{shown(name)} is not an optimizer calc models (it takes {', '.join(OPTIMS)})")
    kind, impl, paged = OPTIMS[name]
    if kind == "adamw" and not impl:
        impl = "foreach" if device == "cuda" else "single"
    fields = {"optimizer": kind, **({"adamw_impl": impl} if kind == "adamw" else {}),
              **({"paged_optimizer": "true"} if paged else {})}  # fmt: skip
    if optim is None:
        r.default(f"{key} = {TRAINER_OPTIM} (transformers' TrainingArguments.optim)", **fields)
    else:
        r.set(key, optim, **fields)


def attention(r: Reading, key: str, impl: str) -> None:
    """transformers' attn_implementation as --attention. FlashAttention-2 keeps what SDPA's flash kernel keeps
    (the output and one fp32 log-sum-exp a row and head): calc counts it as sdpa."""
    known = {"sdpa": "sdpa", "eager": "eager", "flash_attention_2": "sdpa"}
    if not isinstance(impl, str) or impl not in known:
        raise Refused(key, f"{shown(impl)}: calc counts {', '.join(known)}")
    r.set(key, impl, attention=known[impl])


def number(r: Reading, doc: dict, key: str, default: int | None, why: str, field: str) -> None:
    """A whole-number key as calc field `field`, or the tool's default (None: calc's own)."""
    if doc.get(key) is not None:
        r.set(key, doc[key], **{field: whole(key, doc[key])})
    elif default is not None:
        r.default(why, **{field: default})


def words(text: str) -> tuple[str, ...]:
    """The keys of a list written as one text, space-separated."""
    return tuple(text.split())


def mapping(key: str, value: object) -> dict:
    """A key whose value is a mapping of keys (None: an empty one)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refused(key, f"must be a mapping of keys, got {shown(value)}")
    return value
