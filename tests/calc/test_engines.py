"""calc.engines: one rank of DDP, of DDP with ZeroRedundancyOptimizer, of FSDP2 and of tensor parallelism, in the
eager walk (issue 31)."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import calc
from calc import eager_step, finetune, optim_step
from calc.cli import main
from calc.counts import param_counts
from calc.engines import ddp, fsdp, tensor
from calc.fields import ENGINES
from calc.optim_step import Param
from calc.parallel import Parallel
from calc.presets import PRESETS

MODELS = ["llama-3.2-1b", "qwen3-30b-a3b", "gemma-2-9b", "gpt2"]


ONE = Parallel()


def _eager(preset: str, par: Parallel = ONE, **kw) -> dict:
    return calc.step(PRESETS[preset], 512, 1, kw.pop("recipe", "autocast"), walk="eager", device="cpu", par=par, **kw)


@pytest.mark.parametrize("preset", MODELS)
@pytest.mark.parametrize("recipe", ["fp32-full", "autocast", "bf16"])
def test_ddp_rank_is_one_device_plus_its_buckets(preset, recipe):
    """A DDP rank's peak is the one device's plus a flat copy of every gradient, in the gradients' dtype."""
    one, four = _eager(preset, recipe=recipe), _eager(preset, Parallel(dp=4), recipe=recipe)
    grads = calc.RECIPES[recipe].gradients * one["trainable_params"]
    assert four["peak"] == one["peak"] + grads
    assert four["rank_peaks"] == [four["peak"]] * 4


def test_ddp_buckets_of_a_fine_tuning_are_its_trainable_gradients():
    """DDP buckets only the parameters that need a gradient: LoRA's adapters."""
    tune = finetune.Tuning(mode="lora", rank=8, targets=("q", "v"))
    one = _eager("llama-3.2-1b", tune=tune)
    two = _eager("llama-3.2-1b", Parallel(dp=2), tune=tune)
    assert two["peak"] - one["peak"] == 4 * one["trainable_params"]


def test_bucket_sizes_follow_the_caps():
    """Buckets fill in reverse order, the first to 1 MiB, the rest to 25 MiB, and hold every value once."""
    params = [Param(1024, 1024)] * 30 + [Param(7)]
    sizes = ddp.bucket_sizes(params, 4)
    assert sum(sizes) == sum(p.numel for p in params)
    assert 4 * sizes[0] >= ddp.FIRST_BUCKET and 4 * (sizes[0] - 1024 * 1024) < ddp.FIRST_BUCKET
    assert all(4 * n >= ddp.BUCKET_CAP for n in sizes[1:-1])
    cuda = ddp.DataParallel(2).buckets(params, 4, 512)
    assert cuda.bytes == sum(-(-4 * n // 512) * 512 for n in sizes)


@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=40), st.integers(1, 8))
def test_partition_is_torchs_greedy(numels, dp):
    """Every parameter goes to one rank, largest first, each to the rank whose share is smallest so far."""
    params = [Param(n) for n in numels]
    shares = ddp.partition(params, dp)
    assert sorted(p.numel for s in shares for p in s) == sorted(numels)
    sizes, owner = [0] * dp, {}
    for p in sorted(params, key=lambda p: p.numel, reverse=True):  # an independent replay of the rule
        rank = min(range(dp), key=lambda r: (sizes[r], r))
        owner.setdefault(rank, []).append(p.numel)
        sizes[rank] += p.numel
    assert [[p.numel for p in s] for s in shares] == [owner.get(r, []) for r in range(dp)]


