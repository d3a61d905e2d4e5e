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


def breakdown(rows: list[dict], capacity_bytes: int) -> bytes:
    """One stacked bar per recipe, a dashed line at each peak, a solid line at capacity."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    xs = range(len(rows))
    for x, row in zip(xs, rows, strict=True):
        bottom = 0
        for cat in CATEGORIES:
            height = row["bytes"][cat] / GB
            ax.bar(x, height, bottom=bottom, width=0.6, color=COLOURS[cat],
                   label=LABELS[cat] if x == 0 else None)
            bottom += height
        ax.hlines(row["peak"] / GB, x - 0.4, x + 0.4, colors="black", linestyles="dashed", linewidth=1.2)
        ax.annotate(f"peak {row['peak'] / GB:.1f} GB", (x, row["peak"] / GB), textcoords="offset points",
                    xytext=(0, 4), ha="center", fontsize=8)
    ax.axhline(capacity_bytes / GB, color="black", linewidth=1.5)
    ax.annotate(f"{capacity_bytes / GB:.0f} GB device", (len(rows) - 0.5, capacity_bytes / GB),
                textcoords="offset points", xytext=(0, 4), ha="right", fontsize=8)
    ax.set_xticks(list(xs), [row["id"] for row in rows])
    ax.set_ylabel("memory on one device (GB)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return _svg(fig)


def sweep(seqs: list[int], peaks: dict[str, list[int]], capacity_bytes: int) -> bytes:
    """Peak memory against sequence length, one line per recipe, with the capacity line."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for recipe_id, values in peaks.items():
        ax.plot(seqs, [v / GB for v in values], RECIPE_STYLES.get(recipe_id, "-"), marker="o",
                markersize=3, label=recipe_id)
    ax.axhline(capacity_bytes / GB, color="black", linewidth=1.5, label=f"{capacity_bytes / GB:.0f} GB device")
    ax.set_xscale("log", base=2)
    ax.set_xticks(seqs, [f"{s:,}" for s in seqs])
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("peak memory (GB)")
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
    ax.annotate(f"peak ({step['peak'] / GB:.1f} GB): {step['peak_event']}", (peak, step["peak"] / GB),
                textcoords="offset points", xytext=(6, 4), ha="left", fontsize=8)
    ax.set_ylim(0, step["peak"] / GB * 1.12)
    ax.set_xlabel("event in the training step")
    ax.set_ylabel("memory on one device (GB)")
    ax.set_xlim(0, len(events) - 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return _svg(fig)
