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
RECIPE_STYLES = {  # colour and line style per recipe in the sweep figure: the live chart's (--calc-line-N in site.css)
    "mixed-none": ("#0072B2", "-"), "mixed-selective": ("#D55E00", "--"),
    "mixed-full": ("#009E73", ":"), "fp32-none": ("#CC79A7", "-."),
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


# A phone's column is about 360 px: the narrow variants are drawn 4 inches wide (384 px), so their
# 10-point text stays above 11 px there. Pages pick them with <picture> (hooks/placeholders.py).
WIDE, NARROW = (7.5, 4.2), (4.0, 4.4)
NARROW_MEDIA = "(max-width: 40em)"


def narrow_name(name: str) -> str:
    """The phone-width variant of a figure's file name: peak-vs-seq.svg -> peak-vs-seq-narrow.svg."""
    return name.removesuffix(".svg") + "-narrow.svg"


def _legend_as_stacked(ax, narrow: bool = False, **options) -> None:
    """The legend in the stack's order: its top entry is the top of the stack (beside the plot), or
    below the plot in columns on a narrow figure."""
    handles, labels = ax.get_legend_handles_labels()
    if narrow:
        ax.legend(handles, labels, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3,
                  fontsize=10, columnspacing=1.0, handlelength=1.2)
    else:
        ax.legend(handles[::-1], labels[::-1], frameon=False, **options)


def breakdown(rows: list[dict], capacity_bytes: int, narrow: bool = False) -> bytes:
    """One stacked bar per recipe, a dashed line at each peak, a solid line at capacity. Each peak's
    label sits above both its bar and its dashed line, so neither runs through it."""
    fig, ax = plt.subplots(figsize=NARROW if narrow else WIDE)
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
        label = f"{calc.format_gb(row['peak'])} GB" if narrow else f"peak {calc.format_gb(row['peak'])} GB"
        ax.annotate(label, (x, tops[-1]), textcoords="offset points",
                    xytext=(0, 5), ha="center", va="bottom", fontsize=10 if narrow else 9)
    if narrow:  # named in the legend: beside the line it would cover a bar
        ax.axhline(capacity_bytes / GB, color="black", linewidth=1.5,
                   label=f"{calc.units.format_capacity(capacity_bytes)} device")
    else:
        ax.axhline(capacity_bytes / GB, color="black", linewidth=1.5)
        _capacity_label(ax, capacity_bytes, narrow)
    ax.set_ylim(0, max(tops) * 1.12)
    ax.set_xticks(list(xs), [row["id"].replace("-", "\n") if narrow else row["id"] for row in rows])
    ax.set_ylabel("memory on one device (GB)")
    _legend_as_stacked(ax, narrow, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if narrow:
        ax.xaxis.set_tick_params(labelsize=10)
    return _svg(fig)


def _capacity_label(ax, capacity_bytes: int, narrow: bool) -> None:
    """The device's capacity, named at the right end of its line (above it, inside, on a narrow figure)."""
    text = f"{calc.units.format_capacity(capacity_bytes)} device"
    if narrow:
        ax.annotate(text, (1.0, capacity_bytes / GB), xycoords=("axes fraction", "data"), textcoords="offset points",
                    xytext=(0, 3), ha="right", va="bottom", fontsize=10,
                    bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"})
    else:
        ax.annotate(text, (1.0, capacity_bytes / GB), xycoords=("axes fraction", "data"), textcoords="offset points",
                    xytext=(4, 0), va="center", fontsize=9)


def sweep(seqs: list[int], peaks: dict[str, list[int]], capacity_bytes: int, seq: int | None = None,
          narrow: bool = False) -> bytes:
    """Peak memory against sequence length, one line per recipe, with the capacity line and (dotted)
    the chosen sequence (by default the middle of calc.web.seq_grid's range: half its last point).
    A tick every round step of the sequence, not one at every point."""
    if seq is None and seqs[-1] // 2 in seqs:
        seq = seqs[-1] // 2
    fig, ax = plt.subplots(figsize=NARROW if narrow else WIDE)
    for recipe_id, values in peaks.items():
        colour, style = RECIPE_STYLES.get(recipe_id, ("#E69F00", "-"))
        ax.plot(seqs, [v / GB for v in values], style, color=colour, linewidth=2, label=recipe_id)
    ax.axhline(capacity_bytes / GB, color="black", linewidth=1.5)
    _capacity_label(ax, capacity_bytes, narrow)
    if seq is not None:
        ax.axvline(seq, color="grey", linestyle=":", linewidth=1)
        ax.annotate(f"sequence {seq:,}", (seq, 1.0), xycoords=("data", "axes fraction"), textcoords="offset points",
                    xytext=(4, -12), fontsize=10 if narrow else 9, color="dimgrey")
    ax.set_xlim(seqs[0], seqs[-1])
    ax.set_ylim(0, max(max(v) for v in peaks.values()) / GB * (1.14 if narrow else 1.08))
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=4 if narrow else 8, steps=[1, 2, 4, 5, 10],
                                                             integer=True))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{int(v):,}"))
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("peak memory on one device (GB)")
    if narrow:
        ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=10)
    else:
        ax.legend(loc="upper left", frameon=False)
    return _svg(fig)


def walk(step: dict, narrow: bool = False) -> bytes:
    """Memory by category over one training step's events, the peak event marked."""
    events = step["events"]
    xs = list(range(len(events)))
    stacks = [[e["totals"][cat] / GB for e in events] for cat in CATEGORIES]
    fig, ax = plt.subplots(figsize=NARROW if narrow else WIDE)
    ax.stackplot(xs, stacks, colors=[COLOURS[c] for c in CATEGORIES], labels=[LABELS[c] for c in CATEGORIES],
                 step="post")
    peak = step["peak_index"]
    ax.axvline(peak, color="black", linestyle="dashed", linewidth=1.2)
    if narrow:  # the peak's event is named in the text beside the figure; here only its size
        ax.annotate(f"peak {calc.format_gb(step['peak'])} GB", (peak, step["peak"] / GB), textcoords="offset points",
                    xytext=(6, 6), ha="left", va="bottom", fontsize=10)
    else:
        ax.annotate(f"peak {calc.format_gb(step['peak'])} GB, event {peak + 1}:\n{step['peak_event']}",
                    (peak, step["peak"] / GB), textcoords="offset points", xytext=(6, 6), ha="left", va="bottom",
                    fontsize=9)
    ax.set_ylim(0, step["peak"] / GB * 1.22)
    ax.set_xlabel("event in the training step")
    ax.set_ylabel("memory on one device (GB)")
    ax.set_xlim(0, len(events) - 1)
    _legend_as_stacked(ax, narrow, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _svg(fig)


def narrow_files(answer: dict) -> dict[str, bytes]:
    """The phone-width variants of the three figures for calc.web's answer, by file name."""
    sweep_data, capacity = answer["sweep"], answer["capacity"]
    return {
        narrow_name("memory-breakdown.svg"): breakdown(answer["table"], capacity, narrow=True),
        narrow_name("peak-vs-seq.svg"): sweep(sweep_data["seq"], sweep_data["peaks"], capacity, narrow=True),
        narrow_name("step-walk.svg"): walk(answer["step"], narrow=True),
    }
