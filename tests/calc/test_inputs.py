"""calc.inputs: a field typed that nothing reads is refused in one line naming it (issue 19), a config's own
values never are; one message for a bad capacity (issue 20); the CLI's step answers the loop's fields with the
eager walk's figure beside the deck's, as the page (calc.web) does, so the page's links are the CLI's."""

import contextlib
import dataclasses
import io
import json
from pathlib import Path

import pytest

from calc import web
from calc.cli import main
from calc.inputs import CAPACITY_MESSAGE, canonical_numbers, parse_inputs
from calc.run import Run

CONFIGS = Path(__file__).resolve().parents[2] / "calc" / "configs"


def run(args: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the CLI in-process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue(), err.getvalue()


def page(inputs: dict) -> dict:
    """The page's answer (calc.web.handle) for these fields."""
    return json.loads(web.handle(json.dumps({"inputs": inputs, "sweep": False})))


@pytest.mark.parametrize(
    "args, fields, field",
    [  # the CLI's flags, the page's fields for the same (None: a mode the page has not), the field refused
        (["--table", "--activation", "gelu"], None, "activation"),  # Korthikanti et al.'s MLP whatever it is
        (["--plan", "--no-dropout"], None, "dropout"),  # ... and their dropout masks whatever the model does
        (["--fit-card", "--sliding-window", "512"], None, "sliding-window"),
        (["--table", "--device", "cpu"], None, "device"),
        (["--context", "8192"], {"context": "8192"}, "context"),  # rotary positions keep nothing for it
        (["--head-bias"], {"head-bias": "true"}, "head-bias"),  # Llama's head is bias-free
        (["--preset", "mixtral-8x7b", "--no-shared-expert-gate"],  # Mixtral has no shared expert
         {"preset": "mixtral-8x7b", "shared-expert-gate": "false"}, "shared-expert-gate"),
        (["--walk", "eager", "--norms-per-layer", "2"],  # the family's code has its own norms
         {"walk": "eager", "norms-per-layer": "2"}, "norms-per-layer"),
        (["--sliding-window", "512"], {"sliding-window": "512"}, "sliding-window"),  # Llama's code: no window
        # every layer a mixture of experts, their width their own: the dense FFN's width sizes nothing
        (["--preset", "mixtral-8x7b", "--ffn", "1000"], {"preset": "mixtral-8x7b", "ffn": "1000"}, "ffn"),
        (["--preset", "qwen3-30b-a3b", "--walk", "eager", "--ffn", "1000"],
         {"preset": "qwen3-30b-a3b", "walk": "eager", "ffn": "1000"}, "ffn"),
        (["--preset", "gpt-oss-20b", "--table", "--ffn", "1000"], None, "ffn"),
        (["--preset", "deepseek-v3", "--qkv-bias"], {"preset": "deepseek-v3", "qkv-bias": "true"}, "qkv-bias"),  # MLA
    ],
)
def test_a_field_nothing_reads_is_refused_in_one_line(args, fields, field):
    """Each was accepted and changed no answer; now one line names it, exit 2, and the page says the same."""
    rc, out, err = run(args)
    assert rc == 2 and not out and err.startswith(f"error: --{field}: ") and err.count("\n") == 1, err
    if fields is not None:
        got = page(fields)
        assert got["field"] == field and err == f"error: --{field}: {got['message']}\n", got


@pytest.mark.parametrize("args", [
    ["--preset", "deepseek-v3"],  # its first three layers are dense, of width --ffn
    ["--experts", "8", "--experts-per-token", "2"],  # no --expert-ffn: each expert is --ffn wide
    ["--preset", "mixtral-8x7b", "--dense-layers", "2"],
])
def test_ffn_is_read_where_some_layer_is_dense_or_the_experts_follow_it(args):
    """Issue 19: --ffn is refused only where it sizes nothing; where it sizes a dense layer or the experts, it
    changes the peak."""
    answers = [json.loads(run([*args, *more, "--json"])[1])["peak"] for more in ([], ["--ffn", "1000"])]
    assert answers[0] != answers[1]


@pytest.mark.parametrize("name", ["mistral-7b", "gemma-2-9b", "qwen2.5-7b", "gpt-oss-20b"])
def test_a_configs_own_window_and_activation_are_never_refused(name):
    """A config.json sets sliding_window and hidden_act for every walk: only typed fields are refused."""
    text = (CONFIGS / f"{name}.json").read_text()
    for walk in ("deck", "eager"):
        inputs = parse_inputs({"hf-config": text, "seq": "512", "walk": walk, "attention": "eager"})
        assert inputs.shape.sliding_window or name == "qwen2.5-7b"


def test_a_window_the_familys_code_reads_is_taken_in_the_eager_walk():
    """Gemma 3's model passes sdpa a window mask where the window is no longer than the sequence: a typed
    --sliding-window changes the eager walk's answer there; the deck's table, which has no window, refuses it."""
    config = str(CONFIGS / "gemma-3-12b.json")
    args = ["--hf-config", config, "--walk", "eager", "--seq", "512", "--layers", "2", "--json"]
    events = {w: json.dumps(json.loads(run([*args, "--sliding-window", w])[1])["events"]) for w in ("256", "4096")}
    assert "window" in events["256"] and events["256"] != events["4096"]
    rc, _, err = run(["--hf-config", config, "--table", "--sliding-window", "256"])
    assert rc == 2 and err.startswith("error: --sliding-window: applies to --walk eager")


@pytest.mark.parametrize("value", ["-1", "0", "0.0001", "abc", "100001", "1" * 40])
def test_every_bad_capacity_gets_one_message_naming_the_field(value):
    """A sign, zero, a fourth decimal, a word or too much: the same line, in the CLI (--plan, --fit-card) and
    on the page (issue 20, minor c)."""
    for mode in ("--plan", "--fit-card"):
        rc, _, err = run([mode, f"--capacity-gb={value}"])
        assert rc == 2 and err.startswith(f"error: --capacity-gb: {CAPACITY_MESSAGE}, got '"), err
    got = page({"capacity-gb": value})
    assert got["field"] == "capacity-gb" and got["message"].startswith(CAPACITY_MESSAGE)


def test_a_page_link_with_a_loop_is_the_clis_answer():
    """`?loop=trainer` on the deck walk: the page's eager figure beside the deck's, which the CLI's step prints
    too (issue 20, minor a), and is the eager walk's for the same flags."""
    rc, out, err = run(["--loop", "trainer", "--adamw-impl", "single", "--seq", "1024", "--json"])
    assert rc == 0, err
    cli = json.loads(out)
    alone = json.loads(run(["--seq", "1024", "--json"])[1])
    assert {k: v for k, v in cli.items() if k != "eager"} == alone  # the deck's numbers do not move
    got = page({"loop": "trainer", "adamw-impl": "single", "seq": "1024"})
    eager = json.loads(run(["--walk", "eager", "--loop", "trainer", "--adamw-impl", "single", "--seq", "1024",
                            "--json"])[1])  # fmt: skip
    assert cli["eager"] == got["eager"] and cli["eager"]["peak"] == eager["peak"]
    for mode in ([], ["--events"]):  # printed in the summary and after the events alike
        rc, text, _ = run(["--loop", "trainer", "--seq", "1024", *mode])
        assert rc == 0 and text.splitlines()[-1].startswith("  eager walk:") and "transformers' Trainer" in text


def test_a_loop_without_an_eager_figure_is_refused():
    """Where the eager figure beside the deck's cannot answer (a tensor-parallel layout of the deck's mixed
    recipe: the eager walk's layers plan runs fp32 parameters), the loop's fields have nothing to change."""
    rc, _, err = run(["--loop", "trainer", "--tp", "2"])
    assert rc == 2 and err.startswith("error: --loop: applies to the eager walk's figure")
    assert "fp32-full or autocast" in err


CALC = Path(__file__).resolve().parents[2] / "calc"


@pytest.mark.parametrize("module", sorted(str(p.relative_to(CALC.parent)) for p in CALC.rglob("*.py")))
def test_no_function_is_long(module):
    """Issue 17: parse_inputs (90 lines) and build_parser (117) became small named functions, each at most 60;
    issues 31 and 32 ask the same of every calc function (FSDP2's `around` was 103 lines, eager's `segments` 66)."""
    import ast

    tree = ast.parse((CALC.parent / module).read_text())
    long = {f.name: f.end_lineno - f.lineno + 1 for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}  # fmt: skip
    assert {name: n for name, n in long.items() if n > 60} == {}


def test_the_cli_is_built_from_one_field_table():
    """calc.fields lists every field calc.inputs validates, each once (issue 17: the parser derives from it)."""
    from calc.fields import GROUPS
    from calc.inputs import FIELDS

    names = [f.name for _, fields in GROUPS for f in fields]
    assert sorted(names) == sorted(FIELDS) and len(set(names)) == len(names)


@pytest.mark.parametrize("preset", ["gemma-2-9b", "gpt-oss-20b"])
def test_the_eager_walks_attention_follows_a_family_that_runs_eager_only(preset):
    """Gemma 2's and GPT-OSS's code run eager attention only: with no --attention the eager walk runs eager
    there, the CLI and the page (a link's walk, seq, micro-batch, recipe) alike, and sdpa is still refused."""
    flags = ["--preset", preset, "--walk", "eager", "--seq", "2048", "--micro-batch", "2", "--recipe", "bf16"]
    rc, out, err = run([*flags, "--json"])
    assert rc == 0, err
    assert out == run([*flags, "--attention", "eager", "--json"])[1]
    got = page({"preset": preset, "walk": "eager", "seq": "2048", "micro-batch": "2", "recipe": "bf16"})
    assert got["ok"] and got["step"]["peak"] == json.loads(out)["peak"]
    assert got["step"]["config"]["attention"] == "eager"
    assert run([*flags, "--attention", "sdpa"])[0] == 2


@pytest.mark.parametrize(
    "value, gb", [("1,000", "1000"), ("1_000", "1000"), ("+8", "8"), ("94.5", "94.5"), ("0.512", "0.512")]
)
def test_a_capacity_is_written_as_every_number_field_is(value, gb):
    """Capacity takes what Sequence takes (a "+", thousands separators) and its three decimals, in the CLI and
    on the page alike (minor 9): the same bytes as the plain number."""
    for mode in ("--plan", "--fit-card"):
        rc, out, err = run([mode, "--seq", "512", "--json", f"--capacity-gb={value}"])
        assert rc == 0 and out == run([mode, "--seq", "512", "--json", f"--capacity-gb={gb}"])[1], err
    assert page({"capacity-gb": value})["capacity"] == page({"capacity-gb": gb})["capacity"]
    assert parse_inputs({"seq": value.replace(".", "")}).seq == int(gb.replace(".", ""))


def test_a_number_in_another_form_is_given_back_in_calcs_one_form():
    """canonical_numbers (issue 20's last pass, minor 1): "1,000", "1_000", "+8", "016" and a capacity "80.500" as
    calc read them; a preset, a choice, a list or a number already in that form is left out."""
    typed = {"seq": "1,000", "micro-batch": "+8", "layers": "1_000", "lora-rank": "016", "capacity-gb": "80.500",
             "preset": "gpt2", "zero": "0", "capacity-factor": "1.25", "lora-targets": "q,v", "global-batch": "512"}
    assert canonical_numbers(typed) == {"seq": "1000", "micro-batch": "8", "layers": "1000", "lora-rank": "16",
                                        "capacity-gb": "80.5"}  # fmt: skip
    assert canonical_numbers({"capacity-gb": "94.000"}) == {"capacity-gb": "94"}
    for field, value in canonical_numbers(typed).items():
        lora = {"finetune": "lora"}  # where a rank applies
        assert parse_inputs({**lora, field: value}) == parse_inputs({**lora, field: typed[field]}), field


def test_a_run_is_one_frozen_object():
    """parse_inputs answers one calc.run.Run, whose fields no caller can change after the checks passed."""
    inputs = parse_inputs({"preset": "gpt2", "seq": "256", "walk": "eager"})
    assert isinstance(inputs, Run)
    assert (inputs.shape.name, inputs.seq, inputs.walk, inputs.hf_config) == ("gpt2", 256, "eager", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        inputs.seq = 512
    assert [f.name for f in dataclasses.fields(Run)] == [
        "shape", "seq", "micro_batch", "recipe", "recompute", "walk", "attention", "device", "par", "grad_accum",
        "global_batch", "capacity", "tune", "hf_config", "loop"]  # fmt: skip


MAVERICK_LIKE = {"model_type": "llama4_text", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 32, "intermediate_size_mlp": 48,
                 "num_local_experts": 4, "num_experts_per_tok": 1, "vocab_size": 128, "interleave_moe_layer_step": 2}


@pytest.mark.parametrize(("flags", "field"), [(["--dense-layers", "1"], "dense-layers"), (["--layers", "2"], "layers"),
                                              (["--dense-layers", "3"], "dense-layers"), (["--layers", "6"], "layers"),
                                              (["--layers", "3"], "layers")])  # fmt: skip
def test_a_flag_that_would_move_a_configs_interleaved_dense_layers_is_refused(tmp_path, capsys, flags, field):
    """Llama-4-Maverick's dense layers lie among its experts (1 and 3 of 4 here): a --dense-layers or any other
    --layers (which would drop them, or leave the new layers all experts) is refused in one line naming the field,
    not counted as dense-first layers; --experts 0 makes a dense model of it, with no dense layers left placed."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MAVERICK_LIKE))
    assert main(["--hf-config", str(path), "--walk", "eager", "--device", "cpu", "--seq", "16"]) == 0
    capsys.readouterr()
    assert main(["--hf-config", str(path), "--seq", "16", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --{field}:") and "\n" not in err
    assert main(["--hf-config", str(path), "--seq", "16", "--experts", "0", "--json"]) == 0
    shape = json.loads(capsys.readouterr().out)["config"]["shape"]
    assert (shape["experts"], shape["dense_layers"], shape.get("dense_at", [])) == (0, 0, [])
