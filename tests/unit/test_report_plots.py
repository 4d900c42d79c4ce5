"""The report's figures read back from matplotlib: text legible at the size report.html shows them,
memory axes from 0, the memory plot's ticks at the B×K values the sweep ran."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.text import Text
from rich.console import Console

from orchestrator.judging.intervals import MIN_CYCLES
from orchestrator.views.report import load_outputs, write_report
from orchestrator.views.report._configs import aggregate_repeats
from orchestrator.views.report._html import HTML_STYLE
from orchestrator.views.report._plots import DPI, FONT_PT, throughput_plot, trial_curves
from tests.helpers.synthetic_sweep import write_synthetic_sweep

MIN_PX = 10


def _keep_figures(monkeypatch) -> dict[str, Figure]:
    """Every figure saved from now on, by file name, as drawn."""
    figures: dict[str, Figure] = {}
    original = Figure.savefig

    def keep(fig, path, *args, **kwargs):
        result = original(fig, path, *args, **kwargs)
        figures[str(path).rsplit("/", 1)[-1]] = fig
        return result

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A report of the synthetic sweep under a 5 GiB budget: its trials and its figures."""
    out = tmp_path_factory.mktemp("plots")
    trials = write_synthetic_sweep(out)
    with pytest.MonkeyPatch.context() as monkeypatch:
        figures = _keep_figures(monkeypatch)
        # Drawn in this process, where savefig is watched (a report of many figures forks workers).
        monkeypatch.setattr("orchestrator.views.report._write.PARALLEL_FROM", 10**6)
        write_report(out, console=Console(quiet=True), budget_gib=5.0)
    return trials, figures


def test_every_text_is_at_least_10_px_where_the_page_shows_it(report):
    trials, drawn = report
    page_px = int(re.search(r"max-width: (\d+)px", HTML_STYLE).group(1))  # the page's widest column
    assert {"throughput.png", "memory_vs_completions.png"} <= set(drawn)
    assert sum(name.startswith("feasibility_") for name in drawn) == trials.groupby(["stack", "mode"]).ngroups
    for name, fig in drawn.items():
        width_px = fig.get_size_inches()[0] * DPI
        shown = min(1.0, page_px / width_px)  # the browser shrinks a wider image to the column
        for text in fig.findobj(Text):
            if text.get_visible() and text.get_text().strip():
                px = text.get_fontsize() * DPI / 72 * shown
                assert px >= MIN_PX, f"{name}: {text.get_text()!r} is {px:.1f} px"


def test_memory_axes_start_at_zero_and_ticks_sit_at_the_data(report, tmp_path, monkeypatch):
    trials, drawn = report
    memory = drawn["memory_vs_completions.png"].axes[0]
    assert memory.get_ylim()[0] == 0
    plotted = trials[trials["status"].isin(["completed", "oom"])]
    expected = sorted(set(plotted["num_generations"] * plotted["batch_size"]))
    assert list(memory.get_xticks()) == expected

    # A flat 0.698–0.704 GiB RSS must not fill the memory panel as a ramp.
    curves = _keep_figures(monkeypatch)
    steps = pd.DataFrame({"step": [1, 2, 3], "rss_peak_gib": [0.698, 0.701, 0.704], "probe": [False] * 3})
    trial_curves(pd.Series({"trial_key": "t", "status": "completed"}), steps, tmp_path / "curves.png")
    panel = curves["curves.png"].axes[3]
    low, high = panel.get_ylim()
    assert low == 0 and high >= 0.704
    assert np.ptp(panel.lines[0].get_ydata()) / (high - low) < 0.05


def test_a_users_small_matplotlib_fonts_do_not_shrink_the_report_text(tmp_path, monkeypatch):
    import matplotlib

    curves = _keep_figures(monkeypatch)
    steps = pd.DataFrame({"step": [1, 2], "reward_mean": [0.1, 0.2], "probe": [True, False]})
    small = {"font.size": 5, "xtick.labelsize": 4, "ytick.labelsize": 4, "legend.fontsize": 4}
    with matplotlib.rc_context(small):
        trial_curves(pd.Series({"trial_key": "t", "status": "completed"}), steps, tmp_path / "curves.png")
    sizes = {
        text.get_text(): text.get_fontsize()
        for text in curves["curves.png"].findobj(Text)
        if text.get_visible() and text.get_text().strip()
    }
    assert {"mean reward", "probe step", "step"} <= set(sizes), sizes  # legend entries and axis labels
    assert min(sizes.values()) >= FONT_PT, sizes


