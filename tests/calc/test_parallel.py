"""Sharding and parallelism: published numbers, per-device monotonicity, conservation."""

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import calc
from calc.activations import kept_bytes, layer_bytes
from calc.cli import main
from calc.parallel import Parallel, check, device_params, split
from calc.plan import TP_DEGREES
from calc.recipes import state_bytes
from calc.walk import device_state
from strategies import micro_batches, modern_shapes, moe_shapes, recipes, recomputes, shapes


@pytest.mark.parametrize(("zero", "gb"), [(0, "120.0"), (1, "31.4"), (2, "16.6"), (3, "1.9")])
def test_zero_figure_1(zero, gb):
    """Rajbhandari et al. 2020, Figure 1: 7.5B parameters, K = 12, 64 workers."""
    per_device = state_bytes(7_500_000_000, "mixed", Parallel(dp=64, zero=zero))
    assert calc.format_gb(sum(per_device.values())) == gb


# Korthikanti et al. 2022, Table 2: bytes per layer for a GPT-3-like layer (a 96, h 12288, s 2048).
GPT3 = calc.Shape("gpt3", 96, 12288, 96, 96, 4 * 12288, 51200, False, True, "layer", True, "learned", 2048)
S, B, H, A, T = 2048, 1, 12288, 96, 8
SBH = S * B * H


def test_korthikanti_no_parallelism():
    """sbh(34 + 5as/h)."""
    assert layer_bytes(GPT3, S, B) == SBH * 34 + SBH * 5 * A * S // H


def test_korthikanti_tensor_parallel():
    """Tensor parallel: sbh(10 + 24/t + 5as/(ht))."""
    got = layer_bytes(GPT3, S, B, Parallel(tp=T))
    assert got == SBH * 10 + SBH * 24 // T + SBH * 5 * A * S // (H * T)


def test_korthikanti_tensor_and_sequence_parallel():
    """Tensor + sequence parallel: sbh/t (34 + 5as/h)."""
    assert layer_bytes(GPT3, S, B, Parallel(tp=T, sequence_parallel=True)) == (SBH * 34 + SBH * 5 * A * S // H) // T


def test_korthikanti_selective():
    """Selective recomputation: sbh(10 + 24/t) with tensor parallelism, 34sbh/t with sequence parallelism too."""
    assert kept_bytes(GPT3, S, B, "selective", Parallel(tp=T)) == SBH * 10 + SBH * 24 // T
    assert kept_bytes(GPT3, S, B, "selective", Parallel(tp=T, sequence_parallel=True)) == 34 * SBH // T


def test_korthikanti_full():
    """Full recomputation keeps 2sbh, split by t only under sequence parallelism."""
    assert kept_bytes(GPT3, S, B, "full", Parallel(tp=T)) == 2 * SBH
    assert kept_bytes(GPT3, S, B, "full", Parallel(tp=T, sequence_parallel=True)) == 2 * SBH // T


def test_flash_stores_no_scores():
    """FlashAttention removes the 5as^2b term and nothing else."""
    assert layer_bytes(GPT3, S, B, Parallel(flash=True)) == 34 * SBH


def test_gqa_shrinks_k_and_v():
    """Llama 2 70B's 8 key/value heads of 64 shrink K and V to 1/8: 34 -> 30.5 sbh, plus the scores."""
    shape = calc.PRESETS["llama-2-70b"]
    sbh = 4096 * 8192
    assert layer_bytes(shape, 4096, 1, Parallel(flash=True)) == 34 * sbh - 4 * sbh * 7 // 8


def small_degrees():
    return st.sampled_from([1, 2, 4])


@settings(max_examples=150, deadline=None)
@given(
    shapes(),
    st.integers(1, 2048),
    micro_batches,
    recipes,
    recomputes,
    small_degrees(),
    small_degrees(),
    small_degrees(),
    st.integers(0, 3),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["dp", "tp", "pp"]),
)
def test_doubling_a_degree_never_grows_per_device_memory(
    shape, seq, b, recipe, recompute, dp, tp, pp, zero, sp, flash, which
):
    """Per-device peak never grows when dp, tp or pp doubles (pp splitting the layers evenly)."""
    par = Parallel(dp, tp, pp, zero, sp, flash)
    doubled = Parallel(**{**par.__dict__, which: getattr(par, which) * 2})
    assume(check(shape, par) is None and check(shape, doubled) is None)
    assume(shape.layers % doubled.pp == 0)
    # A tied embedding is copied onto the last stage (Megatron-LM), which can outweigh the halved layers.
    assume(which != "pp" or not shape.tied)
    # The same step on both: as many micro-batches as the deeper pipeline needs (later ones start with the
    # gradients resident, which a one-micro-batch step never does).
    before = calc.step(shape, seq, b, recipe, recompute, par=par, grad_accum=doubled.pp)
    after = calc.step(shape, seq, b, recipe, recompute, par=doubled, grad_accum=doubled.pp)
    assert after["peak"] <= before["peak"]


