"""Reading a transformers config.json's keys as its model class reads them (LlamaConfig, MistralConfig, ...,
GPT2Config in transformers 5): the same defaults where a key is optional, the shape's sizes required. Every
problem is a ConfigError naming the key; calc.inputs turns it into an InputError on "hf-config"."""

from __future__ import annotations

import json
from collections.abc import Mapping

# Largest accepted value of a config's size (as calc.inputs takes the flags); others up to 2^24.
MAX_SIZE = {
    "num_hidden_layers": 10_000,
    "n_layer": 10_000,
    "hidden_size": 1 << 20,
    "n_embd": 1 << 20,
    "num_attention_heads": 1 << 16,
    "n_head": 1 << 16,
    "num_key_value_heads": 1 << 16,
    "head_dim": 1 << 16,
    "num_local_experts": 1 << 16,
    "num_experts": 1 << 16,
    "num_experts_per_tok": 1 << 16,
}
MAX_CHARS = 1_000_000  # a real config.json is a few kB; refuse a paste that is not one
MAX_SHOWN = 40  # a bad value is quoted in a message up to this many characters (as calc.inputs quotes a flag)
# transformers' activation names (transformers/activations.py, ACT2FN) -> the activation calc replays for the
# class each builds: one fused op that saves one tensor (silu, gelu, gelu_tanh, relu), or GELU's tanh
# approximation written as Python ops (gelu_new, calc.parts.mlp: the same ops and saved tensors for all three).
ACTIVATIONS = {
    "silu": "silu",  # SiLUActivation: F.silu
    "swish": "silu",  # nn.SiLU
    "gelu": "gelu",  # GELUActivation: F.gelu
    "gelu_pytorch_tanh": "gelu_tanh",  # GELUTanh: F.gelu(approximate="tanh")
    "relu": "relu",  # nn.ReLU
    "gelu_new": "gelu_new",  # NewGELUActivation: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
    "gelu_accurate": "gelu_new",  # AccurateGELUActivation: the same ops, its constant precomputed
    "gelu_python_tanh": "gelu_new",  # GELUTanh(use_gelu_tanh_python=True): x * 0.5 * (1 + tanh(...))
}
# The other ACT2FN names, by the class transformers builds for each: ops whose saved tensors calc does not
# replay (FastGELUActivation's eight Python ops, a clip after GELU, ...); a config naming one is refused.
NOT_REPLAYED = {
    "gelu_10": "ClippedGELUActivation",
    "gelu_fast": "FastGELUActivation",
    "gelu_python": "GELUActivation(use_gelu_python=True)",
    "hardswish": "nn.Hardswish",
    "laplace": "LaplaceActivation",
    "leaky_relu": "nn.LeakyReLU",
    "linear": "LinearActivation",
    "mish": "MishActivation",
    "quick_gelu": "QuickGELUActivation",
    "relu2": "ReLUSquaredActivation",
    "relu6": "nn.ReLU6",
    "sigmoid": "nn.Sigmoid",
    "sqrtsoftplus": "SqrtSoftplusActivation",
    "tanh": "nn.Tanh",
    "prelu": "nn.PReLU",
    "xielu": "XIELUActivation",
}


class ConfigError(ValueError):
    """A config that calc cannot read; calc.inputs turns it into an InputError on "hf-config"."""


class Written(float):
    """A config's number with a fraction or an exponent, as its text wrote it (calc.hf.parse reads them so):
    `1e999` is Python's inf, which a message quotes as the config wrote it, not as JSON's "Infinity"."""

    text: str

    def __new__(cls, text: str) -> Written:
        number = super().__new__(cls, text)
        number.text = text
        return number


def shown(value: object) -> str:
    """A config's value as JSON for a message, shortened: a whole number of over MAX_SHOWN digits by its
    count of digits (as calc.inputs says of a flag's), other JSON cut to MAX_SHOWN characters with its length
    said, so that a 300-digit hidden_size does not fill the page."""
    text = value.text if isinstance(value, Written) else json.dumps(value)
    if len(text) <= MAX_SHOWN:
        return text
    if isinstance(value, int) and not isinstance(value, bool):
        return f"a number of {len(text.lstrip('-')):,} digits"
    return f"{text[:MAX_SHOWN]}... ({len(text):,} characters)"