def test_the_throughput_plot_draws_each_medians_95_percent_interval_and_none_under_the_minimum(
    tmp_path, monkeypatch
):
    grid = [("trl", "grpo", 2, 1, 1, "completed", 12), ("trl", "grpo", 4, 1, 1, "completed", 3)]
    write_synthetic_sweep(tmp_path, grid=grid)
    ranked = aggregate_repeats(load_outputs(tmp_path))
    figures = _keep_figures(monkeypatch)
    throughput_plot(ranked, tmp_path / "throughput.png")
    ax = figures["throughput.png"].axes[0]
    (bars,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    segments = bars.lines[2][0].get_segments()  # one vertical whisker per bar, K=2 then K=4
    long, short = ranked.set_index("num_generations").loc[2], ranked.set_index("num_generations").loc[4]
    assert long["cycles"] == 11 and short["cycles"] == 2 < MIN_CYCLES
    assert (segments[0][0][1], segments[0][1][1]) == pytest.approx((long["tokens_low"], long["tokens_high"]))
    assert np.isnan(segments[1]).all()  # too few cycles: no whisker


def test_the_prediction_plots_legend_lies_under_its_axes_and_within_the_figures_width(tmp_path, monkeypatch):
    from orchestrator.views.report import prediction_pairs
    from orchestrator.views.report._plots import prediction_plot
    from tests.helpers.synthetic_sweep import add_predictions

    trials = write_synthetic_sweep(tmp_path)
    add_predictions(tmp_path, trials, dict.fromkeys(trials["trial_key"], 1.05), 0.05)
    outputs = load_outputs(tmp_path)
    figures = _keep_figures(monkeypatch)
    prediction_plot(prediction_pairs(outputs.trials, outputs.steps), tmp_path / "predicted.png", 10.0)
    fig = figures["predicted.png"]
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    legend, axes_box = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert any("Qwen" in label for label in labels)  # the long family labels are in it
    assert legend.y1 <= axes_box.y0  # under the axes: it covers no point
    assert legend.width <= fig.bbox.width  # wrapped to the figure's width


def _learned(stack: str, mode: str, shift: float) -> tuple[dict, pd.DataFrame]:
    """A trial of the real learning trace (smollm2, one-digit sums) with its held-out readings moved by
    `shift`: its trials.parquet row (the accuracy figures from its steps) and its steps."""
    import json

    from tools.inputs.learning_traces import LEARNING_TRACES
    from trainers.record import accuracy_figures

    path = LEARNING_TRACES / "learning-smollm2-learning.parquet"
    steps = pd.read_parquet(path).assign(trial_key=f"{stack}-{mode}")
    steps["eval_pass_at_1"] = (steps["eval_pass_at_1"] + shift).clip(0, 1)
    before = json.loads(path.with_suffix(".json").read_text())
    row = {"trial_key": f"{stack}-{mode}", "stack": stack, "mode": mode, "status": "completed",
           "num_generations": 4, "batch_size": 2, "seed": 42, **before,
           **accuracy_figures(steps.to_dict("records"), 0.5)}  # fmt: skip
    return row, steps


def test_a_trials_curves_draw_its_held_out_accuracy_from_before_training_with_intervals(
    tmp_path, monkeypatch
):
    row, steps = _learned("trl", "grpo", 0.0)
    figures = _keep_figures(monkeypatch)
    trial_curves(pd.Series(row), steps, tmp_path / "curves.png")
    panel = figures["curves.png"].axes[4]
    line = panel.lines[0]
    measured = steps.dropna(subset=["eval_pass_at_1"])
    assert list(line.get_xdata()) == [0, *measured["step"]]
    assert list(line.get_ydata()) == [row["eval_before_pass_at_1"], *measured["eval_pass_at_1"]]
    assert panel.get_ylabel() == "held-out accuracy (pass@1)"
    assert len(panel.collections) == 1  # the interval band
    assert [t.get_text() for t in panel.get_legend().get_texts()][1] == "target 0.5"


def test_a_trial_that_measured_no_accuracy_keeps_four_panels(tmp_path, monkeypatch):
    figures = _keep_figures(monkeypatch)
    steps = pd.DataFrame({"step": [1, 2], "reward_mean": [0.1, 0.2]})
    trial_curves(pd.Series({"trial_key": "t", "status": "completed"}), steps, tmp_path / "curves.png")
    assert len(figures["curves.png"].axes) == 4


def test_the_learning_plot_draws_every_stacks_trials_on_one_axis_a_colour_per_stack(tmp_path, monkeypatch):
    from orchestrator.views.report._plots import learning_curves_plot

    made = [_learned(f, m, shift) for f, m, shift in
            (("trl", "grpo", 0.0), ("unsloth", "grpo", -0.1), ("trl", "gspo", 0.05), ("unsloth", "gspo", 0.02))]  # fmt: skip
    trials = pd.DataFrame([row for row, _ in made])
    figures = _keep_figures(monkeypatch)
    learning_curves_plot(trials, pd.concat([steps for _, steps in made]), tmp_path / "learning.png")
    (ax,) = figures["learning.png"].axes
    lines = {line.get_label(): line for line in ax.lines}
    assert {"TRL grpo", "TRL gspo", "Unsloth grpo", "Unsloth gspo", "target 0.5"} == set(lines)
    assert lines["TRL grpo"].get_color() == lines["TRL gspo"].get_color() != lines["Unsloth grpo"].get_color()
    assert lines["TRL grpo"].get_linestyle() != lines["TRL gspo"].get_linestyle()
    assert lines["Unsloth grpo"].get_ydata()[-1] == pytest.approx(
        made[1][1]["eval_pass_at_1"].dropna().iloc[-1]
    )


def test_no_learning_plot_without_a_held_out_reading(tmp_path):
    from orchestrator.views.report._plots import learning_curves_plot

    trials = pd.DataFrame([{"trial_key": "t", "stack": "trl", "mode": "grpo", "status": "completed"}])
    assert (
        learning_curves_plot(trials, pd.DataFrame({"trial_key": ["t"], "step": [1]}), tmp_path / "l.png")
        is None
    )
