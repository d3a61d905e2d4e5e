"""The browser entry point: JSON in, JSON out, errors as data."""

import json

import pytest

import calc
from calc import web
from calc.cli import main
from conftest import ROOT, cli_run


def call(**payload):
    return json.loads(web.handle(json.dumps(payload)))


def test_default_is_the_deck_configuration():
    """No inputs: LLaMA 7B at 4,096, the four recipes, a 200-point sweep."""
    out = call()
    assert out["ok"]
    assert [r["id"] for r in out["table"]] == ["mixed-none", "mixed-selective", "mixed-full", "fp32-none"]
    assert out["table"] == json.loads(
        json.dumps(
            [{**r, "display": out["table"][i]["display"]} for i, r in enumerate(calc.table(calc.PRESETS["llama-7b"]))]
        )
    )
    assert out["table"][0]["display"]["peak"]["gb"] == "199.5"
    assert len(out["sweep"]["seq"]) >= 200
    assert 4096 in out["sweep"]["seq"]
    i = out["sweep"]["seq"].index(4096)
    assert {k: v[i] for k, v in out["sweep"]["peaks"].items()} == {r["id"]: r["peak"] for r in out["table"]}


def test_the_page_asks_for_the_numbers_then_their_sweep():
    """The page's two questions per change: the numbers without the sweep, then the sweep alone, which is the
    full answer's sweep; a refused input is refused by both."""
    inputs = {"preset": "mistral-7b", "seq": "3000", "micro-batch": "2", "finetune": "lora"}
    full = call(inputs=inputs)
    numbers = call(inputs=inputs, sweep=False)
    assert "sweep" not in numbers and numbers == {k: v for k, v in full.items() if k != "sweep"}
    assert call(inputs=inputs, sweep=True, numbers=False) == {"ok": True, "sweep": full["sweep"]}
    assert "finetune" in full["sweep"]["peaks"]
    assert call(inputs={"seq": "0"}, numbers=False)["field"] == "seq"
    # a fine-tuned mixture of experts, which the deck walk refuses: no deck line of "your step" beside the eager one
    moe = call(inputs={"preset": "qwen3-30b-a3b", "seq": "512", "finetune": "lora", "lora-targets": "all-linear",
                       "walk": "eager"}, sweep=True, numbers=False)  # fmt: skip
    assert moe["ok"] and "finetune" not in moe["sweep"]["peaks"] and moe["sweep"]["peaks"]


def test_inputs_use_the_cli_names():
    """Field names are the CLI's flags."""
    out = call(inputs={"preset": "decoder", "seq": "8", "micro-batch": "16", "recompute": "full"})
    assert out["step"]["config"]["recompute"] == "full"
    assert out["table"][0]["peak"] == 286_208


def test_errors_name_the_field():
    """Bad input comes back as data naming the field."""
    assert call(inputs={"seq": "-1"}) == {"ok": False, "field": "seq", "message": "must be at least 1, got -1"}
    assert call(inputs={"heads": "3"})["field"] == "heads"
    assert call(inputs={"wat": "1"})["field"] == "wat"


def test_garbage_never_raises():
    """Whatever arrives, handle answers with JSON."""
    for request in ["", "null", "[1]", '{"inputs": 5}', "{"]:
        assert json.loads(web.handle(request))["ok"] is False


def test_sweep_respects_learned_positions():
    """GPT-2's sweep stops at its context."""
    out = call(inputs={"preset": "gpt2"})
    assert max(out["sweep"]["seq"]) <= 1024


def test_plan_on_request():
    """The page's planner answer is the CLI's --plan for the same inputs."""
    out = call(inputs={"global-batch": "64", "capacity-gb": "94"}, plan=True)
    assert out["capacity"] == 94 * calc.GB
    rows = calc.plan(calc.PRESETS["llama-7b"], 4096, 64, 94 * calc.GB)
    assert [{k: v for k, v in r.items() if k != "display"} for r in out["plan"]] == json.loads(json.dumps(rows))
    assert out["plan"][0]["display"] == {
        "peak": calc.format_gb(rows[0]["peak"]),
        "extra_compute": f"{rows[0]['extra_compute']:.1%}",
    }
    assert out["global_batch"] == 64 and out["fits"] == (out["step"]["peak"] <= 94 * calc.GB)


