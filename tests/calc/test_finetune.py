"""Fine-tuning: trainable parameters, frozen state, LoRA's activations, QLoRA's NF4, the one-card planner."""

import json
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import calc
from calc import finetune, web
from calc.cli import main
from calc.finetune import Tuning
from calc.plan import FIT_MICRO_BATCHES, fit_card
from calc.walk import peak
from strategies import micro_batches, recipes, recomputes, shapes

LLAMA = calc.PRESETS["llama-7b"]  # Llama-2-7B's shape too: 32 layers, 4096 wide, FFN 11008
ALL = finetune.TARGETS


def test_lora_rank_8_on_q_and_v_of_llama_2_7b():
    """The issue's figure: r (d_in + d_out) on q and v of 32 layers 4096 wide, 4,194,304."""
    assert finetune.trainable_params(LLAMA, Tuning("lora", rank=8, targets=("q", "v"))) == 4_194_304
    # Every linear: 4 attention projections 4096 x 4096 and 3 FFN ones 4096 x 11008.
    assert finetune.trainable_params(LLAMA, Tuning("lora", targets=ALL)) == 32 * 8 * (4 * 8192 + 3 * 15104)


@pytest.mark.parametrize("name", [n for n, s in calc.PRESETS.items() if not s.moe_layers])
def test_tensors_add_up_to_the_parameter_count(name):
    """The per-tensor list the optimizers read holds exactly the model's parameters."""
    shape = calc.PRESETS[name]
    assert finetune.numel(finetune.trainable_tensors(shape, Tuning())) == calc.param_counts(shape)["total"]
    frozen = Tuning("freeze", freeze_layers=0)
    embedding = finetune.numel(finetune.outer_tensors(shape)["embedding"])
    # freeze with no layer frozen: all but the embedding (and a head tied to it) trains
    assert finetune.trainable_params(shape, frozen) + embedding == calc.param_counts(shape)["total"]


@pytest.mark.parametrize("flash", [False, True])
@pytest.mark.parametrize("recipe", list(calc.RECIPES))
@pytest.mark.parametrize("recompute", calc.RECOMPUTE)
def test_full_fine_tuning_walk_is_the_decks(recipe, recompute, flash):
    """The fine-tuning walk with everything trainable and AdamW is the deck's walk, event for event."""
    p = calc.RECIPES[recipe].activations
    for shape in (LLAMA, calc.PRESETS["gpt2"], calc.PRESETS["decoder"]):
        seq = min(1024, shape.context)
        segs = finetune.segments(shape, seq, 2, recipe, recompute, p, Tuning(), flash)
        deck = calc.step(shape, seq, 2, recipe, recompute, par=calc.Parallel(flash=flash))
        assert peak(segs)[0] == deck["peak"]
        assert finetune.sizes(shape, seq, 2, recipe, recompute, p, Tuning(), flash) == deck["bytes"]


def test_defaults_keep_every_number():
    """No fine-tuning flag: the deck's table and its JSON are unchanged, plus trainable_params = params."""
    rows = calc.table(LLAMA)
    assert [calc.format_gb(r["peak"]) for r in rows] == ["199.5", "115.8", "110.7", "186.3"]
    out = calc.step(LLAMA)
    assert out["trainable_params"] == out["params"] and "finetune" not in out["config"]


def test_frozen_layers_keep_less_than_trained_ones():
    """LoRA on q and v: a frozen block drops the inputs of o, the FFN and down (12 sbh in Korthikanti's count)
    and keeps each adapter's rank-r intermediate (2 sbr a target)."""
    s, b, h = 4096, 1, 4096
    trained, _ = finetune.layer_bytes(LLAMA, s, b, "none", 2, None)
    frozen, _ = finetune.layer_bytes(LLAMA, s, b, "none", 2, Tuning("lora", rank=8, targets=("q", "v")))
    assert trained == calc.kept_bytes(LLAMA, s, b, "none")
    assert frozen == trained - 12 * s * b * h + 2 * 2 * s * b * 8
    # Adapters on every linear keep every input: only the intermediates are added.
    every, _ = finetune.layer_bytes(LLAMA, s, b, "none", 2, Tuning("lora", rank=8, targets=ALL))
    assert every == trained + 7 * 2 * s * b * 8


