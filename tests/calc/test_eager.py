"""The eager walk (calc.eager): its invariants, and that the deck walk stays the default."""


import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import calc
from calc import eager, eager_step
from calc.api import eager_peak
from calc.families.config import dense_layers
from calc.inputs import eager_lacks, family_problem
from calc.parallel import stage_layers
from calc.recipes import state_bytes
from calc.walk import events, peak
from strategies import micro_batches, recipes, recomputes, seqs, shapes

DECODER = calc.PRESETS["decoder"]
PERSISTENT = ("weights", "optimizer", "master")
EXPANDED = 24  # the deepest model drawn where a test expands the eager walk or replays every layer (Gemma 2's
# layers alternate: each is replayed): its runs of one kind of layer are stretched as a 96-layer model's are (more
# than eager_step.SMALL layers), Gemma 3's pattern of six comes four times (tests/test_eager_kinds.py draws as deep)


# the code the eager walk replays (Mixtral and Qwen2-MoE: Llama's with a sparse block; Qwen3-MoE: Qwen3's)
families = st.sampled_from(["llama", "gpt2", "decoder", "mixtral", "qwen2_moe", "gemma", "gemma2", "gemma3_text",
                            "qwen3_moe"])
DENSE = {"experts": 0, "experts_per_token": 0, "expert_ffn": 0, "shared_expert_ffn": 0, "shared_expert_gate": False,
         "dense_layers": 0, "capacity_factor": 0.0}  # fmt: skip
# Gemma's code: GemmaRMSNorm, rotary positions, a gated bias-free MLP; Gemma 2's soft-caps and alternating
# sliding layers, Gemma 3's five sliding layers of six (and its q/k norms), windows shorter than most sequences
GEMMA = {
    "gemma": {},
    "gemma2": {"norms_per_layer": 4, "attn_softcap": True, "logit_softcap": True, "pattern": 2},
    "gemma3_text": {"norms_per_layer": 4, "pattern": 6},
}


