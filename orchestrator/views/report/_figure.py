"""What every PNG figure of a sweep report shares: the stacks' colours, the resolution, the text's least size
and the figure's greatest width, the style each is drawn under and how it is saved (matplotlib's object
API with the Agg canvas: no pyplot state, no display)."""

from __future__ import annotations

import functools
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

STACK_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]
DPI = 90
# Legible where report.html shows them: no text under FONT_PT points (12.5 px at DPI), and no figure
# wider than MAX_WIDTH_IN inches (1080 px), so the page (1150 px at most) does not shrink it.
FONT_PT = 10
MAX_WIDTH_IN = 12.0
OVER_BUDGET_COLOUR = "#e6e6e6"


# Every text of a report figure at FONT_PT or more, whatever the user's matplotlibrc says: set where the
# text is made (walking a finished figure's texts to resize them took 40% of a figure's time).
REPORT_STYLE = {
    "font.size": FONT_PT,
    "axes.labelsize": FONT_PT,
    "axes.titlesize": FONT_PT + 1,
    "xtick.labelsize": FONT_PT,
    "ytick.labelsize": FONT_PT,
    "legend.fontsize": FONT_PT,
    "legend.title_fontsize": FONT_PT,
    "figure.titlesize": FONT_PT + 2,
}


def report_style(draw):
    """A figure function drawn under REPORT_STYLE."""

    @functools.wraps(draw)
    def styled(*args, **kwargs):
        with matplotlib.rc_context(REPORT_STYLE):
            return draw(*args, **kwargs)

    return styled


def save_figure(fig: Figure, path: Path, tight: bool = True) -> Path:
    # bbox_inches="tight" draws the figure twice; per-trial curves (many per sweep) use a fixed layout.
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=DPI, bbox_inches="tight" if tight else None, facecolor="white")
    return path
