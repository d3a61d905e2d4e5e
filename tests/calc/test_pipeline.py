"""Pipeline parallelism as torch.distributed.pipelining runs it (calc.engines.pipeline): the schedules' order, what
each stage keeps and lets go, the eager walk of every stage, and the flags that ask for it."""

import itertools
import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

import calc
from calc import eager_step
from calc.cli import main
from calc.engines.pipeline import PipelineStage
from calc.parallel import Parallel, stage_layers
from calc.walk import peak

UNTIED = "qwen3-8b"  # an untied head: the stages the eager walk replays


@given(pp=st.integers(2, 8), extra=st.integers(0, 12), data=st.data())
def test_each_schedule_runs_every_micro_batch_once_forward_before_backward(pp, extra, data):
    """Every micro-batch's forward and backward run once each, its forward first, the backwards in micro-batch
    order; GPipe runs every forward before any backward; 1F1B never holds more than pp - stage micro-batches
    between their forward and backward, and holds that many once it has run them (warmup_chunks)."""
    m = pp + extra
    stage = data.draw(st.integers(0, pp - 1))
    for schedule in ("gpipe", "1f1b"):
        order = PipelineStage(pp, stage, schedule, m).order()
        assert {s for s, _, _ in order} == {stage}
        order = [(k, i) for _, k, i in order]
        assert sorted(order) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
        assert [i for k, i in order if k == "B"] == list(range(m))
        assert all(order.index(("F", i)) < order.index(("B", i)) for i in range(m))
        in_flight, most = 0, 0
        for kind, _ in order:
            in_flight += 1 if kind == "F" else -1
            most = max(most, in_flight)
        assert most == (m if schedule == "gpipe" else min(m, pp - stage))


