"""Validation of user input (CLI flags, URL parameters, form fields), one message per field."""

from __future__ import annotations

import re
from collections.abc import Mapping

from .activations import layer_bytes
from .parallel import SINGLE, Parallel, check
from .presets import PRESETS
from .recipes import RECIPES, RECOMPUTE
from .shape import NORMS, POSITIONS, Shape, param_counts
from .units import GB

DEFAULT_PRESET = "llama-7b"
DEFAULT_SEQ = 4096
# Results travel to the browser as JSON numbers: keep every byte count exact there (< 2^53).
MAX_BYTES = 2**53 - 1

# ASCII digits only, optionally signed (a sign gets its own message below), with thousands separators.
WHOLE = re.compile(r"[+-]?(?:[0-9]+|[0-9]{1,3}(?:[,_][0-9]{3})+)")
DECIMAL_GB = re.compile(r"[0-9]+(?:\.[0-9]{1,3})?")
# Python refuses int() of more than 4,300 digits (sys.set_int_max_str_digits): count them first.
MAX_DIGITS = 30
# A message quotes at most this much of what was typed (a 10,000-character value is not echoed whole).
MAX_QUOTE = 40

# Field name (the CLI flag without dashes) -> Shape attribute, largest accepted value.
INT_FIELDS = {
    "layers": ("layers", 10_000),
    "hidden": ("hidden", 1 << 20),
    "heads": ("heads", 1 << 16),
    "kv-heads": ("kv_heads", 1 << 16),
    "ffn": ("ffn", 1 << 24),
    "vocab": ("vocab", 1 << 24),
    "context": ("context", 1 << 24),
}
BOOL_FIELDS = {"gated-ffn": "gated_ffn", "tied": "tied", "bias": "bias", "final-norm": "final_norm"}
CHOICE_FIELDS = {"norm": ("norm", NORMS), "positions": ("positions", POSITIONS)}
RUN_LIMITS = {"seq": 1 << 24, "micro-batch": 1 << 16, "grad-accum": 1 << 20, "global-batch": 1 << 20}
PARALLEL_LIMITS = {"dp": 1 << 20, "tp": 1 << 10, "pp": 10_000}
PARALLEL_BOOLS = {"sequence-parallel": "sequence_parallel", "flash": "flash"}
DEFAULT_CAPACITY_GB = 80
WALKS = ("deck", "eager")  # calc.walk (the default) or calc.eager (PyTorch eager autograd, one device)
FIELDS = (
    "preset",
    *INT_FIELDS,
    *BOOL_FIELDS,
    *CHOICE_FIELDS,
    "seq",
    "micro-batch",
    "recipe",
    "recompute",
    "walk",
    *PARALLEL_LIMITS,
    "zero",
    *PARALLEL_BOOLS,
    "grad-accum",
    "global-batch",
    "capacity-gb",
)


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


def _int(field: str, raw: object, largest: int) -> int:
    if isinstance(raw, bool):
        raise InputError(field, f"must be a whole number, got {raw!r}")
    if isinstance(raw, int):
        value = raw
    else:
        text = str(raw).strip()
        if not WHOLE.fullmatch(text):
            raise InputError(field, f"must be a whole number, got {quote(text)}")
        digits = text.lstrip("+-").replace(",", "").replace("_", "").lstrip("0")
        if len(digits) > MAX_DIGITS:  # before int(): no ValueError from Python's digit limit
            raise InputError(field, f"must be at most {largest:,}, got a number of {len(digits):,} digits")
        value = int(text.replace(",", "").replace("_", ""))
    if value <= 0:
        raise InputError(field, f"must be at least 1, got {value}")
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


def _capacity(raw: object) -> int:
    """Device capacity in GB (10^9 bytes), up to three decimals, as exact bytes."""
    text = str(raw).strip()
    if not DECIMAL_GB.fullmatch(text):
        raise InputError("capacity-gb", f"must be a number of GB like 80 or 94.5, got {quote(text)}")
    whole, _, frac = text.partition(".")
    digits = len(whole.lstrip("0"))
    if digits > MAX_DIGITS:
        raise InputError("capacity-gb", f"must be at most 100,000 GB, got a number of {digits:,} digits")
    capacity = int(whole) * GB + int(frac.ljust(3, "0")) * GB // 1000
    if not 0 < capacity <= 100_000 * GB:
        raise InputError("capacity-gb", f"must be more than 0 and at most 100,000 GB, got {text}")
    return capacity


