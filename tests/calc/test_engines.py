"""calc.engines.ddp: one rank of DDP, and of DDP with ZeroRedundancyOptimizer, in the eager walk (issue 31)."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import calc
from calc import finetune, optim_step
from calc.cli import main
from calc.engines import ddp
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
        (["--dp", "2", "--zero", "2"], "--zero"),
        (["--zero", "1"], "--zero"),  # over one process ZeRO would shard nothing: not accepted and ignored
        (["--dp", "2", "--tp", "2"], "--walk"),
        (["--dp", "2", "--zero", "1", "--recipe", "mixed"], "--recipe"),
        (["--dp", "2", "--zero", "1", "--recipe", "autocast", "--optimizer", "sgd"], "--optimizer"),
        (["--dp", "2", "--zero", "1", "--recipe", "autocast", "--loop", "trainer"], "--loop"),
        (["--preset", "decoder", "--dp", "2"], "--dp"),
        (["--dp", "1025", "--zero", "1", "--recipe", "autocast"], "--dp"),
    ],
)
def test_eager_refuses_what_it_does_not_run_naming_the_field(flags, field, capsys):
    """Layouts the eager walk does not replay exit 2 with one line naming the field (no flag is ignored)."""
    args = [
        "--walk",
        "eager",
        "--device",
        "cpu",
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


def test_zero1_ranks_without_a_share_keep_no_adam_state():
    """With more processes than parameter tensors, some ranks' optimizers step nothing: they peak lower than a
    DDP rank by all of AdamW's moments."""
    tensors = len(optim_step.trainable(PRESETS["gpt2"], finetune.DEFAULT))
    dp = tensors + 4
    ddp_rank = _eager("gpt2", Parallel(dp=dp))
    zero = _eager("gpt2", Parallel(dp=dp, zero=1))
    assert min(zero["rank_peaks"]) <= ddp_rank["peak"] - 8 * ddp_rank["trainable_params"]
