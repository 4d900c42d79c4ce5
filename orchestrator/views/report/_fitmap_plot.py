"""The fit map's PNG figure of a sweep report (orchestrator.judging.fitmap.FitMap): where each stack fits on
the card, by K, B and completion length, with the measured trials on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

from orchestrator.views.report._figure import MAX_WIDTH_IN, report_style, save_figure
from orchestrator.words.outcome import MEMORY_LABELS
from trainers.stacks import label as stacks_label

FIT_COLOURS = {"fits": "#a1d99b", "uncertain": "#fdd49e", "does not fit": "#fcbba1"}
MEASURED_MARKERS = {  # what a measured trial says of the card: (marker, face, edge, legend)
    "fits": ("o", "#2ca02c", "black", "measured: fits"),
    "does not fit": ("X", "#d62728", "black", "measured: out of memory"),
    "undecided": (
        "o",
        "none",
        "#5f5f5f",
        "measured: undecided here (OOM under a smaller budget, or timed out)",
    ),
}


@report_style
def fit_map_plot(fm, model: str, path: Path) -> Path:
    """One model's fit map (orchestrator.judging.fitmap.FitMap): a panel per stack (side by side) and B;
    x the completion length (log2), y K; each K's lengths shaded predicted fits / uncertain (the
    prediction interval crosses the budget) / does not fit, the likely boundary a black line, the first
    stack's boundary dashed on the others' panels (where the stacks part), measured trials as markers."""
    lo, hi = fm.lengths
    stack_names, bs = fm.stacks, sorted({x.b for x in fm.boundaries if x.model == model})
    fig = Figure(figsize=(min(MAX_WIDTH_IN, 1.0 + 4.6 * len(stack_names)), 0.8 + 2.9 * len(bs)))
    axes = fig.subplots(len(bs), len(stack_names), squeeze=False, sharex=True, sharey=True)
    first = stack_names[0]
    for row, b in enumerate(bs):
        for col, stack in enumerate(stack_names):
            ax = axes[row][col]
            rows = sorted((x for x in fm.boundaries if (x.stack, x.model, x.b) == (stack, model, b)),
                          key=lambda x: x.k)  # fmt: skip
            for x in rows:
                y = np.log2(x.k)
                if x.unknown is not None:
                    ax.text(np.sqrt(lo * hi), y, "unknown", ha="center", va="center")
                    continue
                sure = lo if x.sure is None else x.sure
                possible = lo if x.possible is None else x.possible
                for start, end, verdict in ((lo, sure, "fits"), (sure, possible, "uncertain"),
                                            (possible, hi, "does not fit")):  # fmt: skip
                    if end > start:
                        ax.barh(
                            y, end - start, left=start, height=0.8, color=FIT_COLOURS[verdict], linewidth=0
                        )
            _boundary_line(ax, rows, "-", "black", lo)
            if stack != first:
                base = sorted((x for x in fm.boundaries if (x.stack, x.model, x.b) == (first, model, b)),
                              key=lambda x: x.k)  # fmt: skip
                _boundary_line(ax, base, "--", "#1f4e8c", lo)
            for point in fm.measured:
                if (point.stack, point.model, point.b) == (stack, model, b):
                    marker, face, edge, _ = MEASURED_MARKERS[point.on_card]
                    ax.scatter(point.length, np.log2(point.k), marker=marker, s=70, facecolors=face,
                               edgecolors=edge, linewidths=1.2, zorder=5)  # fmt: skip
            ax.set_xscale("log", base=2)
            ax.set_xlim(lo / 1.12, hi * 1.12)  # room for a marker at either end
            ticks = [2**i for i in range(int(np.ceil(np.log2(lo))), int(np.floor(np.log2(hi))) + 1)]
            ax.xaxis.set_major_locator(FixedLocator(ticks))
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_locator(NullLocator())
            ks = [x.k for x in rows]
            ax.set_yticks([np.log2(k) for k in ks], [str(k) for k in ks])
            ax.set_title(f"{stacks_label(stack)}, B={b} ({fm.basis.get((stack, model), 'prior')})")
            if row == len(bs) - 1:
                ax.set_xlabel("completion length (tokens, log scale)")
                ax.tick_params(axis="x", labelrotation=45)
            if col == 0:
                ax.set_ylabel("K: completions per prompt")
    card = f"{fm.card}, " if fm.card else ""
    fig.suptitle(
        f"{model}: where it fits on {card}{fm.budget_gib:g} GiB, {MEMORY_LABELS[fm.measure]} peak predicted"
    )
    handles = [Patch(color=c, label=f"predicted: {v}") for v, c in FIT_COLOURS.items()]
    handles.append(Line2D([], [], color="black", label="predicted boundary (peak = budget)"))
    if len(stack_names) > 1:
        handles.append(
            Line2D([], [], color="#1f4e8c", linestyle="--", label=f"{stacks_label(first)}'s boundary")
        )
    for on_card in sorted({p.on_card for p in fm.measured if p.model == model}):
        marker, face, edge, label = MEASURED_MARKERS[on_card]
        handles.append(Line2D([], [], marker=marker, linestyle="", markerfacecolor=face, markeredgecolor=edge,
                              markersize=8, label=label))  # fmt: skip
    fig.legend(handles=handles, loc="upper center", ncol=2, bbox_to_anchor=(0.5, 0.02))
    return save_figure(fig, path)


def _boundary_line(ax, rows, style: str, colour: str, lo: int) -> None:
    """The likely boundary through each K's row (at lo where nothing fits)."""
    points = [(lo if x.likely is None else x.likely, np.log2(x.k)) for x in rows if x.unknown is None]
    if points:
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, linestyle=style, color=colour, marker="|", markersize=14, linewidth=1.5, zorder=4)