class Aliased(Mapping):
    """A config read as its transformers config class reads it: each pair of its class's attribute_map (an
    alias -> the attribute it stores, Qwen3MoeConfig's num_experts -> num_local_experts) is one setting, found
    under either name. save_pretrained writes the stored name, older files and hand-written ones the other;
    a file giving both with different values is refused, naming both. `written(key)` is the name the file
    used, for messages."""

    def __init__(self, cfg: Mapping, aliases: Mapping[str, str]):
        self.cfg = cfg
        self.other: dict[str, str] = {}
        for alias, stored in aliases.items():
            a, s = cfg.get(alias), cfg.get(stored)
            if a is not None and s is not None and (a != s or isinstance(a, bool) != isinstance(s, bool)):
                raise ConfigError(f"{alias} ({shown(a)}) and {stored} ({shown(s)}) differ, where transformers "
                                  "reads both as one setting: give one")  # fmt: skip
            self.other[alias], self.other[stored] = stored, alias

    def written(self, key: str) -> str:
        """The name under which the file gives `key` (itself or its alias): one with a value, else one present."""
        names = (key, self.other[key]) if key in self.other else (key,)
        given = [n for n in names if self.cfg.get(n) is not None] or [n for n in names if n in self.cfg]
        return given[0] if given else key

    def __getitem__(self, key: str) -> object:
        return self.cfg[self.written(key)]

    def get(self, key: str, default: object = None) -> object:
        return self.cfg.get(self.written(key), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.written(key) in self.cfg

    def __iter__(self):
        return iter(self.cfg)

    def __len__(self) -> int:
        return len(self.cfg)


def written(cfg: Mapping, key: str) -> str:
    """The name a message gives `key`: the one the config wrote (Aliased), or `key` itself."""
    return cfg.written(key) if isinstance(cfg, Aliased) else key


def get(cfg: Mapping, key: str, default: object = ...) -> object:
    value = cfg.get(key)
    if value is None:
        if default is ...:
            other = cfg.other.get(key) if isinstance(cfg, Aliased) else None
            raise ConfigError(f"{key} is missing" if other is None else f"{key} (or {other}) is missing")
        return default
    return value


def dense_layers(sparse: list[bool]) -> dict:
    """Shape's dense_layers of a mixture of experts whose layers, first to last, are `sparse` (True: the layer's
    FFN is the sparse block), and dense_at where those dense layers are not the first ones (Shape.moe_layer)."""
    dense = [i + 1 for i, moe in enumerate(sparse) if not moe]
    return {"dense_layers": len(dense), "dense_at": () if dense == list(range(1, len(dense) + 1)) else tuple(dense)}


def whole(cfg: Mapping, key: str, default: object = ..., smallest: int = 1) -> int:
    value = raw = get(cfg, key, default)
    largest = MAX_SIZE.get(key, 1 << 24)
    key = written(cfg, key)
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 4096.0 is 4096; a message still quotes what the config wrote (1e+308)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key} must be a whole number, got {shown(raw)}")
    short = len(str(value)) <= MAX_SHOWN  # else quoted as the config wrote it, shortened (1e+308)
    if value < smallest:
        raise ConfigError(f"{key} must be at least {smallest}, got {value if short else shown(raw)}")
    if value > largest:
        raise ConfigError(f"{key} must be at most {largest:,}, got {f'{value:,}' if short else shown(raw)}")
    return value


