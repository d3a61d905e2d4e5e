"""The losses that never hold the fp32 logits whole (calc.losses): torchtune's chunked cross-entropy (measured,
tests/test_loops.py's trainer-torchtune-ce rows) and Liger's fused linear cross-entropy (from its source)."""

from pathlib import Path

from calc import losses
from conftest import cli_json, cli_run

ROOT = Path(__file__).resolve().parents[2]
# a vocabulary-heavy step where the loss sets the peak: a 1B Llama with LoRA on 2 x 2,048 tokens
BIG = ["--preset", "llama-3.2-1b", "--seq", "2048", "--micro-batch", "2", "--walk", "eager", "--finetune", "lora",
       "--recompute", "full", "--device", "cuda"]  # fmt: skip


def test_tensor_split_gives_the_first_pieces_one_more():
    """torch.tensor_split(10, 8) is 2, 2, 1, 1, 1, 1, 1, 1; an even split is even."""
    assert losses.split(10, 8) == [2, 2, 1, 1, 1, 1, 1, 1]
    assert losses.split(64, 8) == [8] * 8


def test_liger_chunk_follows_its_source_example():
    """Liger's comment: BT = 4096 x 4, V = 32000, H = 4096 gives inc_factor 8 and chunks of 2,048 rows; a chunk
    never exceeds the tokens."""
    assert losses.liger_chunk(4096 * 4, 4096, 32000) == 2048
    assert losses.liger_chunk(128, 64, 4096) == 2
    assert losses.liger_chunk(3, 4096, 100) == 3


def test_torchtune_upcasts_one_chunk_at_a_time():
    """In a bf16 model (as torchtune's recipes train) each chunk's fp32 copy is freed before the next is made,
    while every chunk's fp32 log-probabilities stay for backward; the peak is below transformers' loss, which
    upcasts the logits whole."""
    got = cli_json([*BIG, "--recipe", "bf16", "--loss", "torchtune-chunked"])
    alive, most = 0, 0
    for e in got["events"]:
        if " in fp32" in e["label"] and e["label"].startswith(("logits chunk", "free logits chunk")):
            alive += 1 if e["bytes"] > 0 else -1
            most = max(most, alive)
    assert most == 1
    logp = [e for e in got["events"] if e["label"].startswith("log-probabilities, chunk")]
    assert len(logp) == 8 and sum(e["bytes"] for e in logp) == 4 * 2 * 2048 * 128256
    assert got["peak"] < cli_json([*BIG, "--recipe", "bf16"])["peak"]


def test_liger_builds_one_tile_and_no_logits():
    """Liger's forward builds one chunk x V tile (its gradient in place), never the N x V logits; its peak is
    below torchtune's and transformers' for a large vocabulary."""
    got = cli_json([*BIG, "--recipe", "autocast", "--loss", "liger-fused"])
    tiles = [e["bytes"] for e in got["events"] if e["label"].startswith("logits tile")]
    rows = losses.liger_chunk(2 * 2048, 2048, 128256)
    assert tiles == [rows * 128256 * 2]
    assert not any(e["label"].startswith(("logits", "log-probabilities")) and e["bytes"] > tiles[0]
                   for e in got["events"])  # fmt: skip
    torchtune = cli_json([*BIG, "--recipe", "autocast", "--loss", "torchtune-chunked"])["peak"]
    assert got["peak"] < torchtune


def test_liger_hands_back_its_gradients_without_a_copy():
    """The gradient of the head made in the forward becomes .grad (freed from the Function's context, then
    .grad made: never both at once), so the full fine-tuning's gradients end as large as transformers' loss's."""
    full = ["--preset", "llama-3.2-1b", "--seq", "512", "--walk", "eager", "--recipe", "fp32-full"]
    liger, plain = cli_json([*full, "--loss", "liger-fused"]), cli_json(full)
    assert liger["bytes"]["gradients"] == plain["bytes"]["gradients"]


def test_liger_is_refused_on_the_cpu_in_one_line():
    """Liger's kernels are Triton's: --loss liger-fused with --device cpu is refused, naming the field."""
    args = ["--preset", "llama-3.2-1b", "--walk", "eager", "--device", "cpu", "--loss", "liger-fused"]
    out = cli_run([*args])
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and out.stderr.startswith("error: --loss:")