def test_layers_below_the_lowest_trainable_one_keep_nothing():
    """--finetune freeze --freeze-layers N: backward stops at block N + 1, so blocks 1..N keep no activations
    and write no gradients."""
    for n in (0, 8, 31):
        out = calc.step(LLAMA, 2048, tune=Tuning("freeze", freeze_layers=n))
        kept, _ = finetune.layer_bytes(LLAMA, 2048, 1, "none", 2, None)
        assert out["bytes"]["activations"] == (32 - n) * kept
        touched = {e["label"].split(":")[0] for e in out["events"] if e["category"] == "gradients" and e["bytes"] > 0}
        assert all(f"backward layer {i}" not in touched for i in range(1, n + 1))
        assert f"backward layer {n + 1}" in touched


def _written_gradients(out: dict) -> int:
    return sum(e["bytes"] for e in out["events"] if e["category"] == "gradients" and e["bytes"] > 0)


@settings(max_examples=60, deadline=None)
@given(
    shapes(),
    st.integers(1, 1024),
    micro_batches,
    recipes,
    recomputes,
    st.sampled_from(["lora", "qlora", "freeze"]),
    st.integers(1, 64),
    st.data(),
)
def test_frozen_parameters_have_neither_gradients_nor_optimizer_state(shape, seq, b, recipe, recompute, mode, r, data):
    """Property: the gradients written, the optimizer state and the master copy are the trainable
    parameters' exactly; the frozen ones add only their weights."""
    seq = min(seq, shape.context) if shape.positions == "learned" else seq
    layers = data.draw(st.integers(0, shape.layers))
    targets = tuple(data.draw(st.sets(st.sampled_from(list(finetune.linears(shape))), min_size=1)))
    tune = Tuning(mode, rank=r, targets=targets, freeze_layers=layers)
    assume(finetune.check(shape, tune) is None)
    out = calc.step(shape, seq, b, recipe, recompute, tune=tune)
    rec, trainable = finetune.trained_recipe(recipe, tune), finetune.trainable_params(shape, tune)
    if not rec.grad_buffer:
        assert _written_gradients(out) == rec.gradients * trainable
    assert out["bytes"]["optimizer"] == finetune.optimizer_bytes(shape, recipe, tune)
    assert out["bytes"]["master"] == rec.master * trainable
    assert out["events"][-1]["total"] == out["static"]  # the step gives back all it took


@settings(max_examples=60, deadline=None)
@given(shapes(), st.integers(1, 2048), micro_batches, recipes, recomputes, st.integers(1, 256), st.data())
def test_peak_grows_with_rank_and_targets(shape, seq, b, recipe, recompute, r, data):
    """Property: a larger rank, or more targets, never lowers the peak (and adds to the static state)."""
    seq = min(seq, shape.context) if shape.positions == "learned" else seq
    names = list(finetune.linears(shape))
    fewer = tuple(data.draw(st.sets(st.sampled_from(names), min_size=1)))
    more = tuple(sorted(set(fewer) | set(data.draw(st.sets(st.sampled_from(names))))))
    mode = data.draw(st.sampled_from(["lora", "qlora"]))

    def walk(rank, targets):
        return calc.step(shape, seq, b, recipe, recompute, tune=Tuning(mode, rank=rank, targets=targets))

    base = walk(r, fewer)
    bigger = walk(r + data.draw(st.integers(1, 64)), fewer)
    wider = walk(r, more)
    assert bigger["peak"] > base["peak"] and bigger["static"] > base["static"]
    assert wider["peak"] >= base["peak"] and wider["static"] >= base["static"]
    if set(more) != set(fewer):
        assert wider["static"] > base["static"]


