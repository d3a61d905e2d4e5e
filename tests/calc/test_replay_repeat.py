"""The eager walk replays a few periods of each run of layers and repeats the rest (calc.eager_step.layer_spans,
_stretch): its answer is the full replay's, every integer of it, for layers of one kind, alternating kinds
(Gemma 2, GPT-OSS), longer patterns (Gemma 3's six, SmolLM3's layers without rotary positions) and dense layers
before experts (DeepSeek-V3), under every recipe, checkpointing, fine-tuning, loop and loss."""

import contextlib
from unittest import mock

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_eager import as_family

import calc
from calc import eager_step, finetune, loops
from calc.inputs import eager_tuning_problem
from strategies import recipes, shapes

DEEP = 32  # the deepest model drawn: a pattern of six repeated five times (stretched), runs of one kind


def plain(segs) -> list:
    """Segments as comparable data: their events and the layers they repeat over (which fill in the labels)."""
    return [(s.events, None if s.reps is None else s.reps.layers) for s in segs]


@contextlib.contextmanager
def full_replay():
    """The old path, for comparison only: every layer replayed (each its own span), nothing stretched."""
    with mock.patch.object(eager_step, "layer_spans", lambda shape, tune: [(i, i) for i in range(1, shape.layers + 1)]):
        eager_step.trainable_params.cache_clear()
        try:
            yield
        finally:
            eager_step.trainable_params.cache_clear()


def pattern_of(draw, layers: int, kinds: str) -> str:
    """A string of `layers` kinds: a drawn prefix, then a drawn pattern of up to six kinds repeated, then a
    drawn tail, so that runs of a period, and what meets them, both come up."""
    letter = st.sampled_from(kinds)
    prefix = draw(st.text(letter, max_size=3))
    ab = str.maketrans("ab", kinds)
    known = st.sampled_from(["ab", "ba", "aab", "aaab", "aaaaab"]).map(lambda p: p.translate(ab))
    period = draw(st.one_of(known, st.text(letter, min_size=1, max_size=6)))  # Gemma 2's, SmolLM3's, Gemma 3's
    tail = draw(st.text(letter, max_size=2))
    body = (period * layers)[: max(0, layers - len(prefix) - len(tail))]
    return (prefix + body + tail)[:layers].ljust(layers, kinds[0])


@st.composite
def periodic_shapes(draw) -> calc.Shape:
    """A shape of a family whose layers differ by index, with a drawn pattern of kinds: Gemma 2's and 3's sliding
    and full layers (layer_types), SmolLM3's layers without rotary positions, GPT-OSS's alternating sliding
    layers (its own), DeepSeek-V3's dense first layers, or a family of one kind."""
    family = draw(st.sampled_from(["gemma2", "gemma3_text", "smollm3", "gpt_oss", "deepseek_v3", "llama", "qwen2_moe"]))
    layers = draw(st.one_of(st.integers(1, DEEP), st.integers(20, DEEP)))  # deep enough to stretch, often
    if family in ("gemma2", "gemma3_text", "llama", "qwen2_moe"):
        # the layers set before the family's own fields, which read them (Qwen2-MoE's dense_at: a fresh-clone run
        # drew 2 layers with dense_at (1, 3), placed for the drawn shape's 3)
        shape = as_family(draw(shapes(max_layers=DEEP)).replace(layers=layers), family)
        if family in ("gemma2", "gemma3_text"):
            shape = shape.replace(layer_types=pattern_of(draw, layers, "sf"), sliding_window=draw(st.sampled_from(
                [1, 16, 4096])))  # fmt: skip
        return shape
    preset = {"smollm3": "smollm3-3b", "gpt_oss": "gpt-oss-20b", "deepseek_v3": "deepseek-v3"}[family]
    tiny = {"hidden": 64, "heads": 4, "kv_heads": 4 if family == "deepseek_v3" else 2, "ffn": 96, "vocab": 512}
    shape = calc.PRESETS[preset].replace(layers=layers, **tiny)
    if family == "smollm3":
        rope = pattern_of(draw, layers, "rn")
        shape = shape.replace(no_rope_layers=tuple(i + 1 for i, r in enumerate(rope) if r == "n"), head_size=16)
    if family == "gpt_oss":
        shape = shape.replace(head_size=16, experts=4, experts_per_token=2, expert_ffn=32, sliding_window=8)
    if family == "deepseek_v3":
        shape = shape.replace(dense_layers=draw(st.integers(0, layers)), head_size=24, q_rank=32, kv_rank=16,
                              rope_dim=8, v_head_size=16, experts=8, experts_per_token=2, expert_ffn=32,
                              shared_expert_ffn=32, expert_groups=2, group_topk=1)  # fmt: skip
    return shape


