"""The deck's numbers and the walk's invariants."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calc
from calc import eager
from calc.walk import CATEGORIES, category_peaks, events, peak, segments
from strategies import micro_batches, moe_shapes, recipes, recomputes, seqs, shapes

LLAMA = calc.PRESETS["llama-7b"]
DECODER = calc.PRESETS["decoder"]

# The deck's table (GB, one decimal): weights, gradients, optimizer, master, activations, logits.
DECK_CELLS = {
    "mixed-none": ("13.5", "13.5", "53.9", "27.0", "104.2", "0.8"),
    "mixed-selective": ("13.5", "13.5", "53.9", "27.0", "18.3", "0.8"),
    "mixed-full": ("13.5", "13.5", "53.9", "27.0", "1.1", "0.8"),
    "fp32-none": ("27.0", "27.0", "53.9", "0.0", "104.2", "0.8"),
}
DECK_PEAKS = {"mixed-none": "199.5", "mixed-selective": "116.1", "mixed-full": "110.7", "fp32-none": "186.3"}


@pytest.fixture(scope="module")
def rows():
    return {row["id"]: row for row in calc.table(LLAMA, 4096, 1)}


@pytest.mark.parametrize("row_id", DECK_CELLS)
def test_deck_table_cells(rows, row_id):
    """Every category cell of the deck's table, at its rounding."""
    assert tuple(calc.format_gb(rows[row_id]["bytes"][c]) for c in calc.CATEGORIES) == DECK_CELLS[row_id]


@pytest.mark.parametrize("row_id", ["mixed-none", "mixed-full", "fp32-none"])
def test_deck_peaks_reproduced(rows, row_id):
    """The honest walk reproduces three of the deck's four peaks exactly."""
    assert calc.format_gb(rows[row_id]["peak"]) == DECK_PEAKS[row_id]


def test_selective_peak_differs_from_deck_by_the_double_counted_checkpoint(rows):
    """Selective: 115.8 GB, not the deck's 116.1; the deck's rule adds 34sbh and drops the 16-bit logits."""
    ours = rows["mixed-selective"]["peak"]
    assert calc.format_gb(ours) == "115.8"
    sbh = 4096 * 4096
    deck_rule = ours + 34 * sbh - 2 * 4096 * 32000  # re-create 194sbh on top of 34sbh; logits already freed
    assert calc.format_gb(deck_rule) == DECK_PEAKS["mixed-selective"]


def test_peak_events(rows):
    """Where each peak is set: head gradient (no recomputation), first or last layer's recomputation."""
    assert rows["mixed-none"]["peak_event"].startswith("loss and head backward")
    assert rows["fp32-none"]["peak_event"].startswith("loss and head backward")
    assert rows["mixed-selective"]["peak_event"] == "backward layer 32: recompute dropped activations"
    assert rows["mixed-full"]["peak_event"] == "backward layer 1: recompute dropped activations"