@given(pp=st.integers(2, 8), data=st.data())
def test_interleaved_1f1b_runs_each_of_a_ranks_stages_over_every_micro_batch(pp, data):
    """Under interleaved 1F1B rank r runs stages r and r + pp; each of its stages runs every micro-batch's forward
    and backward once, the forward first, the backwards in micro-batch order; a stage's forward of a micro-batch
    comes after the stage before it on the same rank has run it (its input went round the other ranks)."""
    m = data.draw(st.integers(1, 4 * pp).filter(lambda m: m % max(1, m // pp) == 0))  # rounds of equal size
    rank = data.draw(st.integers(0, pp - 1))
    order = PipelineStage(pp, rank, "interleaved-1f1b", m).order()
    assert PipelineStage(pp, rank, "interleaved-1f1b", m).stages == range(rank, 2 * pp, pp)
    for s in (rank, rank + pp):
        mine = [(k, i) for t, k, i in order if t == s]
        assert sorted(mine) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
        assert [i for k, i in mine if k == "B"] == list(range(m))
        assert all(order.index((s, "F", i)) < order.index((s, "B", i)) for i in range(m))
    assert all(order.index((rank, "F", i)) < order.index((rank + pp, "F", i)) for i in range(m))
    assert all(order.index((rank + pp, "B", i)) < order.index((rank, "B", i)) for i in range(m))


@pytest.mark.torch
@pytest.mark.parametrize(("pp", "m"), [(2, 2), (2, 4), (2, 6), (3, 3), (3, 6), (3, 4), (4, 4), (4, 8), (4, 10), (4, 3)])
def test_interleaved_1f1b_order_is_torchs(pp, m):
    """The order calc replays is the one torch's ScheduleInterleaved1F1B computes for each rank (its
    _calculate_single_rank_operations, the idle steps left out), 2 stages a rank."""
    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B, _ComputationType

    schedule = ScheduleInterleaved1F1B.__new__(ScheduleInterleaved1F1B)  # its order alone, without a process group
    schedule.pp_group_size, schedule.n_local_stages, schedule._n_microbatches = pp, 2, m
    schedule.microbatches_per_round = m // max(1, m // pp)
    kinds = {_ComputationType.FORWARD: "F", _ComputationType.FULL_BACKWARD: "B"}
    for rank in range(pp):
        torch_order = [(a.stage_index, kinds[a.computation_type], a.microbatch_index)
                       for a in schedule._calculate_single_rank_operations(rank) if a is not None]  # fmt: skip
        assert PipelineStage(pp, rank, "interleaved-1f1b", m).order() == torch_order, rank


def test_1f1b_lets_go_of_its_last_warmup_send_when_its_steady_loop_ends():
    """1F1B's send_work holds the output of micro-batch pp - stage - 2 until its steady loop breaks (after
    backward m - warm); every other output goes at its own backward, each input gradient at the next backward;
    GPipe keeps every send until its backward loop ends."""
    stage = PipelineStage(4, 0, "1f1b", 8)  # warm 4: micro-batch 2's output waits for backward 4
    assert stage.lets_go("output") == [0, 1, 4, 3, 4, 5, 6, 7]
    assert stage.lets_go("input gradient sent") == [1, 2, 3, 4, 5, 6, 7, 7]
    assert PipelineStage(4, 3, "1f1b", 8).lets_go("output") == list(range(8))  # warm 1: no send held
    assert PipelineStage(2, 0, "gpipe", 4).lets_go("output") == [3] * 4
    # interleaved 1F1B (_PipelineScheduleRuntime) waits on every send as the step ends: None
    assert PipelineStage(2, 0, "interleaved-1f1b", 4).lets_go("output") == [None] * 4


def _stage(preset: str, pp: int, stage: int, schedule: str, m: int, recipe: str = "fp32-full", recompute="none"):
    return eager_step.segments(calc.PRESETS[preset], 512, 1, recipe, recompute, "sdpa", "cpu",
                               engine=PipelineStage(pp, stage, schedule, m))  # fmt: skip


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved-1f1b"])
@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize("recipe", ["fp32-full", "autocast"])
def test_a_stage_ends_its_step_holding_what_it_started_with(schedule, recompute, recipe):
    """After the optimizer's step and zero_grad a stage holds what it started with: its parameters and AdamW's
    state, its receive buffers and, on the last stage, the logits it returns (nothing else outlives the step)."""
    for s in range(4):
        segs = _stage(UNTIED, 4, s, schedule, 8, recipe, recompute)
        start = sum(e.bytes for e in segs[0].events)
        assert sum(seg.repeats * e.bytes for seg in segs for e in seg.events) == start, s


def test_stages_hold_the_models_parameters_between_them():
    """The stages' parameters add up to the model's: each its layers, the first the embedding, the last the
    final norm and the head (calc.parallel.stage_layers' split, earlier stages taking the remainder)."""
    shape = calc.PRESETS[UNTIED]
    per_stage = []
    for s in range(5):
        first = _stage(UNTIED, 5, s, "1f1b", 5)[0].events[0]  # the weights resident, fp32
        per_stage.append(first.bytes // 4)
        assert len(stage_layers(shape, 5, s)) in (shape.layers // 5, shape.layers // 5 + 1)
    assert sum(per_stage) == calc.param_counts(shape)["total"]
    per_rank = [_stage(UNTIED, 4, r, "interleaved-1f1b", 4)[0].events[0].bytes // 4 for r in range(4)]
    assert sum(per_rank) == calc.param_counts(shape)["total"]  # 8 stages, 2 a rank
    assert per_rank[0] == sum(len(stage_layers(shape, 8, s)) for s in (0, 4)) * calc.param_counts(shape)[
        "per_layer"] + shape.vocab * shape.hidden  # stages 1 and 5: 5 + 4 of the 36 layers, and the embedding


def test_gpipe_holds_every_micro_batch_1f1b_only_its_stages_share():
    """With more micro-batches than stages, GPipe's first stage peaks higher than 1F1B's: it keeps every
    micro-batch's activations, where 1F1B keeps pp of them. The deck's accounting is the papers' 1F1B and
    refuses GPipe."""
    gpipe, one = (peak(_stage(UNTIED, 2, 0, s, 8))[0] for s in ("gpipe", "1f1b"))
    assert gpipe > one
    walked = {s: calc.step(calc.PRESETS[UNTIED], 512, 1, "autocast", par=Parallel(pp=4, pp_schedule=s), walk="eager",
                           grad_accum=8, device="cpu") for s in ("gpipe", "1f1b")}  # fmt: skip
    assert walked["gpipe"]["in_flight"] == 8 and walked["1f1b"]["in_flight"] == 4 - walked["1f1b"]["stage"]
    assert walked["gpipe"]["peak"] > walked["1f1b"]["peak"]
    with pytest.raises(ValueError, match="the papers' 1f1b"):
        calc.step(calc.PRESETS["llama-7b"], 4096, 1, par=Parallel(pp=4, pp_schedule="gpipe"), grad_accum=8)


def test_a_stage_numbers_its_layers_as_the_model_does():
    """A stage after the first names its layers by the model's numbers (stage 1 of 4 of a 36-layer model holds
    layers 10 to 18), in its events as in its repetitions."""
    segs = _stage(UNTIED, 4, 1, "1f1b", 4)
    layers = {layer for s in segs if s.reps for layer in s.reps.layers}
    assert layers == set(stage_layers(calc.PRESETS[UNTIED], 4, 1)) == set(range(10, 19))


def test_interleaved_1f1b_holds_more_than_1f1b_on_the_same_ranks(capsys):
    """Over the same ranks and micro-batches, interleaved 1F1B's busiest rank holds more activations than 1F1B's:
    its warmup runs a round more forwards, and every send is held until the step ends. --json gives every rank's
    peak, the busiest's as the peak; its in_flight counts the micro-batches of all a rank's stages."""
    got = {}
    for schedule in ("1f1b", "interleaved-1f1b"):
        args = ["--preset", UNTIED, "--seq", "512", "--walk", "eager", "--recipe", "fp32-full", "--device", "cpu",
                "--pp", "4", "--pp-schedule", schedule, "--grad-accum", "8", "--json"]  # fmt: skip
        assert main(args) == 0
        got[schedule] = json.loads(capsys.readouterr().out)
    step = got["interleaved-1f1b"]
    assert step["engine"] == "pipeline" and len(step["rank_peaks"]) == 4
    assert step["peak"] == max(step["rank_peaks"]) == step["rank_peaks"][step["stage"]]
    assert step["bytes"]["activations"] > got["1f1b"]["bytes"]["activations"]
    # rank 0: a round of 4 and 2 x (4 - 1 - 0) forwards, then one more, before its first backward (warmup_ops)
    assert (step["stage"], step["in_flight"], step["accumulating"]) == (0, 11, True)
    assert (got["1f1b"]["stage"], got["1f1b"]["in_flight"]) == (0, 4)


def test_the_python_api_refuses_what_the_cli_refuses():
    """calc.step refuses an interleaved pipeline that torch would not run (its rounds uneven, more stages than
    layers) and a schedule it does not know, naming the field, as the CLI does."""
    shape = calc.PRESETS[UNTIED]
    for pp, m, field in ((4, 9, "--grad-accum"), (19, 19, "--pp")):
        with pytest.raises(ValueError, match=field):
            calc.step(shape, 512, 1, "autocast", par=Parallel(pp=pp, pp_schedule="interleaved-1f1b"), walk="eager",
                      grad_accum=m, device="cpu")  # fmt: skip
    with pytest.raises(ValueError, match="schedule is one of 1f1b, gpipe, interleaved-1f1b"):
        calc.step(shape, 512, 1, "autocast", par=Parallel(pp=2, pp_schedule="zb"), walk="eager", device="cpu")


def test_cli_gives_every_stages_peak(capsys):
    """--walk eager --pp N --json names the engine and gives every stage's peak, the busiest's as the peak."""
    args = ["--preset", UNTIED, "--seq", "512", "--walk", "eager", "--recipe", "autocast", "--device", "cpu",
            "--pp", "4", "--pp-schedule", "gpipe", "--grad-accum", "6", "--json"]  # fmt: skip
    assert main(args) == 0
    step = json.loads(capsys.readouterr().out)
    assert step["engine"] == "pipeline" and len(step["rank_peaks"]) == 4
    assert step["peak"] == max(step["rank_peaks"]) == step["rank_peaks"][step["stage"]]
    assert step["config"]["parallel"]["pp_schedule"] == "gpipe" and step["config"]["grad_accum"] == 6


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--pp-schedule", "gpipe"], "--pp-schedule"),  # one stage: nothing to schedule
        (["--walk", "deck", "--pp", "2", "--pp-schedule", "gpipe", "--device", "cuda"], "--pp-schedule"),
        (["--pp", "32", "--pp-schedule", "gpipe", "--grad-accum", "4096"], "--grad-accum"),  # a bound on its time
        (["--pp", "4", "--grad-accum", "2"], "--grad-accum"),  # Schedule1F1B needs m >= pp
        (["--pp", "2", "--preset", "llama-3.2-1b"], "--tied"),  # a tied head's last stage
        (["--pp", "2", "--preset", "qwen3-30b-a3b"], "--walk"),  # experts
        (["--pp", "2", "--recipe", "mixed"], "--recipe"),
        (["--pp", "2", "--dp", "2", "--tp", "2"], "--pp"),  # DDP and tensor parallelism beside one pipeline
        (["--pp", "2", "--dp", "2", "--zero", "3", "--pp-schedule", "interleaved-1f1b"], "--pp-schedule"),
        (["--pp", "2", "--dp", "2", "--zero", "2", "--pp-schedule", "interleaved-1f1b"], "--pp-schedule"),
        (["--pp", "2", "--dp", "2", "--zero", "2", "--engine", "ddp"], "--engine"),
        (["--pp", "2", "--dp", "2", "--engine", "fsdp2"], "--engine"),
        (["--pp", "2", "--tp", "2", "--tp-plan", "transformers"], "--tp-plan"),
        (["--pp", "2", "--dp", "2", "--tp", "2", "--zero", "2", "--engine", "fsdp2", "--sequence-parallel", "true"],
         "--sequence-parallel"),  # beside FSDP2 over the layers plan: not replayed
        (["--pp", "2", "--tp", "2", "--sequence-parallel", "true", "--seq", "511"], "--sequence-parallel"),  # uneven
        (["--pp", "2", "--tp", "3"], "--tp"),  # 3 does not divide the heads
        (["--pp", "2", "--device", "cuda"], "--device"),
        (["--pp", "2", "--finetune", "lora"], "--finetune"),
        (["--pp", "2", "--pp-schedule", "zb"], "--pp-schedule"),
        (["--pp", "4", "--pp-schedule", "interleaved-1f1b", "--grad-accum", "9"], "--grad-accum"),  # rounds of 2
        (["--pp", "19", "--pp-schedule", "interleaved-1f1b"], "--pp"),  # 38 stages over 36 layers
        (["--pp", "2", "--layers", "3", "--pp-schedule", "interleaved-1f1b"], "--pp"),  # 4 stages over 3 layers
        (["--walk", "deck", "--pp", "2", "--pp-schedule", "interleaved-1f1b", "--device", "cuda"], "--pp-schedule"),
    ],
)
def test_eager_pipeline_refusals_name_the_field(flags, field, capsys):
    """What the eager walk's pipeline does not run exits 2 with one line naming the field."""
    base = {"--walk": "eager", "--preset": UNTIED, "--recipe": "fp32-full", "--device": "cpu"}
    given = dict(zip(flags[::2], flags[1::2], strict=True))
    if given.get("--walk") == "deck":
        del base["--device"], given["--device"]
    args = [a for k, v in {**base, **given}.items() for a in ((k,) if v == "true" else (k, v))]  # a switch
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {field}:"), err


def test_the_planners_pipelines_are_1f1b_and_its_load_says_so():
    """The planner's rows are 1F1B's (the deck's accounting), each saying so, so that the page's Load sets the
    Pipeline schedule it assumed and its question leaves the reader's schedule out (hooks.deck: the layout)."""
    from hooks import deck

    rows = calc.plan(calc.PRESETS["llama-2-70b"], 4096, 1024, 80 * 10**9)
    assert rows and {r["pp_schedule"] for r in rows} == {"1f1b"}
    assert "pp-schedule" in deck.page_fields()["layout"]


def _beside(stage: int, dp: int = 1, tp: int = 1, **more) -> list:
    return eager_step.segments(calc.PRESETS[UNTIED], 512, 1, "fp32-full", "none", "sdpa", "cpu",
                               engine=PipelineStage(2, stage, "1f1b", 4, dp, tp, **more))  # fmt: skip


def test_a_stage_beside_ddp_adds_its_buckets_beside_tp_runs_its_share():
    """Beside DDP a stage's rank holds the stage's step plus DDP's buckets of the stage's parameters (a second copy
    of its gradients, fp32 here, whole for the step); beside the layers plan it runs the narrower model, its share
    of the heads and of the MLP, the embedding and the head whole."""
    from calc import optim_step
    from calc.engines.tensor import TensorParallel

    shape = calc.PRESETS[UNTIED]
    for s in range(2):
        alone, ddp = _stage(UNTIED, 2, s, "1f1b", 4), _beside(s, dp=2)
        buckets = [e for e in ddp[0].events if "bucket" in e.label]
        sub = replace(shape, layers=len(stage_layers(shape, 2, s)))
        params = optim_step.stage_params(sub, calc.finetune.DEFAULT, s == 0, s == 1)
        assert len(buckets) == 1 and 0 <= buckets[0].bytes - 4 * sum(p.numel for p in params) < 4096 * len(params)
        assert peak(ddp)[0] == peak(alone)[0] + buckets[0].bytes  # resident from start to end
        local = TensorParallel(2).local(sub)
        mine = optim_step.stage_params(local, calc.finetune.DEFAULT, s == 0, s == 1)
        assert _beside(s, tp=2)[0].events[0].bytes == 4 * sum(p.numel for p in mine)  # the fp32 weights
        assert peak(_beside(s, tp=2))[0] < peak(alone)[0]


def test_cli_lists_every_process_of_a_pipeline_beside_ddp_or_tp(capsys):
    """--pp 2 --dp 2 --engine ddp (or --tp 2) --json lists 4 processes, the pipeline's dimension outermost (rank
    stage x 2 + i): a stage's two processes hold alike; the peak is the busiest's, and its stage is named."""
    for beside in (["--dp", "2", "--engine", "ddp"], ["--tp", "2"]):
        args = ["--preset", UNTIED, "--seq", "512", "--walk", "eager", "--recipe", "fp32-full", "--device", "cpu",
                "--pp", "2", *beside, "--json"]  # fmt: skip
        assert main(args) == 0
        step = json.loads(capsys.readouterr().out)
        peaks = step["rank_peaks"]
        assert step["engine"] == "pipeline" and len(peaks) == 4 and peaks[0] == peaks[1] and peaks[2] == peaks[3]
        assert step["peak"] == max(peaks) == peaks[2 * step["stage"]]
        alone = calc.step(calc.PRESETS[UNTIED], 512, 1, "fp32-full", par=Parallel(pp=2), walk="eager", device="cpu")
        assert (max(peaks) > max(alone["rank_peaks"])) == (beside[0] == "--dp")  # buckets add, a share takes away


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_a_stage_under_fsdp2_gathers_once_reduces_once_and_ends_where_it_started(recompute):
    """Beside FSDP2 (ZeRO 2) a stage's rank starts with its rows of the stage's weights, gathers every group once
    before its first micro-batch and keeps them whole for the step, reduce-scatters each group once after its
    last backward, and after zero_grad holds what it started with; its peak lies between the pipeline's alone with
    those shards and with the whole weights resident."""
    for s in range(2):
        segs = eager_step.segments(calc.PRESETS[UNTIED], 512, 1, "fp32-full", recompute, "sdpa", "cpu",
                                   engine=PipelineStage(2, s, "1f1b", 4, 2, 1, True, 0))  # fmt: skip
        events = [e for seg in segs for _ in range(seg.repeats) for e in seg.events]
        start = sum(e.bytes for e in segs[0].events)
        assert sum(e.bytes for e in events) == start, s
        layers = len(stage_layers(calc.PRESETS[UNTIED], 2, s))
        assert sum("flat output" in e.label for e in events) == layers + 1  # each layer, and the stage's root
        assert sum("flat input" in e.label for e in events) == layers + 1
        shards = next(e for e in segs[0].events if e.category == "weights").bytes
        whole = next(e for e in _stage(UNTIED, 2, s, "1f1b", 4, recompute=recompute)[0].events
                     if e.category == "weights").bytes  # fmt: skip
        assert 2 * shards == whole  # dp 2 divides every tensor's rows
        alone = peak(_stage(UNTIED, 2, s, "1f1b", 4, recompute=recompute))[0]
        assert alone - whole < peak(segs)[0] < alone + whole


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_a_stage_under_fsdp2_resharding_after_forward_gathers_where_its_groups_were_let_go(schedule, recompute):
    """Beside FSDP2 with reshard_after_forward=True (ZeRO 3) a stage gathers its groups in a micro-batch's forward
    unless its last op was a backward (which leaves them whole), and in a backward only after a forward; every
    forward ends with them resharded, so the rank holds only its shards of the weights between a forward and the
    next op; it reduce-scatters each group once after its last backward and ends where it started."""
    pp, m = 4, 8
    for s in range(pp):
        rank = PipelineStage(pp, s, schedule, m, 2, 1, True, 0, reshard=True)
        segs = eager_step.segments(calc.PRESETS[UNTIED], 512, 1, "fp32-full", recompute, "sdpa", "cpu", engine=rank)
        events = [e for seg in segs for _ in range(seg.repeats) for e in seg.events]
        groups = len(stage_layers(calc.PRESETS[UNTIED], pp, s)) + (s in (0, pp - 1))  # the root: outer tensors
        kinds = [kind for _, kind, _ in rank.order()]
        after = zip(kinds, [None, *kinds[:-1]], strict=True)  # each op, and the stage's op before it
        gathering = sum((k == "F" and was != "B") or (k == "B" and was == "F") for k, was in after)
        assert sum("flat output" in e.label for e in events) == groups * gathering, s
        assert sum("flat input" in e.label for e in events) == groups  # one reduce-scatter a group
        shards, weights, ends = segs[0].events[0].bytes, 0, 0
        assert segs[0].events[0].category == "weights"
        for e, then in itertools.pairwise(events):
            weights += e.bytes if e.category == "weights" else 0
            ours = e.phase == "forward" and e.label.endswith(")") and "(micro-batch" in e.label
            if ours and (then.phase != "forward" or then.label[-4:] != e.label[-4:]):
                ends += 1  # the last event of a micro-batch's forward (its label ends "micro-batch k)")
                assert weights == shards, (s, e.label)
        assert ends == m  # each forward's
        assert sum(e.bytes for e in events) == sum(e.bytes for e in segs[0].events)


def test_fsdp2_beside_a_pipeline_lists_each_ranks_rows(capsys):
    """--pp 2 --dp 3 --zero 2: FSDP2's last rank holds fewer rows where 3 does not divide a tensor's (a width of
    4,000 here), so a stage's ranks differ; --json lists all 6, the pipeline's dimension outermost."""
    args = ["--preset", UNTIED, "--hidden", "4000", "--heads", "32", "--kv-heads", "8", "--seq", "512", "--walk",
            "eager", "--recipe", "autocast", "--device", "cpu", "--pp", "2", "--dp", "3", "--zero", "2", "--json"]
    assert main(args) == 0
    step = json.loads(capsys.readouterr().out)
    peaks = step["rank_peaks"]
    assert step["engine"] == "pipeline" and len(peaks) == 6 and step["peak"] == max(peaks)
    assert peaks[0] == peaks[1] > peaks[2] and peaks[3] == peaks[4] > peaks[5]
    args[args.index("--dp") : args.index("--dp")] = ["--tp", "2"]  # and over the layers plan: (pp, dp, tp)
    assert main(args) == 0
    peaks = json.loads(capsys.readouterr().out)["rank_peaks"]
    assert len(peaks) == 12 and [p == peaks[0] for p in peaks[:6]] == [True] * 4 + [False] * 2  # rank d x 2 + t
    assert peaks[6:10] == [peaks[6]] * 4 and peaks[10] == peaks[11] < peaks[6]


@pytest.mark.parametrize(
    ("flags", "suggests"),
    [
        (["--dp", "2", "--engine", "fsdp2"], "--zero 3 (reshard_after_forward=True, its default) or 2 (False)"),
        (["--dp", "2", "--zero", "2", "--engine", "ddp"], "--zero 0, or 1 (ZeroRedundancyOptimizer beside it)"),
        (["--dp", "2", "--zero", "1", "--engine", "fsdp2"], "ZeRO 0 and 1 are DDP's"),
        (["--engine", "fsdp2"], "DDP or FSDP2 beside --pp"),
    ],
)
def test_an_engine_beside_a_pipeline_is_refused_with_what_runs_beside_it(flags, suggests, capsys):
    """--engine beside --pp: the refusal suggests only what the eager walk runs beside a pipeline's stages."""
    args = ["--preset", UNTIED, "--walk", "eager", "--recipe", "autocast", "--device", "cpu", "--pp", "2", *flags]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --engine:") and suggests in err and len(err.splitlines()) == 1, err


def test_zero1_beside_a_pipeline_steps_each_ranks_share_of_the_stages_adam():
    """--pp 2 --dp 2 --zero 1 --engine ddp: beside DDP's buckets (whole), ZeroRedundancyOptimizer gives each of a
    stage's processes its share of the stage's parameters (calc.engines.ddp.partition): Adam's moments of that
    share only, so the two shares' moments add up to the stage's, and each rank peaks at most where DDP alone does."""
    from calc import optim_step
    from calc.engines import ddp as ddp_engine

    shape = calc.PRESETS[UNTIED]
    for s in range(2):
        sub = replace(shape, layers=len(stage_layers(shape, 2, s)))
        params = optim_step.stage_params(sub, calc.finetune.DEFAULT, s == 0, s == 1)
        shares = ddp_engine.partition(params, 2)
        alone = _beside(s, dp=2)
        moments = [sum(e.bytes for e in _beside(s, dp=2, shard=False, dp_rank=d, zero1=True)[0].events
                       if e.category == "optimizer" and "moments" in e.label) for d in range(2)]  # fmt: skip
        whole = sum(e.bytes for e in alone[0].events if e.category == "optimizer" and "moments" in e.label)
        assert moments == [8 * sum(p.numel for p in share) for share in shares] and sum(moments) == whole
        for d in range(2):
            segs = _beside(s, dp=2, dp_rank=d, zero1=True)
            assert [e for e in segs[0].events if "bucket" in e.label] == [e for e in alone[0].events
                                                                          if "bucket" in e.label]  # fmt: skip
            assert peak(segs)[0] <= peak(alone)[0]


def test_zero1_beside_a_pipeline_lists_each_ranks_share(capsys):
    args = ["--preset", UNTIED, "--seq", "512", "--walk", "eager", "--recipe", "autocast", "--device", "cpu", "--pp",
            "2", "--dp", "2", "--engine", "ddp", "--json"]  # fmt: skip
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)["rank_peaks"]
    assert main([*args, "--zero", "1"]) == 0
    step = json.loads(capsys.readouterr().out)
    assert step["engine"] == "pipeline" and len(step["rank_peaks"]) == 4 and step["peak"] == max(step["rank_peaks"])
    assert all(z < p for z, p in zip(step["rank_peaks"], plain, strict=True))  # each rank's share of Adam
    assert main([*args[:-1], "--zero", "1"]) == 0
    assert "DDP with ZeroRedundancyOptimizer over 2 processes a stage" in capsys.readouterr().out


def test_zero1_under_interleaved_1f1b_shares_both_of_a_ranks_stages(capsys):
    """--pp 2 --pp-schedule interleaved-1f1b --dp 2 --zero 1 --engine ddp: one ZeroRedundancyOptimizer over both of
    a pipeline rank's stages (stages r and r + 2 of 4), so each data-parallel process keeps Adam's moments of its
    share of their parameters together (calc.engines.ddp.partition of the two stages' parameters in order), the
    two shares adding up to what DDP alone keeps; every process is listed, and the summary says DDP is made with
    static_graph=True (with torch 2.13's defaults the second step fails under this schedule, and under GPipe)."""
    from calc import optim_step
    from calc.engines import ddp as ddp_engine

    shape = calc.PRESETS[UNTIED]
    for r in range(2):
        params = [p for s in (r, r + 2) for p in optim_step.stage_params(
            replace(shape, layers=len(stage_layers(shape, 4, s))), calc.finetune.DEFAULT, s == 0, s == 3)]
        shares = ddp_engine.partition(params, 2)
        walks = [eager_step.segments(shape, 512, 1, "fp32-full", "none", "sdpa", "cpu", engine=PipelineStage(
            2, r, "interleaved-1f1b", 4, 2, dp_rank=d, zero1=z)) for d, z in ((0, False), (0, True), (1, True))]
        moments = [sum(e.bytes for e in w[0].events if e.category == "optimizer" and "moments" in e.label)
                   for w in walks]  # fmt: skip
        assert moments[1:] == [8 * sum(p.numel for p in share) for share in shares] and sum(moments[1:]) == moments[0]
    args = ["--preset", UNTIED, "--seq", "512", "--walk", "eager", "--recipe", "autocast", "--device", "cpu", "--pp",
            "2", "--pp-schedule", "interleaved-1f1b", "--dp", "2", "--engine", "ddp"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)["rank_peaks"]
    assert main([*args, "--zero", "1", "--json"]) == 0
    step = json.loads(capsys.readouterr().out)
    assert len(step["rank_peaks"]) == 4 and all(z < p for z, p in zip(step["rank_peaks"], plain, strict=True))
    for zero in ("0", "1"):
        assert main([*args, "--zero", zero]) == 0
        assert "(static_graph=True, which runs where torch's defaults fail)" in capsys.readouterr().out
    assert main([*args[:-6], "--pp-schedule", "1f1b", "--dp", "2", "--engine", "ddp"]) == 0
    assert "static_graph" not in capsys.readouterr().out  # 1F1B runs with torch's defaults
    assert main([*args[:-6], "--pp-schedule", "gpipe", "--dp", "2", "--engine", "ddp"]) == 0  # GPipe fails with them
    assert "(static_graph=True, which runs where torch's defaults fail)" in capsys.readouterr().out
    assert main([*args[:-6], "--pp-schedule", "gpipe", "--dp", "2", "--zero", "2"]) == 0
    assert "static_graph" not in capsys.readouterr().out  # FSDP2 has no such flag


def test_sequence_parallelism_beside_a_pipeline_sends_each_ranks_positions(capsys):
    """--pp 2 --tp 2 --sequence-parallel (the layers plan's sequence parallelism, applied before the stages are cut):
    a later stage receives and sends s / tp positions, so its receive buffers are half the plain layers plan's; the
    first stage cuts its input once (its first layer), the later one never; the first stage lets go of the
    embeddings once its first layer returns (its forward rebinds h), which the plain plan's first layer keeps for
    its norm's backward anyway, so its peak there is the same; every process is listed and the summary says so."""
    sp, plain = (_beside(s, tp=2, sequence=True) for s in (0, 1)), (_beside(s, tp=2) for s in (0, 1))
    for s, (with_sp, without) in enumerate(zip(sp, plain, strict=True)):
        received = [[e.bytes for e in segs[0].events if e.label.startswith("received")] for segs in (with_sp, without)]
        assert received[0] and [2 * b for b in received[0]] == received[1]
        cuts = [e for seg in with_sp for e in seg.events if "this rank's positions" in e.label and e.bytes > 0
                and "gradient" not in e.label and "sum" not in e.label]  # fmt: skip
        assert (len(cuts) > 0) == (s == 0)
    args = ["--preset", UNTIED, "--seq", "512", "--walk", "eager", "--recipe", "autocast", "--device", "cpu", "--pp",
            "2", "--tp", "2", "--sequence-parallel"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    step = json.loads(capsys.readouterr().out)
    assert len(step["rank_peaks"]) == 4 and step["peak"] == max(step["rank_peaks"])
    assert main(args) == 0
    assert "the layers plan over 2 ranks a stage with sequence parallelism" in capsys.readouterr().out


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_last_stage_reshards_its_root_as_its_module_returns_before_the_loss(recompute):
    """Beside FSDP2 resharding after forward, the last stage's root (its final norm and head) is let go as the
    stage module returns its logits, before the schedule's loss_fn runs on them, in every micro-batch: under
    checkpointed autocast too, where the layers' cached 16-bit weights are freed after the head."""
    rank = PipelineStage(2, 1, "1f1b", 4, 2, 1, True, 0, reshard=True)
    segs = eager_step.segments(calc.PRESETS[UNTIED], 512, 1, "autocast", recompute, "sdpa", "cpu", engine=rank)
    labels = [e.label for seg in segs for _ in range(seg.repeats) for e in seg.events]
    for m in range(1, 5):
        tag = f"(micro-batch {m})"
        reshard = labels.index(f"reshard the stage's root (the embedding, final norm and head it holds): free its "
                               f"unsharded parameters {tag}")  # fmt: skip
        assert labels.index(f"logits {tag}") < reshard < labels.index(f"log-probabilities (fp32) {tag}")