@given(st.integers(1, 10**13), st.integers(1, 512), recipes, st.integers(0, 3))
def test_sharded_state_sums_to_the_unsharded_state(params, dp, recipe, zero):
    """Adding every worker's ZeRO shards gives back the unsharded state, category by category."""
    par = Parallel(dp=dp, zero=zero)
    whole = state_bytes(params, recipe)
    for category, from_stage in (("optimizer", 1), ("master", 1), ("gradients", 2), ("weights", 3)):
        total = sum(state_bytes(params, recipe, par, rank)[category] for rank in range(dp))
        assert total == (whole[category] if zero >= from_stage else dp * whole[category])


@settings(max_examples=100, deadline=None)
@given(st.one_of(shapes(), modern_shapes()), small_degrees(), st.integers(1, 8))
def test_tensor_and_pipeline_shards_sum_to_the_model(shape, tp, pp):
    """Over every stage and tensor rank, the split parameters add up to the model (replicas counted once)."""
    par = Parallel(tp=tp, pp=pp)
    assume(check(shape, par) is None)
    total = 0
    for stage in range(pp):
        parts = [device_params(shape, par, stage, rank) for rank in range(tp)]
        total += sum(p["total"] for p in parts) - (tp - 1) * parts[0]["replicated"]
    extra_head_copy = shape.vocab * shape.hidden if shape.tied and pp > 1 else 0
    assert total == calc.param_counts(shape)["total"] + extra_head_copy


def test_split_gives_rank_zero_the_most():
    """split() hands out remainders to the first ranks and loses nothing."""
    assert [split(10, 4, r) for r in range(4)] == [3, 3, 2, 2]


def test_zero3_gathers_each_layer():
    """ZeRO-3's walk all-gathers and releases every layer's weights around its forward and backward."""
    s = calc.step(calc.PRESETS["llama-7b"], par=Parallel(dp=8, zero=3))
    gathers = [e for e in s["events"] if "all-gather" in e["label"]]
    assert len(gathers) == 2 * 32 + 4  # layers forward and backward; embedding and head, both ways
    assert s["events"][-1]["totals"]["gradients"] == 0


def test_pipeline_first_stage_holds_pp_micro_batches():
    """1F1B: the first of 4 stages keeps 4 micro-batches of its 8 layers."""
    s = calc.step(calc.PRESETS["llama-7b"], recompute="full", par=Parallel(pp=4))
    assert s["stage"] == 0
    forwards = [e for e in s["events"] if e["phase"] == "forward" and e["category"] == "activations"]
    assert len(forwards) == 4 * 8


def test_plan_rows_fit_and_are_sorted():
    """Every planned layout fits, fewest devices first, and the walk agrees with its peak."""
    shape = calc.PRESETS["llama-7b"]
    rows = calc.plan(shape, 4096, 256, 80 * calc.GB)
    key = lambda r: (r["devices"], r["extra_compute"], -r["micro_batch"], r["zero"], r["peak"])  # noqa: E731
    assert rows and rows == sorted(rows, key=key)
    for r in rows:
        assert r["peak"] <= 80 * calc.GB and r["devices"] == r["dp"] * r["tp"] * r["pp"]
        assert r["grad_accum"] * r["micro_batch"] * r["dp"] == 256
        par = Parallel(r["dp"], r["tp"], r["pp"], r["zero"], r["sequence_parallel"], r["flash"])
        s = calc.step(shape, 4096, r["micro_batch"], "mixed", r["recompute"], par=par, grad_accum=r["grad_accum"])
        assert s["peak"] == r["peak"]
    assert calc.plan(shape, 4096, 256, 10**9) == []  # nothing fits in 1 GB: 16N alone is 108 GB


