"""Held-out accuracy over the steps, drawn on a given axis: a trial's readings in step order with their
95% Wilson intervals over the evaluated prompts, the evaluation before the first step (trials.parquet's
eval_before_pass_at_1) at step 0. The per-trial curves (_plots.trial_curves) give it a panel; the
learning section's plot (_plots.learning_curves_plot) puts every trial on one axis."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from trainers.record import TRIAL, finite_or_none, held_out_evals, wilson_interval

ACCURACY_LABEL = "held-out accuracy (pass@1)"


class Accuracy(NamedTuple):
    """A trial's held-out readings: steps, pass@1, and its 95% Wilson interval's ends."""

    step: np.ndarray
    share: np.ndarray
    low: np.ndarray
    high: np.ndarray


def accuracy_series(trial: pd.Series, steps: pd.DataFrame) -> Accuracy | None:
    """The trial's held-out readings in step order, the one before its first step at step 0; None when
    it measured none."""
    readings = held_out_evals(steps.to_dict("records")) if len(steps) else []
    before = finite_or_none(trial.get(TRIAL.eval_before_pass_at_1))
    before_prompts = finite_or_none(trial.get(TRIAL.eval_before_prompts))
    if before is not None and before_prompts and all(step != 0 for step, _, _ in readings):
        readings = [(0, before, before_prompts), *readings]
    if not readings:
        return None
    ends = [wilson_interval(share, prompts) for _, share, prompts in readings]
    return Accuracy(
        np.array([r[0] for r in readings], float),
        np.array([r[1] for r in readings], float),
        np.array([e[0] for e in ends], float),
        np.array([e[1] for e in ends], float),
    )


def draw_accuracy(
    ax, series: Accuracy, label: str | None = None, colour: str | None = None, style: str = "-"
):
    """One trial's readings as a line with markers, its interval as a band."""
    (line,) = ax.plot(series.step, series.share, style, marker="o", color=colour, label=label)
    ax.fill_between(series.step, series.low, series.high, color=line.get_color(), alpha=0.15, linewidth=0)


def target_line(ax, targets) -> None:
    """The sweep's accuracy target (verdict.accuracy_target) where its trials share one."""
    values = pd.to_numeric(pd.Series(list(targets), dtype=object), errors="coerce").dropna().unique()
    if len(values) == 1:
        ax.axhline(values[0], color="#d62728", linestyle="--", linewidth=1, label=f"target {values[0]:g}")


def accuracy_panel(ax, trial: pd.Series, steps: pd.DataFrame) -> None:
    """A trial's held-out accuracy panel, with the sweep's target; 'not measured' without a reading."""
    series = accuracy_series(trial, steps)
    if series is None:
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes, color="#777")
    else:
        draw_accuracy(ax, series, label="pass@1 (band: 95% interval)")
        target_line(ax, [trial.get(TRIAL.accuracy_target)])
        ax.legend()
    ax.set_ylim(0, 1)
    ax.set_ylabel(ACCURACY_LABEL)
