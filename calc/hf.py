"""A transformers `config.json` read into a Shape, for the model types whose code calc follows.

Each model type's reader lives in its family's module (calc.families), reading the fields transformers' own
model class reads with the same defaults. Every problem is a ConfigError naming the config's key."""

from __future__ import annotations

import json
from collections.abc import Mapping

from .families import MODEL_TYPES
from .families.config import MAX_CHARS, ConfigError, Written, shown
from .shape import Shape

__all__ = ["MAX_CHARS", "READERS", "ConfigError", "compact", "parse", "shape_from_config", "shape_from_text"]

READERS = {name: t.read for name, t in MODEL_TYPES.items()}  # model_type -> its reader (calc.families)


def parse(text: str) -> dict:
    """The JSON object of a config.json's text."""
    if not isinstance(text, str):
        raise ConfigError("not the text of a config.json")
    if len(text) > MAX_CHARS:
        raise ConfigError(f"too long: {len(text):,} characters, where a config.json has at most {MAX_CHARS:,}")
    text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark, as Windows editors write one: not JSON's
    try:
        cfg = json.loads(text, parse_float=Written, object_pairs_hook=_once)  # each number with its text
    except ConfigError:  # a key given twice (_once): a ValueError, said as it is
        raise
    except json.JSONDecodeError as e:
        raise ConfigError(f"not JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    except (ValueError, RecursionError) as e:  # a number of over 4,300 digits, or nesting past the stack
        reason = "a number too long" if isinstance(e, ValueError) else "nested too deeply"
        raise ConfigError(f"not JSON: {reason}") from None
    if not isinstance(cfg, dict):
        raise ConfigError("not a JSON object, as a transformers config.json is")
    return cfg


def _once(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object whose keys are given once each: json.load (and so transformers) would keep the last of a
    key given twice, silently; a config is refused instead, naming the key."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"{shown(key)} is given twice (first {shown(out[key])}, then {shown(value)}): "
                              "transformers would read the last; give it once")  # fmt: skip
        out[key] = value
    return out


def shape_from_config(cfg: Mapping, name: str | None = None) -> Shape:
    """The Shape of a transformers config (a dict), or ConfigError naming the key at fault; its name, unless
    given, says where it came from: "config.json (llama)"."""
    model_type = cfg.get("model_type")
    if model_type is None:
        raise ConfigError(f"model_type is missing; supported: {', '.join(READERS)}")
    if not isinstance(model_type, str) or model_type not in READERS:
        raise ConfigError(f"model_type {shown(model_type)} is not supported; supported: {', '.join(READERS)}")
    fields = MODEL_TYPES[model_type].fields(cfg)
    fields["family"] = MODEL_TYPES[model_type].family  # whose code runs it (calc.families)
    return Shape(name=name or f"config.json ({model_type})", **fields)


def shape_from_text(text: str, name: str | None = None) -> Shape:
    """The Shape of a config.json's text."""
    return shape_from_config(parse(text), name)


class _Reads(dict):
    """A config that remembers which keys the reader asked for."""

    def __init__(self, cfg: Mapping):
        super().__init__(cfg)
        self.asked: set[str] = set()

    def get(self, key, default=None):
        self.asked.add(key)
        return super().get(key, default)


def compact(cfg: Mapping) -> str:
    """The config reduced to the keys calc reads, as short canonical JSON (sorted keys, no spaces), for a
    link: shape_from_text(compact(cfg)) equals shape_from_config(cfg)."""
    reads = _Reads(cfg)
    shape_from_config(reads)  # only a config calc reads is worth a link
    # a null stays: it can differ from a missing key (Mistral's "sliding_window": null is no window, where a
    # missing one takes MistralConfig's 4,096)
    kept = {k: cfg[k] for k in sorted(reads.asked) if k in cfg}
    return json.dumps(kept, separators=(",", ":"))