def as_family(shape: calc.Shape, family: str) -> calc.Shape:
    """The shape as that family's code writes it (GPT-2: every head's keys and values, LayerNorm, a plain
    feed-forward layer, learned positions; Mixtral: bias-free SwiGLU experts, top-2 of 4 of the drawn width;
    Qwen2-MoE: top-4 of 8 narrower ones and a gated shared expert, every other layer dense; Qwen3-MoE: top-4 of 8
    narrower ones, renormalised; Gemma: GEMMA), so that no draw is thrown away."""
    if family == "gpt2":
        shape = shape.replace(kv_heads=shape.heads, gated_ffn=False, norm="layer", positions="learned")
    if family == "mixtral":
        shape, family = shape.replace(gated_ffn=True, bias=False, experts=4, experts_per_token=2), "llama"
    if family == "qwen2_moe":  # decoder_sparse_step 2: the odd layers dense (of two or more), as the reader places them
        placed = dense_layers([i % 2 == 1 for i in range(shape.layers)] if shape.layers > 1 else [True])
        moe = {"experts": 8, "experts_per_token": 4, "expert_ffn": max(1, shape.ffn // 4), **placed}
        shared = {"shared_expert_ffn": shape.ffn, "shared_expert_gate": True}
        shape = shape.replace(gated_ffn=True, bias=False, qkv_bias=True, **moe, **shared)
        family = "llama"
    if family in GEMMA:
        own = dict(GEMMA[family])
        pattern = own.pop("pattern", 0)
        types = "".join("f" if (i + 1) % pattern == 0 else "s" for i in range(shape.layers)) if pattern else ""
        shape = shape.replace(norm="rms", positions="rope", gated_ffn=True, bias=False, qkv_bias=False,
                              final_norm=True, **DENSE, **own, layer_types=types,
                              sliding_window=16 if pattern else 0)  # fmt: skip
    if family == "qwen3_moe":
        moe = {"experts": 8, "experts_per_token": 4, "expert_ffn": max(1, shape.ffn // 4), "norm_topk_prob": True}
        shape = shape.replace(gated_ffn=True, bias=False, qkv_bias=False, **moe)
    shape = shape.replace(family=family)
    assert family_problem(shape) is None and eager_lacks(shape) is None
    return shape


def tokens(shape: calc.Shape, seq: int, b: int) -> int:
    """The token batch a transformers step starts and ends with (the Decoder's walk leaves it out)."""
    return 0 if shape.family == "decoder" else 8 * seq * b


@settings(max_examples=200, deadline=None)
@given(
    shapes(max_layers=EXPANDED),
    seqs,
    micro_batches,
    recipes,
    recomputes,
    st.sampled_from([2, 4]),
    families,
    st.sampled_from(["eager", "sdpa"]),
)
def test_eager_walk_invariants(shape, seq, b, recipe, recompute, p, family, attention):
    """Peak = the largest running total; allocations minus frees leave the static state; no category
    goes negative; the segment-wise peak equals the expanded walk's."""
    shape = as_family(shape, family)
    assume(family == "decoder" or recompute != "selective")
    s = calc.step(shape, seq, b, recipe, recompute, p, walk="eager", attention=attention)
    walk = s["events"]
    totals = [e["total"] for e in walk]
    assert s["peak"] == max(totals) == walk[s["peak_index"]]["total"]
    assert s["peak_index"] == totals.index(max(totals))
    assert s["peak"] >= s["static"]
    running = dict.fromkeys(calc.CATEGORIES, 0)
    for e in walk:
        running[e["category"]] += e["bytes"]
        assert e["totals"] == running and e["total"] == sum(running.values())
        assert all(v >= 0 for v in running.values())
        assert e["source"]
    # The step ends where it started: the state (with the token batch; eager PyTorch makes gradients in
    # backward, whatever their dtype).
    started = walk[sum(e["phase"] == "start" for e in walk) - 1]
    assert running == started["totals"] and sum(e["bytes"] for e in walk) == s["static"] == started["total"]
    state = state_bytes(s["params"], recipe)
    assert s["static"] == sum(state.values()) - state["gradients"] + tokens(shape, seq, b)
    segs = eager.segments(shape, seq, b, recipe, recompute, p, attention)
    assert peak(segs) == (s["peak"], s["peak_index"])
    assert sum(len(seg.events) * seg.repeats for seg in segs) == len(walk)  # what events(segs) would expand


@settings(max_examples=100, deadline=None)
@given(shapes(max_layers=EXPANDED), seqs, micro_batches, recipes, recomputes, families)
def test_eager_static_state_matches_the_deck(shape, seq, b, recipe, recompute, family):
    """Both walks start from the same resident state (and the token batch) and write the same gradients."""
    shape = as_family(shape, family)
    assume(family == "decoder" or recompute != "selective")
    assume(not calc.RECIPES[recipe].grad_buffer)
    deck = calc.step(shape, seq, b, recipe, recompute)
    ours = calc.step(shape, seq, b, recipe, recompute, walk="eager", device="cpu")  # bytes as asked, unrounded
    counters = sum(e["bytes"] for e in ours["events"] if e["label"] == "AdamW's step counters")
    assert ours["static"] == deck["static"] + tokens(shape, seq, b) + counters
    written = sum(e["bytes"] for e in ours["events"] if e["label"] == "zero_grad: free gradients")
    assert -written == deck["bytes"]["gradients"]


@settings(max_examples=50, deadline=None)
@given(shapes(max_layers=EXPANDED), st.integers(1, 64), st.integers(1, 4), recipes, st.sampled_from(["llama", "gpt2"]))
def test_cuda_allocations_come_in_512_byte_blocks(shape, seq, b, recipe, family):
    """On CUDA every allocation and free of the replayed step is a multiple of 512 bytes (the caching
    allocator's block), each at least the bytes asked for on the CPU."""
    shape = as_family(shape, family)
    cuda = eager_step.replay(shape, seq, b, recipe, "none", "sdpa", "cuda")[0].events
    cpu = eager_step.replay(shape, seq, b, recipe, "none", "sdpa", "cpu")[0].events
    cpu = [(n, e) for n, e in cpu if "in the common dtype" not in e.label]  # CPU only: TensorIterator's casts
    assert [e.label for _, e in cuda] == [e.label for _, e in cpu]
    for (_, c), (_, p) in zip(cuda, cpu, strict=True):
        assert c.bytes % 512 == 0 and abs(c.bytes) >= abs(p.bytes) and abs(c.bytes) - abs(p.bytes) < 512


@settings(max_examples=100, deadline=None)
@given(shapes(), seqs, micro_batches, recipes, st.sampled_from([2, 4]))
def test_eager_recomputation_order(shape, seq, b, recipe, p):
    """What a Decoder layer keeps falls from none to selective to full."""
    shape = shape.replace(family="decoder")
    kept = [eager.kept_bytes(shape, seq, b, r, p) for r in calc.RECOMPUTE]
    assert kept[0] > kept[1] > kept[2] > 0


@settings(max_examples=100, deadline=None)
@given(shapes(max_layers=EXPANDED), seqs, micro_batches, recipes, recomputes, st.integers(1, 8), families)
def test_eager_peak_grows_with_tokens(shape, seq, b, recipe, recompute, k, family):
    """More tokens never need less memory."""
    shape = as_family(shape, family)
    assume(family == "decoder" or recompute != "selective")
    # api.eager_peak: the peak calc.step's eager walk reports (test_eager_walk_invariants), without expanding it
    base = eager_peak(shape, seq, b, recipe, recompute)[0]
    assert eager_peak(shape, seq + k, b, recipe, recompute)[0] >= base
    assert eager_peak(shape, seq, b + k, recipe, recompute)[0] >= base


@given(shapes())
def test_layer_params_add_up(shape):
    """Attention's and the feed-forward's parameters make up the layer."""
    shape = shape.replace(family="decoder")
    assume(not shape.qkv_bias)
    assert sum(eager._layer_params(shape)) == calc.param_counts(shape)["per_layer"]


def test_decoder_saved_values_per_block():
    """At 4 bytes a value the Decoder block keeps 1,696 values per sequence at seq 8, as measured
    (tests/test_measure.py): 1,696 x 4 bytes."""
    assert eager.kept_bytes(DECODER, 8, 1, "none", 4) == 1696 * 4


def test_decoder_eager_peak():
    """The Decoder at 16 sequences of 8 in fp32, as the reference trainer runs it: the peak is in
    cross-entropy's backward, 420,864 bytes (measured on CPU: 423,200, the rest being the token batch,
    the causal masks and Adam's step counters)."""
    s = calc.step(DECODER, 8, 16, "fp32", "none", 4, walk="eager")
    assert s["peak"] == 420_864
    assert s["peak_event"] == "log_softmax backward: gradient of the logits"


def test_deck_is_the_default_and_unchanged():
    """walk="deck" is the default, and the result names the walk it came from."""
    assert calc.step(DECODER, 8, 16) == calc.step(DECODER, 8, 16, walk="deck")
    assert calc.step(DECODER, 8, 16)["config"]["walk"] == "deck"
    assert calc.step(DECODER, 8, 16, walk="eager")["config"]["walk"] == "eager"


def test_eager_refuses_parallelism_and_unknown_walks():
    """The eager walk runs data or tensor parallelism or a pipeline alone, FSDP2 over tensor parallelism, a pipeline
    beside DDP or tensor parallelism, and the course's Decoder on one device; other walk names are refused."""
    with pytest.raises(ValueError, match="Decoder on one device"):
        calc.step(DECODER, 8, 16, par=calc.Parallel(dp=2), walk="eager")
    with pytest.raises(ValueError, match="llama and qwen3's dense layers only"):  # the layers plan's families
        calc.step(DECODER, 8, 16, par=calc.Parallel(tp=2), walk="eager")
    with pytest.raises(ValueError, match="pipeline is measured on llama and qwen3's dense, untied layers only"):
        calc.step(DECODER, 8, 16, par=calc.Parallel(pp=2), walk="eager")
    for par in (calc.Parallel(pp=2, dp=2, tp=2), calc.Parallel(dp=2, tp=2)):
        with pytest.raises(ValueError, match=r"\(DDP, ZeRO 1, FSDP2\), tensor parallelism or a\s+pipeline alone"):
            calc.step(DECODER, 8, 16, par=par, walk="eager")
    for par in (calc.Parallel(pp=2, dp=2, zero=3, pp_schedule="interleaved-1f1b"),
                calc.Parallel(pp=2, dp=2, tp=2, zero=2, sequence_parallel=True)):
        with pytest.raises(ValueError, match=r"pipeline (runs one stage a rank|runs sequence parallelism beside)"):
            calc.step(DECODER, 8, 16, par=par, walk="eager")
    with pytest.raises(ValueError, match="unknown walk"):
        calc.step(DECODER, 8, 16, walk="lazy")


def test_walk_input_is_validated():
    """The "walk" field: deck by default, eager on request, anything else an InputError naming it."""
    assert calc.parse_inputs({}).walk == "deck"
    assert calc.parse_inputs({"walk": " Eager "}).walk == "eager"
    for raw in ({"walk": "lazy"}, {"walk": "eager", "ep": 2, "dp": 2, "preset": "mixtral-8x7b"}):
        with pytest.raises(calc.InputError) as err:
            calc.parse_inputs(raw)
        assert err.value.field == "walk"


def test_cli_walk_flag(capsys):
    """--walk eager --json prints the eager walk; with --table it exits 2 with one line."""
    import json

    from calc.cli import main

    assert main(["--preset", "decoder", "--seq", "8", "--micro-batch", "16", "--walk", "eager", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["walk"] == "eager"
    assert out["peak"] == calc.step(DECODER, 8, 16, walk="eager")["peak"]
    assert main(["--walk", "eager", "--table"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --walk:")


@settings(max_examples=40, deadline=None)
@given(
    shapes(max_layers=EXPANDED),
    st.integers(1, 64),
    st.integers(1, 4),
    recipes,
    st.sampled_from(["none", "full"]),
    st.sampled_from(["eager", "sdpa"]),
    st.sampled_from(["llama", "gpt2", "mixtral", "qwen2_moe", "qwen3_moe"]),
    st.sampled_from(["cuda", "cpu"]),
)
def test_a_deep_model_is_its_middle_layer_repeated(shape, seq, b, recipe, recompute, attention, family, device):
    """The walk replays four layers and stretches the middle ones: event for event the replay of every layer."""
    shape = as_family(shape, family).replace(layers=max(shape.layers, eager_step.SMALL + 1))
    stretched = eager_step.segments(shape, seq, b, recipe, recompute, attention, device)
    whole = eager_step._compress(eager_step.replay(shape, seq, b, recipe, recompute, attention, device)[0].events)
    replayed = [(e["label"], e["bytes"]) for e in events(stretched)][len(stretched[0].events) :]
    assert replayed[: -len(stretched[-1].events)] == [(e["label"], e["bytes"]) for e in events(whole)]


@settings(max_examples=120, deadline=None)
@given(shapes(), st.integers(1, 2048), st.integers(1, 4), recipes, recomputes, st.sampled_from(["eager", "sdpa"]),
       st.integers(2, 16), st.booleans(), st.data())  # fmt: skip
def test_moe_peak_grows_with_experts_per_token(shape, seq, b, recipe, recompute, attention, experts, shared, data):
    """Each token routed to one more expert never needs less memory: every expert tensor has k x tokens rows.
    Drawn as one step from k to k + 1 (each draw two walks, not one per k: the chain holds if every link does)."""
    assume(recompute != "selective")
    shape = as_family(shape, "qwen2_moe" if shared else "mixtral").replace(experts=experts)
    k = data.draw(st.integers(1, experts - 1), label="experts per token")
    shapes_k = [shape.replace(experts_per_token=j) for j in (k, k + 1)]
    peaks = [eager_peak(s, seq, b, recipe, recompute, attention)[0] for s in shapes_k]  # calc.step's eager peak
    assert peaks[0] <= peaks[1]
    assert calc.param_counts(shapes_k[0])["total"] == calc.param_counts(shapes_k[1])["total"]


def test_moe_the_eager_walk_refuses_what_it_does_not_replay():
    """An expert capacity, experts that are not SwiGLU, a shared expert without its gate: the deck walk (dense
    layers among the experts, first or where they lie, are replayed: Shape.moe_layer)."""
    moe = calc.PRESETS["llama-7b"].replace(experts=8, experts_per_token=2)
    assert eager_lacks(moe) is None
    assert eager_lacks(moe.replace(dense_layers=1)) is None
    assert eager_lacks(moe.replace(dense_layers=2, dense_at=(1, 3))) is None
    for changes in ({"capacity_factor": 1.25}, {"gated_ffn": False}, {"shared_expert_ffn": 64},
                    {"family": "gpt2"}):  # fmt: skip
        assert eager_lacks(moe.replace(**changes)), changes


@pytest.mark.parametrize("recipe", ["autocast", "fp32-full"])
def test_autocast_makes_a_weights_fp32_gradient_after_its_matmul_lets_go(recipe):
    """Under autocast a weight's gradient comes in 16 bits out of the matmul's backward; the engine then runs the
    weight's cast's ToCopyBackward0 (created just before the matmul), which makes the fp32 gradient once the
    matmul's node has released what it saved (traced: torch 2.13's CPU profile of a pipeline stage's step). So
    the fp32 gradient comes after the saved input and the 16-bit weight are freed, the 16-bit gradient beside it
    until then. Without autocast the matmul writes the gradient itself, before it lets go of its input."""
    segs = eager_step.segments(calc.PRESETS["qwen3-8b"], 256, 1, recipe, "none", "sdpa", "cpu")
    labels = [e["label"] for e in events(segs) if e["phase"] == "backward"]
    at = {label: i for i, label in reversed(list(enumerate(labels)))}  # the first of each label
    grad, saved = at["gradient of layer 36 down_proj.weight"], at["free layer 36: act(gate) * up"]
    if recipe == "autocast":
        work = at["layer 36 down_proj backward working memory"]
        assert work < saved < at["free 16-bit copy of layer 36 down_proj.weight"] < grad
        assert labels[grad + 1] == "free layer 36 down_proj backward working memory"
    else:
        assert grad < saved


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_event_labels_name_the_layer_that_made_the_tensor(recompute):
    """Every label is filled in (no "{layer}" left over outside the layers), and a tensor freed or given its
    gradient in another layer than the one that made it is named by the layer that made it: each layer's output is
    freed once, under its own number, whether the next layer or the backward pass lets it go."""
    shape = calc.PRESETS["llama-3.2-1b"]
    step = calc.step(shape, 128, 1, "autocast", recompute, walk="eager", device="cpu")
    labels = [e["label"] for e in step["events"]]
    assert not any("{" in label or "}" in label for label in labels)
    numbers = {int(n) for label in labels for n in re.findall(r"\blayer (\d+)\b", label)}
    assert numbers == set(range(1, shape.layers + 1))
    out = "layer {}: residual after the feed-forward layer"
    freed = [label for label in labels if re.fullmatch("free " + out.format(r"\d+"), label)]
    assert sorted(freed) == sorted(f"free {out.format(n)}" for n in range(1, shape.layers + 1))  # each once
    fed = r"^gradient of layer (\d+): residual after the feed"
    given = {int(n) for label in labels for n in re.findall(fed, label)}
    assert given == set(range(1, shape.layers + 1))  # each layer's output gets its gradient under its number


@pytest.mark.parametrize("par", [calc.Parallel(pp=2), calc.Parallel(tp=2, sequence_parallel=True)])
def test_event_labels_of_a_stage_or_a_rank_name_the_models_layers(par):
    """A pipeline stage's events name the model's layers, the ones it holds (its replay numbers them from 1), and
    so do a tensor-parallel rank's under sequence parallelism; no label is left with a "{layer}"."""
    shape = calc.PRESETS["llama-3.1-8b"].replace(layers=4)
    step = calc.step(shape, 512, 1, "autocast", walk="eager", device="cpu", par=par)
    labels = [e["label"] for e in step["events"]]
    assert not any("{" in label or "}" in label for label in labels)
    held = stage_layers(shape, par.pp, step["stage"]) if par.pp > 1 else range(1, shape.layers + 1)
    assert {int(n) for label in labels for n in re.findall(r"\blayer (\d+)\b", label)} == set(held)
