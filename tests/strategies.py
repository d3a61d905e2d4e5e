"""Hypothesis strategies shared by the tests: valid model shapes and runs."""

from hypothesis import strategies as st

import calc


@st.composite
def shapes(draw, max_layers: int = 96) -> calc.Shape:
    """Any valid shape: heads divide the width, key/value heads divide the heads. `max_layers`: a property of a
    walk expanded event by event (whose cost grows with the depth) draws shallower models, still deeper than the
    eager walk's four replayed layers of a run (calc.eager_step.layer_spans), the same branches at less cost."""
    head_dim = draw(st.sampled_from([1, 2, 4, 8, 16, 64, 128]))
    heads = draw(st.integers(1, 64))
    kv_heads = draw(st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0]))
    positions = draw(st.sampled_from(calc.shape.POSITIONS))
    return calc.Shape(
        name="drawn",
        layers=draw(st.integers(1, max_layers)),
        hidden=heads * head_dim,
        heads=heads,
        kv_heads=kv_heads,
        ffn=draw(st.integers(1, 65536)),
        vocab=draw(st.integers(1, 256_000)),
        gated_ffn=draw(st.booleans()),
        tied=draw(st.booleans()),
        norm=draw(st.sampled_from(calc.shape.NORMS)),
        bias=draw(st.booleans()),
        positions=positions,
        context=draw(st.integers(1, 1 << 16)),
        final_norm=draw(st.booleans()),
    )


seqs = st.integers(1, 1 << 15)
micro_batches = st.integers(1, 64)
# the recipes a step on one device runs (fsdp-bf16 is FSDP2's policy: tests/calc/test_engines.py)
recipes = st.sampled_from([name for name, r in calc.RECIPES.items() if not r.computes])
recomputes = st.sampled_from(calc.RECOMPUTE)


@st.composite
def modern_shapes(draw) -> calc.Shape:
    """Any valid shape with today's features too: a head size apart from width / heads (Gemma), q/k/v-only
    biases (Qwen2), four norms a block (Gemma 2), a sliding window (Mistral)."""
    shape = draw(shapes())
    return shape.replace(
        head_size=draw(st.sampled_from([0, 0, 1, 8, 256])),
        qkv_bias=draw(st.booleans()),
        norms_per_layer=draw(st.sampled_from([2, 4])),
        sliding_window=draw(st.sampled_from([0, 16, 4096])),
    )


@st.composite
def moe_shapes(draw) -> calc.Shape:
    """Any valid mixture of experts: E experts, top-k, an optional shared expert and gate, some dense layers,
    first or (half the time) anywhere among the experts' (Shape.dense_at)."""
    shape = draw(modern_shapes())
    experts = draw(st.sampled_from([1, 2, 4, 6, 8, 16, 60, 64]))
    shared = draw(st.sampled_from([0, 0, 8, 1408]))
    dense = draw(st.integers(0, shape.layers))
    at = ()
    if 0 < dense < shape.layers and draw(st.booleans()):
        at = tuple(sorted(draw(st.lists(st.integers(1, shape.layers), min_size=dense, max_size=dense, unique=True))))
        at = () if at == tuple(range(1, dense + 1)) else at  # the first ones: the count alone says so
    return shape.replace(
        experts=experts,
        experts_per_token=draw(st.integers(1, experts)),
        expert_ffn=draw(st.sampled_from([0, 4, 32, 1408, 14336])),
        shared_expert_ffn=shared,
        shared_expert_gate=shared > 0 and draw(st.booleans()),
        dense_layers=dense,
        dense_at=at,
        capacity_factor=draw(st.sampled_from([0.0, 0.0, 1.0, 1.25, 2.0])),
    )
