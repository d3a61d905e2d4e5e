"""MkDocs hook: the fine-tuning page's build-time figures (docs/finetune.md), drawn from calc.

Two sweeps of LLaMA 7B's shape (the llama-7b preset; Llama 2 7B's is the same) on one device, pure bf16,
SDPA-style attention (no s x s scores): the peak against LoRA's rank, and against the sequence length,
for full fine-tuning, LoRA and QLoRA. Every value is calc.step's peak (the deck walk); this module lays them out as
hooks/figures.py lays out the deck's, with a phone-width variant of each.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: hooks/ and calc/
import matplotlib.pyplot as plt
import matplotlib.ticker

import calc
from calc import finetune
from hooks import figures

PRESET, RECIPE, MICRO_BATCH, CARD_GB = "llama-7b", "bf16", 1, 24  # the page's setting and its card (GB)
RANKS = [2**i for i in range(9)]  # 1 ... 256
RANK_SEQ = 2048
SEQS = list(range(256, 4097, 128))  # up to Llama 2 7B's context; the preset's (LLaMA 1's) is marked
SEQ_RANK = 8
ALL = "all"  # every linear of the blocks
LINES = {  # label -> (mode, targets, recompute, style, colour)
    "full fine-tuning": ("full", ("q", "v"), "full", "-", "#000000"),
    "LoRA q,v": ("lora", ("q", "v"), "full", "--", "#0072B2"),
    "LoRA all linears": ("lora", ALL, "full", "-", "#0072B2"),
    "LoRA all linears, no checkpointing": ("lora", ALL, "none", ":", "#0072B2"),
    "QLoRA all linears": ("qlora", ALL, "full", "-", "#D55E00"),
    "QLoRA all linears, no checkpointing": ("qlora", ALL, "none", ":", "#D55E00"),
}
RANK_LINES = ("full fine-tuning", "LoRA q,v", "LoRA all linears", "QLoRA all linears")
SEQ_LINES = ("full fine-tuning", "LoRA all linears", "LoRA all linears, no checkpointing", "QLoRA all linears",
             "QLoRA all linears, no checkpointing")


def peak(label: str, seq: int, rank: int) -> int:
    """calc's peak for one line of the figures at this sequence length and rank, in bytes."""
    mode, targets, recompute, *_ = LINES[label]
    shape = calc.PRESETS[PRESET]
    chosen = tuple(finetune.linears(shape)) if targets == ALL else targets
    tune = finetune.Tuning(mode, rank=rank, targets=chosen)
    return calc.step(shape, seq, MICRO_BATCH, RECIPE, recompute, par=calc.Parallel(flash=True), tune=tune)["peak"]


def _lines(ax, xs: list[int], labels, values) -> float:
    top = 0.0
    for label in labels:
        _, _, _, style, colour = LINES[label]
        ys = [v / figures.GB for v in values[label]]
        top = max(top, *ys)
        ax.plot(xs, ys, style, color=colour, linewidth=2, label=label)
    ax.axhline(CARD_GB, color="grey", linewidth=1.5)
    # named at the left end, where every line of both figures runs below the card
    ax.annotate(f"{CARD_GB} GB card", (0.0, CARD_GB), xycoords=("axes fraction", "data"), textcoords="offset points",
                xytext=(4, 3), ha="left", va="bottom", fontsize=10, color="dimgrey")
    ax.set_ylim(0, top * 1.08)
    ax.set_ylabel("peak memory on one device (GB)")
    return top


def _legend(ax, narrow: bool) -> None:
    if narrow:
        ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, fontsize=10)
    else:  # below the plot, so both figures keep the same width and scale to the same text size
        ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=9)


def by_rank(narrow: bool = False) -> bytes:
    """Peak against LoRA's rank (log scale), at RANK_SEQ tokens, checkpointing every block."""
    values = {label: [peak(label, RANK_SEQ, r) for r in RANKS] for label in RANK_LINES}
    fig, ax = plt.subplots(figsize=figures.NARROW if narrow else figures.WIDE)
    _lines(ax, RANKS, RANK_LINES, values)
    ax.set_xscale("log", base=2)
    ticks = RANKS[::2] if narrow else RANKS
    ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{int(v)}"))
    ax.set_xlim(RANKS[0], RANKS[-1])
    ax.set_xlabel(f"LoRA rank r ({RANK_SEQ:,} tokens)")
    _legend(ax, narrow)
    return figures._svg(fig)


def by_seq(narrow: bool = False) -> bytes:
    """Peak against the sequence length at rank SEQ_RANK, with and without activation checkpointing."""
    values = {label: [peak(label, s, SEQ_RANK) for s in SEQS] for label in SEQ_LINES}
    fig, ax = plt.subplots(figsize=figures.NARROW if narrow else figures.WIDE)
    _lines(ax, SEQS, SEQ_LINES, values)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=4 if narrow else 8, steps=[1, 2, 4, 5, 10],
                                                             integer=True))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{int(v):,}"))
    ax.set_xlim(SEQS[0], SEQS[-1])
    context = calc.PRESETS[PRESET].context  # past it the model was never trained: Llama 2 7B's shape goes on
    ax.axvline(context, color="grey", linewidth=1, linestyle="--")
    ax.annotate(f"LLaMA 1's context ({context:,})", (context, 1.0), xycoords=("data", "axes fraction"),
                textcoords="offset points", xytext=(4, -4), ha="left", va="top", fontsize=9, color="dimgrey")
    ax.set_xlabel(f"sequence length (tokens; rank {SEQ_RANK})")
    _legend(ax, narrow)
    return figures._svg(fig)


def figure_files() -> dict[str, bytes]:
    """The page's figures and their phone-width variants, by file name."""
    out = {}
    for name, draw in (("finetune-rank.svg", by_rank), ("finetune-seq.svg", by_seq)):
        out[name] = draw()
        out[figures.narrow_name(name)] = draw(narrow=True)
    return out


def on_files(files, config):
    for name, svg in figure_files().items():
        files.append(File.generated(config, f"figures/{name}", content=svg))
    return files
