"""The eager walk against transformers' own models (not written by this project), measured on the CPU.

Each model is built from a config with random weights (no download), trained for two steps with the loop
most people write, and the second step's allocator peak, less the matrix library's workspace (the peak of its
tensors, conftest.assert_predicts_tensors), compared with what the CLI predicts for the same model from the flags
a user would type. Slow-ish (a few seconds each); small shapes.
"""

import sys
from pathlib import Path

import pytest

from conftest import assert_predicts_tensors, cli_json

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "training"))

import hf_models  # noqa: E402
import measure_transformers  # noqa: E402
import profile_step  # noqa: E402

pytestmark = pytest.mark.torch  # real steps of PyTorch and transformers

BOUND = 0.03  # the bound: within 3% of the measured peak


def predicted(m, precision, attention, checkpointing, seq, b) -> int:
    """The peak the CLI prints, run as a user runs it (the flags from measure_transformers.cli_args)."""
    return cli_json(measure_transformers.cli_args(m, seq, b, precision, attention, checkpointing, "cpu"))["peak"]


CASES = [
    # (model, precision, attention, checkpointing, seq, micro-batch)
    (hf_models.Model("llama", 3, 64, 4, 4, 176, 256), "fp32-full", "eager", "none", 128, 2),
    (hf_models.Model("llama", 3, 64, 4, 1, 176, 256), "fp32-full", "sdpa", "full", 128, 2),
    (hf_models.Model("llama", 3, 64, 4, 2, 176, 256), "autocast", "sdpa", "none", 128, 2),
    (hf_models.Model("mistral", 3, 64, 4, 2, 176, 256), "autocast", "eager", "none", 96, 2),
    (hf_models.Model("qwen2", 3, 64, 4, 2, 176, 256), "fp32-full", "eager", "full", 128, 2),
    (hf_models.Model("qwen2", 3, 64, 4, 4, 176, 256), "autocast", "sdpa", "full", 128, 2),
    (hf_models.Model("mistral", 3, 64, 4, 1, 176, 256), "fp32-full", "sdpa", "none", 128, 1),
    (hf_models.Model("gpt2", 3, 64, 4, 4, 256, 256), "fp32-full", "eager", "full", 128, 2),
    (hf_models.Model("gpt2", 3, 64, 4, 4, 256, 256), "autocast", "sdpa", "none", 128, 2),
    # mixtures of experts: the experts' k x tokens rows take the peak (small vocabulary)
    (hf_models.mixtral(2, 64, 4, 1, 128, 128, 8, 4), "fp32-full", "sdpa", "none", 128, 2),
    (hf_models.mixtral(2, 64, 4, 2, 96, 128, 4, 2), "autocast", "eager", "full", 128, 2),
    (hf_models.qwen2_moe(2, 64, 4, 1, 64, 128, 8, 4, 256), "autocast", "sdpa", "none", 128, 2),
    (hf_models.qwen2_moe(2, 64, 4, 2, 64, 128, 4, 2, 128), "fp32-full", "eager", "full", 128, 2),
    # Qwen3's per-head q/k norms (a head size apart from width / heads), Granite's four multipliers
    (hf_models.Model("qwen3", 3, 64, 4, 1, 176, 256, (("head_dim", 32),)), "autocast", "sdpa", "full", 128, 2),
    (hf_models.Model("qwen3", 3, 64, 4, 2, 176, 256, (("head_dim", 16),)), "fp32-full", "eager", "none", 128, 2),
    (hf_models.Model("granite", 3, 64, 4, 1, 176, 256, measure_transformers.GRANITE), "autocast", "sdpa", "full",
     128, 2),
    (hf_models.Model("granite", 3, 64, 4, 2, 176, 256, measure_transformers.GRANITE), "fp32-full", "eager", "none",
     128, 2),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].model_type}-kv{c[0].kv_heads}-{'-'.join(c[1:4])}")
def test_eager_walk_predicts_transformers_step(case):
    """The CLI's --walk eager peak is within 3% of the measured step's tensors (its peak less the CPU matrix
    library's workspace, which calc does not model) for transformers' own model."""
    m, precision, attention, checkpointing, seq, b = case
    got = profile_step.measure_cpu(m, precision, attention, checkpointing, seq, b)
    assert_predicts_tensors(predicted(m, precision, attention, checkpointing, seq, b), got, BOUND)