def test_sixteen_n():
    """16N = 107.8 GB for LLaMA 7B; the activations are 104.2 GB."""
    s = calc.step(LLAMA)
    assert sum(s["bytes"][c] for c in ("weights", "gradients", "optimizer", "master")) == 16 * s["params"]
    assert calc.format_gb(16 * s["params"]) == "107.8"
    assert s["activations_per_layer"] == 4096 * 4096 * (34 + 5 * 32 * 4096 // 4096)


def test_decoder_figures():
    """The Decoder: 86,016 bytes of state, 2,496 values per sequence per block, peak 286,208 bytes."""
    s = calc.step(DECODER, seq=8, micro_batch=16)
    assert 16 * s["params"] == 86_016
    assert calc.layer_bytes(DECODER, 8, 1) // 2 == 2_496
    assert s["peak"] == 286_208


@settings(max_examples=200, deadline=None)
@given(shapes(), seqs, micro_batches, recipes, recomputes)
def test_walk_invariants(shape, seq, b, recipe, recompute):
    """Peak >= static state and every running total; allocations minus frees = what remains; totals add up."""
    s = calc.step(shape, seq, b, recipe, recompute)
    walk = s["events"]
    assert s["peak"] == max(e["total"] for e in walk) == walk[s["peak_index"]]["total"]
    assert s["peak"] >= s["static"]
    assert walk[s["peak_index"]]["label"] == s["peak_event"]
    running = dict.fromkeys(calc.CATEGORIES, 0)
    for e in walk:
        running[e["category"]] += e["bytes"]
        assert e["totals"] == running and e["total"] == sum(running.values())
        assert all(v >= 0 for v in running.values())
    # After the step only the state that persists across steps remains (Megatron's gradient buffer too).
    persists = ("weights", "optimizer", "master") + (("gradients",) if calc.RECIPES[recipe].grad_buffer else ())
    assert running == {c: s["bytes"][c] if c in persists else 0 for c in calc.CATEGORIES}
    assert sum(e["bytes"] for e in walk) == s["static"]
    # Each category's high-water mark never exceeds its full size.
    for c in ("weights", "gradients", "optimizer", "master", "logits"):
        assert max(e["totals"][c] for e in walk) == s["bytes"][c]


@settings(max_examples=100, deadline=None)
@given(shapes(), seqs, micro_batches, recipes, recomputes)
def test_fast_peak_equals_expanded_walk(shape, seq, b, recipe, recompute):
    """The segment-wise peak equals the maximum over the expanded event list, at the same event."""
    segs = segments(shape, seq, b, recipe, recompute)
    walk = events(segs)
    totals = [e["total"] for e in walk]
    assert peak(segs) == (max(totals), totals.index(max(totals)))


@settings(max_examples=100, deadline=None)
@given(shapes(), seqs, micro_batches, recipes)
def test_recomputation_order(shape, seq, b, recipe):
    """Activations fall from none to selective to full; so does the peak, never below the state."""
    steps = [calc.step(shape, seq, b, recipe, r) for r in calc.RECOMPUTE]
    acts = [s["bytes"]["activations"] for s in steps]
    assert acts[0] >= acts[1] >= acts[2]
    assert steps[0]["peak"] >= steps[2]["peak"] >= steps[0]["static"]


@settings(max_examples=100, deadline=None)
@given(shapes(), seqs, micro_batches, recipes, recomputes, st.integers(1, 8))
def test_peak_grows_with_sequence_and_batch(shape, seq, b, recipe, recompute, k):
    """More tokens never need less memory."""
    base = calc.step(shape, seq, b, recipe, recompute)["peak"]
    assert calc.step(shape, seq + k, b, recipe, recompute)["peak"] >= base
    assert calc.step(shape, seq, b + k, recipe, recompute)["peak"] >= base


@given(shapes(), st.lists(seqs, min_size=1, max_size=20), micro_batches, recipes, recomputes)
def test_sweep_matches_step(shape, seq_list, b, recipe, recompute):
    """The sweep's peaks are the step's peaks."""
    assert calc.sweep(shape, seq_list, b, recipe, recompute) == [
        calc.step(shape, s, b, recipe, recompute)["peak"] for s in seq_list
    ]


def test_every_event_has_a_source_and_a_known_category():
    """Each event names a category and where its size comes from."""
    for recompute in calc.RECOMPUTE:
        for e in calc.step(LLAMA, recompute=recompute)["events"]:
            assert e["category"] in calc.CATEGORIES
            assert e["phase"] in ("start", "forward", "backward", "optimizer")
            assert e["source"]


def test_fp32_activations_double():
    """Counting activations at 4 bytes doubles the 16-bit formula."""
    two = calc.step(DECODER, 8, 4, "fp32", "none")
    four = calc.step(DECODER, 8, 4, "fp32", "none", activation_bytes=4)
    assert four["bytes"]["activations"] == 2 * two["bytes"]["activations"]


@settings(max_examples=60, deadline=None)
@given(shapes(), st.lists(seqs, min_size=1, max_size=5), micro_batches, recipes, recomputes,
       st.sampled_from([(1, 1, 1, 0), (2, 2, 2, 1), (8, 1, 4, 3), (4, 2, 1, 2)]), st.sampled_from([None, 1, 4, 8]))
def test_sweep_peak_of_is_peak(shape, seq_list, b, recipe, recompute, layout, accum):
    """The sweep's compiled peak (walk.peak_of) gives exactly the walks' own peaks, sequence by sequence."""
    from calc.api import walks
    from calc.parallel import Parallel
    from calc.recipes import RECIPES
    from calc.walk import seq_sizes, template

    dp, tp, pp, zero = layout
    par = Parallel(dp=dp, tp=tp, pp=pp, zero=zero)
    if shape.layers < pp or shape.heads % tp or shape.kv_heads % tp:
        return
    p = RECIPES[recipe].activations
    templates = [template(shape, recipe, recompute, par, *w) for w in walks(par, accum, shape)]
    want = [max(peak(t, seq_sizes(shape, s, b, recompute, p, par))[0] for t in templates) for s in seq_list]
    assert calc.api.sweep(shape, seq_list, b, recipe, recompute, par, accum) == want


def test_one_byte_activations_are_half_of_16_bit():
    """FP8 activations (1 byte a value) count half of the 16-bit ones, not zero (calc.activations.at_width)."""
    from calc import activations, finetune, walk

    shape = calc.PRESETS["llama-7b"]
    one, two = (walk.seq_sizes(shape, 4096, 1, "none", b) for b in (1, 2))
    assert one["kept"] > 0 and 2 * one["kept"] == two["kept"] and 2 * one["logits16"] == two["logits16"]
    kept, full = finetune.layer_bytes(shape, 4096, 1, "none", 1, None)
    assert (2 * kept, 2 * full) == finetune.layer_bytes(shape, 4096, 1, "none", 2, None)
    assert activations.at_width(10, 1) == 5 and activations.at_width(10, 4) == 20


@settings(max_examples=60, deadline=None)
@given(shapes(), st.integers(1, 4096), st.integers(1, 8), recipes, st.sampled_from(["none", "full"]),
       st.sampled_from(["eager", "sdpa"]), st.sampled_from(["cuda", "cpu"]), st.booleans())  # fmt: skip
def test_category_peaks_are_the_expanded_walks(shape, seq, b, recipe, recompute, attention, device, deck):
    """Each category's high-water mark found segment by segment is the one found by expanding every event
    (the eager walk's `bytes`; the deck's walk too), on walks with repeated layers of either sign."""
    shape = shape.replace(family="llama", positions="rope", norm="rms")
    segs = segments(shape, seq, b, recipe, recompute) if deck else eager.segments(
        shape, seq, b, recipe, recompute, None, attention, device)  # fmt: skip
    expanded = events(segs)
    assert category_peaks(segs) == {c: max(e["totals"][c] for e in expanded) for c in CATEGORIES}


@settings(max_examples=60, deadline=None)
@given(shapes(), recipes, recomputes, st.sampled_from([None, 1, 4]),
       st.lists(st.tuples(*(st.integers(-(10**12), 10**12) for _ in range(4))), min_size=1, max_size=4),
       st.booleans())  # fmt: skip
def test_the_sums_at_a_time_are_the_peak_at_each_size(shape, recipe, recompute, accum, drawn, signed):
    """walk.peaks_over (the chart's sweep) is walk.peak_of at each set of sizes, for any sizes, negative ones
    included (where it cannot drop the sums another is never below): the same integers."""
    from calc.api import walks
    from calc.parallel import SINGLE
    from calc.walk import PARTS_OF, peak_forms, peak_of, peaks_over, template

    templates = [template(shape, recipe, recompute, SINGLE, *w) for w in walks(SINGLE, accum)]
    sizes = []
    for values in drawn:  # sizes as a walk has them (at least 0: the sums another is never below dropped), or any
        values = values if signed else [abs(v) for v in values]
        s = dict(zip(("logits16", "logits32", "kept", "recomputed"), values, strict=True))
        s |= {"moe:" + k: 3 * v for k, v in s.items() if k in ("kept", "recomputed")}
        s |= {name: sum(sign * s[part] for part, sign in terms) for name, terms in PARTS_OF.items()}
        sizes.append(s)
    top = peak_of(*templates)
    columns = {name: [s[name] for s in sizes] for name in sizes[0]}
    assert peaks_over(peak_forms(*templates), columns) == [top(s) for s in sizes]


@settings(max_examples=40, deadline=None)
@given(shapes(), seqs, micro_batches, st.sampled_from([(1, 1, 1, 0), (2, 2, 2, 1), (8, 1, 4, 3), (4, 2, 1, 2)]),
       st.sampled_from([None, 1, 4]))  # fmt: skip
def test_each_table_row_is_its_step(shape, seq, b, layout, accum):
    """calc.table's rows (which do not expand the events) are step()'s bytes, peak and peak event."""
    from calc.parallel import Parallel

    dp, tp, pp, zero = layout
    par = Parallel(dp=dp, tp=tp, pp=pp, zero=zero)
    if shape.layers < pp or shape.heads % tp or shape.kv_heads % tp:
        return
    for row in calc.table(shape, seq, b, par, accum):
        s = calc.step(shape, seq, b, row["recipe"], row["recompute"], par=par, grad_accum=accum)
        assert (row["bytes"], row["peak"], row["peak_event"]) == (s["bytes"], s["peak"], s["peak_event"])


@settings(max_examples=60, deadline=None)
@given(st.one_of(shapes(), moe_shapes()), st.lists(seqs, min_size=1, max_size=5), micro_batches, recomputes,
       st.sampled_from([1, 2, 4]))  # fmt: skip
def test_a_sweeps_columns_are_the_part_sizes_at_each_length(shape, lengths, b, recompute, p):
    """walk.part_columns (the chart's sweep, a list a size) holds walk.part_sizes at each sequence length, dense
    and mixture-of-experts layers alike, and a sweep of no lengths is empty."""
    from calc.walk import part_columns, part_sizes, token_parts

    parts = [token_parts(shape, s, b) for s in lengths]
    columns = part_columns(parts, shape, lengths, b, recompute, p)
    assert [{name: column[i] for name, column in columns.items()} for i in range(len(lengths))] == [
        part_sizes(part, shape, s, b, recompute, p) for part, s in zip(parts, lengths, strict=True)]
    assert calc.sweep(shape, [], b, "mixed", recompute) == []


@settings(max_examples=60, deadline=None)
@given(moe_shapes(), st.integers(3, 6), seqs, micro_batches, recipes, recomputes, st.integers(1, 12))
def test_the_deck_pipelines_busiest_stage_is_found_wherever_the_experts_lie(shape, pp, seq, b, recipe, recompute, m):
    """The deck walk walks the first stage, the last, and each stage in between whose dense and mixture-of-experts
    layers lie otherwise than the first's (calc.api.heavier_stages): its peak is the largest of every stage's,
    walked one by one, wherever the config puts its dense layers (DeepSeek's first ones, Llama 4's interleaved, or
    one layer of experts later in a middle stage than in the first, recomputed in backward beside more gradients)."""
    from calc.api import walks, worst_stage
    from calc.parallel import Parallel

    shape = shape.replace(layers=max(shape.layers, pp))  # every stage holds a layer (dense_at stays in range)
    par = Parallel(pp=pp)
    every = [(s, min(pp - s, m), acc) for s in range(pp) for acc in (False, True) if not acc or m > min(pp - s, m)]
    brute = max(peak(segments(shape, seq, b, recipe, recompute, 2, par, *w))[0] for w in every)
    assert worst_stage(shape, seq, b, recipe, recompute, 2, par, m)[2][0] == brute
    assert {w[0] for w in walks(par, m, shape)} >= {0, pp - 1}


def test_a_middle_stage_whose_layer_of_experts_lies_later_is_walked():
    """Six layers over three stages, experts in layer 0 and layer 3: the first stage and the second each hold one
    dense layer and one of experts, but the second recomputes its experts last in backward, beside more of its
    gradients, and peaks higher (a case Hypothesis found; counting each kind of layer alone missed it)."""
    from calc.api import worst_stage

    shape = calc.Shape(name="d", layers=6, hidden=1, heads=1, kv_heads=1, ffn=1, vocab=1, gated_ffn=False,
                  experts=1, experts_per_token=1, expert_ffn=4, dense_layers=4, dense_at=(2, 3, 5, 6))  # fmt: skip
    par = calc.Parallel(pp=3)
    first, second = (peak(segments(shape, 1, 25, "mixed", "full", 2, par, s, 1, False))[0] for s in (0, 1))
    assert second > first
    assert worst_stage(shape, 1, 25, "mixed", "full", 2, par, 1)[0] == (1, 1, False)


def test_a_middle_stage_that_holds_the_experts_is_the_pipelines_busiest():
    """DeepSeek-V3 over 16 stages: the first holds its three dense layers and one of experts, the second four of
    experts and peaks higher, which the deck walk now reports (it walked the first and last stages only)."""
    shape = calc.PRESETS["deepseek-v3"]
    step = calc.step(shape, 4096, 1, "mixed", "full", par=calc.Parallel(pp=16))
    assert step["stage"] == 1
    first = peak(segments(shape, 4096, 1, "mixed", "full", 2, calc.Parallel(pp=16), 0, 16, False))[0]
    assert step["peak"] > first