def test_parallel_inputs_make_the_table_per_device():
    """dp and ZeRO fields shrink the table's state columns."""
    out = call(inputs={"dp": "8", "zero": "3"})
    assert out["table"][0]["bytes"]["weights"] == 2 * -(-calc.param_counts(calc.PRESETS["llama-7b"])["total"] // 8)
    assert call(inputs={"tp": "3"})["field"] == "tp"


@pytest.mark.parametrize("layout", [{"dp": "4"}, {"dp": "4", "zero": "3"}, {"tp": "2", "sequence-parallel": "true"},
                                    {"dp": "2", "tp": "2", "zero": "2"}, {"pp": "2", "preset": "llama-7b"}])
def test_the_eager_figure_beside_the_decks_layout_is_its_engines_busiest_rank(layout):
    """Issue 31: beside the deck's accounting of a layout, the eager figure is the busiest rank (or stage) of the
    engine the eager walk runs it on, the same as the eager walk's own step, its engine in words and its band
    the engine's; the CLI's --device gives it too, where it said the figure was one device's and refused."""
    inputs = {"preset": "llama-3.2-1b", "seq": "512", "recipe": "autocast", "device": "cpu", **layout}
    deck = json.loads(web.handle(json.dumps({"inputs": inputs, "sweep": False})))
    eager = json.loads(web.handle(json.dumps({"inputs": {**inputs, "walk": "eager"}, "sweep": False})))
    beside, step = deck["eager"], eager["step"]
    assert beside["available"] and beside["peak"] == step["peak"] == max(step["rank_peaks"])
    assert beside["band"] == eager["eager"]["band"] and eager["engine_text"] in beside["how"]
    assert beside["peak"] != deck["step"]["peak"]  # the deck's accounting is another figure
    flags = [f"--{k}" if v == "true" else f"--{k}={v}" for k, v in inputs.items()]
    said = cli_run([*flags, "--json"])
    assert said.returncode == 0 and json.loads(said.stdout)["eager"]["peak"] == beside["peak"]


@pytest.mark.parametrize(("layout", "said"), [
    ({"pp": "2", "grad-accum": "64"}, "at most 256 layers a stage"),  # 1,024 passes of a stage
    ({"dp": "128", "zero": "3"}, "64 data- and tensor-parallel ranks"),
    ({"dp": "2", "tp": "2"}, "--dp 2 or more with --zero 2 or 3, or --dp 1 and --zero 0"),  # DDP x TP
    ({"dp": "4", "zero": "3", "device": "cuda"}, "gloo only (on CUDA its collectives run on streams of their own)"),
])  # fmt: skip
def test_the_eager_figure_beside_a_layout_is_bounded_and_says_why_not(layout, said):
    """Beside the deck's figure the eager walk runs at every change: a layout too long or too wide for that, or
    one it does not replay, shows the reason instead (no pointer to the deck walk the reader is in)."""
    inputs = {"preset": "llama-7b", "recipe": "autocast", "device": "cpu", **layout}
    beside = web.eager_beside(calc.inputs.parse_inputs(inputs, eager_beside=True))
    assert beside["available"] is False and said in beside["reason"] and "deck walk" not in beside["reason"]


def test_eager_walk_beside_the_deck():
    """The page gets the eager walk's peak for the same step beside the deck's, or the reason it has none."""
    out = json.loads(web.handle(json.dumps({"inputs": {"preset": "llama-7b", "seq": 512, "attention": "eager"}})))
    eager = calc.step(calc.PRESETS["llama-7b"], 512, walk="eager", attention="eager")
    assert out["eager"] == {
        "available": True,
        "peak": eager["peak"],
        "peak_event": eager["peak_event"],
        "display": web._display(eager["peak"]),
        "family": "llama",
        "band": "llama",
        "attention": "eager",  # the one it ran: given
        "how": "AdamW (foreach) as PyTorch runs it on a GPU",  # CUDA's default AdamW
        "setting": "mixed adamw bare transformers",
    }
    lion = json.loads(web.handle(json.dumps({"inputs": {"optimizer": "lion", "device": "cpu"}, "sweep": False})))
    assert lion["eager"]["how"] == "Lion on a CPU" and lion["eager"]["setting"] == "mixed lion bare transformers"
    assert out["eager"]["peak"] != out["step"]["peak"]  # the deck's accounting is another figure
    sharded = json.loads(web.handle(json.dumps({"inputs": {"dp": 4, "zero": 1}})))
    assert sharded["ok"] and sharded["eager"]["available"] is False  # the deck's mixed recipe: a master copy
    assert "ZeroRedundancyOptimizer" in sharded["eager"]["reason"] and "deck walk" not in sharded["eager"]["reason"]
    moe = json.loads(web.handle(json.dumps({"inputs": {"preset": "mixtral-8x7b", "seq": 512}})))
    assert moe["eager"]["available"] and moe["eager"]["peak"] > 0  # Mixtral's sparse block is replayed
    assert moe["eager"]["band"] == "moe"  # its error is the one measured on mixtures of experts
    for mode, band in (("lora", "lora"), ("freeze", "lora"), ("qlora", "qlora")):
        tuned = json.loads(web.handle(json.dumps({"inputs": {"seq": 512, "finetune": mode}})))
        assert tuned["eager"]["band"] == band, mode
    capped_inputs = {"preset": "mixtral-8x7b", "seq": 512, "capacity-factor": 1.25}
    capped = json.loads(web.handle(json.dumps({"inputs": capped_inputs})))
    assert capped["eager"] == {
        "available": False,
        "reason": "the eager walk does not follow an expert capacity (transformers' Mixtral and Qwen2-MoE drop no "
        "tokens) yet",  # shown beside the deck walk's figure: no pointer to it
    }


def test_the_loop_fields_change_the_eager_figure_beside_the_deck_walk():
    """The page's answer carries the eager walk beside the deck's: `loop`, `adamw-impl` and `loss` change that
    figure as `--walk eager` with the same flags does (the CLI's deck walk, which prints no such figure,
    refuses them)."""
    from conftest import cli_json

    cases = [({"loop": "trainer"}, ["--loop", "trainer"]),
             ({"loop": "trainer", "adamw-impl": "single"}, ["--loop", "trainer", "--adamw-impl", "single"]),
             ({"loop": "sft", "finetune": "lora"}, ["--loop", "sft", "--finetune", "lora"])]
    for fields, flags in cases:
        answer = json.loads(web.handle(json.dumps({"inputs": fields, "sweep": False})))
        assert answer["ok"], answer
        assert answer["eager"]["peak"] == cli_json(["--walk", "eager", *flags])["peak"], fields
    bare = json.loads(web.handle(json.dumps({"inputs": {}, "sweep": False})))["eager"]["peak"]
    assert bare == cli_json(["--walk", "eager"])["peak"] != cli_json(["--walk", "eager", "--loop", "trainer"])["peak"]


def test_the_plan_is_refused_where_the_cli_refuses_it():
    """Another optimizer, a fine-tuning or the eager walk: no layouts, and the reason `--plan` gives (exit 2);
    the fit list still answers, but on the eager walk (whose peaks its rows are not: it says why)."""
    for flags in (["--optimizer", "sgd"], ["--finetune", "qlora", "--optimizer", "sgd"], ["--walk", "eager"]):
        inputs = {flags[i].lstrip("-"): flags[i + 1] for i in range(0, len(flags), 2)}
        out = call(inputs=inputs, sweep=False, plan=True, fit=True)
        cli = cli_run([*flags, "--plan"])
        refused = out["plan_refused"]
        assert cli.returncode == 2 and cli.stderr.strip() == f"error: --{refused['field']}: {refused['message']}"
        eager = "--walk" in flags
        assert out["plan"] == [] and bool(out["fit"]) != eager and ("fit_refused" in out) == eager
    assert "plan_refused" not in call(sweep=False, plan=True)


def test_the_plan_refusal_names_the_field_that_leaves_the_decks_step():
    """Optimizer lion or sgd, a paged optimizer, a fine-tuning: the planner's refusal names that field (the page
    then says "Optimizer", not "Trains"), and the CLI's --plan names the same flag."""
    cases = [(["--optimizer", "lion"], {"optimizer": "lion"}, "optimizer"),
             (["--optimizer", "sgd"], {"optimizer": "sgd"}, "optimizer"),
             (["--paged-optimizer"], {"paged-optimizer": "true"}, "paged-optimizer"),
             (["--finetune", "lora", "--optimizer", "sgd"], {"finetune": "lora", "optimizer": "sgd"}, "finetune")]
    for flags, inputs, field in cases:
        refused = call(inputs=inputs, sweep=False, plan=True)["plan_refused"]
        cli = cli_run([*flags, "--plan"])
        assert refused["field"] == field and cli.stderr.startswith(f"error: --{field}: "), (flags, refused, cli.stderr)
    assert "not lion" in call(inputs={"optimizer": "lion"}, sweep=False, plan=True)["plan_refused"]["message"]


def test_a_number_typed_in_another_form_comes_back_in_calcs_own():
    """Sequence "1,000" or "1_000", micro-batch "+2", capacity "94.500" (issue 20's last pass, minor 1): the
    answer gives each in the one form calc read (the address writes that), and those inputs give the same
    answer; inputs already in that form get no such key (nor do a preset or a choice)."""
    for seq in ("1,000", "1_000"):
        typed = {"seq": seq, "micro-batch": "+2", "capacity-gb": "94.500", "recipe": "bf16"}
        got = call(inputs=typed, sweep=False, plan=True)
        assert got["canonical"] == {"seq": "1000", "micro-batch": "2", "capacity-gb": "94.5"}
        again = call(inputs={**typed, **got["canonical"]}, sweep=False, plan=True)
        assert "canonical" not in again and again == {k: v for k, v in got.items() if k != "canonical"}
    assert "canonical" not in call(inputs={"preset": "gpt2", "seq": "1000", "capacity-gb": "80", "zero": "0"})


def test_the_planner_asks_for_its_rows_alone():
    """With "numbers": false the planner's question answers its layouts and fit list, the same rows as the
    whole answer's, and the run they are for, without the step the page drew already (issue 21)."""
    for inputs in ({"preset": "llama-2-70b", "global-batch": "512"}, {"preset": "gpt2", "finetune": "lora"}):
        ask = {"inputs": inputs, "sweep": False, "plan": True, "fit": True}
        whole = json.loads(web.handle(json.dumps(ask)))
        rows = json.loads(web.handle(json.dumps({**ask, "numbers": False})))
        assert "step" not in rows and "table" not in rows
        assert rows["config"] == {"shape": whole["step"]["config"]["shape"], "seq": whole["step"]["config"]["seq"]}
        for key in ("plan", "plan_refused", "fit", "capacity", "global_batch"):
            assert rows.get(key) == whole.get(key), key
    assert "plan_refused" in rows  # LoRA: --plan refuses it, the fit list answers
    bad = json.loads(web.handle(json.dumps({"inputs": {"seq": "0"}, "plan": True, "numbers": False})))
    assert bad["ok"] is False and bad["field"] == "seq"


def test_sequence_parallel_over_one_rank_is_the_planners_not_the_steps():
    """The switch at one tensor-parallel rank splits nothing in the step, which names it, as the CLI does; the
    planner's own question reads it (as --plan does): its layouts with tp 2 or more run it, and off they do not."""
    inputs = {"preset": "llama-7b", "sequence-parallel": "true"}
    step = json.loads(web.handle(json.dumps({"inputs": inputs})))
    assert step["ok"] is False and step["field"] == "sequence-parallel" and step["plans"] is True  # still plans
    bad = json.loads(web.handle(json.dumps({"inputs": {**inputs, "seq": "0"}})))
    assert bad["field"] == "seq" and "plans" not in bad  # the planner's question refuses it too
    assert cli_run(["--preset", "llama-7b", "--sequence-parallel"]).returncode == 2
    ask = {"sweep": False, "plan": True, "fit": True, "numbers": False}
    on = json.loads(web.handle(json.dumps({"inputs": inputs, **ask})))
    off = json.loads(web.handle(json.dumps({"inputs": {**inputs, "sequence-parallel": "false"}, **ask})))
    split = [r for r in on["plan"] if r["tp"] > 1]
    assert split and all(r["sequence_parallel"] for r in split)
    assert not any(r["sequence_parallel"] for r in off["plan"])


def test_the_planners_answer_in_slices_is_handles_byte_for_byte():
    """The page's worker runs the planner a slice at a time (web.Sliced, issue 21) and answers a reader's change
    between slices: the answer is handle's, byte for byte, and a plan takes many slices (each one layout or one
    fine-tuning), while any other question is answered in its first."""
    plan_ask = {"sweep": False, "plan": True, "fit": True, "numbers": False}
    asks = [{"inputs": {"preset": preset, "global-batch": "512"}, **plan_ask}
            for preset in ("llama-2-70b", "mixtral-8x7b", "gpt2")]
    asks += [{"inputs": {"finetune": "lora"}, **plan_ask}, {"inputs": {"seq": "0"}, **plan_ask}, {"inputs": {}},
             {"inputs": {}, "sweep": True, "numbers": False}, "not json"]
    for ask in asks:
        request = ask if isinstance(ask, str) else json.dumps(ask)
        sliced, answer, slices = web.Sliced(request), None, 0
        while answer is None:
            answer, slices = sliced.step(0), slices + 1  # one slice a call
        assert answer == web.handle(request)
        assert (slices > 10) == (ask in asks[:4]), (ask, slices)


def test_a_deep_eager_walk_is_refused_on_the_page_naming_the_layers():
    """The eager walk's event list grows with the layers (some 70 kB of JSON a layer): past PAGE_EAGER_LAYERS the
    page's answer would not fit the browser, so the page refuses it on Layers (the CLI still answers), while
    the deck walk of the same model answers."""
    deep = str(web.PAGE_EAGER_LAYERS + 1)
    refused = json.loads(web.handle(json.dumps({"inputs": {"layers": deep, "walk": "eager"}, "sweep": False})))
    assert refused["ok"] is False and refused["field"] == "layers" and "--walk eager" in refused["message"]
    # the walk is a field on the page: the message names its choice (format.js puts the label for --walk)
    assert "use the deck walk here" not in refused["message"]
    assert "choose the deck's accounting under --walk" in refused["message"]
    assert json.loads(web.handle(json.dumps({"inputs": {"layers": deep}, "sweep": False})))["ok"] is True
    at_most = {"layers": str(web.PAGE_EAGER_LAYERS), "hidden": "256", "heads": "4", "kv-heads": "4", "ffn": "512",
               "walk": "eager"}  # fmt: skip
    assert json.loads(web.handle(json.dumps({"inputs": at_most, "sweep": False})))["ok"] is True


def test_a_measured_band_speaks_for_the_setting_its_steps_ran():
    """The page quotes a band beside the eager figure only where the measured steps ran its recipe, optimizer,
    loop and loss: the setting calc.web gives a step typed as a measured row's command is the one hooks/deck.py
    reads from that command."""
    from hooks import deck

    data = ROOT / "docs" / "data"
    commands = []
    for name in ("transformers", "lora"):  # the rows typed with shape flags (a config.json is a file there)
        typed = [r["command"] for r in json.loads((data / f"{name}.json").read_text())["runs"]
                 if "--hf-config" not in r["command"]]  # fmt: skip
        commands += [typed[0], typed[-1]]
    for command in commands:
        flags = command.split()[3:]
        nexts = [*flags[1:], ""]
        inputs = {f[2:]: v for f, v in zip(flags, nexts, strict=True) if f.startswith("--") and not v.startswith("--")}
        inputs.pop("walk")
        eager = json.loads(web.handle(json.dumps({"inputs": inputs, "sweep": False})))["eager"]
        assert eager["setting"] == deck.setting_of(command), command
        assert deck.band_for(deck.eager_bands(), eager["band"], eager["setting"]), command


def test_every_loop_measured_speaks_for_the_step_the_page_shows_with_its_flags():
    """Issue 33: a Trainer or SFTTrainer step of results §13.2 typed on the page (its config.json pasted, its
    flags as fields) is quoted beside the eager figure with §13.2's band, not called unmeasured: the band hooks/
    deck.py files it under is the one calc.web gives the step (its kind and its setting), and its figures
    span that setting's rows."""
    from hooks import deck

    bands = deck.eager_bands()
    runs = json.loads((ROOT / "docs" / "data" / "loops.json").read_text())["runs"]
    seen = set()
    for r in runs:
        flags = r["eager"]["command"].split()[3:]
        inputs = {f[2:]: v for f, v in zip(flags, [*flags[1:], ""], strict=True) if f.startswith("--")}
        inputs.pop("walk")
        m = r["model"]  # scripts/training/hf_models.py's Model: the file the command names, pasted on the page
        assert m["model_type"] != "gpt2" and not m["extra"]
        inputs["hf-config"] = json.dumps({
            "model_type": m["model_type"], "num_hidden_layers": m["layers"], "hidden_size": m["hidden"],
            "num_attention_heads": m["heads"], "num_key_value_heads": m["kv_heads"], "intermediate_size": m["ffn"],
            "vocab_size": m["vocab"], "max_position_embeddings": 1024, "tie_word_embeddings": False})  # fmt: skip
        eager = json.loads(web.handle(json.dumps({"inputs": inputs, "sweep": False})))["eager"]
        band = deck.band_for(bands, eager["band"], eager["setting"])
        assert band is not None and band["section"] == "13.2", r["eager"]["command"]
        assert band["low"] <= r["eager"]["peak"] / r["measured_peak"] <= band["high"]
        seen.add(eager["setting"].split()[2])
    assert seen == {"trainer", "sft"}


def test_the_fit_list_of_a_mixture_of_experts_is_refused_as_the_cli_refuses_it(capsys):
    """The page's fit list for Mixtral: no rows and the CLI's --fit-card reason (M3), not an empty list."""
    got = call(inputs={"preset": "mixtral-8x7b"}, sweep=False, numbers=False, fit=True)
    assert got["fit"] == [] and got["fit_refused"]["field"] == "fit-card"
    assert main(["--preset", "mixtral-8x7b", "--fit-card"]) == 2
    assert capsys.readouterr().err == f"error: --fit-card: {got['fit_refused']['message']}\n"
    dense = call(inputs={"preset": "mistral-7b", "seq": "512"}, sweep=False, numbers=False, fit=True)
    assert "fit_refused" not in dense


def test_the_fit_list_on_the_eager_walk_is_refused_as_the_planner_is():
    """Its rows are the deck walk's peaks: on a link's walk=eager (or a loop's) a Load would show another peak
    than its row's, so the list says why it is empty, naming the walk, as the planner does."""
    for inputs in ({"preset": "llama-3.1-8b", "seq": "2048", "walk": "eager"},
                   {"preset": "llama-3.1-8b", "seq": "2048", "walk": "eager", "loop": "sft"}):  # fmt: skip
        got = call(inputs=inputs, sweep=False, numbers=False, fit=True, plan=True)
        assert got["fit"] == [] and got["fit_refused"]["field"] == "walk" == got["plan_refused"]["field"]
        assert "deck walk" in got["fit_refused"]["message"]
    deck = call(inputs={"preset": "llama-3.1-8b", "seq": "2048", "loop": "sft"}, sweep=False, numbers=False, fit=True)
    assert "fit_refused" not in deck and deck["fit"]


# Steps the page shows no eager figure beside (selective recomputation, a paged optimizer, tensor parallelism)
# and the loop's fields at a value other than their default (issue 20, a fresh reviewer's major).
PAGED = {"finetune": "lora", "optimizer": "adamw-8bit", "paged-optimizer": "true"}
NO_EAGER_STEPS = ({"recompute": "selective"}, PAGED, {"tp": "2"})
LOOP_VALUES = ({"loop": "trainer"}, {"loop": "sft"}, {"adamw-impl": "fused"}, {"loss": "torchtune-chunked"},
               {"device": "cpu"}, {"activation": "gelu"})  # fmt: skip


def _flags(fields: dict) -> list[str]:
    """The CLI's flags for page fields (a switch "true" as --name)."""
    return [x for k, v in fields.items() for x in ((f"--{k}",) if v == "true" else (f"--{k}", v))]


def test_the_page_and_the_cli_agree_on_the_loop_fields_beside_the_deck(capsys):
    """A loop field (loop, adamw-impl, loss, device, a field only the eager walk reads) other than its default,
    on a step with no eager figure beside the deck's: calc.web refuses it naming the field, as the CLI does,
    with the CLI's message; the same field's default (which the page always sends) is no refusal. On steps
    with an eager figure both answer the same step and the same figure."""
    for step_fields in NO_EAGER_STEPS:
        for loop_fields in LOOP_VALUES:
            out = call(inputs={**step_fields, **loop_fields}, sweep=False)
            assert main(_flags({**step_fields, **loop_fields})) == 2
            err = capsys.readouterr().err.strip()
            assert not out["ok"], (step_fields, loop_fields)
            assert err == f"error: --{out['field']}: {out['message']}"
            assert out["field"] in loop_fields
        sent = call(inputs={**step_fields, "loop": "bare", "device": "cuda", "adamw-impl": ""}, sweep=False)
        assert sent["ok"] and sent["eager"]["available"] is False, step_fields
    for loop_fields in LOOP_VALUES:
        out = call(inputs={**loop_fields, "finetune": "lora"}, sweep=False)
        assert main([*_flags({**loop_fields, "finetune": "lora"}), "--json"]) == 0
        cli = json.loads(capsys.readouterr().out)
        assert out["ok"] and out["step"]["peak"] == cli["peak"]
        assert out["eager"]["peak"] == cli["eager"]["peak"] and out["eager"]["how"] == cli["eager"]["how"]


def test_inputs_read_once_are_the_inputs_read_again():
    """The page's sweep request repeats its numbers' inputs, which calc.web reads once (web.accepted): each
    answer is the one a fresh worker gives, whatever came before it, a refusal included."""
    asks = [
        {"inputs": {"seq": "2048"}, "sweep": False},
        {"inputs": {"seq": "2048"}, "numbers": False, "sweep": True},
        {"inputs": {"seq": "0"}, "numbers": False, "sweep": True},
        {"inputs": {"seq": "2048", "loop": "trainer", "recompute": "selective"}, "sweep": False},
        {"inputs": {"seq": "2048"}, "numbers": False, "sweep": True},
        {"inputs": {"seq": "2,048"}, "sweep": False},
    ]
    answers = [web.handle(json.dumps(a)) for a in asks]
    fresh = []
    for a in asks:
        web._accepted.cache_clear()
        fresh.append(web.handle(json.dumps(a)))
    assert answers == fresh
    assert [json.loads(a)["ok"] for a in answers] == [True, True, False, False, True, True]


def test_every_engine_measured_speaks_for_its_ranks_on_the_page():
    """Issue 31 and 33: an eager step over several processes typed on the page (results §14's commands, their
    config.json pasted) shows its busiest rank beside the deck's figures, as the step itself (no second walk),
    with the band of the engine's measured ranks, where it said the figure is one device's and showed none; the
    deck walk of the same layout on the CPU shows the same engine's busiest rank beside its accounting."""
    from hooks import deck

    bands = deck.eager_bands()
    runs = json.loads((ROOT / "docs" / "data" / "engines.json").read_text())["runs"]
    for r in runs:
        flags = r["eager"]["command"].split()[3:]
        inputs = {f[2:]: "true" if v.startswith("--") or not v else v  # a switch (--sequence-parallel)
                  for f, v in zip(flags, [*flags[1:], ""], strict=True) if f.startswith("--")}  # fmt: skip
        inputs.update({"hf-config": json.dumps(r["model"])})  # the file the command names, pasted
        got = json.loads(web.handle(json.dumps({"inputs": inputs, "sweep": False})))
        eager = got["eager"]
        assert eager["available"] and eager["band"] == r["engine"], r["eager"]["command"]
        assert eager["peak"] == got["step"]["peak"] == max(r["eager"]["rank_peaks"])
        band = deck.band_for(bands, eager["band"], eager["setting"])
        assert band["section"] == "14" and band["models"] == sorted({x["family"] for x in runs
                                                                     if x["engine"] == r["engine"]})  # fmt: skip
        assert all(band["low"] <= rank["predicted_peak"] / rank["measured_peak"] <= band["high"]
                   for rank in r["ranks"])  # fmt: skip
    eager_only = ("engine", "device", "pp-schedule", "tp-plan")
    deck_walk = {k: v for k, v in inputs.items() if k not in eager_only} | {"walk": "deck"}
    said = json.loads(web.handle(json.dumps({"inputs": deck_walk, "sweep": False})))
    assert not said["eager"]["available"] and "on the CPU with gloo only" in said["eager"]["reason"]  # on CUDA
    said = json.loads(web.handle(json.dumps({"inputs": {**deck_walk, "device": "cpu"}, "sweep": False})))
    walked = json.loads(web.handle(json.dumps({"inputs": {**deck_walk, "device": "cpu", "walk": "eager"},
                                               "sweep": False})))  # fmt: skip
    assert said["eager"]["peak"] == walked["step"]["peak"] == max(walked["step"]["rank_peaks"])  # the layout's


@pytest.mark.parametrize("zero", ["1", "2", "3"])
def test_a_zero_stage_over_one_worker_is_refused_naming_the_field_in_the_cli_and_the_page(zero, capsys):
    """Issue 33's minor: ?zero=3 with one data-parallel worker was accepted and raised the peak by gathering
    from nobody. The CLI and the page refuse it on ZeRO, each in one line; with --dp 2 both answer, and --plan,
    which chooses the stage itself, still says so."""
    assert main(["--zero", zero]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: --zero: ZeRO {zero} shards the step's state over the --dp")
    page = json.loads(web.handle(json.dumps({"inputs": {"zero": zero}, "sweep": False})))
    assert (page["ok"], page["field"]) == (False, "zero") and page["message"] in err
    assert main(["--zero", zero, "--dp", "2"]) == 0
    assert json.loads(web.handle(json.dumps({"inputs": {"zero": zero, "dp": "2"}, "sweep": False})))["ok"] is True
    assert main(["--zero", zero, "--plan"]) == 2 and "--plan chooses it itself" in capsys.readouterr().err


def test_an_engine_step_of_a_fine_tuning_no_engine_run_measured_quotes_no_band(capsys):
    """A review's find: freezing layers over DDP (answered by the eager walk) was quoted with §14's band of
    full training; its band is its own (ddp-freeze), which no measured step speaks for, while FSDP2's LoRA
    keeps the band of its measured ranks."""
    from hooks import deck

    bands = deck.eager_bands()
    base = {"preset": "llama-3.2-1b", "seq": "512", "recipe": "autocast", "device": "cpu", "walk": "eager"}
    asked = {**base, "dp": "2", "finetune": "freeze", "freeze-layers": "2"}
    frozen = json.loads(web.handle(json.dumps({"inputs": asked, "sweep": False})))["eager"]
    assert frozen["band"] == "ddp-freeze" and deck.band_for(bands, frozen["band"], frozen["setting"]) is None
    lora = json.loads(web.handle(json.dumps({"inputs": {**base, "dp": "2", "zero": "3", "engine": "fsdp2",
                                                        "finetune": "lora"}, "sweep": False})))["eager"]  # fmt: skip
    assert lora["band"] == "fsdp2-lora" and deck.band_for(bands, lora["band"], lora["setting"])["section"] == "14"


def test_a_trained_embedding_refused_by_both_walks_says_no_walk_answers_it(capsys):
    """A refusal names a walk that answers the same flags, or says none does (issue 34): the deck walk sends
    --no-freeze-embedding to the eager walk, except where the eager walk refuses the step too (a paged
    optimizer), where it says so."""
    flags = ["--finetune", "freeze", "--freeze-layers", "2", "--no-freeze-embedding"]
    assert main(flags) == 2 and capsys.readouterr().err.rstrip().endswith(": --walk eager")
    assert main([*flags, "--walk", "eager", "--device", "cpu"]) != 2
    capsys.readouterr()
    assert main([*flags, "--paged-optimizer"]) == 2
    said = capsys.readouterr().err
    assert "the eager walk refuses --paged-optimizer here: no walk answers this step" in said
    assert main([*flags, "--paged-optimizer", "--walk", "eager"]) == 2
    assert capsys.readouterr().err.startswith("error: --paged-optimizer:")