@settings(max_examples=60, deadline=None)
@given(shapes(), recipes, st.integers(1, 64), st.data())
def test_qlora_static_state_is_below_loras(shape, recipe, r, data):
    """Property: QLoRA's resident state is below LoRA's for the same model and adapters, for any model whose
    linears hold at least one NF4 block of 64 weights (a smaller one pays more in block scales than it saves)."""
    assume(min(i * o for i, o in finetune.linears(shape).values()) >= finetune.NF4_BLOCK)
    targets = tuple(data.draw(st.sets(st.sampled_from(list(finetune.linears(shape))), min_size=1)))
    lora = calc.step(shape, 16, 1, recipe, tune=Tuning("lora", rank=r, targets=targets))
    qlora = calc.step(shape, 16, 1, recipe, tune=Tuning("qlora", rank=r, targets=targets))
    assert qlora["static"] < lora["static"]


def test_nf4_is_4_127_bits_a_weight():
    """bitsandbytes' NF4 with double quantization: 4 bits, a byte of absmax per 64, 4 bytes per 64 x 256."""
    n = 64 * 256 * 1024
    assert Fraction(8 * finetune.nf4_bytes(n), n) == Fraction(4) + Fraction(8, 64) + Fraction(32, 64 * 256)
    assert finetune.nf4_bytes(4096 * 4096) == 4096 * 4096 // 2 + 4096 * 64 + 4 * 1024
    assert finetune.nf4_bytes(1) == 1 + 1 + 4  # a partial byte, block and second-level block


def test_qlora_walk_dequantizes_one_linear_at_a_time():
    """QLoRA: the block linears are NF4, the rest 16-bit, the adapters fp32 (peft's default); each layer
    dequantizes its largest weight to the compute dtype for a moment, in forward and in backward."""
    out = calc.step(LLAMA, 2048, recipe="bf16", tune=Tuning("qlora", targets=ALL))
    linear = sum(i * o for i, o in finetune.linears(LLAMA).values())
    outer = calc.param_counts(LLAMA)["total"] - 32 * linear
    adapters = finetune.trainable_params(LLAMA, Tuning("qlora", targets=ALL))
    nf4 = 32 * sum(finetune.nf4_bytes(i * o) for i, o in finetune.linears(LLAMA).values())
    assert out["bytes"]["weights"] == nf4 + 2 * outer + 4 * adapters
    deq = [e["bytes"] for e in out["events"] if "dequantize" in e["label"]]
    assert len(deq) == 4 * 32 and set(deq) == {2 * 4096 * 11008, -2 * 4096 * 11008} and sum(deq) == 0


def test_fit_card_rows_fit_and_are_the_largest_micro_batch():
    """Every row fits the card; its micro-batch is the largest power of two that does; cheapest first."""
    capacity = 24 * calc.GB
    rows = fit_card(LLAMA, 2048, capacity, "bf16", flash=True)
    assert rows and {r["finetune"] for r in rows} >= {"lora", "qlora"}
    keys = [(r["extra_compute"], -r["micro_batch"], r["peak"]) for r in rows]
    assert keys == sorted(keys)
    for row in rows:
        targets = tuple(row["targets"]) or ("q", "v")
        tune = Tuning(row["finetune"], rank=row["rank"] or 8, targets=targets)
        walk = calc.step(LLAMA, 2048, row["micro_batch"], "bf16", row["recompute"], par=calc.Parallel(flash=True),
                         tune=tune)
        assert walk["peak"] == row["peak"] <= capacity
        if row["micro_batch"] < FIT_MICRO_BATCHES[-1]:
            more = calc.step(LLAMA, 2048, 2 * row["micro_batch"], "bf16", row["recompute"],
                             par=calc.Parallel(flash=True), tune=tune)
            assert more["peak"] > capacity
    # Full fine-tuning of 7B with AdamW needs 16 bytes a parameter: never on a 24 GB card.
    assert "full" not in {r["finetune"] for r in rows}