def test_recompute_overhead_full_is_a_third():
    """Full recomputation repeats the forward pass: about a third of a step's compute, less the head's share."""
    overhead = calc.recompute_overhead(calc.PRESETS["llama-7b"], 4096, "full")
    assert 0.30 < overhead < 1 / 3
    assert calc.recompute_overhead(calc.PRESETS["llama-7b"], 4096, "selective", flash=True) == 0


def test_cli_plan_json(capsys):
    """--plan --json prints the planner's list with its documented keys."""
    assert main(["--plan", "--json", "--global-batch", "64", "--capacity-gb", "80"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == calc.plan(calc.PRESETS["llama-7b"], 4096, 64, 80 * calc.GB)
    assert {"dp", "tp", "pp", "zero", "recompute", "micro_batch", "devices", "peak"} <= set(rows[0])


def test_cli_per_device(capsys):
    """--dp/--zero make bytes and peak per device."""
    assert main(["--dp", "64", "--zero", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bytes"]["weights"] == 2 * split(calc.param_counts(calc.PRESETS["llama-7b"])["total"], 64)


def test_accumulation_starts_later_micro_batches_with_gradients():
    """With several micro-batches a step, a later one starts with the gradients resident: never a lower peak."""
    shape = calc.PRESETS["llama-7b"]
    one = calc.step(shape, 4096, 1, "mixed", "full")
    two = calc.step(shape, 4096, 1, "mixed", "full", grad_accum=2)
    assert two["accumulating"] and not one["accumulating"]
    assert two["events"][3]["category"] == "gradients" and two["events"][3]["bytes"] == one["bytes"]["gradients"]
    assert two["peak"] > one["peak"]
    assert two["events"][-1]["totals"]["gradients"] == 0


def test_plan_equals_brute_force():
    """The planner's early stops lose nothing: it equals trying every layout and micro-batch."""
    shape, seq, batch = calc.PRESETS["decoder"], 8, 16
    capacity = calc.step(shape, seq, 4, "mixed", "none")["peak"]
    got = calc.plan(shape, seq, batch, capacity, limit=10_000)
    want = []
    for tp in TP_DEGREES:
        for pp in (1, 2):
            for dp in (1, 2, 4, 8, 16):
                for zero in range(4 if pp == 1 else 2) if dp > 1 else (0,):
                    par = Parallel(dp, tp, pp, zero)
                    if check(shape, par):
                        continue
                    for recompute in calc.RECOMPUTE:
                        for b in (1, 2, 4, 8, 16):
                            m = batch // dp // b if batch // dp % b == 0 else 0
                            if m < pp:
                                continue
                            peak = calc.step(shape, seq, b, "mixed", recompute, par=par, grad_accum=m)["peak"]
                            if peak <= capacity:
                                want.append((dp * tp * pp, dp, tp, pp, zero, recompute, b, peak))
    assert sorted(
        (r["devices"], r["dp"], r["tp"], r["pp"], r["zero"], r["recompute"], r["micro_batch"], r["peak"]) for r in got
    ) == sorted(want)


MIXTRAL = calc.PRESETS["mixtral-8x7b"]


@settings(max_examples=100, deadline=None)
@given(moe_shapes(), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 3]), recipes, st.integers(0, 3))
def test_expert_parallel_state_sums_to_the_unsharded_state(shape, ep, groups, recipe, zero):
    """With --ep, adding every worker's state gives the model's: each expert lives on dp/ep workers (ZeRO
    shards it over them), everything else on all dp; with ZeRO-3 exactly the unsharded state."""
    par = Parallel(dp=ep * groups, zero=zero, ep=ep)
    assume(check(shape, par) is None)
    n, counts = device_params(shape, par), calc.param_counts(shape)
    assert n["experts"] * ep == counts["experts"] and n["total"] - n["experts"] == counts["total"] - counts["experts"]
    whole, experts = state_bytes(counts["total"], recipe), state_bytes(counts["experts"], recipe)
    total = dict.fromkeys(whole, 0)
    for rank in range(par.dp):
        for category, size in device_state(n["total"], n["experts"], recipe, par, rank).items():
            total[category] += size
    for category, from_stage in (("optimizer", 1), ("master", 1), ("gradients", 2), ("weights", 3)):
        copies = (whole[category] - experts[category]) * par.dp + experts[category] * groups
        assert total[category] == (whole[category] if zero >= from_stage else copies)


@settings(max_examples=100, deadline=None)
@given(moe_shapes(), small_degrees(), st.integers(1, 4), st.sampled_from([1, 2, 4]))
def test_expert_tensor_and_pipeline_shards_sum_to_the_model(shape, tp, pp, ep):
    """Over every stage, tensor rank and expert rank, a mixture of experts' split parameters add up to the model."""
    par = Parallel(dp=ep, tp=tp, pp=pp, ep=ep)
    assume(check(shape, par) is None)
    total = 0
    for stage in range(pp):
        parts = [device_params(shape, par, stage, rank) for rank in range(tp)]
        total += sum(p["total"] - p["experts"] for p in parts) - (tp - 1) * parts[0]["replicated"]
        total += ep * sum(p["experts"] for p in parts)  # each expert rank holds different experts
    extra_head_copy = shape.vocab * shape.hidden if shape.tied and pp > 1 else 0
    assert total == calc.param_counts(shape)["total"] + extra_head_copy


@settings(max_examples=100, deadline=None)
@given(moe_shapes(), st.integers(1, 2048), micro_batches, recipes, recomputes)
def test_peak_grows_with_experts_per_token(shape, seq, b, recipe, recompute):
    """Routing each token to one more expert never lowers the peak."""
    assume(shape.experts_per_token < shape.experts and shape.moe_layers)
    more = shape.replace(experts_per_token=shape.experts_per_token + 1)
    before = calc.step(shape, seq, b, recipe, recompute)["peak"]
    after = calc.step(more, seq, b, recipe, recompute)["peak"]
    assert after >= before


@pytest.mark.parametrize("recompute", calc.RECOMPUTE)
def test_mixtral_peak_grows_with_each_expert_per_token(recompute):
    """Mixtral 8x7B at 4,096 tokens: each further expert per token raises the peak, whatever is recomputed."""
    peaks = [calc.step(MIXTRAL.replace(experts_per_token=k), 4096, 1, "mixed", recompute)["peak"] for k in range(1, 9)]
    assert peaks == sorted(set(peaks))


def test_mixtral_routed_activations():
    """Mixtral 8x7B, s = 4,096: its FFN keeps the router's logits and fp32 softmax (6 sbE) and, for the 2 sb
    token copies routed, each expert's input and output (4h) and two inner activations (4 x 14,336), in place
    of the dense FFN's 16 sbh."""
    sb, h = 4096, 4096
    moe = calc.layer_bytes(MIXTRAL, 4096, 1, moe=True) - calc.layer_bytes(MIXTRAL, 4096, 1)
    assert moe == 6 * sb * 8 + 2 * sb * (4 * h + 4 * 14336) - 16 * sb * h
    mistral = calc.PRESETS["mistral-7b"]
    assert calc.layer_bytes(MIXTRAL, 4096, 1) == calc.layer_bytes(mistral, 4096, 1)  # same attention


@pytest.mark.parametrize(("factor", "copies"), [(0.0, 2 * 4096), (1.0, 2 * 4096), (1.25, 8 * 1280), (2.0, 4 * 4096)])
def test_capacity_factor_pads_each_expert(factor, copies):
    """Dropless routing keeps k sb token copies; a capacity factor c pads each of the E experts to c k sb / E."""
    assert calc.activations.routed_tokens(MIXTRAL.replace(capacity_factor=factor), 4096) == copies


def test_expert_parallelism_splits_the_experts():
    """Mixtral over 8 workers with --ep 8: each holds one expert a layer and everything else."""
    counts = calc.param_counts(MIXTRAL)
    n = device_params(MIXTRAL, Parallel(dp=8, ep=8))
    assert n["total"] == counts["total"] - counts["experts"] + counts["experts"] // 8
    one = calc.step(MIXTRAL, par=Parallel(dp=8))
    eight = calc.step(MIXTRAL, par=Parallel(dp=8, ep=8))
    assert one["bytes"]["activations"] == eight["bytes"]["activations"]  # balanced routing: as many tokens
    # The peak is the head's gradient, before any expert's gradient: 2 + 8 + 4 bytes less per expert parameter.
    assert one["peak_event"] == eight["peak_event"] == "loss and head backward: write its weight gradients"
    assert one["peak"] - eight["peak"] == (2 + 8 + 4) * (counts["experts"] - counts["experts"] // 8)


@pytest.mark.parametrize(
    ("shape", "par", "message"),
    [
        ("llama-7b", Parallel(dp=2, ep=2), "expert parallelism needs a mixture of experts (--experts)"),
        ("mixtral-8x7b", Parallel(dp=6, ep=3), "3 expert-parallel ranks do not divide the 8 experts"),
        ("mixtral-8x7b", Parallel(dp=2, ep=4), "4 expert-parallel ranks do not divide the 2 data-parallel workers"),
    ],
)
def test_expert_parallel_layouts_are_checked(shape, par, message):
    """--ep needs experts, and must divide both the experts and the data-parallel workers."""
    assert check(calc.PRESETS[shape], par) == ("ep", message)


def test_plan_tries_expert_parallelism():
    """For Mixtral the planner lists layouts with ep > 1, each with the peak its walk gives."""
    rows = calc.plan(MIXTRAL, 4096, 64, 80 * calc.GB, limit=40)
    assert any(r["ep"] > 1 for r in rows)
    for r in rows:
        par = Parallel(r["dp"], r["tp"], r["pp"], r["zero"], r["sequence_parallel"], r["flash"], r["ep"])
        s = calc.step(MIXTRAL, 4096, r["micro_batch"], "mixed", r["recompute"], par=par, grad_accum=r["grad_accum"])
        assert s["peak"] == r["peak"] <= 80 * calc.GB


def test_sliding_window_changes_no_memory():
    """Mistral 7B's 4,096-token window: eager and SDPA attention still hold s x s scores, so no walk changes."""
    mistral = calc.PRESETS["mistral-7b"]
    assert mistral.sliding_window == 4096
    for seq in (4096, 16384):
        assert calc.step(mistral, seq)["peak"] == calc.step(mistral.replace(sliding_window=0), seq)["peak"]


def test_gemma2_norms_keep_their_inputs():
    """Gemma 2's two extra norms each keep their 16-bit input: 4 sbh more a layer than with two norms."""
    gemma = calc.PRESETS["gemma-2-9b"]
    sbh = 4096 * 3584
    assert calc.layer_bytes(gemma, 4096, 1) - calc.layer_bytes(gemma.replace(norms_per_layer=2), 4096, 1) == 4 * sbh


@settings(max_examples=50, deadline=None)
@given(
    moe_shapes(),
    st.integers(1, 512),
    st.integers(1, 4),
    recipes,
    recomputes,
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2]),
    st.integers(1, 3),
    st.integers(0, 3),
    st.integers(1, 4),
)
def test_moe_walk_invariants(shape, seq, b, recipe, recompute, ep, tp, pp, zero, accum):
    """A mixture of experts' walk on any layout (dense layers first, then MoE layers; ep, tp, pp, ZeRO): the fast
    peak is the expanded walk's, the step ends holding only the persistent state, and the forward pass keeps
    the activations `bytes` reports."""
    par = Parallel(dp=2 * ep, tp=tp, pp=pp, zero=zero if pp == 1 else min(zero, 1), ep=ep)
    assume(check(shape, par) is None and shape.layers >= pp)
    s = calc.step(shape, seq, b, recipe, recompute, par=par, grad_accum=max(accum, pp))
    walk = s["events"]
    assert s["peak"] == max(e["total"] for e in walk) == walk[s["peak_index"]]["total"]
    last = walk[-1]["totals"]
    kept_grads = s["bytes"]["gradients"] if calc.RECIPES[recipe].grad_buffer else 0  # Megatron's buffer stays
    assert last == {**last, "gradients": kept_grads, "activations": 0, "logits": 0}
    assert (last["weights"], last["optimizer"], last["master"]) == tuple(
        s["bytes"][c] for c in ("weights", "optimizer", "master")
    )
    kept = sum(e["bytes"] for e in walk if e["label"].endswith("keep activations for backward"))
    assert kept == s["bytes"]["activations"]
    # A later micro-batch (of the step, or in flight) writes a module's gradients beside the resident ones
    # before adding them in, and ZeRO-2 and 3 write them whole before the reduce-scatter.
    whole_gradients = s["in_flight"] == 1 and not s["accumulating"] and par.zero < 2
    for c in ("optimizer", "master", "logits", *(("gradients",) if whole_gradients else ())):
        assert max(e["totals"][c] for e in walk) == s["bytes"][c]