def flag(cfg: Mapping, key: str, default: bool) -> bool:
    value = get(cfg, key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{written(cfg, key)} must be true or false, got {shown(value)}")
    return value


def rate(cfg: Mapping, *keys: str) -> bool:
    """Whether any of these dropout probabilities is above zero."""
    for key in keys:
        value = get(cfg, key, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ConfigError(f"{written(cfg, key)} must be a probability from 0 to 1, got {shown(value)}")
        if value > 0:
            return True
    return False


def activation_of(cfg: Mapping, key: str, default: str) -> str:
    """The activation calc replays for the ACT2FN name at `key`: what transformers' class for it runs."""
    value = get(cfg, key, default)
    if isinstance(value, str) and value in ACTIVATIONS:
        return ACTIVATIONS[value]
    runs = NOT_REPLAYED.get(value) if isinstance(value, str) else None
    why = f": transformers runs {runs}, which calc does not replay" if runs else ""
    raise ConfigError(f"{written(cfg, key)} {shown(value)} is not supported{why}; supported: {', '.join(ACTIVATIONS)}")


def attention(cfg: Mapping, kv_default: int | None = None, head_default: int = 0, gpt2: bool = False) -> dict:
    """Width, heads, key/value heads and head size, checked as transformers' attention needs them.
    `kv_default` and `head_default` are the config class's defaults (None: as many as the heads; 0: width/heads)."""
    hidden_key, heads_key = ("n_embd", "n_head") if gpt2 else ("hidden_size", "num_attention_heads")
    hidden = whole(cfg, hidden_key)
    heads = whole(cfg, heads_key)
    kv_heads = heads if gpt2 else whole(cfg, "num_key_value_heads", heads if kv_default is None else kv_default)
    head_size = 0 if gpt2 else whole(cfg, "head_dim", head_default, smallest=0)
    if not head_size and hidden % heads:
        missing = "" if gpt2 else " and head_dim is not given"
        heads_key, hidden_key = written(cfg, heads_key), written(cfg, hidden_key)
        raise ConfigError(f"{heads_key} ({heads}) does not divide {hidden_key} ({hidden}){missing}")
    if heads % kv_heads:
        raise ConfigError(f"num_key_value_heads ({kv_heads}) does not divide {written(cfg, heads_key)} ({heads})")
    return {
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_size": 0 if head_size * heads == hidden else head_size,
    }


def llama_like(
    cfg: Mapping,
    tied: bool,
    context: int,
    kv_default: int | None = None,
    head_default: int = 0,
    activation: tuple[str, str] = ("hidden_act", "silu"),
) -> dict:
    """What the Llama family's decoders share: RMSNorm, rotary positions, a gated FFN, no linear biases.
    The arguments are the config class's defaults."""
    return {
        "layers": whole(cfg, "num_hidden_layers"),
        **attention(cfg, kv_default, head_default),
        "vocab": whole(cfg, "vocab_size"),
        "gated_ffn": True,
        "tied": flag(cfg, "tie_word_embeddings", tied),
        "norm": "rms",
        "bias": False,
        "head_bias": False,  # the lm_head of every Llama-family model has none
        "positions": "rope",
        "context": whole(cfg, "max_position_embeddings", context),
        "final_norm": True,
        "activation": activation_of(cfg, *activation),
        "dropout": rate(cfg, "attention_dropout"),
        "family": "llama",
    }


def attention_bias(cfg: Mapping, mlp_bias: bool = False) -> dict:
    """Llama's and Gemma's attention_bias puts biases on Q, K, V and O; calc has that only together with
    the FFN's (bias) or without O's (qkv_bias)."""
    on = flag(cfg, "attention_bias", False)
    if on != mlp_bias:
        raise ConfigError("attention_bias and mlp_bias must be equal: calc counts biases on all linear layers or none")
    return {"bias": on}


def window(cfg: Mapping, use_key: str | None = None, default: int = 0) -> int:
    """The sliding window's tokens (0: none); `use_key` a flag that must be on for the window to apply."""
    if use_key and not flag(cfg, use_key, False):
        return 0
    if "sliding_window" in cfg and cfg.get("sliding_window") is None:
        return 0  # null: no window (Mistral 7B v0.2 on); a missing key takes the class's default
    return whole(cfg, "sliding_window", default, smallest=0)