@pytest.mark.parametrize("preset", ["llama-3.2-1b", "qwen3-30b-a3b"])
def test_zero1_shards_adam_but_not_the_buckets(preset):
    """Under ZeRO 1 each rank keeps its share of AdamW's moments: the moments over the ranks add up to one
    device's, the buckets stay whole, and the step's peak is the busiest rank's."""
    shape, one = PRESETS[preset], _eager(preset)
    zero = _eager(preset, Parallel(dp=4, zero=1))
    assert len(zero["rank_peaks"]) == 4 and zero["peak"] == max(zero["rank_peaks"])
    assert zero["peak"] < one["peak"] + 4 * one["trainable_params"]  # DDP alone, on every rank

    def moments(engine):
        segs = calc.eager.segments(shape, 512, 1, "autocast", "none", None, "sdpa", "cpu", engine=engine)
        return sum(e.bytes for e in segs[0].events if e.category == "optimizer" and "moments" in e.label)

    params = optim_step.trainable(shape, finetune.DEFAULT)
    shares = [moments(ddp.DataParallel(4, tuple(share))) for share in ddp.partition(params, 4)]
    assert sum(shares) == moments(None) == 8 * sum(p.numel for p in params)
    assert len(set(shares)) > 1 or len(params) % 4 == 0


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--dp", "2", "--zero", "2"], "--recipe"),  # FSDP2 of fp32 parameters: no mixed recipe's master copy
        (["--dp", "2", "--zero", "3", "--recipe", "bf16"], "--recipe"),
        (["--dp", "2", "--zero", "3", "--recipe", "autocast", "--device", "cuda"], "--device"),
        (["--preset", "mixtral-8x7b", "--dp", "2", "--zero", "3", "--recipe", "autocast"], "--walk"),
        (["--dp", "2", "--zero", "3", "--recipe", "autocast", "--finetune", "qlora"], "--finetune"),
        (["--dp", "2", "--zero", "3", "--recipe", "autocast", "--finetune", "freeze", "--freeze-layers", "2"],
         "--finetune"),
        (["--dp", "2", "--zero", "3", "--recipe", "fsdp-bf16", "--finetune", "lora"], "--finetune"),
        (["--dp", "2", "--zero", "2", "--recipe", "autocast", "--optimizer", "adafactor"], "--optimizer"),
        (["--dp", "2", "--zero", "3", "--recipe", "autocast", "--loop", "trainer"], "--loop"),
        (["--dp", "2", "--zero", "3", "--recipe", "autocast", "--grad-accum", "2"], "--grad-accum"),
        (["--dp", "2", "--zero", "3", "--recipe", "autocast", "--adamw-impl", "foreach"], "--adamw-impl"),
        (["--dp", "2", "--zero", "3", "--recipe", "autocast", "--loss", "torchtune-chunked"], "--loss"),
        (["--dp", "1025", "--zero", "3", "--recipe", "autocast"], "--dp"),
        (["--zero", "1"], "--zero"),  # over one process ZeRO would shard nothing: not accepted and ignored
        (["--dp", "2", "--tp", "2"], "--tp"),  # DDP x TP: not modelled
        (["--dp", "2", "--tp", "2", "--zero", "1", "--recipe", "autocast"], "--tp"),  # ZeRO 1 beside TP: neither
        (["--dp", "2", "--tp", "2", "--zero", "3", "--recipe", "autocast", "--tp-plan", "transformers"],
         "--tp-plan"),
        (["--dp", "2", "--tp", "2", "--zero", "3", "--recipe", "autocast", "--sequence-parallel", "--seq", "1023"],
         "--sequence-parallel"),  # FSDP2 x TP x SP: the tp ranks split the sequence
        (["--dp", "2", "--tp", "2", "--zero", "3", "--recipe", "fsdp-bf16"], "--recipe"),  # FSDP2 x TP: fp32 only
        (["--dp", "2", "--tp", "2", "--zero", "3", "--recipe", "autocast", "--finetune", "lora"], "--finetune"),
        (["--tp", "2", "--engine", "fsdp2", "--zero", "3", "--recipe", "autocast"], "--tp"),  # no dp to shard over
        (["--tp", "2", "--zero", "1"], "--tp"),  # names --tp, not a --dp that --tp then refuses
        (["--tp", "2", "--pp", "2", "--dp", "2"], "--pp"),  # DDP and TP beside one pipeline: not yet
        (["--sequence-parallel"], "--sequence-parallel"),  # one rank: no sequence to split
        (["--tp", "2", "--tp-plan", "transformers", "--sequence-parallel"], "--sequence-parallel"),
        (["--tp", "2", "--sequence-parallel", "--seq", "1023"], "--sequence-parallel"),  # uneven parts
        (["--tp", "2", "--recipe", "bf16"], "--recipe"),
        (["--tp", "2", "--recipe", "autocast", "--device", "cuda"], "--device"),
        (["--tp", "3", "--recipe", "autocast"], "--tp"),  # 32 heads
        (["--tp", "2", "--recipe", "autocast", "--kv-heads", "1"], "--tp"),
        (["--tp", "2", "--recipe", "autocast", "--ffn", "8191"], "--tp"),
        (["--preset", "qwen3-30b-a3b", "--tp", "2", "--recipe", "autocast"], "--walk"),
        (["--preset", "gemma-2-9b", "--tp", "2", "--recipe", "autocast"], "--walk"),
        (["--tp", "2", "--recipe", "autocast", "--finetune", "lora"], "--finetune"),
        (["--tp", "2", "--recipe", "autocast", "--loop", "trainer"], "--loop"),
        (["--tp", "2", "--recipe", "autocast", "--grad-accum", "2"], "--grad-accum"),
        (
            [
                "--tp",
                "1025",
                "--recipe",
                "autocast",
                "--heads",
                "1025",
                "--hidden",
                "1025",
                "--kv-heads",
                "1025",
                "--ffn",
                "1025",
            ],
            "--tp",
        ),
        (["--dp", "2", "--zero", "1", "--recipe", "mixed"], "--recipe"),
        (["--dp", "2", "--zero", "1", "--recipe", "autocast", "--optimizer", "sgd"], "--optimizer"),
        (["--dp", "2", "--zero", "1", "--recipe", "autocast", "--loop", "trainer"], "--loop"),
        (["--preset", "decoder", "--dp", "2"], "--dp"),
        (["--dp", "1025", "--zero", "1", "--recipe", "autocast"], "--dp"),
        (["--dp", "2", "--engine", "ddp", "--zero", "2", "--recipe", "autocast"], "--engine"),
        (["--dp", "2", "--engine", "fsdp2", "--zero", "1", "--recipe", "autocast"], "--engine"),
        (["--dp", "2", "--engine", "fsdp2", "--recipe", "autocast"], "--engine"),  # --zero 0 is DDP's
        (["--engine", "ddp"], "--engine"),  # one process: no engine to name
        (["--tp", "2", "--engine", "ddp", "--recipe", "autocast"], "--engine"),
        (["--tp", "2", "--dp", "2", "--zero", "3", "--engine", "ddp", "--recipe", "autocast"], "--engine"),
        (["--dp", "2", "--engine", "nccl"], "--engine"),
    ],
)
def test_eager_refuses_what_it_does_not_run_naming_the_field(flags, field, capsys):
    """Layouts the eager walk does not replay exit 2 with one line naming the field (no flag is ignored)."""
    args = [
        "--walk",
        "eager",
        *(["--device", "cpu"] if "--device" not in flags else []),
        *(["--preset", "llama-3.2-1b"] if "--preset" not in flags else []),
        *flags,
    ]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {field}:")