tunings = st.one_of(
    st.just(finetune.DEFAULT),
    st.builds(lambda k: finetune.Tuning(mode="freeze", freeze_layers=k), st.integers(1, 12)),
    st.builds(lambda m, r: finetune.Tuning(mode=m, rank=r, targets=("q", "v")), st.sampled_from(["lora", "qlora"]),
              st.integers(1, 8)),
)  # fmt: skip
loops_drawn = st.builds(
    loops.Loop,
    name=st.sampled_from(loops.LOOPS),
    grad_accum=st.integers(1, 3),
    loss=st.sampled_from(["", "transformers", "trl-chunked", "liger-fused"]),
)


@settings(max_examples=60, deadline=None)
@given(periodic_shapes(), st.integers(1, 48), st.integers(1, 2), recipes, st.sampled_from(["none", "full"]),
       st.sampled_from(["eager", "sdpa"]), st.sampled_from(["cuda", "cpu"]), tunings, loops_drawn)  # fmt: skip
def test_the_repeated_replay_is_the_full_replay(shape, seq, b, recipe, recompute, attention, device, tune, loop):
    """calc.step's whole answer (every event, the peak and where it is, each category's peak, a layer's
    activations, the trainable parameters) is the same from the few layers replayed as from every layer."""
    assume(attention in calc.families.FAMILIES[shape.family].attentions)
    assume(tune.default or eager_tuning_problem(tune, shape) is None)
    assume(tune.mode != "qlora" or recipe in ("autocast", "bf16", "mixed"))
    how = {"walk": "eager", "attention": attention, "device": device, "tune": tune, "loop": loop,
           "grad_accum": loop.grad_accum}  # fmt: skip
    try:
        fast = calc.step(shape, seq, b, recipe, recompute, **how)
    except ValueError as e:  # a refusal (an input the walk does not take) must be the full replay's too
        with full_replay():
            try:
                calc.step(shape, seq, b, recipe, recompute, **how)
            except ValueError as again:
                assert str(again) == str(e)
                return
        raise
    with full_replay():
        whole = calc.step(shape, seq, b, recipe, recompute, **how)
    assert fast == whole


@settings(max_examples=40, deadline=None)
@given(periodic_shapes(), st.integers(1, 48), recipes, st.sampled_from(["none", "full"]), tunings, st.booleans())
def test_the_stretched_segments_are_the_whole_replays(shape, seq, recipe, recompute, tune, accumulate):
    """Segment for segment (events and the layers each repeats over), the stretched replay is the whole one."""
    attention = "eager" if shape.family == "gpt_oss" else "sdpa"
    assume(tune.default or eager_tuning_problem(tune, shape) is None)
    assume(tune.mode != "qlora" or recipe in ("autocast", "bf16", "mixed"))
    args = (seq, 1, recipe, recompute, attention, "cuda", tune)
    fast = eager_step._replayed(shape, args, accumulate=accumulate)[2]
    whole = eager_step.whole(shape, args, accumulate=accumulate)
    assert plain(fast) == plain(whole)


def test_an_alternating_model_replays_two_periods_and_its_ends():
    """Gemma 2's 42 alternating layers replay 8 (the first, second, third and last pair), Gemma 3's 62 layers of
    five sliding and one full 26 (four periods of six, and its last two layers), not every layer; and where a
    period's second and third copies differ the whole model is replayed, still the same answer."""
    spans = eager_step.layer_spans(calc.PRESETS["gemma-2-9b"], finetune.DEFAULT)
    assert spans == [(1, 1), (2, 2), (3, 3), (4, 4), (5, 39), (6, 40), (41, 41), (42, 42)]
    assert len(eager_step.layer_spans(calc.PRESETS["gemma-3-27b"], finetune.DEFAULT)) == 26
    shape = calc.PRESETS["gemma-2-9b"].replace(hidden=64, heads=4, kv_heads=2, head_size=16, ffn=96, vocab=512)
    args = (32, 1, "autocast", "full", "eager", "cpu", finetune.DEFAULT)
    rp = eager_step.replay(shape, *args, layers=[lo for lo, _ in spans])[0]
    chunks = eager_step._chunks(rp.events)
    assert plain(eager_step._stretch(chunks, spans)) == plain(eager_step.whole(shape, args))
    third = next(i for i, (layer, _) in enumerate(chunks) if layer == 5)
    changed = [*chunks[:third], (5, chunks[third][1][:-1]), *chunks[third + 1 :]]  # the third period differs
    assert eager_step._stretch(changed, spans) is None
