"""Static SVG figures of the deck's configuration, drawn with matplotlib from calc.

They are what a reader without JavaScript sees in place of the live charts, and
what docs/results.md can cite. Every value drawn comes from calc; this module
only lays it out. Colours match docs/stylesheets/site.css (Okabe-Ito).
"""

from __future__ import annotations

from io import StringIO

import matplotlib

import calc

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker

GB = 10**9
CATEGORIES = calc.CATEGORIES
LABELS = calc.CATEGORY_LABELS
COLOURS = {
    "weights": "#0072B2", "gradients": "#E69F00", "optimizer": "#009E73",
    "master": "#CC79A7", "activations": "#D55E00", "logits": "#56B4E9",
}
ALT = {  # file name (under figures/ in the site) -> alternative text
    "memory-breakdown.svg": "Stacked bars of memory by category for the four recipes, "
                            "with each recipe's peak and the device's capacity",
    "peak-vs-seq.svg": "Peak memory against sequence length for the four recipes, with the device's capacity",
    "step-walk.svg": "Memory by category over the events of one training step, with the peak event marked",
}
RECIPE_STYLES = {  # line style per recipe in the sweep figure
    "mixed-none": "-", "mixed-selective": "--", "mixed-full": ":", "fp32-none": "-.",
}

plt.rcParams.update({
    "svg.hashsalt": "calc-figures",  # stable ids: the same data gives the same file
    "svg.fonttype": "none",          # text stays text (searchable, scales)
    "font.size": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
})


def _svg(fig) -> bytes:
    out = StringIO()
    fig.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return out.getvalue().encode()


def _legend_as_stacked(ax, **options) -> None:
    """The legend in the stack's order: its top entry is the top of the stack."""
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], frameon=False, **options)


def breakdown(rows: list[dict], capacity_bytes: int) -> bytes:
    """One stacked bar per recipe, a dashed line at each peak, a solid line at capacity. Each peak's
    label sits above both its bar and its dashed line, so neither runs through it."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    xs = range(len(rows))
    tops = []
    for x, row in zip(xs, rows, strict=True):
        bottom = 0
        for cat in CATEGORIES:
            height = row["bytes"][cat] / GB
            ax.bar(x, height, bottom=bottom, width=0.6, color=COLOURS[cat],
                   label=LABELS[cat] if x == 0 else None)
            bottom += height
        peak = row["peak"] / GB
        tops.append(max(bottom, peak))
        ax.hlines(peak, x - 0.4, x + 0.4, colors="black", linestyles="dashed", linewidth=1.2)
        ax.annotate(f"peak {calc.format_gb(row['peak'])} GB", (x, tops[-1]), textcoords="offset points",
                    xytext=(0, 5), ha="center", va="bottom", fontsize=9)
    ax.axhline(capacity_bytes / GB, color="black", linewidth=1.5)
    ax.annotate(f"{calc.format_gb(capacity_bytes).removesuffix('.0')} GB device", (1.0, capacity_bytes / GB),
                xycoords=("axes fraction", "data"), textcoords="offset points", xytext=(4, 0), va="center", fontsize=9)
    ax.set_ylim(0, max(tops) * 1.12)
    ax.set_xticks(list(xs), [row["id"] for row in rows])
    ax.set_ylabel("memory on one device (GB)")
    _legend_as_stacked(ax, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _svg(fig)


def sweep(seqs: list[int], peaks: dict[str, list[int]], capacity_bytes: int, seq: int | None = None) -> bytes:
    """Peak memory against sequence length, one line per recipe, with the capacity line and (dotted)
    the chosen sequence (by default the middle of calc.web.seq_grid's range: half its last point).
    A tick every round step of the sequence, not one at every point."""
    if seq is None and seqs[-1] // 2 in seqs:
        seq = seqs[-1] // 2
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for recipe_id, values in peaks.items():
        ax.plot(seqs, [v / GB for v in values], RECIPE_STYLES.get(recipe_id, "-"), linewidth=2, label=recipe_id)
    capacity = capacity_bytes / GB
    ax.axhline(capacity, color="black", linewidth=1.5)
    ax.annotate(f"{calc.format_gb(capacity_bytes).removesuffix('.0')} GB device", (1.0, capacity),
                xycoords=("axes fraction", "data"), textcoords="offset points", xytext=(4, 0), va="center", fontsize=9)
    if seq is not None:
        ax.axvline(seq, color="grey", linestyle=":", linewidth=1)
        ax.annotate(f"sequence {seq:,}", (seq, 1.0), xycoords=("data", "axes fraction"), textcoords="offset points",
                    xytext=(4, -12), fontsize=9, color="dimgrey")
    ax.set_xlim(seqs[0], seqs[-1])
    ax.set_ylim(0, max(max(v) for v in peaks.values()) / GB * 1.08)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=8, steps=[1, 2, 4, 5, 10], integer=True))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{int(v):,}"))
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("peak memory on one device (GB)")
    ax.legend(loc="upper left", frameon=False)
    return _svg(fig)


def walk(step: dict) -> bytes:
    """Memory by category over one training step's events, the peak event marked."""
    events = step["events"]
    xs = list(range(len(events)))
    stacks = [[e["totals"][cat] / GB for e in events] for cat in CATEGORIES]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.stackplot(xs, stacks, colors=[COLOURS[c] for c in CATEGORIES], labels=[LABELS[c] for c in CATEGORIES],
                 step="post")
    peak = step["peak_index"]
    ax.axvline(peak, color="black", linestyle="dashed", linewidth=1.2)
    ax.annotate(f"peak {calc.format_gb(step['peak'])} GB, event {peak + 1}:\n{step['peak_event']}",
                (peak, step["peak"] / GB), textcoords="offset points", xytext=(6, 6), ha="left", va="bottom",
                fontsize=9)
    ax.set_ylim(0, step["peak"] / GB * 1.22)
    ax.set_xlabel("event in the training step")
    ax.set_ylabel("memory on one device (GB)")
    ax.set_xlim(0, len(events) - 1)
    _legend_as_stacked(ax, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _svg(fig)