def test_cli_json_gives_every_ranks_peak(capsys):
    """--json carries rank_peaks beside the peak, the largest of them."""
    assert main(["--preset", "llama-3.2-1b", "--walk", "eager", "--device", "cpu", "--recipe", "fp32-full",
                 "--dp", "3", "--zero", "1", "--json"]) == 0  # fmt: skip
    got = json.loads(capsys.readouterr().out)
    assert len(got["rank_peaks"]) == 3 and got["peak"] == max(got["rank_peaks"])
    assert got["config"]["parallel"]["dp"] == 3 and got["config"]["parallel"]["zero"] == 1


def _json(args: list[str], capsys) -> dict:
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("engine", "stage"), [("ddp", 0), ("ddp", 1), ("fsdp2", 2), ("fsdp2", 3)])
def test_engine_names_the_engine_its_zero_stage_runs_on(engine, stage, capsys):
    """--engine ddp goes with --zero 0 and 1, --engine fsdp2 with --zero 2 and 3 (reshard_after_forward False and
    True): the answer is the --zero stage's, whose "engine" it names; the engine without its stage is refused."""
    base = ["--preset", "llama-3.2-1b", "--walk", "eager", "--device", "cpu", "--recipe", "autocast", "--seq", "256",
            "--dp", "2"]  # fmt: skip
    named = _json([*base, "--engine", engine, "--zero", str(stage)], capsys)
    staged = _json([*base, "--zero", str(stage)], capsys)
    assert named == staged and named["engine"] == engine and named["config"]["parallel"]["zero"] == stage
    other = next(e for e in ENGINES if e != engine)
    assert main([*base, "--engine", other, "--zero", str(stage)]) == 2
    assert capsys.readouterr().err.startswith("error: --engine: ")


