"""The eager walk replays one layer of each kind (calc.eager_step.layer_spans): the same segments, event for
event and layer for layer, as replaying every layer, for every shape, recipe, checkpointing and tuning."""

import dataclasses
import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_eager import as_family

import calc
from calc import eager_step, finetune
from calc.families import FAMILIES, family, tuning_lacks
from calc.inputs import eager_lacks, eager_tuning_problem
from strategies import recipes, shapes


def plain(segs) -> list:
    """Segments as comparable data: their events and the layers and micro-batches they repeat over."""
    return [(s.events, None if s.reps is None else (s.reps.layers, s.reps.micro_batches)) for s in segs]


def same_as_whole(shape, args, **how) -> list[tuple[int, int]]:
    """Assert the fast replay's segments are the whole replay's; return the layers it replayed."""
    fast = eager_step._replayed(shape, args, **how)[2]
    assert plain(fast) == plain(eager_step.whole(shape, args, **how))
    return eager_step.layer_spans(shape, args[-1])


tunings = st.one_of(
    st.just(finetune.DEFAULT),
    st.builds(lambda k: finetune.Tuning(mode="freeze", freeze_layers=k), st.integers(0, 12)),
    st.builds(lambda m, r, t: finetune.Tuning(mode=m, rank=r, targets=t), st.sampled_from(["lora", "qlora"]),
              st.integers(1, 16), st.sampled_from([("q", "v"), ("q", "k", "v", "o", "gate", "up", "down")])),
)  # fmt: skip


DRAWN_FAMILIES = ["llama", "gpt2", "mixtral", "qwen2_moe", "qwen3", "granite"]  # as test_eager.as_family writes them


@settings(max_examples=80, deadline=None)
@given(
    shapes(),
    st.integers(1, 64),
    st.integers(1, 3),
    recipes,
    st.sampled_from(["none", "full"]),
    st.sampled_from(["eager", "sdpa"]),
    st.sampled_from(DRAWN_FAMILIES),
    st.sampled_from(["cuda", "cpu"]),
    tunings,
    st.booleans(),
    st.sampled_from(["transformers", "trl-chunked"]),
)
def test_one_layer_of_each_kind_is_the_whole_replay(
    shape, seq, b, recipe, recompute, attention, fam, device, tune, accumulate, loss_kind
):
    """Random shapes, recipes, checkpointing, LoRA, QLoRA, frozen layers, gradient accumulation, TRL's head."""
    shape = as_family(shape, fam).replace(layers=min(shape.layers, 24))
    assume(eager_tuning_problem(tune, shape) is None)
    assume(tune.mode != "qlora" or recipe in ("autocast", "bf16", "mixed"))
    args = (seq, b, recipe, recompute, attention, device, tune)
    spans = same_as_whole(shape, args, accumulate=accumulate, loss_kind=loss_kind)
    kinds = len(set(eager_step.layer_kinds(shape, tune)))
    # at most SMALL periods of each kind replayed whole, and a period's remainder after them (Qwen2-MoE's dense and
    # expert layers alternating over 9 layers: 4 periods and one layer, 9 spans)
    assert len(spans) <= kinds * (eager_step.SMALL + 1) and spans[-1][1] == shape.layers


def test_a_family_declares_its_kinds_of_layer(monkeypatch):
    """A family whose layer reads its index (here: an extra 1 KB tensor on every layer after the fifth, held
    to the end of the forward, and a dense first layer) keeps its answers when it declares that kind."""
    llama = FAMILIES["llama"]

    def layer(ops, x, cos, sin, mask):
        if ops.rp.layer > 5:
            ops.rp.node("extra", ops.new(1024, 1, "layer {layer}: extra", "test"), inputs=[(x, x.nbytes, "new")])
        return llama.layer(ops, x, cos, sin, mask)

    def kind(shape, i):
        return family.dense_or_moe(shape, i), i > 5

    monkeypatch.setitem(FAMILIES, "llama", dataclasses.replace(llama, layer=layer, layer_kind=kind))
    shape = calc.PRESETS["llama-2-70b"].replace(hidden=64, heads=8, kv_heads=8, ffn=128, vocab=100)
    for recompute in ("none", "full"):
        args = (16, 1, "mixed", recompute, "sdpa", "cuda", finetune.DEFAULT)
        spans = same_as_whole(shape, args)
        assert spans == [(1, 1), (2, 2), (3, 4), (5, 5), (6, 6), (7, 7), (8, 79), (80, 80)]


