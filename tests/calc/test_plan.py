"""calc.plan: the planner and the fit list, which share sizes and templates and prune layouts that cannot fit,
give exactly the lists of walking every layout and micro-batch one by one, as they did before."""

import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calc
from calc import finetune
from calc.api import worst_stage
from calc.optimizers import OPTIMIZERS
from calc.parallel import Parallel, check
from calc.plan import FIT_MICRO_BATCHES, TP_DEGREES, _divisors, _Layouts, fit_card, fit_variants, plan
from calc.walk import label_at, peak
from strategies import modern_shapes, moe_shapes, recipes, recomputes

ROOT = Path(__file__).resolve().parents[2]


def plan_one_by_one(shape, seq, global_batch, capacity, recipe="mixed", sequence_parallel=False, flash=False,
                    max_devices=4096, limit=50):  # fmt: skip
    """calc.plan as it was: every layout's worst walk (calc.api.worst_stage), built and walked one by one."""
    layouts = sorted(
        (dp * tp * pp, dp, tp, pp)
        for tp in TP_DEGREES
        for pp in _divisors(shape.layers)
        for dp in _divisors(global_batch)
        if dp * tp * pp <= max_devices
    )
    found = []
    for devices, dp, tp, pp in layouts:
        if len(found) >= limit and devices > found[limit - 1]["devices"]:
            break
        per_worker = global_batch // dp
        groups = [
            [b for b in _divisors(per_worker) if per_worker // b > pp],
            [b for b in _divisors(per_worker) if per_worker // b == pp],
        ]
        eps = [e for e in _divisors(shape.experts) if dp % e == 0] if shape.moe_layers else [1]
        for zero, ep in ((z, e) for z in (range(4 if pp == 1 else 2) if dp > 1 else (0,)) for e in eps):
            par = Parallel(dp, tp, pp, zero, sequence_parallel and tp > 1, flash, ep)
            if check(shape, par):
                break
            for recompute in calc.RECOMPUTE:
                for group in groups:
                    for b in group:
                        top = worst_stage(shape, seq, b, recipe, recompute, 2, par, per_worker // b)[2][0]
                        if top > capacity:
                            break
                        found.append({
                            "dp": dp, "tp": tp, "pp": pp, "ep": ep, "zero": zero, "recompute": recompute,
                            "micro_batch": b, "devices": devices, "peak": top,
                            "sequence_parallel": par.sequence_parallel, "flash": flash, "pp_schedule": par.pp_schedule,
                            "grad_accum": per_worker // b,
                            "extra_compute": calc.recompute_overhead(shape, seq, recompute, flash),
                        })  # fmt: skip
        found.sort(
            key=lambda f: (f["devices"], f["extra_compute"], -f["micro_batch"], f["zero"], f["peak"], f["ep"])
        )
    return found[:limit]


def fit_card_one_by_one(shape, seq, capacity, recipe="mixed", optimizer="adamw", paged=False, flash=False,
                        limit=60):  # fmt: skip
    """calc.plan.fit_card as it was: every fine-tuning, recomputation and micro-batch walked one by one."""
    if shape.moe_layers:
        return []
    found = []
    for tune in fit_variants(shape, optimizer, paged):
        if finetune.check(shape, tune):
            continue
        for recompute in calc.RECOMPUTE:
            if flash and recompute == "selective":
                continue
            best = None
            for b in FIT_MICRO_BATCHES:
                segs = finetune.segments(shape, seq, b, recipe, recompute, calc.RECIPES[recipe].activations, tune,
                                         flash)  # fmt: skip
                top, at = peak(segs)
                if top > capacity:
                    break
                best = (b, top, label_at(segs, at))
            if best is not None:
                found.append({
                    "finetune": tune.mode, "optimizer": tune.optimizer, "rank": tune.rank if tune.adapters else 0,
                    "targets": list(tune.targets) if tune.adapters else [], "recompute": recompute,
                    "micro_batch": best[0], "peak": best[1], "peak_event": best[2],
                    "trainable_params": finetune.trainable_params(shape, tune), "flash": flash,
                    "extra_compute": calc.recompute_overhead(shape, seq, recompute, flash),
                })  # fmt: skip
    found.sort(key=lambda f: (f["extra_compute"], -f["micro_batch"], f["peak"]))
    return found[:limit]


def capacity_near(shape, seq, recipe, fraction):
    """A fraction of one device's peak at one sequence, fully recomputed: below 1, only a layout over several devices
    can fit."""
    return max(1, int(calc.step(shape, seq, 1, recipe, "full")["peak"] * fraction))


@settings(max_examples=60, deadline=None)
@given(
    shape=st.one_of(modern_shapes(), moe_shapes()),
    seq=st.integers(1, 4096),
    batch=st.sampled_from([1, 2, 3, 8, 12, 64, 96, 1024]),
    fraction=st.integers(1, 96).map(lambda n: n / 64),
    recipe=recipes,
    sequence_parallel=st.booleans(),
    flash=st.booleans(),
    max_devices=st.sampled_from([4, 64, 4096]),
    limit=st.sampled_from([1, 7, 50]),
)
def test_plan_equals_walking_every_layout(
    shape, seq, batch, fraction, recipe, sequence_parallel, flash, max_devices, limit
):
    """The planner's list is, byte for byte, the one walking every layout one by one gives."""
    capacity = capacity_near(shape, seq, recipe, fraction)
    args = (shape, seq, batch, capacity, recipe, sequence_parallel, flash, max_devices, limit)
    assert plan(*args) == plan_one_by_one(*args)


@settings(max_examples=60, deadline=None)
@given(
    shape=modern_shapes(),
    seq=st.integers(1, 4096),
    fraction=st.integers(1, 128).map(lambda n: n / 64),
    recipe=recipes,
    optimizer=st.sampled_from(list(OPTIMIZERS)),
    paged=st.booleans(),
    flash=st.booleans(),
)
def test_fit_card_equals_walking_every_tuning(shape, seq, fraction, recipe, optimizer, paged, flash):
    """The fit list is, byte for byte, the one walking every tuning and micro-batch one by one gives."""
    capacity = capacity_near(shape, seq, recipe, fraction)
    args = (shape, seq, capacity, recipe, optimizer, paged, flash)
    assert fit_card(*args) == fit_card_one_by_one(*args)


@settings(max_examples=150, deadline=None)
@given(
    shape=st.one_of(modern_shapes(), moe_shapes()),
    seq=st.integers(1, 4096),
    micro_batch=st.integers(1, 16),
    recipe=recipes,
    recompute=recomputes,
    dp=st.sampled_from([1, 2, 3, 8]),
    zero=st.integers(0, 3),
    extra=st.integers(0, 3),
    sequence_parallel=st.booleans(),
    flash=st.booleans(),
    data=st.data(),
)
def test_floors_are_under_the_peak(
    shape, seq, micro_batch, recipe, recompute, dp, zero, extra, sequence_parallel, flash, data
):
    """What the planner prunes by never exceeds the walk's peak, and its peak is calc.api.worst_stage's."""
    tp = data.draw(st.sampled_from([t for t in TP_DEGREES if not check(shape, Parallel(tp=t))]))
    pp = data.draw(st.integers(1, min(shape.layers, 8)))
    eps = [e for e in (1, 2, 4, 8) if shape.experts % e == 0 and dp % e == 0] if shape.moe_layers else [1]
    ep = data.draw(st.sampled_from(eps))
    par = Parallel(dp, tp, pp, zero if dp > 1 else 0, sequence_parallel and tp > 1, flash, ep)
    assert check(shape, par) is None
    grad_accum = pp + extra
    shared = _Layouts(shape, seq, recipe, flash)
    states = shared.states(par)
    top = worst_stage(shape, seq, micro_batch, recipe, recompute, 2, par, grad_accum)[2][0]
    assert max(states) <= shared.floor(par, states, micro_batch, recompute, grad_accum) <= top
    assert shared.peak(par, micro_batch, recompute, grad_accum, math.inf) == top
    below = shared.peak(par, micro_batch, recompute, grad_accum, top - 1)  # stops at the first walk above
    assert top - 1 < below <= top


def test_plan_llama_2_70b():
    """llama-2-70b at a global batch of 1,024 on 80 GB, the page's slowest common question: the same 50 layouts."""
    shape = calc.PRESETS["llama-2-70b"]
    rows = plan(shape, 4096, 1024, 80 * calc.GB)
    assert rows == plan_one_by_one(shape, 4096, 1024, 80 * calc.GB)
    assert len(rows) == 50 and all(r["peak"] <= 80 * calc.GB for r in rows)


@pytest.mark.slow  # a fresh Python over the stored grid's subset; the core: test_plan_equals_walking_every_layout
def test_stored_answers_are_unchanged():
    """The CLI's --plan --json and --fit-card --json as stored before the planner got faster (a subset; the
    whole grid: `python scripts/plan_outputs.py --check`)."""
    out = subprocess.run(
        [sys.executable, "scripts/plan_outputs.py", "--check", "--only", "--preset (gpt2|decoder|llama-2-70b) "],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert " answers equal the stored ones" in out.stderr and "differs" not in out.stderr
