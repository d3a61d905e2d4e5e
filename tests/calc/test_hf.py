"""Reading transformers configs: what each key gives, every bad config one message (counts: test_hf_counts.py)."""

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calc
from calc.cli import main
from calc.hf import MAX_CHARS, ConfigError, compact, parse, shape_from_config, shape_from_text
from calc.presets import CONFIG_PRESETS, config_text
from calc.web import handle

CONFIGS = Path(__file__).parents[1] / "hf_configs"  # published config.json files of model types no preset uses


def test_mixtral_active_parameters():
    """Mixtral 8x7B: 46.7B parameters, of which a token uses 12.9B (two of eight experts; Jiang et al. 2024)."""
    counts = calc.param_counts(calc.PRESETS["mixtral-8x7b"])
    expert = 3 * 4096 * 14336
    assert counts["experts"] == 32 * 8 * expert
    assert counts["active"] == counts["total"] - 32 * 6 * expert == 12_879_925_248


def test_gemma2_has_four_norms_and_wide_heads():
    """Gemma 2 9B: 16 heads of 256 (4,096 wide against a 3,584 width) and four RMSNorms a block."""
    shape = calc.PRESETS["gemma-2-9b"]
    assert (shape.head_dim, shape.q_width, shape.kv_width, shape.norms_per_layer) == (256, 4096, 2048, 4)
    h = 3584
    assert calc.param_counts(shape)["per_layer"] == 2 * h * 4096 + 2 * h * 2048 + 3 * h * 14336 + 4 * h


def test_qwen2_biases_are_on_q_k_v_only():
    """Qwen2.5 7B: q, k and v biases (3,584 + 2 x 512 a layer) and no others."""
    shape = calc.PRESETS["qwen2.5-7b"]
    assert shape.qkv_bias and not shape.bias
    no_bias = calc.param_counts(shape.replace(qkv_bias=False))["total"]
    assert calc.param_counts(shape)["total"] - no_bias == 28 * (3584 + 2 * 512)


def test_compact_round_trips():
    """A config reduced to what calc reads gives the same shape, and is shorter than the file."""
    for name in CONFIG_PRESETS:
        text = config_text(name)
        short = compact(parse(text))
        assert shape_from_text(short, name) == calc.PRESETS[name]
        assert len(short) < len(text) and short == compact(json.loads(short))


def test_compact_keeps_a_null_window():
    """Mistral 7B v0.2's "sliding_window": null (no window) comes back from its compact form as no window, not
    as the 4,096 that MistralConfig gives a missing key."""
    cfg = {**json.loads(config_text("mistral-7b")), "sliding_window": None}
    assert shape_from_config(cfg).sliding_window == 0
    assert shape_from_text(compact(cfg)).sliding_window == 0
    assert shape_from_text(compact({k: v for k, v in cfg.items() if k != "sliding_window"})).sliding_window == 4096