def test_engine_is_the_eager_walks_and_each_step_says_its_engine(capsys):
    """The deck walk counts ZeRO as its paper does: --engine is refused there, naming the field; a step says its
    engine only where one runs it (the eager walk over several processes)."""
    assert main(["--dp", "4", "--zero", "3", "--engine", "fsdp2"]) == 2
    assert capsys.readouterr().err.startswith("error: --engine: applies to the eager walk")
    assert "engine" not in _json(["--dp", "4", "--zero", "3"], capsys)
    one = ["--preset", "llama-3.2-1b", "--walk", "eager", "--device", "cpu", "--recipe", "autocast", "--seq", "256"]
    assert "engine" not in _json(one, capsys)
    assert _json([*one, "--tp", "2"], capsys)["engine"] == "tensor-parallel"
    assert main([*one, "--dp", "3", "--zero", "1"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("engine:"))
    assert "DDP with ZeroRedundancyOptimizer" in line and "busiest of 3 ranks" in line


def test_zero1_ranks_without_a_share_keep_no_adam_state():
    """With more processes than parameter tensors, some ranks' optimizers step nothing: they peak lower than a
    DDP rank by all of AdamW's moments."""
    tensors = len(optim_step.trainable(PRESETS["gpt2"], finetune.DEFAULT))
    dp = tensors + 4
    ddp_rank = _eager("gpt2", Parallel(dp=dp))
    zero = _eager("gpt2", Parallel(dp=dp, zero=1))
    assert min(zero["rank_peaks"]) <= ddp_rank["peak"] - 8 * ddp_rank["trainable_params"]


DENSE = ["llama-3.2-1b", "qwen3-8b", "gemma-2-9b", "gpt2"]


@pytest.mark.parametrize("preset", [*DENSE, "qwen3-30b-a3b"])
def test_fsdp2_groups_are_the_models_parameters(preset):
    """The root's and the layers' groups hold every parameter tensor once: full training's trainable ones."""
    shape = PRESETS[preset]
    groups = optim_step.model_groups(shape)
    assert len(groups) == shape.layers + 1
    flat = sorted(p.numel for g, _ in groups for p in g)
    assert all(g == t for g, t in groups)  # full training: every tensor of a group trains
    assert flat == sorted(p.numel for p in optim_step.trainable(shape, finetune.DEFAULT))
    assert sum(flat) == calc.param_counts(shape)["total"]


@given(st.integers(1, 10_000), st.integers(0, 64), st.integers(1, 64))
def test_fsdp2_rows_are_torch_chunks(rows, cols, dp):
    """Each rank holds ceil(rows / dp) rows but the last ones, which hold what is left (maybe none): every row
    once; the padded shard is the first rank's."""
    p = Param(rows, cols)
    got = [fsdp.local(p, dp, r).rows for r in range(dp)]
    assert sum(got) == rows and got == sorted(got, reverse=True) and got[0] == -(-rows // dp)
    assert fsdp.FullyShard(dp).padded([p]) == fsdp.local(p, dp, 0).numel


@pytest.mark.parametrize("zero", [2, 3])
@pytest.mark.parametrize("preset", [*DENSE, "qwen3-30b-a3b"])
def test_fsdp2_step_returns_the_state_it_found(preset, zero):
    """Every gathered group is freed, every reduce-scatter buffer too, and zero_grad frees the shards'
    gradients: the step ends where it started, as on one device."""
    for par in (ONE, Parallel(dp=4, zero=zero)):
        w = calc.api.eager_walk(PRESETS[preset], 256, 1, "autocast", "none", 2, "sdpa", "cpu", finetune.DEFAULT,
                                calc.loops.BARE, par)  # fmt: skip
        assert sum(s.repeats * e.bytes for s in w.segs[1:] for e in s.events) == 0, par


@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize("zero", [2, 3])
@pytest.mark.parametrize("preset", ["llama-3.2-1b", "gemma-2-9b", "qwen3-30b-a3b"])
def test_fsdp2_deep_model_is_its_middle_layer_repeated(preset, zero, recompute):
    """FSDP2's gathers, reshards and reduce-scatters around each layer stretch as the layers do: event for
    event the replay of every layer with them."""
    shape = PRESETS[preset]
    args = (256, 1, "autocast", recompute, "sdpa", "cpu", finetune.DEFAULT)
    how = {"gathered": fsdp.FullyShard(4, zero == 3), "loss_kind": "transformers"}
    spans = eager_step.layer_spans(shape, finetune.DEFAULT)
    rp, _ = eager_step.replay(shape, *args, layers=[lo for lo, _ in spans])
    chunks = eager_step._sharded(eager_step._chunks(rp.events), shape, "autocast", rp, how["gathered"])
    stretched = eager_step._stretch(chunks, spans)
    assert stretched is not None and len(spans) < shape.layers  # a few layers replayed, stretched to the rest
    flat = [(e.label, e.bytes) for s in stretched for _ in range(s.repeats) for e in s.events]
    whole = eager_step.whole(shape, args, **how)
    assert flat == [(e.label, e.bytes) for s in whole for _ in range(s.repeats) for e in s.events]


def test_fsdp2_zero3_holds_less_than_zero2_and_ddp():
    """Resharding after forward frees each layer's whole parameters until its backward: ZeRO 3 peaks lower than
    ZeRO 2, which keeps them, and both lower than DDP (AdamW sharded, no buckets) on a model that large."""
    peaks = [_eager("llama-3.2-1b", Parallel(dp=8, zero=z), recipe="fp32-full")["peak"] for z in (0, 2, 3)]
    assert peaks[0] > peaks[1] > peaks[2]


def test_fsdp2_ranks_differ_where_dp_does_not_divide_the_rows():
    """Over 3 processes the last rank holds fewer rows of the 2,048-wide weights: less AdamW state, the same
    padded shards and buffers; rank 0 is the busiest."""
    got = _eager("llama-3.2-1b", Parallel(dp=3, zero=3), recipe="fp32-full")
    peaks = got["rank_peaks"]
    assert len(peaks) == 3 and peaks[0] == got["peak"] == max(peaks) and peaks[2] < peaks[0]
    even = _eager("llama-3.2-1b", Parallel(dp=4, zero=3), recipe="fp32-full")["rank_peaks"]
    assert len(set(even)) == 1


@pytest.mark.parametrize("par", [Parallel(), Parallel(dp=4, zero=3), Parallel(dp=8, tp=2, zero=2)])
def test_fsdp_bf16_deck_accounting_is_fp32_state(par):
    """The deck walk counts FSDP2's bf16 policy as ZeRO counts fp32 state (4 + 4 + 8 bytes a parameter, sharded
    as ZeRO shards it) with 16-bit activations: the fp32 recipe's figures, byte for byte; the gathered bf16
    copies are the eager walk's."""
    shape = PRESETS["llama-3.2-1b"]
    mixed, fp32 = (calc.step(shape, 1024, 1, recipe, par=par) for recipe in ("fsdp-bf16", "fp32"))
    assert mixed["bytes"] == fp32["bytes"] and mixed["peak"] == fp32["peak"]


@pytest.mark.parametrize("args", [[], ["--dp", "2"], ["--dp", "2", "--zero", "1"], ["--tp", "2"]])
def test_fsdp_bf16_eager_needs_fsdp2(args):
    """The bf16 policy is FSDP2's: the eager walk refuses it anywhere else, naming --recipe."""
    assert main(["--walk", "eager", "--device", "cpu", "--recipe", "fsdp-bf16", *args]) == 2


@pytest.mark.parametrize("reshard", [True, False])
def test_fsdp_bf16_gathers_bf16_and_reduces_fp32(reshard):
    """Under the bf16 policy a rank keeps fp32 shards and AdamW state of its rows (the fp32-full step's), and
    gathers bf16: its all-gather outputs are half the fp32 step's, its reduce-scatter inputs the same."""
    shape, par = PRESETS["llama-3.2-1b"], Parallel(dp=4, zero=3 if reshard else 2)
    mixed, fp32 = (_eager("llama-3.2-1b", par, recipe=r) for r in ("fsdp-bf16", "fp32-full"))
    first = lambda got, s: next(e["bytes"] for e in got["events"] if s in e["label"])  # noqa: E731
    assert first(mixed, "flat output") * 2 == first(fp32, "flat output")
    assert first(mixed, "flat input (its") == first(fp32, "flat input (its")
    assert first(mixed, "cast to bf16") * 8 == first(fp32, "flat output")  # its shard in bf16: 2 of dp x 4 bytes
    assert mixed["events"][0]["bytes"] == fp32["events"][0]["bytes"]  # the fp32 shards
    assert mixed["bytes"]["optimizer"] == fp32["bytes"]["optimizer"]
    assert mixed["peak"] < fp32["peak"] and shape.layers == 16


@pytest.mark.parametrize("zero", [2, 3])
@pytest.mark.parametrize("preset", ["llama-3.2-1b", "qwen3-8b"])
def test_fsdp2_lora_reduces_and_steps_the_adapters_only(preset, zero):
    """Under peft's LoRA a rank gathers every group as in full training (its adapters beside its frozen
    weights), reduce-scatters only the adapters' gradients (the frozen root none), and holds AdamW's moments
    of its rows of the adapters."""
    shape, dp = PRESETS[preset], 4
    tune = finetune.Tuning("lora")
    full = _eager(preset, Parallel(dp=dp, zero=zero), recipe="fp32-full")
    lora = _eager(preset, Parallel(dp=dp, zero=zero), recipe="fp32-full", tune=tune)
    adapters = [p for _, rows, cols in finetune.adapter_tensors(shape, tune) for p in [optim_step.Param(rows, cols)]]
    engine = fsdp.FullyShard(dp)
    flat = [e["bytes"] for e in lora["events"] if "flat input (its" in e["label"]]
    assert flat == [4 * dp * engine.padded(adapters)] * shape.layers  # each layer's, none for the root
    moments = sum(-(-p.rows // dp) * p.cols for p in adapters) * shape.layers * 8
    assert lora["bytes"]["optimizer"] >= moments and lora["peak"] < full["peak"]
    gathered = lambda got: [e["bytes"] for e in got["events"] if "flat output" in e["label"]]  # noqa: E731
    assert gathered(lora)[0] == gathered(full)[0]  # the root: no adapters
    assert gathered(lora)[1] == gathered(full)[1] + 4 * dp * engine.padded(adapters)


TP = ["llama-3.2-1b", "qwen3-8b"]


@pytest.mark.parametrize("tp", [2, 4, 8])
@pytest.mark.parametrize("preset", TP)
def test_tensor_parallel_rank_holds_its_share_of_each_layer(preset, tp):
    """A rank of the layers plan holds its rows of q, k, v, gate and up and its columns of o and down, and the
    embedding, the norms and the head whole: its weights are the one-device model's less (tp - 1) / tp of the
    layers' linears. Every rank peaks alike, and below one device."""
    shape = PRESETS[preset]
    one, got = _eager(preset, recipe="fp32-full"), _eager(preset, Parallel(tp=tp), recipe="fp32-full")
    c = param_counts(shape)
    linears = shape.layers * (shape.hidden * (2 * shape.q_width + 2 * shape.kv_width) + 3 * shape.hidden * shape.ffn)
    assert got["bytes"]["weights"] == 4 * (c["total"] - linears + linears // tp)
    assert got["bytes"]["weights"] == 4 * got["device_params"]  # the header counts what the rank holds
    assert got["rank_peaks"] == [got["peak"]] * tp and got["peak"] < one["peak"]


@pytest.mark.parametrize("preset", ["gpt2", "phi-4", "qwen3-30b-a3b"])
def test_tensor_parallel_api_refuses_families_it_does_not_model(preset):
    """calc.step, like the CLI, walks the layers plan on Llama's and Qwen3's dense layers only: GPT-2's and Phi's
    fused projections and a mixture's experts are not split as the plan splits them."""
    with pytest.raises(ValueError, match="dense layers only"):
        _eager(preset, Parallel(tp=2), recipe="fp32-full")


@pytest.mark.parametrize("recipe", ["fp32-full", "autocast"])
@pytest.mark.parametrize("preset", TP)
def test_tensor_parallel_all_reduces_each_linear_pair(preset, recipe):
    """Each layer all-reduces o's and down's outputs in forward and the inputs' gradients of q, k, v, gate and
    up in backward, each a new tensor of the hidden state's size beside the partial one it replaces; one device
    has none of these."""
    shape, seq = PRESETS[preset], 256
    args = (seq, 1, recipe, "none", "sdpa", "cpu", finetune.DEFAULT)
    local = tensor.TensorParallel(2).local(shape)
    events = [e for _, e in eager_step.replay(local, *args, layers=[1], tp=2)[0].events]
    forward = [e for e in events if e.bytes > 0 and e.phase == "forward" and tensor.SOURCE in e.source]
    unit = 4 if recipe == "fp32-full" else 2  # the matmul's output: bf16 under autocast
    assert [e.bytes for e in forward] == [unit * seq * shape.hidden] * 2
    backward = [e for e in events if e.bytes > 0 and e.phase == "backward" and "DTensor" in e.source]
    assert [e.bytes for e in backward] == [4 * seq * shape.hidden] * 5  # the residual stream's dtype
    one = [e for _, e in eager_step.replay(local, *args, layers=[1])[0].events]
    assert not any("all-reduced" in e.label or "DTensor" in e.label for e in one)


@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_tensor_parallel_deep_model_is_its_middle_layer_repeated(recompute, sp):
    """The all-reduces (the gathers and scatters of sequence parallelism) stretch with the layers: the stretched
    step is, event for event, every layer replayed."""
    shape = tensor.TensorParallel(4).local(PRESETS["llama-3.2-1b"])
    args = (256, 1, "autocast", recompute, "sdpa", "cpu", finetune.DEFAULT)
    spans = eager_step.layer_spans(shape, finetune.DEFAULT)
    rp, _ = eager_step.replay(shape, *args, layers=[lo for lo, _ in spans], tp=4, sp=sp)
    stretched = eager_step._stretch(eager_step._chunks(rp.events), spans)
    assert stretched is not None and len(spans) < shape.layers
    flat = [(e.label, e.bytes) for s in stretched for _ in range(s.repeats) for e in s.events]
    whole = eager_step.whole(shape, args, tp=4, sp=sp)
    assert flat == [(e.label, e.bytes) for s in whole for _ in range(s.repeats) for e in s.events]
    w = calc.api.eager_walk(PRESETS["llama-3.2-1b"], 256, 1, "autocast", recompute, 2, "sdpa", "cpu",
                            finetune.DEFAULT, calc.loops.BARE, Parallel(tp=4, sequence_parallel=sp))  # fmt: skip
    assert sum(s.repeats * e.bytes for s in w.segs[1:] for e in s.events) == 0  # the step ends where it started


@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize("recipe", ["fp32-full", "autocast"])
@pytest.mark.parametrize("preset", TP)
def test_sequence_parallel_splits_the_stream_and_gathers_each_blocks_input(preset, recipe, recompute):
    """Under sequence parallelism a layer's norms and residual sums hold s / tp positions; the attention's and the
    MLP's inputs are gathered whole (what q, k, v, gate and up save), o's and down's outputs reduce-scattered back,
    and nothing is all-reduced; the first layer's input is cut once and the head's gathered once. The rank's
    weights are the layers plan's, and every rank peaks alike."""
    shape, seq, tp = PRESETS[preset], 512, 2
    args = (seq, 1, recipe, recompute, "sdpa", "cpu", finetune.DEFAULT)
    local = tensor.TensorParallel(tp).local(shape)
    events = [e for _, e in eager_step.replay(local, *args, layers=[1, 2], tp=tp, sp=True)[0].events]

    def made(end: str) -> list[int]:  # the forward's allocations so named, not autocast's casts of them
        return [e.bytes for e in events if e.bytes > 0 and e.phase == "forward" and e.label.endswith(end)
                and not e.label.startswith("16-bit copy")]  # fmt: skip

    part, whole = 4 * seq * shape.hidden // tp, 4 * seq * shape.hidden  # the residual stream is fp32
    assert set(made("input_layernorm: x^2")) == set(made("post_attention_layernorm: x^2")) == {part}
    assert made("input (gathered)") == [whole] * 5  # two layers' attention and MLP, and the head
    unit = 4 if recipe == "fp32-full" else 2  # o's and down's outputs: bf16 under autocast
    assert made("(reduce-scattered)") == [unit * seq * shape.hidden // tp] * 4
    assert made("input (this rank's positions)") == [part]
    assert not any("all-reduced" in e.label for e in events)
    got = _eager(preset, Parallel(tp=tp, sequence_parallel=True), recipe=recipe, recompute=recompute)
    plain = _eager(preset, Parallel(tp=tp), recipe=recipe, recompute=recompute)
    assert got["bytes"]["weights"] == plain["bytes"]["weights"] and got["rank_peaks"] == [got["peak"]] * tp


def test_sequence_parallel_cli_matches_calc_step(capsys):
    """--tp 2 --sequence-parallel answers calc.step's peak for every rank, and the config and summary say so."""
    args = ["--preset", "llama-3.2-1b", "--seq", "512", "--micro-batch", "1", "--walk", "eager", "--recipe",
            "autocast", "--device", "cpu", "--tp", "2", "--sequence-parallel"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    step = json.loads(capsys.readouterr().out)
    assert step["config"]["parallel"]["sequence_parallel"] is True and len(step["rank_peaks"]) == 2
    assert step["peak"] == _eager("llama-3.2-1b", Parallel(tp=2, sequence_parallel=True))["peak"]
    assert main(args) == 0
    assert "with sequence parallelism" in capsys.readouterr().out


@pytest.mark.parametrize("zero", [2, 3])
@pytest.mark.parametrize("preset", TP)
def test_fsdp2_over_tensor_parallel_shards_each_ranks_local_tensors(preset, zero):
    """FSDP2 x TP (torchtitan's 2D: the layers plan over a (dp, tp) mesh's tp dimension, fully_shard over its dp
    one): a rank holds its dp rows of the tensors its tensor-parallel rank holds (its share of the heads and the
    MLP, the embedding, norms and head whole), FSDP2's padded shards of the narrower model. It peaks below FSDP2
    over the same dp processes and below tensor parallelism over the same tp ones; rank_peaks lists every
    process in the mesh's order, the tp ranks of one data-parallel rank alike."""
    shape, dp, tp = PRESETS[preset], 3, 2  # 3: FSDP2 pads, and its last rank holds fewer rows
    two = _eager(preset, Parallel(dp=dp, tp=tp, zero=zero), recipe="fp32-full")
    local = tensor.TensorParallel(tp).local(shape)
    rows = fsdp.FullyShard(dp).padded(optim_step.model_params(local))
    assert two["events"][0]["bytes"] == 4 * rows and two["engine"] == "fsdp2"  # its shards, resident
    shares = _eager(preset, Parallel(dp=dp, zero=zero), recipe="fp32-full")
    ranks = two["rank_peaks"]
    assert len(ranks) == dp * tp and all(ranks[2 * d] == ranks[2 * d + 1] for d in range(dp))
    assert [ranks[2 * d] > ranks[2 * (dp - 1)] for d in range(dp - 1)] == [
        shares["rank_peaks"][d] > shares["rank_peaks"][dp - 1] for d in range(dp - 1)]  # the last holds fewer rows
    assert two["peak"] < shares["peak"]
    assert two["peak"] < _eager(preset, Parallel(tp=tp), recipe="fp32-full")["peak"]


@pytest.mark.parametrize("zero", [2, 3])
def test_fsdp2_over_sequence_parallel_keeps_both_engines_bytes(zero):
    """FSDP2 x TP with sequence parallelism (torchtitan's 2D default): a rank holds the same FSDP2 shards as
    without it, runs the sequence-parallel layer (its norms on s / tp positions, each block's input gathered, o's
    and down's outputs reduce-scattered, nothing all-reduced) between FSDP2's all-gathers and reduce-scatters, and
    peaks below FSDP2 x TP without it."""
    dp, tp = 2, 2
    sp = _eager("llama-3.2-1b", Parallel(dp=dp, tp=tp, zero=zero, sequence_parallel=True), recipe="autocast")
    plain = _eager("llama-3.2-1b", Parallel(dp=dp, tp=tp, zero=zero), recipe="autocast")
    labels = [e["label"] for e in sp["events"]]
    assert sp["events"][0] == plain["events"][0] and sp["engine"] == "fsdp2"
    assert any("(reduce-scattered)" in x for x in labels) and not any("all-reduced" in x for x in labels)
    assert any(x.startswith("all-gather") for x in labels) and any("input (gathered)" in x for x in labels)
    assert len(sp["rank_peaks"]) == dp * tp and sp["peak"] < plain["peak"]


def test_fsdp2_over_tensor_parallel_cli_says_both(capsys):
    """--dp 2 --tp 2 --zero 3 --engine fsdp2 answers calc.step's four ranks and names both engines."""
    args = ["--preset", "llama-3.2-1b", "--seq", "512", "--micro-batch", "1", "--walk", "eager", "--recipe",
            "autocast", "--device", "cpu", "--dp", "2", "--tp", "2", "--zero", "3", "--engine", "fsdp2"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    step = json.loads(capsys.readouterr().out)
    assert step["rank_peaks"] == _eager("llama-3.2-1b", Parallel(dp=2, tp=2, zero=3))["rank_peaks"]
    assert main(args) == 0
    assert "reshard_after_forward=True over 2 tensor-parallel ranks of the layers plan" in capsys.readouterr().out


HF_TP = ["llama-3.1-8b", "qwen3-8b"]  # untied heads, vocabularies that 2, 4 and 8 divide


@pytest.mark.parametrize("tp", [2, 4, 8])
@pytest.mark.parametrize("preset", HF_TP)
def test_transformers_plan_splits_the_embedding_and_head_by_vocabulary(preset, tp):
    """transformers' plan (tp_plan="auto") holds vocab / tp rows of the embedding and the head beside the layers
    plan's split, and their AdamW moments; yet the embedding's gradient is whole on every rank (its backward runs
    on the replicated ids and gradient), and the loss sees the whole logits, gathered from each rank's columns.
    Every rank peaks alike."""
    shape = PRESETS[preset]
    layers = _eager(preset, Parallel(tp=tp), recipe="fp32-full")
    got = _eager(preset, Parallel(tp=tp, tp_plan="transformers"), recipe="fp32-full")
    split = 2 * (shape.vocab - shape.vocab // tp) * shape.hidden  # the embedding's and the head's rows it drops
    assert got["bytes"]["weights"] == layers["bytes"]["weights"] - 4 * split == 4 * got["device_params"]
    made = lambda label: [e["bytes"] for e in got["events"] if e["label"] == label]  # noqa: E731
    assert made("gradient of embedding.weight") == [4 * shape.vocab * shape.hidden]
    assert made("gradient of lm_head.weight") == [4 * shape.vocab // tp * shape.hidden]
    assert made("logits (this rank's columns)") == [4 * 512 * shape.vocab // tp]
    assert made("logits (gathered)") == [4 * 512 * shape.vocab]
    assert got["rank_peaks"] == [got["peak"]] * tp and got["engine"] == "tensor-parallel"


def test_transformers_plan_refuses_an_uneven_vocabulary():
    """calc.step, like the CLI, walks transformers' plan where the ranks divide the vocabulary (the measured
    steps'): DTensor pads an uneven one."""
    shape = PRESETS["llama-7b"].replace(vocab=32001)
    with pytest.raises(ValueError, match="divide the vocab"):
        calc.step(shape, 512, 1, "fp32-full", walk="eager", device="cpu", par=Parallel(tp=2, tp_plan="transformers"))


@pytest.mark.parametrize("tp", [2, 4])
def test_transformers_plan_on_a_tied_head_splits_the_one_table(tp):
    """A tied head under transformers' plan (measured: llama-tied, tp-hf) is the embedding's table, split by
    vocabulary once: the rank drops (V - V / tp) x h of it where an untied model drops that of two tables, and its
    head is the gathered one (its columns of the logits, gathered whole), as an untied head's."""
    preset = "llama-3.2-1b"  # a tied head, a vocabulary that 2 and 4 divide
    shape = PRESETS[preset]
    layers = _eager(preset, Parallel(tp=tp), recipe="autocast")
    got = _eager(preset, Parallel(tp=tp, tp_plan="transformers"), recipe="autocast")
    dropped = (shape.vocab - shape.vocab // tp) * shape.hidden  # one table's rows, not two
    assert shape.tied and got["device_params"] == layers["device_params"] - dropped
    made = lambda label: [e["bytes"] for e in got["events"] if e["label"] == label]  # noqa: E731
    assert made("logits (this rank's columns)") == [2 * 512 * shape.vocab // tp]  # bf16 under autocast
    assert made("16-bit copy of embedding.weight") == [2 * shape.vocab // tp * shape.hidden]  # the rank's rows
    assert got["rank_peaks"] == [got["peak"]] * tp and got["peak"] < layers["peak"]


@pytest.mark.parametrize(("par", "walk"), [(Parallel(tp=2, tp_plan="transformers"), "deck"),
                                           (Parallel(tp_plan="transformers"), "eager"),
                                           (Parallel(tp=2, tp_plan="megatron"), "eager")])  # fmt: skip
def test_calc_step_refuses_a_plan_it_would_not_walk(par, walk):
    """calc.step, like the CLI, refuses transformers' plan under the deck walk (its accounting is Megatron's,
    whatever plan is named), over one rank, and a plan it does not know, where it would answer another plan's."""
    with pytest.raises(ValueError, match=r"Megatron-LM's accounting|plan is one of"):
        calc.step(PRESETS["qwen3-8b"], 512, 1, "autocast", walk=walk, device="cpu", par=par)


def test_cli_runs_transformers_plan_and_says_it(capsys):
    """--tp 2 --tp-plan transformers --json answers every rank, the plan in the config and the summary."""
    args = ["--preset", "qwen3-8b", "--seq", "512", "--walk", "eager", "--recipe", "autocast", "--device", "cpu",
            "--tp", "2", "--tp-plan", "transformers"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    step = json.loads(capsys.readouterr().out)
    assert step["config"]["parallel"]["tp_plan"] == "transformers" and len(step["rank_peaks"]) == 2
    assert step["peak"] == _eager("qwen3-8b", Parallel(tp=2, tp_plan="transformers"))["peak"]
    assert main(args) == 0
    assert "transformers plan" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--tp-plan", "transformers"], "--tp-plan"),  # one rank: nothing to split
        (["--walk", "deck", "--tp", "2", "--tp-plan", "transformers"], "--tp-plan"),  # the deck's is Megatron's
        (["--walk", "deck", "--tp", "2", "--tp-plan", "layers"], "--tp-plan"),  # whichever plan is typed
        (["--tp", "2", "--tp-plan", "megatron"], "--tp-plan"),
        (["--tp", "2", "--tp-plan", "transformers", "--vocab", "32001"], "--tp"),
    ],
)
def test_tp_plan_refusals_name_the_field(flags, field, capsys):
    """What transformers' plan does not run exits 2 with one line naming the field."""
    base = {"--walk": "eager", "--preset": "llama-7b", "--recipe": "fp32-full", "--device": "cpu"}
    given = dict(zip(flags[::2], flags[1::2], strict=True))
    if given.get("--walk") == "deck":
        del base["--device"]
    args = [a for k, v in {**base, **given}.items() for a in (k, v)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {field}:"), err


def test_the_planner_refuses_a_tp_plan(capsys):
    """--plan lays out the deck walk's accounting, whose tensor parallelism is Megatron's: a plan typed beside it
    is refused, naming the field, not ignored."""
    assert main(["--plan", "--tp-plan", "layers"]) == 2
    assert capsys.readouterr().err.startswith("error: --tp-plan: applies to --walk eager")