def parse_inputs(raw: Mapping[str, object]) -> dict:
    """Validated inputs: {"shape", "seq", "micro_batch", "recipe", "recompute", "walk", "par",
    "grad_accum" (None: as many micro-batches as pipeline stages), "global_batch", "capacity"}.

    Keys are the CLI's flag names without dashes; missing keys take the preset's (or the
    default's) value. Raises InputError naming the first bad field."""
    given = {k: v for k, v in raw.items() if v is not None and v != ""}
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        raise InputError(unknown[0], "is not a known field")
    preset = _choice("preset", given.get("preset", DEFAULT_PRESET), tuple(PRESETS))
    base = PRESETS[preset]
    changes: dict[str, object] = {}
    for field, (attr, largest) in INT_FIELDS.items():
        if field in given:
            changes[attr] = _int(field, given[field], largest)
    for field, attr in BOOL_FIELDS.items():
        if field in given:
            changes[attr] = _bool(field, given[field])
    for field, (attr, choices) in CHOICE_FIELDS.items():
        if field in given:
            changes[attr] = _choice(field, given[field], choices)
    if "heads" in changes and "kv_heads" not in changes and base.kv_heads == base.heads:
        changes["kv_heads"] = changes["heads"]  # keep multi-head attention multi-head
    shape = base.replace(name=base.name if not changes else "custom", **changes)
    check_shape(shape)

    default_seq = min(DEFAULT_SEQ, shape.context) if shape.positions == "learned" else DEFAULT_SEQ
    seq = _int("seq", given.get("seq", default_seq), RUN_LIMITS["seq"])
    micro_batch = _int("micro-batch", given.get("micro-batch", 1), RUN_LIMITS["micro-batch"])
    if shape.positions == "learned" and seq > shape.context:
        raise InputError("seq", f"must be at most the context of {shape.context:,} (learned positions)")
    recipe = _choice("recipe", given.get("recipe", "mixed"), tuple(RECIPES))
    recompute = _choice("recompute", given.get("recompute", "none"), RECOMPUTE)
    walk = _choice("walk", given.get("walk", "deck"), WALKS)
    degrees = {f: _int(f, given.get(f, 1), largest) for f, largest in PARALLEL_LIMITS.items()}
    zero = given.get("zero", 0)
    if str(zero).strip() not in ("0", "1", "2", "3"):
        raise InputError("zero", f"must be a ZeRO stage 0, 1, 2 or 3, got {quote(zero)}")
    flags = {attr: _bool(f, given[f]) for f, attr in PARALLEL_BOOLS.items() if f in given}
    par = Parallel(degrees["dp"], degrees["tp"], degrees["pp"], int(str(zero).strip()), **flags)
    problem = check(shape, par)
    if problem:
        raise InputError(*problem)
    check_size(shape, seq, micro_batch, par)
    grad_accum = _int("grad-accum", given["grad-accum"], RUN_LIMITS["grad-accum"]) if "grad-accum" in given else None
    if walk == "eager" and (par != Parallel() or (grad_accum or 1) > 1):
        raise InputError(
            "walk",
            "the eager walk is one micro-batch on one device: leave --dp, --tp, --pp, --zero, --grad-accum unset",
        )
    global_batch = _int("global-batch", given.get("global-batch", 1024), RUN_LIMITS["global-batch"])
    capacity = _capacity(given.get("capacity-gb", DEFAULT_CAPACITY_GB))
    return {
        "shape": shape,
        "seq": seq,
        "micro_batch": micro_batch,
        "recipe": recipe,
        "recompute": recompute,
        "walk": walk,
        "par": par,
        "grad_accum": grad_accum,
        "global_batch": global_batch,
        "capacity": capacity,
    }


def check_shape(shape: Shape) -> None:
    """Structural checks that the field ranges alone cannot make."""
    if shape.hidden % shape.heads:
        raise InputError("heads", f"{shape.heads} heads do not divide the width {shape.hidden}")
    if shape.heads % shape.kv_heads:
        raise InputError("kv-heads", f"{shape.kv_heads} key/value heads do not divide {shape.heads} heads")


def size_bound(shape: Shape, seq: int, micro_batch: int, par: Parallel = SINGLE) -> int:
    """An upper bound on any byte count calc reports for these inputs, per device or in total: every
    recipe of the table (the page shows all four), whatever the recomputation, on any walk.

    Twice the 16 bytes a parameter of state (the eager walk's transient copies); each layer's saved
    activations (Korthikanti et al.'s sbh(34 + 5as/h), without the 5as/h scores under FlashAttention)
    at up to 4 bytes a value (fp32), for every layer and once more for the one being recomputed, with
    room for backward's working memory (x2); logits at 16 bytes a value (16-bit, fp32, fp32 gradients
    and the loss's working copy)."""
    state = 32 * param_counts(shape)["total"]
    layer = layer_bytes(shape, seq, micro_batch, Parallel(flash=par.flash))
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
