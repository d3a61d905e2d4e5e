"""The eager walk's fine-tuning (peft's LoRA, frozen layers) against transformers' own models, measured on the
CPU, and its properties: frozen parameters get no gradient, and the walk trains what the deck's count trains.

Each measured model is built from a config with random weights (no download), fine-tuned for two steps as
scripts/training/measure_lora.py does it, and the peak of the second step's tensors (its allocator peak less the
matrix library's workspace: conftest.assert_predicts_tensors) compared with the CLI's prediction from the flags a
user would type. Small shapes; a few seconds each."""

import json
import re
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import calc
from calc import eager_step, finetune
from calc.finetune import Tuning
from calc.inputs import eager_lacks, family_problem
from conftest import PARTS, assert_cli_predicts, part_of
from strategies import micro_batches, recipes, shapes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "training"))

BOUND = 0.03  # the bound: within 3% of the measured peak
ALL = ("q", "k", "v", "o", "gate", "up", "down")

CASES = [
    # (model, seq, micro-batch, tuning, precision, attention, checkpointing)
    (("llama", 3, 64, 4, 4, 176, 256), 128, 2, ("lora", 8, 16, ("q", "v")), "fp32-full", "sdpa", "none"),
    (("llama", 3, 64, 4, 2, 176, 256), 128, 2, ("lora", 16, 32, ALL), "fp32-full", "eager", "full"),
    (("qwen2", 3, 64, 4, 2, 176, 256), 128, 2, ("lora", 8, 16, ("q", "k", "v", "o")), "autocast", "sdpa", "none"),
    (("mistral", 3, 64, 4, 1, 176, 256), 96, 2, ("lora", 4, 8, ("q", "v")), "autocast", "eager", "full"),
    (("llama", 3, 64, 4, 4, 176, 256), 128, 2, ("freeze", 8, 16, ("q", "v"), 1), "autocast", "sdpa", "full"),
]


def _id(case) -> str:
    m, _, _, tune, *run = case
    return f"{m[0]}-kv{m[4]}-{tune[0]}-{'-'.join(run)}"


@pytest.mark.torch
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_eager_walk_predicts_peft_step(case):
    """The CLI's --walk eager --finetune peak is within 3% of the measured step's tensors of the fine-tuned model."""
    pytest.importorskip("peft")
    import hf_models
    import measure_lora

    model, seq, b, tune, precision, attention, checkpointing = case
    m = hf_models.Model(*model)
    tune = measure_lora.Tune(*tune)
    got = measure_lora.measure_cpu(m, precision, attention, checkpointing, seq, b, tune)
    assert_cli_predicts(measure_lora.cli_args(m, seq, b, precision, attention, checkpointing, tune), got, BOUND)


# (family of measure_families.FAMILIES, tuning, precision, attention, checkpointing): none is recorded as such
FAMILY_CASES = [
    ("gemma3_text", ("lora", 4, 8, ("q", "k", "v", "o")), "autocast", "sdpa", "full"),
    ("gemma", ("freeze", 8, 16, ("q", "v"), 1), "fp32-full", "eager", "full"),  # the scaled embedding, the leaf
    ("olmo3", ("lora", 8, 16, ("v", "down")), "autocast", "eager", "none"),
    ("granite", ("lora", 2, 4, ALL), "fp32-full", "sdpa", "full"),
    ("phi3", ("lora", 4, 8, ("gate", "up", "down")), "autocast", "eager", "full"),  # one adapter on gate_up_proj
    # issue 34: LoRA on a mixture of experts' attention, its experts frozen (grouped_mm then saves no input)
    ("qwen3_moe", ("lora", 8, 16, ("q", "k", "v", "o")), "autocast", "sdpa", "none"),
    ("gpt_oss", ("lora", 4, 8, ("q", "v")), "fp32-full", "eager", "none"),
    # and on the experts' fused weights (peft's target_parameters): each merged weight made, kept and differentiated
    ("mixtral", ("lora", 4, 8, ("q", "v", "gate", "up", "down")), "autocast", "sdpa", "full"),
    # peft's all-linear as peft converts it: the router's weight too, the experts' gate_up_proj at twice the rank
    ("qwen3_moe", ("lora", 4, 8, ("all-linear",)), "fp32-full", "eager", "none"),
    # Llama 4's attention, its experts' bmm frozen (it then saves no input), the shared expert and router too
    ("llama4_text", ("lora", 4, 8, ("q", "k", "v", "o")), "autocast", "sdpa", "full"),
]
TENTH = 0.001  # the families' band on the step's tensors


