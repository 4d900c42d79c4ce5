"""Predicted against measured peak memory: the prediction each trial's row records (made before it ran,
from the trials finished before it) beside the peak it measured, and the errors by family.

Error = predicted - measured, as % of the measured peak (positive: over-predicted). Only completed
trials count: an `oom` trial was killed on its way up, and a `timeout` one at its time limit, so its
measured peak is a lower bound; it is shown, not scored. The measured figure is outcome.peak_memory's (GPU, else torch reserved, else RSS).
Families are the memory model's (orchestrator.judging.memory.FAMILY), and so are the fitted terms shown per
family (MemoryModel.families()).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from orchestrator.judging.memory import PARTS, MemoryModel, family_label, spec_of
from orchestrator.views.report._outputs import trial_peak, trial_steps
from orchestrator.words import outcome
from trainers.record import finite_or_none

PREDICTED_COLUMNS = (
    "predicted_peak_gib",
    "predicted_low_gib",
    "predicted_high_gib",
    "predicted_from_trials",
)
ERROR_HEADERS = (
    "Family",
    "Trials scored",
    "Mean |error| (% of measured)",
    "Worst |error| (%)",
    "Mean signed error (%)",
    "Worst under-prediction (%)",
    "Measured inside the interval",
)


def _family(trial: pd.Series) -> str:
    """The trial's memory family in words (orchestrator.judging.memory.family_label)."""
    return family_label(spec_of({k: v for k, v in trial.items() if not _missing(v)}))


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def prediction_error(row: pd.Series | dict, measured_gib: float | None = None) -> tuple[float, float] | None:
    """(predicted - measured in GiB, that as % of measured) of a completed trial with a prediction and a
    measured peak (measured_gib, else outcome.peak_memory of the row); None for any other trial."""
    predicted = finite_or_none(row.get("predicted_peak_gib"))
    measured = measured_gib if measured_gib is not None else outcome.peak_memory(row)[0]
    if predicted is None or measured is None or measured <= 0 or row.get("status") != outcome.COMPLETED:
        return None
    return predicted - measured, 100.0 * (predicted - measured) / measured


def prediction_pairs(trials: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per trial with a prediction: family, status, measured and predicted peaks with the
    interval, the trials the prediction was fitted on, and the error (null where not scored)."""
    rows = []
    for _, trial in trials.iterrows():
        predicted = finite_or_none(trial.get("predicted_peak_gib"))
        if predicted is None:
            continue
        measured, kind = trial_peak(trial, trial_steps(steps, trial.get("trial_key")))
        error = prediction_error(trial, measured)
        low, high = (
            finite_or_none(trial.get("predicted_low_gib")),
            finite_or_none(trial.get("predicted_high_gib")),
        )
        rows.append(
            {
                "trial_key": trial.get("trial_key"),
                "family": _family(trial),
                "status": trial.get("status"),
                "measured_gib": measured,
                "memory_kind": kind,
                "predicted_gib": predicted,
                "low_gib": low,
                "high_gib": high,
                "from_trials": finite_or_none(trial.get("predicted_from_trials")),
                "basis": trial.get("predicted_basis"),
                "error_gib": error[0] if error else None,
                "error_pct": error[1] if error else None,
                "inside": (low <= measured <= high)
                if error and low is not None and high is not None
                else None,
            }
        )
    columns = ["trial_key", "family", "status", "measured_gib", "memory_kind", "predicted_gib", "low_gib",
               "high_gib", "from_trials", "basis", "error_gib", "error_pct", "inside"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def _errors(family: str, scored: pd.DataFrame) -> dict[str, Any]:
    errors = scored["error_pct"].astype(float)
    intervals = scored["inside"].dropna()
    return dict(
        zip(
            ERROR_HEADERS,
            [
                family,
                len(scored),
                errors.abs().mean(),
                errors.abs().max(),
                errors.mean(),
                max(0.0, -errors.min()),
                f"{int(intervals.sum())} of {len(intervals)}" if len(intervals) else "no interval",
            ],
            strict=True,
        )
    )


def error_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """The errors by family (and over all of them when there are several), as % of the measured peak;
    empty when no completed trial had a prediction."""
    scored = pairs[pairs["error_pct"].notna()] if len(pairs) else pairs
    if scored.empty:
        return pd.DataFrame(columns=list(ERROR_HEADERS))
    rows = [_errors(family, group) for family, group in scored.groupby("family", sort=True)]
    if len(rows) > 1:
        rows.append(_errors("all families", scored))
    return pd.DataFrame(rows, columns=list(ERROR_HEADERS)).round(2)


def prediction_metrics(row: pd.Series | dict) -> dict[str, float]:
    """A trial run's MLflow metrics of its prediction: the predicted figures its row holds and, for a
    scored trial, the error in GiB and in % of the measured peak. Empty when no prediction was made."""
    metrics = {name: finite_or_none(row.get(name)) for name in PREDICTED_COLUMNS}
    error = prediction_error(row)
    if error:
        metrics |= {"prediction_error_gib": error[0], "prediction_error_pct": error[1]}
    return {name: value for name, value in metrics.items() if value is not None}


# The sweep run's MLflow metrics, over every scored trial: name -> the error table's column.
SWEEP_METRICS = {
    "prediction_trials_scored": "Trials scored",
    "prediction_mean_abs_error_pct": "Mean |error| (% of measured)",
    "prediction_worst_abs_error_pct": "Worst |error| (%)",
    "prediction_mean_signed_error_pct": "Mean signed error (%)",
    "prediction_worst_under_prediction_pct": "Worst under-prediction (%)",
}


def prediction_summary(pairs: pd.DataFrame) -> dict[str, float]:
    """The errors over all scored trials, named for the sweep's MLflow run; empty when none was scored."""
    scored = pairs[pairs["error_pct"].notna()] if len(pairs) else pairs
    if scored.empty:
        return {}
    overall = _errors("all families", scored)
    return {name: float(overall[column]) for name, column in SWEEP_METRICS.items()}


def terms_table(trials: pd.DataFrame) -> pd.DataFrame:
    """Per family with a measured trial, the memory model fitted on this sweep's trials: what its
    static, generation and training parts hold (GiB) at its largest measured trial."""
    # A row without a value (a sweep older than a column) takes the knob's default, as TrialSpec would.
    rows = [{k: v for k, v in row.items() if not _missing(v)} for row in trials.to_dict("records")]
    lines = []
    for fit in MemoryModel.fit(rows).families():
        if not fit.n_fitted:
            continue
        line = {
            "Family": fit.label,
            "Trials measured": fit.n_fitted,
            "OOM or timeout trials (lower bounds)": fit.n_censored,
        }
        # GiB to two decimals: a CPU run's parts are fractions of a GiB.
        line |= {f"{part.capitalize()} (GiB)": f"{fit.terms.get(part, 0.0):.2f}" for part in PARTS}
        line["Sum (GiB)"] = f"{sum(fit.terms.get(part, 0.0) for part in PARTS):.2f}"
        line["Worst leave-one-out error (%)"] = 100.0 * fit.loo_worst if fit.loo_worst is not None else None
        lines.append(line)
    return pd.DataFrame(lines)