LLAMA = json.loads(config_text("llama-3.1-8b"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": None}, "hidden_size is missing"),
        ({"num_attention_heads": 0}, "num_attention_heads must be at least 1, got 0"),
        ({"num_hidden_layers": -2}, "num_hidden_layers must be at least 1, got -2"),
        ({"vocab_size": 1.5}, "vocab_size must be a whole number, got 1.5"),
        ({"intermediate_size": "14336"}, 'intermediate_size must be a whole number, got "14336"'),
        ({"tie_word_embeddings": "no"}, 'tie_word_embeddings must be true or false, got "no"'),
        ({"num_attention_heads": 30, "num_key_value_heads": 6}, "num_attention_heads (30) does not divide hidden_size"),
        ({"num_key_value_heads": 5}, "num_key_value_heads (5) does not divide num_attention_heads (32)"),
        ({"hidden_size": 1 << 21}, "hidden_size must be at most 1,048,576"),
        ({"model_type": "bert"}, 'model_type "bert" is not supported; supported: llama, mistral'),
        ({"model_type": None}, "model_type is missing"),
        ({"model_type": ["llama"]}, 'model_type ["llama"] is not supported'),
        ({"vocab_size": float("nan")}, "vocab_size must be a whole number, got NaN"),
        ({"hidden_act": "tanh"}, 'hidden_act "tanh" is not supported'),
        ({"attention_bias": True}, "attention_bias and mlp_bias must be equal"),
        ({"attention_dropout": 2}, "attention_dropout must be a probability from 0 to 1, got 2"),
        # an oversized value is quoted short: as the config wrote it, or by its count of digits
        ({"hidden_size": 1e308}, "hidden_size must be at most 1,048,576, got 1e+308$"),
        ({"hidden_size": -1e308}, "hidden_size must be at least 1, got -1e+308$"),
        ({"hidden_size": int("9" * 300)}, "hidden_size must be at most 1,048,576, got a number of 300 digits$"),
        ({"hidden_size": "x" * 1000}, 'hidden_size must be a whole number, got "xxxxxxxxx'),
        ({"model_type": "y" * 1000}, 'model_type "yyyyyyyyyyyy'),
    ],
)
def test_bad_config_names_the_field(change, message):
    """Each bad config raises one message that names the config's key."""
    cfg = {k: v for k, v in {**LLAMA, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match="^" + re.escape(message).replace(r"\$", "$")) as raised:
        shape_from_config(cfg)
    assert len(str(raised.value)) < 400  # a 1,000-character value is not printed whole


def test_moe_configs_are_checked():
    """More experts per token than experts is refused, naming both keys."""
    cfg = json.loads(config_text("mixtral-8x7b"))
    with pytest.raises(ConfigError, match=r"num_experts_per_tok \(9\) is more than num_local_experts \(8\)"):
        shape_from_config({**cfg, "num_experts_per_tok": 9})


def qwen3_moe_saved(**keys) -> dict:
    """Qwen3-30B-A3B's config.json with its experts named as transformers 5's save_pretrained writes them
    (Qwen3MoeConfig.attribute_map: num_experts is stored as num_local_experts)."""
    cfg = json.loads(config_text("qwen3-30b-a3b"))
    cfg["num_local_experts"] = cfg.pop("num_experts")
    return {**cfg, **keys}


def test_a_key_is_read_under_either_of_its_config_class_names():
    """Qwen3-MoE's experts as the Hub's file names them (num_experts) and as transformers 5 saves them
    (num_local_experts) are one shape; a small count under the saved name is read, not the class's 128."""
    assert shape_from_config(qwen3_moe_saved()) == shape_from_config(json.loads(config_text("qwen3-30b-a3b")))
    assert shape_from_config(qwen3_moe_saved(num_local_experts=4, num_experts_per_tok=2)).experts == 4
    gpt2 = json.loads((CONFIGS / "gpt2.json").read_text())
    renamed = {"n_embd": "hidden_size", "n_head": "num_attention_heads", "n_layer": "num_hidden_layers",
               "n_positions": "max_position_embeddings"}  # fmt: skip
    usual = {renamed.get(k, k): v for k, v in gpt2.items()}
    assert usual.keys() != gpt2.keys() and shape_from_config(usual) == shape_from_config(gpt2)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (qwen3_moe_saved(num_experts=64), "num_experts (64) and num_local_experts (128) differ, where transformers"),
        (qwen3_moe_saved(num_local_experts=4), "num_experts_per_tok (8) is more than num_local_experts (4)"),
        (qwen3_moe_saved(num_local_experts=-1), "num_local_experts must be at least 0, got -1"),
        ({"model_type": "gpt2", "n_embd": 64, "hidden_size": 32}, "hidden_size (32) and n_embd (64) differ"),
        ({"model_type": "gpt2", "hidden_size": 64, "n_head": 4, "vocab_size": 9}, "n_layer (or num_hidden_layers) is"),
        ({"model_type": "gpt2", "hidden_size": 65, "n_head": 4}, "n_head (4) does not divide hidden_size (65)"),
        ({**json.loads(config_text("deepseek-v3")), "num_local_experts": 255}, "num_local_experts (255) and n_rou"),
    ],
)
def test_a_key_given_under_both_names_must_agree_and_messages_name_the_one_written(cfg, message):
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        shape_from_config(cfg)


def test_both_names_agreeing_are_read_and_compact_keeps_the_one_written():
    """A file giving both names with one value reads as either alone; its link keeps what the file wrote."""
    both = qwen3_moe_saved(num_experts=128)
    assert shape_from_config(both) == shape_from_config(qwen3_moe_saved())
    short = json.loads(compact(qwen3_moe_saved()))
    assert short["num_local_experts"] == 128 and "num_experts" not in short
    assert shape_from_text(json.dumps(short)) == shape_from_config(qwen3_moe_saved())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON: Expecting property name enclosed in double quotes at line 1, column 2"),
        ("[1, 2]", "not a JSON object"),
        ("", "not JSON: Expecting value at line 1, column 1"),
        (" " * (MAX_CHARS + 1), f"too long: {MAX_CHARS + 1:,} characters, where a config.json has at most"),
        ("[" * 100_000 + "]" * 100_000, "not JSON: nested too deeply"),
        ('{"vocab_size": ' + "9" * 5000 + "}", "not JSON: a number too long"),
        # json.load would keep the last silently (issue 33): named, in a nested object too
        ('{"model_type": "llama", "num_hidden_layers": 2, "num_hidden_layers": 3}',
         '"num_hidden_layers" is given twice (first 2, then 3): transformers would read the last; give it once'),
        ('{"model_type": "gemma3", "text_config": {"vocab_size": 8, "vocab_size": 9}}', '"vocab_size" is given twice'),
    ],
)
def test_text_that_is_no_config(text, message):
    """Not JSON, not an object, or too long: one message."""
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        parse(text)