@pytest.mark.torch
@pytest.mark.parametrize("case", FAMILY_CASES, ids=lambda c: f"{c[0]}-{c[1][0]}-{'-'.join(c[2:])}")
def test_eager_walk_predicts_peft_step_on_other_families(case):
    """A family's tiny model (its own features: Gemma 3's sliding layers, OLMo 3's window, Granite's
    multipliers, Phi-3's fused gate_up_proj), fine-tuned as a user does it and predicted from its config.json
    (`--hf-config`), within 0.1% of the step's tensors."""
    pytest.importorskip("peft")
    import measure_families
    import measure_lora

    name, tune, precision, attention, checkpointing = case
    m, tune = {**measure_families.FAMILIES, "mixtral": measure_lora.MIXTRAL}[name], measure_lora.Tune(*tune)
    got = measure_lora.measure_cpu(m, precision, attention, checkpointing, 96, 2, tune)
    assert_cli_predicts(measure_lora.cli_args(m, 96, 2, precision, attention, checkpointing, tune), got, TENTH)


@st.composite
def tunings(draw, shape: calc.Shape) -> Tuning:
    mode = draw(st.sampled_from(["lora", "qlora", "freeze"]))
    if mode == "freeze":  # the embedding trained (eager walk only) or not, the head frozen (--freeze-head) or not
        return Tuning("freeze", freeze_layers=draw(st.integers(0, shape.layers)), freeze_embedding=draw(st.booleans()),
                      freeze_head=draw(st.booleans()))
    names = list(finetune.linears(shape))
    targets = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    return Tuning(mode, rank=draw(st.integers(1, 64)), targets=tuple(t for t in finetune.TARGETS if t in targets))


@settings(max_examples=60, deadline=None)
@given(shapes(), st.integers(1, 512), micro_batches, recipes, st.sampled_from(["none", "full"]),
       st.sampled_from(["eager", "sdpa"]), st.sampled_from(["cpu", "cuda"]), st.data())  # fmt: skip
def test_frozen_parameters_get_no_gradient(shape, seq, b, recipe, recompute, attention, device, data):
    """In the eager walk a frozen parameter has no gradient event, and the parameters it writes gradients for
    are the deck's trainable parameters."""
    shape = shape.replace(family="llama", layers=min(shape.layers, 6), hidden=min(shape.hidden, 512), vocab=1000)
    assume(family_problem(shape) is None and eager_lacks(shape) is None)
    tune = data.draw(tunings(shape))
    assume(finetune.check(shape, tune) is None)
    s = calc.step(shape, seq, b, recipe, recompute, walk="eager", attention=attention, device=device, tune=tune)
    assert s["trainable_params"] == finetune.trainable_params(shape, tune)
    trains = eager_step.trainable(tune)
    for e in s["events"]:
        if e["category"] != "gradients" or not e["label"].startswith("gradient of "):
            continue
        name = e["label"].removeprefix("gradient of ")
        found = re.match(r"layer (\d+) ", name)
        assert trains(int(found.group(1)) if found else 0, name), e["label"]


def test_full_finetune_leaves_the_eager_walk_as_it_was():
    """--finetune full (the default) walks exactly the step the eager walk always walked."""
    shape = calc.PRESETS["llama-7b"]
    plain = calc.step(shape, 512, 1, "autocast", "full", walk="eager", device="cpu")
    full = calc.step(shape, 512, 1, "autocast", "full", walk="eager", device="cpu", tune=Tuning("full"))
    assert plain["events"] == full["events"] and plain["trainable_params"] == calc.param_counts(shape)["total"]


