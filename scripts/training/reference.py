"""Reference Decoder trainer in PyTorch: the course's Decoder, built exactly as calc's `decoder` preset.

The default configuration is the Decoder: vocabulary 64, width 16, 2 heads, 2 blocks, a plain GELU
feed-forward layer of width 32, context 8, learned position embeddings, a LayerNorm (weight and bias)
before attention and before the feed-forward layer, no biases in linear layers, no final norm, and the
head tied to the token embedding: 64*16 + 8*16 + 2*(2*32 + 4*16*16 + 2*16*32) = 5,376 parameters.

Every size is configurable, so scripts/training/measure.py can also measure a 12-layer model.
The attention core is written out (scores, causal mask, softmax, weighted sum), not fused, so autograd
keeps the values Korthikanti et al. (2022, §4.1) count term by term, less their dropout (the Decoder has
none). Recomputation uses torch.utils.checkpoint (non-reentrant) around the attention core ("selective")
or each block ("full"), with preserve_rng_state=False: nothing here draws random numbers, and keeping the
RNG state would add 5,056 bytes (the CPU generator's state) per checkpointed call.

    python scripts/training/reference.py                 # train the Decoder on its synthetic stream
    python scripts/training/reference.py --layers 12 --width 64 --heads 4 --ffn 128 --steps 50

PyTorch is an optional extra (`pip install torch==2.13.0`), not a dependency of calc.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Config:
    vocab: int = 64  # token vocabulary, V
    context: int = 8  # longest sequence; one learned position embedding per place
    layers: int = 2  # blocks, L
    width: int = 16  # model width, h
    heads: int = 2  # attention heads, a (width must divide by it)
    ffn: int = 32  # feed-forward width (plain GELU MLP, two linear layers)
    recompute: str = "none"  # "none", "selective" (attention core only) or "full" (whole block)

    def __post_init__(self) -> None:
        for name in ("vocab", "context", "layers", "width", "heads", "ffn"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be a positive integer, got {getattr(self, name)}")
        if self.width % self.heads:
            raise ValueError(f"heads: width {self.width} does not divide into {self.heads} heads")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute: must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")


def attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """softmax(QK^T / sqrt(d)) V with a causal mask; q, k, v are (B, a, s, h/a)."""
    with record_function("attention core"):  # profiler labels (measure.py); free when not profiling
        return _attention_core(q, k, v, masked)


def _attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (B, a, s, s)
    scores = scores.masked_fill(masked, float("-inf"))
    weights = F.softmax(scores, dim=-1)  # (B, a, s, s): kept for backward, a*s*s values a sequence
    return weights @ v  # (B, a, s, h/a)


class Attention(nn.Module):
    """Causal multi-head self-attention, no biases."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.width, 3 * config.width, bias=False)  # 3h^2 parameters
        self.proj = nn.Linear(config.width, config.width, bias=False)  # h^2 parameters
        self.selective = config.recompute == "selective"
        masked = torch.ones(config.context, config.context, dtype=torch.bool).triu(1)  # True above the diagonal
        self.register_buffer("masked", masked, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape  # (B, s, h)
        q, k, v = self.qkv(x).split(width, dim=2)
        q, k, v = (t.view(batch, seq, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        masked = self.masked[:seq, :seq]
        if self.selective:  # Korthikanti et al. §5: drop and recompute only the attention core
            y = checkpoint(attention_core, q, k, v, masked, use_reentrant=False, preserve_rng_state=False)
        else:
            y = attention_core(q, k, v, masked)
        y = y.transpose(1, 2).contiguous().view(batch, seq, width)  # (B, s, h)
        return self.proj(y)


class FeedForward(nn.Module):
    """Plain GELU MLP: h -> ffn -> h, no biases."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.up = nn.Linear(config.width, config.ffn, bias=False)
        self.down = nn.Linear(config.ffn, config.width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.width)  # weight and bias: 2h parameters
        self.attn = Attention(config)
        self.norm2 = nn.LayerNorm(config.width)
        self.mlp = FeedForward(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with record_function("block"):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    """Token and learned position embeddings, `layers` blocks, no final norm, head tied to the embedding."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab, config.width)
        self.positions = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        for p in self.parameters():  # GPT-2's initialisation; LayerNorms keep weight 1, bias 0
            if p.dim() == 2:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids (B, s) -> logits (B, s, V)."""
        seq = idx.size(1)
        if seq > self.config.context:
            raise ValueError(f"seq: {seq} is longer than the context {self.config.context}")
        x = self.tokens(idx) + self.positions(torch.arange(seq, device=idx.device))  # (B, s, h)
        for block in self.blocks:
            if self.config.recompute == "full":  # keep only each block's input (Chen et al. 2016)
                x = checkpoint(block, x, use_reentrant=False, preserve_rng_state=False)
            else:
                x = block(x)
        with record_function("head"):
            return F.linear(x, self.tokens.weight)  # tied head: (B, s, V)


def param_count(model: nn.Module) -> int:
    """Parameters, each shared tensor once (the tied head adds none)."""
    return sum(p.numel() for p in model.parameters())


def synthetic_stream(vocab: int, tokens: int, seed: int = 0) -> torch.Tensor:
    """A seeded token stream with structure to learn: a Markov chain where each token has 3 likely successors."""
    gen = torch.Generator().manual_seed(seed)
    successors = torch.randint(vocab, (vocab, 3), generator=gen)
    stream = torch.empty(tokens, dtype=torch.long)
    stream[0] = torch.randint(vocab, (1,), generator=gen)
    choice = torch.randint(3, (tokens,), generator=gen)
    noise = torch.rand(tokens, generator=gen) < 0.1  # one token in ten is uniform noise
    uniform = torch.randint(vocab, (tokens,), generator=gen)
    for i in range(1, tokens):
        stream[i] = uniform[i] if noise[i] else successors[stream[i - 1], choice[i]]
    return stream


def batch(
    stream: torch.Tensor, seq: int, micro_batch: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of the stream: inputs (B, s) and next-token targets (B, s)."""
    starts = torch.randint(len(stream) - seq - 1, (micro_batch,), generator=gen)
    windows = torch.stack([stream[i : i + seq + 1] for i in starts.tolist()])
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


def make_optimizer(model: nn.Module, lr: float = 1e-2) -> torch.optim.Optimizer:
    """Plain FP32 Adam (calc's "fp32" recipe: weights 4, gradients 4, Adam m and v 8 bytes per parameter)."""
    return torch.optim.Adam(model.parameters(), lr=lr)


def train_step(model: Decoder, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    """One training step: forward, loss, backward, Adam step, gradients set to None."""
    with record_function("forward"):
        logits = model(x)  # the loop holds the logits until the step ends, as most loops do
        with record_function("loss"):
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return loss.item()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="reference.py", description=__doc__.split("\n\n")[0])
    defaults = Config()
    for name in ("vocab", "context", "layers", "width", "heads", "ffn"):
        parser.add_argument(f"--{name}", type=int, default=getattr(defaults, name))
    parser.add_argument("--recompute", default="none")
    parser.add_argument("--seq", type=int, default=None, help="sequence length (default: the context)")
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        names = ("vocab", "context", "layers", "width", "heads", "ffn", "recompute")
        config = Config(**{n: getattr(args, n) for n in names})
        seq = args.seq or config.context
        if not 1 <= seq <= config.context:
            raise ValueError(f"seq: must be between 1 and the context {config.context}, got {seq}")
        if args.micro_batch < 1 or args.steps < 1:
            raise ValueError("micro-batch, steps: must be positive integers")
    except ValueError as err:
        print(f"reference.py: error: {err}", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    model = Decoder(config)
    optimizer = make_optimizer(model)
    stream = synthetic_stream(config.vocab, 20_000, seed=args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    print(f"{param_count(model):,} parameters; loss at uniform guessing {math.log(config.vocab):.3f}")
    for step in range(1, args.steps + 1):
        loss = train_step(model, optimizer, *batch(stream, seq, args.micro_batch, gen))
        if step == 1 or step % max(1, args.steps // 10) == 0:
            print(f"step {step:5d}  loss {loss:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