def test_cli_reads_a_config_and_flags_override_it(capsys):
    """--hf-config gives the file's model; a flag beside it changes that one field."""
    path = str(Path(calc.__file__).parent / "configs" / "mixtral-8x7b.json")
    assert main(["--hf-config", path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"] == 46_702_792_704 and out["config"]["shape"]["experts"] == 8
    assert main(["--hf-config", path, "--experts-per-token", "1", "--layers", "2", "--json"]) == 0
    shape = json.loads(capsys.readouterr().out)["config"]["shape"]
    assert (shape["experts_per_token"], shape["layers"], shape["hidden"], shape["name"]) == (1, 2, 4096, "custom")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read {path}: No such file or directory"),
        ("dir", "cannot read {path}: Is a directory"),
        ("not json", "not JSON: Expecting value at line 1, column 1"),
        ("", "{path} is empty: give a model's config.json"),  # not the preset's answer for a file saying nothing
        (" \n", "{path} is empty: give a model's config.json"),
        (" " * 10_000_000, "too long: 1,000,001 characters, where a config.json has at most 1,000,000"),
        ('{"model_type": "bert"}', 'model_type "bert" is not supported; supported: llama, mistral, mixtral, qwen2'),
        ('{"model_type": "llama", "hidden_size": 4096}', "num_hidden_layers is missing"),
        (b"\xff\xfe{", "cannot read {path}: UnicodeDecodeError"),
    ],
)
def test_cli_bad_config_file_is_one_line(tmp_path, capsys, content, message):
    """A missing file, a folder, not JSON, a 10 MB file or a bad config: exit 2, one line naming the problem."""
    path = tmp_path / "config.json"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    assert main(["--hf-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --hf-config: " + message.format(path=path)) and err.count("\n") == 1


def test_a_byte_order_mark_is_read_past(tmp_path, capsys):
    """A config.json saved with a UTF-8 byte-order mark (as Windows editors write one) reads as without it."""
    text = config_text("qwen3-8b")
    assert shape_from_text("\ufeff" + text) == shape_from_text(text)
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert main(["--hf-config", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["shape"]["layers"] == 36


def test_cli_refuses_a_preset_beside_a_config(capsys):
    """--preset and --hf-config both name the model: one of them."""
    path = str(Path(calc.__file__).parent / "configs" / "gpt-3-175b.json")
    assert main(["--preset", "gpt2", "--hf-config", path]) == 2
    assert capsys.readouterr().err == "error: --preset: give a preset or hf-config, not both\n"


def test_web_takes_the_config_text():
    """The page sends the pasted config.json as the hf-config field; errors come back naming it."""
    text = config_text("qwen2.5-7b")
    out = json.loads(handle(json.dumps({"inputs": {"hf-config": text, "seq": "2048"}, "sweep": False})))
    assert out["ok"] and out["step"]["params"] == calc.param_counts(calc.PRESETS["qwen2.5-7b"])["total"]
    assert out["hf_config"] == compact(json.loads(text))  # the short form the page puts in its address
    zero_width = text.replace('"hidden_size": 3584', '"hidden_size": 0')
    bad = json.loads(handle(json.dumps({"inputs": {"hf-config": zero_width}})))
    assert bad == {"ok": False, "field": "hf-config", "message": "hidden_size must be at least 1, got 0"}
    huge = json.loads(handle(json.dumps({"inputs": {"hf-config": "x" * 10_000_000}})))
    assert huge["field"] == "hf-config" and huge["message"].startswith("too long")


@pytest.mark.parametrize(
    ("preset", "missing"),
    [
        ("mixtral-8x7b --capacity-factor 1.25", "an expert capacity (transformers' Mixtral and Qwen2-MoE drop no "
         "tokens)"),
    ],
)
def test_eager_walk_refuses_what_it_does_not_follow(capsys, preset, missing):
    """--walk eager names the feature of the shape that calc.eager does not count, instead of a wrong peak."""
    assert main(["--preset", *preset.split(), "--walk", "eager"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --walk: the eager walk does not follow {missing} yet: use the deck walk\n"
    assert calc.inputs.eager_lacks(calc.PRESETS["llama-3.2-3b"]) is None


def test_gpt2_config_reads_gelu_new_as_its_python_ops():
    """GPT-2's own config.json names gelu_new: transformers' NewGELUActivation, Python ops whose intermediates
    autograd saves. Read from the config, the eager step is the gpt2 preset's (which types it out), not the
    fused tanh GELU's (22% lower: gelu_pytorch_tanh saves only its input)."""
    shape = shape_from_text((Path(__file__).parents[1] / "hf_configs" / "gpt2.json").read_text())
    assert shape.activation == "gelu_new"

    def peak(s):  # a small vocabulary, so that the layers take the peak
        return calc.step(s.replace(vocab=1000), 256, 1, "fp32-full", "none", walk="eager", device="cpu")["peak"]

    assert peak(shape) == peak(calc.PRESETS["gpt2"])
    assert peak(shape.replace(activation="gelu_tanh")) < peak(shape)


@pytest.mark.parametrize(("name", "replayed"), [("gelu_accurate", "gelu_new"), ("gelu_python_tanh", "gelu_new"),
                                                 ("swish", "silu"), ("gelu_pytorch_tanh", "gelu_tanh")])  # fmt: skip
def test_activation_names_read_as_transformers_runs_them(name, replayed):
    """An ACT2FN name is read as the activation whose ops transformers' class for it runs."""
    cfg = json.loads(config_text("llama-3.2-1b"))
    assert shape_from_config({**cfg, "hidden_act": name}).activation == replayed


@pytest.mark.parametrize(("name", "runs"), [("gelu_fast", "FastGELUActivation"), ("quick_gelu", "QuickGELUActivation"),
                                            ("relu2", "ReLUSquaredActivation")])  # fmt: skip
def test_activation_names_calc_does_not_replay_are_refused(capsys, tmp_path, name, runs):
    """gelu_fast (once read as the fused tanh GELU) and the other ACT2FN names whose ops calc does not replay are
    refused in one line naming the key, the value and the class transformers would run."""
    cfg = json.loads(config_text("llama-3.2-1b"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "hidden_act": name}))
    assert main(["--hf-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: --hf-config: hidden_act "{name}" is not supported: transformers runs {runs}')
    assert err.count("\n") == 1


@pytest.mark.torch
def test_every_act2fn_name_is_read_or_refused():
    """Every name transformers' ACT2FN knows is either read as a replayed activation or refused by name."""
    from transformers.activations import ACT2CLS

    from calc.families.config import ACTIVATIONS, NOT_REPLAYED

    assert set(ACT2CLS) == set(ACTIVATIONS) | set(NOT_REPLAYED)
    assert not set(ACTIVATIONS) & set(NOT_REPLAYED)


def test_sliding_window_is_read_as_transformers_reads_it():
    """Mistral 7B v0.1 attends over 4,096 tokens; null means no window; Qwen2's needs use_sliding_window."""
    mistral = json.loads(config_text("mistral-7b"))
    assert shape_from_config(mistral).sliding_window == 4096
    assert shape_from_config({**mistral, "sliding_window": None}).sliding_window == 0
    qwen = json.loads(config_text("qwen2.5-7b"))
    assert shape_from_config(qwen).sliding_window == 0
    assert shape_from_config({**qwen, "use_sliding_window": True}).sliding_window == 131072


KEYS = sorted({k for name in CONFIG_PRESETS for k in json.loads(config_text(name))} | {"n_inner", "mlp_only_layers"})
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 1 << 30) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=5,
)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(CONFIG_PRESETS), st.dictionaries(st.sampled_from(KEYS), JSON_VALUES, max_size=4))
def test_any_config_is_read_or_refused_with_a_message(name, changes):
    """Whatever values a pasted config holds, calc answers with a shape or with an InputError on hf-config."""
    text = json.dumps({**json.loads(config_text(name)), **changes})
    try:
        inputs = calc.parse_inputs({"hf-config": text, "seq": "64"})
    except calc.InputError as e:
        assert e.field in calc.inputs.FIELDS and e.message
    else:
        assert calc.param_counts(inputs.shape)["total"] > 0


@pytest.mark.parametrize("number", ["1e999", "-1E+999", "4096.0e0", "1.50"])
def test_a_bad_number_is_quoted_as_the_config_wrote_it(number):
    """A number past float's range (1e999 is Python's inf) or written with an exponent is quoted back as the
    text the reader pasted, not as JSON's "Infinity" (issue 20, a fresh reviewer's minor); a whole number
    written so is still read."""
    text = (CONFIGS / "llama-2-7b.json").read_text().replace('"hidden_size": 4096', f'"hidden_size": {number}')
    assert number in text
    if number == "4096.0e0":
        assert shape_from_text(text).hidden == 4096
        return
    with pytest.raises(ConfigError) as e:
        shape_from_text(text)
    assert str(e.value) == f"hidden_size must be a whole number, got {number}"