def recorded_args(row: dict, folder: Path) -> list[str]:
    """A recorded row's command as flags; where it reads a config.json (`--hf-config NAME.json`), the row's
    recorded "config" written to `folder` under that name (measure_lora.recorded_args, without torch)."""
    args = row["command"].split()[3:]
    if "config" in row:
        i = args.index("--hf-config") + 1
        (folder / args[i]).write_text(json.dumps(row["config"]))
        args[i] = str(folder / args[i])
    return args


def setting(row: dict) -> tuple:
    """What a recorded row measured, but for its dtypes, attention and device: its model, its fine-tuning and
    whether it checkpoints (the core checks the first row of each; every row: `slow`)."""
    return row["model_type"], str(row.get("tune")), row["checkpointing"]


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("data", ["transformers.json", "lora.json"])
def test_recorded_commands_still_predict_their_peaks(data, part, capsys, tmp_path):
    """Every measured row's command, run again, predicts the bytes recorded beside it (docs/data/*.json)."""
    from calc.cli import main

    path = ROOT / "docs" / "data" / data
    if not path.exists():
        pytest.skip(f"{data} not measured yet")
    for row in part_of(json.loads(path.read_text())["runs"], part, setting):
        assert main([*recorded_args(row, tmp_path), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["peak"] == row["predicted_peak"], row["command"]


BAND = (0.999, 1.001)  # predicted / the step's tensors, on every recorded LoRA and frozen-layers row


def test_every_family_s_recorded_fine_tuning_is_within_a_tenth_of_a_percent():
    """Every fine-tuning step measured on the CPU (docs/data/lora.json: peft's LoRA and frozen layers on each
    family the eager walk fine-tunes, fp32 and autocast, eager and sdpa, checkpointing off and on) is predicted
    within 0.1% of its tensors (the peak less the matrix library's workspace), and trains the parameters peft
    trains; every family that fine-tunes has rows. Their commands predict the same today:
    test_recorded_commands_still_predict_their_peaks."""
    from calc.families import FAMILIES, MODEL_TYPES

    rows = json.loads((ROOT / "docs" / "data" / "lora.json").read_text())["runs"]
    for r in rows:
        assert BAND[0] <= r["predicted_peak"] / r["measured_peak_tensors"] <= BAND[1], r["command"]
        assert r["trainable_params"] == r["measured_trainable"], r["command"]
        assert 0 <= r["measured_peak"] - r["measured_peak_tensors"] <= r["workspace_peak"], r["command"]
    measured = {MODEL_TYPES[r["model_type"]].family for r in rows}
    assert measured == {name for name, fam in FAMILIES.items() if fam.finetune or fam.expert_lora}
    with_experts = {r["model_type"] for r in rows if "num_experts" in str(r.get("config")) or r["model_type"] in
                    ("mixtral", "qwen2_moe")}  # fmt: skip
    assert with_experts == {"qwen3_moe", "mixtral", "qwen2_moe", "gpt_oss", "llama4_text"}  # Family.expert_lora


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("mode", ["lora", "qlora", "freeze"])
def test_a_fine_tuning_step_ends_where_it_started(device, mode):
    """With checkpointing, what the step holds until it returns (a frozen embedding's output made a leaf,
    and its gradient) is freed in the allocator's blocks too: the step ends holding exactly its start."""
    shape = calc.PRESETS["llama-7b"].replace(layers=2, hidden=100, heads=4, kv_heads=4, ffn=70, vocab=33)
    tune = finetune.Tuning(mode=mode, rank=3, freeze_layers=1 if mode == "freeze" else 0)
    s = calc.step(shape, 7, 1, "fp32-full", "full", walk="eager", device=device, tune=tune)
    start = [e for e in s["events"] if e["phase"] == "start"][-1]
    assert s["events"][-1]["totals"] == start["totals"]


def test_a_trained_embedding_under_frozen_blocks_is_measured_and_refused_where_it_is_not_walked(capsys, tmp_path):
    """Issue 34: freezing the first blocks but not the embedding (--no-freeze-embedding) trains it, and a head
    tied to it, backward reaching it through the frozen blocks. Every such measured step (lora.json: Llama
    untied, Gemma and SmolLM3 tied) is predicted by the eager walk within 0.01%, where the flags a user could
    type before (the embedding frozen) gave at most 0.96 of it; the deck walk, whose frozen blocks keep nothing,
    refuses it naming the field."""
    from calc.cli import main

    rows = [r for r in json.loads((ROOT / "docs" / "data" / "lora.json").read_text())["runs"]
            if r["tune"].endswith("embedding trained")]  # fmt: skip
    assert {r["model_type"] for r in rows} == {"llama", "gemma", "smollm3"} and len(rows) == 24
    for r in rows:
        assert 0.9999 <= r["predicted_peak"] / r["measured_peak"] <= 1.0001, r["command"]
        assert "--no-freeze-embedding" in r["command"].split()
        frozen = [a for a in recorded_args(r, tmp_path) if a != "--no-freeze-embedding"]
        assert main([*frozen, "--json"]) == 0
        before = json.loads(capsys.readouterr().out)
        assert before["peak"] / r["measured_peak"] < 0.96 and before["trainable_params"] < r["measured_trainable"]
    assert main(["--finetune", "freeze", "--freeze-layers", "2", "--no-freeze-embedding"]) == 2
    assert capsys.readouterr().err.startswith("error: --freeze-embedding: trains the embedding below frozen blocks")
    page = json.loads(calc.web.handle(json.dumps({"inputs": {"finetune": "freeze", "freeze-layers": "2",
                                                              "freeze-embedding": "false"}, "sweep": False})))
    assert (page["ok"], page["field"]) == (False, "freeze-embedding")  # the page's deck walk, inline


def test_a_frozen_head_is_measured_walked_alike_in_both_walks_and_refused_where_it_is_the_trained_embedding(
        capsys, tmp_path):  # fmt: skip
    """Issue 32: --freeze-head freezes the final norm and an untied head with the first blocks (LLaMA-Factory's
    freeze). Its measured steps (lora.json: Llama and Qwen3) are predicted within 0.01%, each trainable count
    peft's; without the switch the prediction trains the head (more parameters, a higher peak). Both walks
    count the same trainable parameters; a head tied to an embedding that trains trains with it, the final norm
    frozen alone."""
    from calc.cli import main

    rows = [r for r in json.loads((ROOT / "docs" / "data" / "lora.json").read_text())["runs"]
            if r["tune"].endswith("head and final norm frozen")]  # fmt: skip
    assert {r["model_type"] for r in rows} == {"llama", "qwen3"} and len(rows) == 16
    for r in rows:
        assert 0.9999 <= r["predicted_peak"] / r["measured_peak"] <= 1.0001, r["command"]
        assert r["trainable_params"] == r["measured_trainable"]
        trained = [a for a in recorded_args(r, tmp_path) if a != "--freeze-head"]
        assert main([*trained, "--json"]) == 0
        before = json.loads(capsys.readouterr().out)
        assert before["trainable_params"] > r["measured_trainable"] and before["peak"] > r["measured_peak"]
    flags = ["--preset", "llama-7b", "--seq", "256", "--finetune", "freeze", "--freeze-layers", "30"]
    counts = set()
    for walk in ("deck", "eager"):
        for head in ([], ["--freeze-head"]):
            assert main([*flags, "--walk", walk, *head, "--json"]) == 0
            counts.add((bool(head), json.loads(capsys.readouterr().out)["trainable_params"]))
    shape = calc.PRESETS["llama-7b"]
    assert counts == {(False, 2 * calc.param_counts(shape)["per_layer"] + shape.hidden * (shape.vocab + 1)),
                      (True, 2 * calc.param_counts(shape)["per_layer"])}  # fmt: skip
    tied = ["--preset", "llama-3.2-1b", *flags[2:-1], "14", "--walk", "eager", "--no-freeze-embedding", "--json"]
    trained = {}
    for head in ([], ["--freeze-head"]):  # a tied head trains with the embedding: the final norm is frozen alone
        assert main([*tied, *head]) == 0
        trained[bool(head)] = json.loads(capsys.readouterr().out)["trainable_params"]
    assert trained[False] - trained[True] == calc.PRESETS["llama-3.2-1b"].hidden


def test_lora_on_a_mixture_of_experts_is_walked_eagerly_and_refused_elsewhere_naming_the_field(capsys):
    """Issue 34: peft's LoRA on a mixture of experts (Qwen3-MoE, Mixtral, Qwen2-MoE, GPT-OSS) is replayed by the
    eager walk: on the attention's linears, and on the experts' fused weights through peft's target_parameters
    (gate,up: gate_up_proj; down: down_proj; A (r E) x d_in and B d_out x (r E) each), the router frozen
    (lora.json: every such step within 0.1%). The deck walk refuses it naming the eager walk, which answers;
    all-linear as peft converts it (the router and the experts too, gate_up_proj at twice the rank; GPT-OSS's
    attention alone) is replayed too; gate apart from up, the experts of a model with a shared expert,
    QLoRA on one (Qwen2-MoE: QLoRA is walked on Qwen3-MoE, Mixtral and GPT-OSS), another optimizer and DeepSeek-V3's
    attention are refused naming the field."""
    from calc.cli import main

    base = ["--preset", "qwen3-30b-a3b", "--seq", "512", "--finetune", "lora"]
    shape = calc.PRESETS["qwen3-30b-a3b"]
    # A (8 x its input) and B (its output x 8) on q, k, v and o
    attention = shape.layers * 8 * (4 * shape.hidden + 2 * shape.q_width + 2 * shape.kv_width)
    experts = shape.layers * 8 * shape.experts * ((shape.hidden + 2 * shape.expert_width) +  # gate_up_proj
                                                  (shape.expert_width + shape.hidden))  # down_proj  # fmt: skip
    for targets, trained in (("q,k,v,o", attention), ("q,k,v,o,gate,up,down", attention + experts)):
        assert main([*base, "--walk", "eager", "--lora-targets", targets, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["trainable_params"] == trained, targets
        grads = [e for e in out["events"] if e["category"] == "gradients" and e["label"].startswith("gradient of ")]
        assert grads and all(".lora_" in e["label"] for e in grads)  # the experts and the router get none
        merged = [e for e in out["events"] if e["label"].endswith("_proj + LoRA")]
        assert bool(merged) == ("gate" in targets)  # W + B A of each expert, made in every layer's forward

    def refused(*flags: str) -> str:
        assert main([*flags, "--json"]) == 2
        return capsys.readouterr().err.strip()

    # peft's all-linear as peft 0.21 converts it on Qwen3-MoE: the router's weight at r, gate_up_proj at 2 r
    router = shape.layers * 8 * (shape.hidden + shape.experts)
    gate_up = shape.layers * 8 * shape.experts * (shape.hidden + 2 * shape.expert_width)
    assert main([*base, "--walk", "eager", "--lora-targets", "all-linear", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trainable_params"] == attention + experts + gate_up + router
    made = [e["bytes"] for e in out["events"] if "router's W + delta" in e["label"] and e["bytes"] > 0
            and e["phase"] == "forward"]
    assert len(made) == 2 * shape.layers and set(made) == {2 * shape.experts * shape.hidden}  # bf16 weights
    assert refused(*base) == "error: --finetune: the deck walk does not fine-tune a mixture of experts: --walk eager " \
                             "replays this LoRA"
    err = refused(*base, "--walk", "eager", "--lora-targets", "q,gate")
    assert err.endswith("name gate and up together"), err
    qwen2_moe = ["--hf-config", str(ROOT / "tests" / "hf_configs" / "qwen1.5-moe-a2.7b.json"), *base[2:], "--walk",
                 "eager"]  # fmt: skip
    assert "shared expert" in refused(*qwen2_moe, "--lora-targets", "down")
    said = refused(*qwen2_moe, "--lora-targets", "all-linear")  # its shared expert's linears: a fix that answers
    assert "shared expert" in said and said.endswith("name the attention's q, k, v and o"), said
    said = refused("--preset", "deepseek-v3", *base[2:], "--walk", "eager", "--lora-targets", "all-linear")
    assert said.startswith("error: --finetune: a mixture of experts is fine-tuned by the eager walk only"), said
    assert main([*base, "--walk", "eager", "--lora-targets", "all-linear"]) == 0  # the summary says what peft adapts
    assert "(peft's all-linear: the router too, the experts' gate_up_proj at twice the rank)" in capsys.readouterr().out
    gpt_oss = ["--preset", "gpt-oss-20b", *base[2:], "--walk", "eager", "--attention", "eager", "--json"]
    said = {}
    for targets in ("all-linear", "q,k,v,o"):  # GPT-OSS's all-linear: its attention alone (peft converts nothing)
        assert main([*gpt_oss, "--lora-targets", targets]) == 0
        said[targets] = json.loads(capsys.readouterr().out)
    assert said["all-linear"]["peak"] == said["q,k,v,o"]["peak"]
    assert said["all-linear"]["trainable_params"] == said["q,k,v,o"]["trainable_params"] > 0
    assert main([*qwen2_moe, "--lora-targets", "q,k,v,o", "--json"]) == 0
    capsys.readouterr()
    assert main([*base[:-1], "qlora", "--walk", "eager", "--json"]) == 0  # qlora.json's moe_runs: within 0.1%
    capsys.readouterr()
    said = refused(*qwen2_moe[:-4], "--finetune", "qlora", "--walk", "eager")
    assert said.startswith("error: --finetune: QLoRA on a mixture of experts is modelled on Qwen3-MoE, Mixtral and "
                           "GPT-OSS (no shared expert)"), said  # fmt: skip
    for optimizer in (base[:-2], base):  # full training or LoRA, with another optimizer
        said = refused(*optimizer, "--optimizer", "adafactor", "--walk", "eager")
        assert said.startswith("error: --optimizer: a mixture of experts is modelled with AdamW"), said
    flags = ["--preset", "deepseek-v3", "--seq", "512", "--finetune", "lora"]
    err = refused(*flags, "--walk", "eager")
    assert err.endswith("Mixtral, Qwen2-MoE, Qwen3-MoE, GPT-OSS and Llama 4, and by no walk otherwise"), err
    assert refused(*flags) == err  # the deck walk names no walk that would answer
    assert main(["--preset", "mixtral-8x7b", "--seq", "512", "--finetune", "lora", "--walk", "eager", "--json"]) == 0
    capsys.readouterr()
    for layout in (["--dp", "2"], ["--dp", "2", "--zero", "3"], ["--tp", "2"], ["--pp", "2", "--grad-accum", "4"]):
        said = refused(*base, "--walk", "eager", "--device", "cpu", "--recipe", "autocast", *layout)
        assert said.endswith("is measured on one device only: no walk answers it over several processes yet"), said


def test_lora_on_the_experts_keeps_each_layers_merged_weights_for_backward():
    """peft's ParamWrapper makes W + B A of every expert (torch.baddbmm) when the experts' forward reads the weight,
    and the grouped matmul saves it with its input: each layer keeps a whole copy of its experts' adapted weights
    until its backward, where attention-only LoRA keeps none of them."""
    shape = calc.PRESETS["qwen3-30b-a3b"].replace(layers=3, vocab=1000)
    kept = {}
    for targets in (("q", "v"), ("q", "v", "gate", "up", "down")):
        s = calc.step(shape, 32, 1, "fp32-full", "none", walk="eager", device="cpu",
                      tune=Tuning("lora", targets=targets))  # fmt: skip
        last = max(i for i, e in enumerate(s["events"]) if e["phase"] == "forward")
        kept[targets[-1]] = s["events"][last]["totals"]["activations"]
    copy = shape.experts * (2 * shape.expert_width * shape.hidden + shape.hidden * shape.expert_width) * 4
    assert kept["down"] - kept["v"] >= shape.layers * copy


def test_frozen_experts_keep_no_input_for_their_weights():
    """GroupedMmBackward0 saves its input only for the weight's gradient: under LoRA on the attention the
    experts' gathered tokens and their act(gate) * up are freed as the block returns, so the step keeps less
    than full training's activations by at least those two a layer (k x tokens x (h + expert width) values)."""
    shape = calc.PRESETS["qwen3-30b-a3b"].replace(layers=2, vocab=1000)
    lora = Tuning("lora", targets=("q", "k", "v", "o"))
    saved = {}
    for name, tune in (("full", Tuning()), ("lora", lora)):
        s = calc.step(shape, 64, 1, "fp32-full", "none", walk="eager", device="cpu", tune=tune)
        fwd = [e for e in s["events"] if e["phase"] == "forward"]
        saved[name] = max(e["totals"]["activations"] for e in fwd)
    k_tokens = 64 * shape.experts_per_token
    assert saved["full"] - saved["lora"] >= shape.layers * k_tokens * (shape.hidden + shape.expert_width) * 4


def test_a_refusal_of_lora_on_a_mixture_of_experts_names_no_walk_that_refuses_it_too(capsys, tmp_path):
    """A fresh reviewer's findings: the deck walk's refusal named the eager walk, which then refused the same
    inputs (an expert capacity, expert or sequence parallelism, several processes); a model the eager walk does
    not fine-tune was refused on its targets first, naming a fix refused in turn; a trainer config's gate_proj,
    up_proj and down_proj, which peft reads by model type on a mixture of experts (Qwen3-MoE's at twice the rank,
    GPT-OSS's as nothing), were counted as calc's target_parameters at the rank given."""
    from calc.cli import main

    base = ["--preset", "qwen3-30b-a3b", "--finetune", "lora", "--lora-targets", "q,k,v,o"]
    for extra in (["--capacity-factor", "1.25"], ["--dp", "2", "--ep", "2"], ["--tp", "2", "--sequence-parallel"],
                  ["--dp", "2"], ["--pp", "2"]):  # fmt: skip
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert "no walk fine-tunes a mixture of experts with these inputs" in err and "deck walk)" not in err, err
        assert "--walk eager" not in err and "use the deck walk" not in err, err
    assert main(base) == 2
    assert capsys.readouterr().err.strip().endswith("--walk eager replays this LoRA")  # and it does:
    assert main([*base, "--walk", "eager", "--json"]) == 0
    capsys.readouterr()
    assert main(["--preset", "deepseek-v3", "--finetune", "lora", "--lora-targets", "q,k,v,o,gate,up,down", "--walk",
                 "eager"]) == 2  # fmt: skip
    assert "by no walk otherwise" in capsys.readouterr().err
    text = "model_name_or_path: Qwen/Qwen3-30B-A3B\nstage: sft\nfinetuning_type: lora\nbf16: true\n"
    for target, code in (("q_proj,v_proj,down_proj", 2), ("q_proj,k_proj,v_proj,o_proj", 0)):
        path = tmp_path / "moe-lora.yaml"  # LLaMA-Factory's YAML
        path.write_text(f"{text}lora_target: {target}\n")
        assert main(["--trainer-config", str(path), "--walk", "eager", "--json"]) == code, target
        out = capsys.readouterr()
        if code:
            assert out.err.startswith("error: --trainer-config: lora_target gives --lora-targets q,v,down: on a "
                                      "mixture of experts peft reads gate_proj, up_proj and down_proj by model type")
        else:
            assert json.loads(out.out)["config"]["finetune"]["targets"] == ["q", "k", "v", "o"]