def test_cli_flags_and_json(capsys):
    """--finetune ... --json carries trainable_params; bad fine-tuning input exits 2 naming the field."""
    assert main(["--finetune", "lora", "--lora-targets", "q,v", "--lora-rank", "8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["trainable_params"] == 4_194_304 and data["config"]["finetune"]["targets"] == ["q", "v"]
    assert main(["--fit-card", "--card", "rtx-4090", "--seq", "1024", "--json"]) == 0
    assert all(r["peak"] <= 24 * calc.GB for r in json.loads(capsys.readouterr().out))
    for argv, field in [
        (["--lora-rank", "8"], "--lora-rank"),
        (["--finetune", "lora", "--lora-targets", "q,x"], "--lora-targets"),
        (["--finetune", "lora", "--lora-targets", "all-linear,q"], "--lora-targets"),  # not "got 'all-linear'"
        (["--finetune", "freeze", "--freeze-layers", "33"], "--freeze-layers"),
        (["--optimizer", "adam"], "--optimizer"),
        (["--finetune", "qlora", "--walk", "eager", "--preset", "gpt2"], "--finetune"),
        (["--finetune", "lora", "--tp", "2"], "--finetune"),
        (["--card", "h200", "--capacity-gb", "80"], "--card"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {field}:")
        assert "got 'all-linear'" not in err  # a message names what was typed, not a part of it that is valid


def test_web_takes_the_fine_tuning_fields():
    """The page's entry point accepts the fine-tuning inputs and returns trainable_params and the fit list."""
    out = json.loads(
        web.handle(
            json.dumps(
                {
                    "inputs": {"finetune": "lora", "lora-rank": "8", "lora-targets": "q,v", "optimizer": "adamw-8bit"},
                    "fit": True,
                }
            )
        )
    )
    assert out["ok"] and out["trainable_params"] == 4_194_304
    assert out["step"]["bytes"]["optimizer"] == finetune.optimizer_bytes(LLAMA, "mixed", Tuning(
        "lora", "adamw-8bit"))
    assert len(out["sweep"]["peaks"]["finetune"]) == len(out["sweep"]["seq"])
    assert out["fit"] and out["eager"]["available"] is True  # the eager walk steps 8-bit AdamW too (issue 19)
    bad = json.loads(web.handle(json.dumps({"inputs": {"freeze-layers": "2"}})))
    assert bad == {"ok": False, "field": "freeze-layers", "message": "applies to --finetune freeze"}
    plain = json.loads(web.handle(json.dumps({})))
    assert plain["trainable_params"] == plain["step"]["params"] and "fit" not in plain


@pytest.mark.torch
def test_pytorch_saves_no_input_for_a_frozen_linear():
    """Checked against autograd itself (saved_tensors_hooks): a frozen linear saves only its weight (a
    parameter, no new memory); an adapter on it saves x, shared with the base, and the rank-r intermediate."""
    import torch

    def saved(fn, x):
        shapes = []

        def pack(t):
            shapes.append(tuple(t.shape))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(x)
        return shapes

    d_in, d_out, r, tokens = 16, 32, 2, 4
    base = torch.nn.Linear(d_in, d_out, bias=False)
    a, b = torch.nn.Linear(d_in, r, bias=False), torch.nn.Linear(r, d_out, bias=False)
    x = torch.randn(tokens, d_in, requires_grad=True)
    weights = {(d_out, d_in), (d_in, d_out), (r, d_in), (d_in, r), (d_out, r), (r, d_out)}  # (transposed) views

    def activations(fn):
        return sorted(s for s in saved(fn, x) if s not in weights)

    assert activations(base) == [(tokens, d_in)]  # trainable: the input, for the weight gradient
    base.weight.requires_grad_(False)
    assert activations(base) == []
    assert activations(lambda x: base(x) + b(a(x)) * 2.0) == [(tokens, r), (tokens, d_in)]
    assert saved(base, torch.randn(tokens, d_in)) == []  # below every trainable parameter: nothing


@pytest.mark.parametrize("recipe", ["mixed", "bf16", "megatron", "fp32", "autocast"])
def test_adapters_are_fp32_by_default_as_peft_makes_them(recipe):
    """peft's get_peft_model upcasts 16-bit adapters to fp32 (autocast_adapter_dtype=True, its default): their
    weights, gradients and AdamW moments are fp32 (4 + 4 + 8 bytes, no master copy), and each adapted
    layer keeps an fp32 copy of its input for lora_A; `adapter_dtype="model"` keeps the recipe's bytes. On an
    fp32 model the two are the same step."""
    tune = Tuning("lora", rank=8, targets=("q", "v"))
    fp32 = calc.step(LLAMA, 2048, 1, recipe, "none", tune=tune)
    model = calc.step(LLAMA, 2048, 1, recipe, "none", tune=replace(tune, adapter_dtype="model"))
    n, rec = finetune.trainable_params(LLAMA, tune), calc.RECIPES[recipe]
    if rec.weights == 4:
        assert fp32 == {**model, "config": fp32["config"]}
        return
    assert fp32["bytes"]["optimizer"] == 8 * n and fp32["bytes"]["master"] == 0
    assert model["bytes"]["optimizer"] == rec.optimizer * n and model["bytes"]["master"] == rec.master * n
    assert fp32["bytes"]["weights"] - model["bytes"]["weights"] == (4 - rec.weights) * n
    sb, h = 2048, LLAMA.hidden  # per layer, per target (q and v both read the block's normed input, width h)
    per_layer = 2 * (4 * sb * (8 + h) - 2 * sb * 8)
    assert fp32["bytes"]["activations"] - model["bytes"]["activations"] == LLAMA.layers * per_layer


def test_adapter_dtype_is_refused_without_adapters(capsys):
    assert main(["--preset", "llama-7b", "--adapter-dtype", "model"]) == 2
    assert capsys.readouterr().err.strip() == "error: --adapter-dtype: applies to --finetune lora or qlora"
    assert main(["--preset", "llama-7b", "--finetune", "lora", "--adapter-dtype", "bf16"]) == 2
    assert "--adapter-dtype: must be one of fp32, model" in capsys.readouterr().err


def test_a_fused_store_takes_one_adapter_as_peft_puts_it():
    """Phi-3's qkv_proj and gate_up_proj: one adapter each, as wide as their parts (A r x h, B (q + 2 kv) x r);
    a store named in part is refused naming --lora-targets, and the fit list widens q and v to it."""
    from calc.finetune import Tuning, adapted, adapter_tensors, check, whole

    phi = calc.PRESETS["phi-4"]
    every = ("q", "k", "v", "o", "gate", "up", "down")
    h, q, kv, f = phi.hidden, phi.q_width, phi.kv_width, phi.ffn
    assert adapted(phi, every) == [("qkv_proj", h, q + 2 * kv), ("o_proj", q, h), ("gate_up_proj", h, 2 * f),
                                   ("down_proj", f, h)]  # fmt: skip
    assert adapter_tensors(phi, Tuning("lora", rank=4, targets=("q", "k", "v"))) == [(1, 4, h), (1, q + 2 * kv, 4)]
    assert check(phi, Tuning("lora", targets=("q", "v")))[0] == "lora-targets"
    assert check(phi, Tuning("lora", targets=("gate", "down")))[0] == "lora-targets"
    assert check(phi, Tuning("lora", targets=("o", "down"))) is None
    assert whole(phi, ("q", "v")) == ("q", "k", "v") and whole(phi, ("up",)) == ("gate", "up")
    llama = calc.PRESETS["llama-7b"]  # separate linears: one adapter a target, nothing widened
    assert [m for m, _, _ in adapted(llama, ("q", "v"))] == ["q_proj", "v_proj"] and whole(llama, ("q",)) == ("q",)


def test_the_deck_walk_fine_tunes_with_accumulation():
    """A later micro-batch starts with the trainable gradients resident and adds each module's into them: its
    walk peaks higher by exactly those gradients where the peak is in the forward pass (issue 34)."""
    from calc import finetune as ft
    from calc.api import step

    shape = calc.PRESETS["llama-3.2-1b"]
    for tune in (ft.Tuning(mode="lora", targets=("q", "k", "v", "o")), ft.Tuning(mode="qlora"),
                 ft.Tuning(optimizer="adamw-8bit")):  # fmt: skip
        one = step(shape, 1024, 1, "bf16", "none", tune=tune)
        many = step(shape, 1024, 1, "bf16", "none", tune=tune, grad_accum=4)
        grads = many["bytes"]["gradients"]
        assert many["accumulating"] and many["events"][0]["phase"] == "start"
        assert many["peak"] == one["peak"] + grads, tune
        start = sum(e["bytes"] for e in many["events"] if e["phase"] == "start")
        assert many["events"][-1]["total"] == start - grads  # zero_grad frees every gradient held, resident ones too


def test_qlora_on_a_mixture_of_experts_leaves_the_experts_in_16_bits():
    """Issue 34: bitsandbytes quantizes nn.Linear layers only, and transformers 5's experts are fused parameters
    (its routers no nn.Linear): QLoRA on Qwen3-30B-A3B stores its attention in NF4 and nothing else, so its base
    is the bf16 base less what NF4 saves on 4 linears a layer; a dense layer among the experts has its MLP in
    NF4 too. Refused where not measured: a shared expert (Qwen2-MoE), GPT-OSS."""
    big = calc.PRESETS["qwen3-30b-a3b"]
    attention = tuple(n for t, n in ((t, a * b) for t, (a, b) in finetune.linears(big).items()) if t in "qkvo")
    assert finetune.quantized(big) == list(attention) * big.layers  # 4 a layer, the experts none
    lora = finetune.weight_bytes(big, "bf16", Tuning("lora", targets=("q", "k", "v", "o")))
    qlora = finetune.weight_bytes(big, "bf16", Tuning("qlora", targets=("q", "k", "v", "o")))
    saved = big.layers * sum(2 * n - finetune.nf4_bytes(n) for n in attention)
    assert lora["base"] - qlora["base"] == saved and qlora["base"] > 0.95 * lora["base"]
    dense = len(finetune.quantized(replace(big, dense_layers=2))) - len(finetune.quantized(big))
    assert dense == 2 * 3  # two dense layers: gate, up and down each
    every = [a * b for a, b in finetune.linears(LLAMA).values()] * LLAMA.layers  # a dense model: every linear
    assert sorted(finetune.quantized(LLAMA)) == sorted(every)
    qlora = Tuning("qlora", targets=("q", "k", "v", "o"))
    assert finetune.moe_problem(calc.PRESETS["gpt-oss-20b"], qlora) is None  # measured (results §12.5)
    shared = replace(calc.PRESETS["qwen3-30b-a3b"], shared_expert_ffn=512)  # Qwen2-MoE's layout: not measured
    problem = finetune.moe_problem(shared, qlora)
    assert problem and problem[0] == "finetune" and "--finetune lora" in problem[1]


@pytest.mark.parametrize("zero", ["1", "2", "3"])
def test_deck_lora_beside_zero_names_the_eager_command_that_answers_it(zero, capsys):
    """The deck walk fine-tunes on one device (or plain dp): LoRA beside a ZeRO stage is refused naming the field,
    and the command it names (the CLI's eager walk, which replays peft's LoRA beside ZeroRedundancyOptimizer or
    FSDP2) answers the same layout (issue 34: no refusal that points nowhere)."""
    args = ["--preset", "llama-3.2-1b", "--seq", "256", "--finetune", "lora", "--dp", "2", "--zero", zero]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --finetune:") and len(err.splitlines()) == 1
    command = err.split("the CLI's ", 1)[1].split(", which", 1)[0].split()
    assert main([*args, *command, "--json"]) == 0
    step = json.loads(capsys.readouterr().out)
    assert step["config"]["finetune"]["mode"] == "lora" and step["config"]["parallel"]["zero"] == int(zero)
    assert main([*args, "--tp", "2"]) == 2 and "the CLI's" not in capsys.readouterr().err  # the eager walk refuses