def test_an_undeclared_kind_in_the_middle_falls_back_to_the_whole_replay(monkeypatch):
    """A layer that differs where the walk looks for the steady state (the third) is caught: the whole model
    is replayed, and the answer is still the whole replay's."""
    llama = FAMILIES["llama"]

    def layer(ops, x, cos, sin, mask):
        if ops.rp.layer == 3:
            ops.rp.node("extra", ops.new(1024, 1, "layer {layer}: extra", "test"), inputs=[(x, x.nbytes, "new")])
        return llama.layer(ops, x, cos, sin, mask)

    monkeypatch.setitem(FAMILIES, "llama", dataclasses.replace(llama, layer=layer))
    shape = calc.PRESETS["llama-7b"].replace(hidden=64, heads=8, kv_heads=8, ffn=128, vocab=100)
    args = (16, 1, "mixed", "none", "sdpa", "cuda", finetune.DEFAULT)
    spans = eager_step.layer_spans(shape, args[-1])
    assert spans == [(1, 1), (2, 2), (3, 31), (32, 32)]
    rp = eager_step.replay(shape, *args, layers=[lo for lo, _ in spans])[0]
    assert eager_step._stretch(eager_step._chunks(rp.events), spans) is None
    same_as_whole(shape, args)


def test_frozen_layers_are_a_kind():
    """freeze_layers splits the layers in two runs: 70B's 80 layers with 10 frozen replay 8 layers, not 80."""
    tune = finetune.Tuning(mode="freeze", freeze_layers=10)
    shape = calc.PRESETS["llama-2-70b"]
    assert eager_step.layer_spans(shape, tune) == [(1, 1), (2, 2), (3, 9), (10, 10), (11, 11), (12, 12),
                                                   (13, 79), (80, 80)]  # fmt: skip
    small = shape.replace(hidden=64, heads=8, kv_heads=8, ffn=128, vocab=100)
    same_as_whole(small, (16, 2, "autocast", "full", "eager", "cpu", tune))


def _kinds(name: str) -> tuple:
    """What decides a preset's kinds of layer beside its layer count: its family, experts and q/k/v biases."""
    shape = calc.PRESETS[name]
    return shape.family, shape.experts > 0, shape.qkv_bias


# The core replays in whole the shallowest preset of each kind whose family the property above does not draw
# (it replays random shapes of DRAWN_FAMILIES both ways, Mixtral and Qwen2-MoE being llama's); `slow` (make
# test) every other preset too.
DRAWN = {as_family(calc.PRESETS["gpt2"], f).family for f in DRAWN_FAMILIES}
SHALLOWEST = {min(group, key=lambda n: (calc.PRESETS[n].layers, calc.PRESETS[n].hidden, n))
              for kind, group in itertools.groupby(sorted(calc.PRESETS, key=_kinds), key=_kinds)
              if kind[0] not in DRAWN}  # fmt: skip


# The presets whose layers the eager walk replays (not the Decoder's, a closed form in calc.eager).
REPLAYED = sorted(n for n, shape in calc.PRESETS.items()
                  if not eager_lacks(shape) and FAMILIES[shape.family].layer is not None)  # fmt: skip


@pytest.mark.parametrize("name", [n if n in SHALLOWEST else pytest.param(n, marks=pytest.mark.slow) for n in REPLAYED])
def test_every_preset_replayed_by_kind_is_its_whole_replay(name):
    """Every preset the eager walk replays (a family added later included, with its own kinds of layer: sliding
    windows, dense first layers): the fast replay's segments are the whole replay's, with and without
    checkpointing, and with frozen layers where the family fine-tunes."""
    shape = calc.PRESETS[name]
    tunes = [finetune.DEFAULT]
    if tuning_lacks(shape, "freeze") is None:
        tunes.append(finetune.Tuning(mode="freeze", freeze_layers=min(3, shape.layers - 1)))
    attention = "sdpa" if "sdpa" in FAMILIES[shape.family].attentions else "eager"  # GPT-OSS's runs eager only
    for recompute, tune in itertools.product(("none", "full"), tunes):
        same_as_whole(shape, (64, 1, "mixed", recompute, attention, "cuda", tune))


@pytest.mark.parametrize("extra", [
    {"model_type": "llama4_text", "num_local_experts": 4, "num_experts_per_tok": 1, "intermediate_size_mlp": 48,
     "interleave_moe_layer_step": 2, "attention_chunk_size": 8},  # Maverick's layout: dense, experts, dense...
    {"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
     "decoder_sparse_step": 1, "mlp_only_layers": [1, 2, 20]},  # dense layers 2, 3 and 21 among the experts
])  # fmt: skip
def test_dense_layers_among_the_experts_are_kinds_of_their_own(extra):
    """Layers that alternate between a dense FFN and the experts replay by kind (Llama 4's period of four: the
    experts every second layer, RoPE off every fourth) as the whole model does, event for event, and replay
    fewer than half the model's 48 layers."""
    cfg = {"num_hidden_layers": 48, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "intermediate_size": 32, "vocab_size": 128, **extra}
    shape = calc.hf.shape_from_config(cfg)
    assert eager_lacks(shape) is None and shape.dense_at
    kinds = [k[0][0] for k in eager_step.layer_kinds(shape, finetune.DEFAULT)]
    assert kinds == ["moe" if shape.moe_layer(i) else "dense" for i in range(1, 49)] and len(set(kinds)) == 2
    for recompute in ("none", "full"):
        spans = same_as_whole(shape, (16, 2, "autocast", recompute, "sdpa", "cpu", finetune.DEFAULT))
        assert len(spans) < shape.layers / 2
