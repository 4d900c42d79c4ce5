"""A sweep's Parquet outputs read back (trials.parquet + steps/stack=*/mode=*/*.parquet), and the
figures of each trial: summary.csv's table and the summary metrics of its MLflow run. A completed
trial whose row has no training verdict (a sweep older than the columns) gets one computed from its
steps file, under the thresholds of the sweep's sweep.yaml (orchestrator/judging/verdict.py)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from orchestrator.judging.intervals import median_interval
from orchestrator.judging.verdict import VerdictSettings, judge_trial
from orchestrator.recording.sinks import STEP_SCHEMA, TRIAL_SCHEMA
from orchestrator.words import outcome
from trainers.record import OLD_NAMES, STEP, TRIAL, finite_or_none, renamed_frame


def _numeric_columns(schema: pa.Schema) -> list[str]:
    return [f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)]


# The schemas' number columns: read as numbers whatever a file stored (all-null columns arrive as object).
STEP_NUMERIC = _numeric_columns(STEP_SCHEMA)
TRIAL_NUMERIC = _numeric_columns(TRIAL_SCHEMA)

# A trial's start-up figures (trainers/record.py: derived from its steps when its row was built).
STARTUP_COLUMNS = (TRIAL.time_to_first_step_s, TRIAL.warmup_s)

# The original benchmark's summary columns, in its order (ours measured where it estimated); summary.csv
# writes them under the original's names (ORIGINAL_NAMES).
ORIGINAL_COLUMNS = [
    "run_name",
    "stack",
    "mode",
    "num_generations",
    "batch_size",
    "seed",
    "step_count",
    "avg_step_time_sec",
    "avg_estimated_tokens_per_sec",
    "peak_cuda_memory_allocated_gb",
]
ORIGINAL_NAMES = {"stack": "framework"}  # the original benchmark's own name, not one renamed here
EXTRA_COLUMNS = [
    "status",
    "status_detail",
    "peak_device_gib",
    "median_tokens_per_s",
    "median_tokens_per_s_lo",
    "median_tokens_per_s_hi",
    "cycles_measured",
    "p10_tokens_per_s",
    "p90_tokens_per_s",
    "budget_margin_gib",
    "budget_margin_pct",
    "tight",
    "model",
    "task",
    "micro_batch_size",
    "max_completion_length",
    "peak_rss_gib",
    "median_step_s",
    "final_reward",
    "sandbox_kills",
    "wall_s",
    *STARTUP_COLUMNS,
    "training_verdict",
    "training_verdict_detail",
]
SUMMARY_COLUMNS = ORIGINAL_COLUMNS + EXTRA_COLUMNS


@dataclass
class SweepOutputs:
    output_dir: Path
    trials: pd.DataFrame
    steps: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    # Where the rows came from when they are measured trials read from --trials sources (a result file, a
    # tracking server; sources.json, `rlsweep report --trials`): one row per trial, no steps recorded.
    # None for a sweep's own folder.
    sources: dict | None = None

    @property
    def sweep_name(self) -> str:
        names = self.trials["sweep"].dropna().unique() if "sweep" in self.trials else []
        return str(names[0]) if len(names) == 1 else self.output_dir.name


def load_outputs(output_dir: str | Path) -> SweepOutputs:
    """Read trials.parquet and every steps file; a step file that cannot be read becomes a warning."""
    out = Path(output_dir)
    trials_path = out / "trials.parquet"
    if not trials_path.is_file():
        raise FileNotFoundError(
            f"output_dir: no trials.parquet in {out}; give the folder a sweep wrote "
            f"(`rlsweep run SWEEP.yaml` writes outputs/<sweep>/trials.parquet)"
        )
    trials = numeric(renamed_frame(pq.read_table(trials_path).to_pandas()), TRIAL_NUMERIC)
    unjudged = _unjudged(trials)
    frames, warnings, step_rows = [], [], {}
    # Names starting with '.' are in-flight temp files of the atomic writer: skip them.
    # the partition under the stack's old name too (record.OLD_NAMES)
    steps_files = [
        *out.glob("steps/stack=*/mode=*/*.parquet"),
        *out.glob(f"steps/{OLD_NAMES['stack']}=*/mode=*/*.parquet"),
    ]
    for path in sorted(steps_files):
        if path.name.startswith("."):
            continue
        try:
            table = pq.read_table(path)
        except Exception as exc:  # a broken file must not hide the rest of the sweep
            warnings.append(f"could not read {path.relative_to(out)}: {exc}")
            continue
        frames.append(table.to_pandas())
        if path.stem in unjudged:  # rows as written: a NaN loss stays NaN, a null stays None
            step_rows[path.stem] = table.to_pylist()
    if unjudged:
        trials = _with_verdicts(trials, unjudged, step_rows, verdict_settings(out))
    frames = [f for f in frames if len(f)]
    steps = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["trial_key", "step", "probe"])
    )
    steps = numeric(steps, STEP_NUMERIC)
    steps["probe"] = (
        steps["probe"].astype("boolean").fillna(False).astype(bool) if "probe" in steps else False
    )
    return SweepOutputs(out, trials, steps, warnings, _sources(out))


def _sources(out: Path) -> dict | None:
    """sources.json of a report of --trials sources: {"sources": [...], "provenance": [lines]}."""
    import json

    path = out / "sources.json"
    if not path.is_file():
        return None
    try:
        found = json.loads(path.read_text())
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _unjudged(trials: pd.DataFrame) -> set[str]:
    """Trials of a judged status (outcome.JUDGED_STATUSES) whose row holds no training verdict: written
    before their status was judged (a timeout that kept no step stays without one)."""
    if "status" not in trials:
        return set()
    verdicts = trials.get("training_verdict", pd.Series(None, index=trials.index, dtype=object))
    judged = trials["status"].isin(outcome.JUDGED_STATUSES)
    return set(trials.loc[judged & verdicts.isna(), "trial_key"].astype(str))


def verdict_settings(output_dir: Path) -> VerdictSettings:
    """The verdict thresholds of the sweep that wrote output_dir (its sweep.yaml), else the defaults."""
    try:
        section = (yaml.safe_load((output_dir / "sweep.yaml").read_text()) or {}).get("verdict") or {}
        return VerdictSettings(**{**section, "stop_on": tuple(section.get("stop_on") or ())})
    except (OSError, yaml.YAMLError, AttributeError, TypeError):
        return VerdictSettings()


def memory_headroom_gib(output_dir: Path) -> float:
    """The sweep's memory.headroom_gib (its sweep.yaml): what a fit must leave free; 0 when unset."""
    try:
        section = (yaml.safe_load((output_dir / "sweep.yaml").read_text()) or {}).get("memory") or {}
        return float(section.get("headroom_gib") or 0.0)
    except (OSError, yaml.YAMLError, AttributeError, TypeError, ValueError):
        return 0.0


def _with_verdicts(
    trials: pd.DataFrame, keys: set[str], step_rows: dict[str, list[dict]], settings: VerdictSettings
) -> pd.DataFrame:
    trials = trials.copy()
    for name in ("training_verdict", "training_verdict_detail"):
        trials[name] = trials[name].astype(object) if name in trials else None
    for i, row in trials.iterrows():
        if str(row["trial_key"]) in keys:
            verdict = judge_trial(
                row["status"],
                step_rows.get(str(row["trial_key"]), []),
                settings,
                max_steps=int(row["max_steps"]) if finite_or_none(row.get("max_steps")) else None,
                budget_gib=finite_or_none(row.get("memory_budget_gib")),
                device_total_gib=finite_or_none(row.get("gpu_total_gib")),
                eval_before=(
                    finite_or_none(row.get("eval_before_pass_at_1")),
                    finite_or_none(row.get("eval_before_prompts")),
                ),
            )
            if verdict is None:
                continue
            trials.at[i, "training_verdict"] = verdict.verdict
            trials.at[i, "training_verdict_detail"] = verdict.detail
    return trials


def numeric(df: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """A copy with `columns` as numbers (NaN keeps "not measured" distinct from 0; absent ones NaN)."""
    df = df.copy()
    for col in df.columns:  # hive partitions and dictionary-encoded strings arrive as Categorical
        if isinstance(df[col].dtype, pd.CategoricalDtype):
            df[col] = df[col].astype(object)
    for col in columns:
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df else np.nan
    return df


def parse_json(value: Any) -> dict:
    """A JSON column's object as a dict; anything else (null, bad JSON, a list) as {}."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or not value.strip():
        return {}
    try:
        parsed = json.loads(value)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def plain(value: Any) -> Any:
    """A numpy scalar as its Python value; NaN and infinities as None."""
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def measured_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Steps that measure speed: probe steps force max-length completions, so they are left out
    unless a trial has nothing else."""
    if steps.empty or "probe" not in steps:
        return steps
    regular = steps[~steps["probe"].astype(bool)]
    return regular if len(regular) else steps


def column(df: pd.DataFrame, name: str) -> pd.Series:
    """The measured (non-null) numbers of a column; empty where the frame lacks it."""
    return pd.to_numeric(df[name], errors="coerce").dropna() if name in df else pd.Series(dtype=float)


def stat(series: pd.Series, how: str) -> float:
    """mean, max, median, p10 or p90 of a series; NaN when it is empty."""
    if series.empty:
        return float("nan")
    if how == "mean":
        return float(series.mean())
    if how == "max":
        return float(series.max())
    return float(series.quantile({"median": 0.5, "p10": 0.1, "p90": 0.9}[how]))


def trial_steps(steps: pd.DataFrame, trial_key: Any) -> pd.DataFrame:
    if steps.empty or "trial_key" not in steps:
        return steps.iloc[0:0]
    return steps[steps["trial_key"] == trial_key]


def trial_peak(
    trial_row: pd.Series | dict, steps: pd.DataFrame | None = None
) -> tuple[float | None, str | None]:
    """(peak GiB, kind) by outcome.peak_memory; a peak the trial row lacks is the steps' maximum."""
    steps = steps if steps is not None else pd.DataFrame()
    measured: dict[str, float] = {}
    for _, trial_column, step_columns in outcome.PEAK_SOURCES:
        value = finite_or_none(trial_row.get(trial_column))
        if value is not None:
            measured[trial_column] = value
        else:
            measured |= {name: stat(column(steps, name), "max") for name in step_columns}
    return outcome.peak_memory(measured)


def final_reward(steps: pd.DataFrame) -> float | None:
    if steps.empty or STEP.reward_mean not in steps:
        return None
    ordered = steps.sort_values("step") if "step" in steps else steps
    rewards = pd.to_numeric(ordered[STEP.reward_mean], errors="coerce").dropna()
    return finite_or_none(rewards.iloc[-1]) if len(rewards) else None


def sandbox_kills(steps: pd.DataFrame) -> float | None:
    """Training completions the task's sandbox killed, over the trial's steps (a reward-hacking signal);
    None when no step measured it (a task without a sandbox), never 0 for that."""
    kills = column(steps, STEP.sandbox_kills)
    return float(kills.sum()) if len(kills) else None


def summary_metrics(trial_row: pd.Series | dict, steps_df: pd.DataFrame | None) -> dict[str, float]:
    """Numbers for a trial's MLflow run, so its run table and compare view sort and chart by them.

    Only measured values appear: an unmeasurable figure (device memory on CPU) is left out, not 0.
    """
    steps = steps_df if steps_df is not None else pd.DataFrame()
    if "trial_key" in steps and trial_row.get("trial_key") is not None:
        steps = trial_steps(steps, trial_row.get("trial_key"))
    steps = numeric(steps, STEP_NUMERIC)
    speed = measured_steps(steps)
    peak, kind = trial_peak(trial_row, steps)
    tokens = column(speed, STEP.tokens_per_s)
    step_s = column(speed, STEP.step_s)
    estimate = median_interval([tokens.tolist()])
    tight = trial_row.get("tight")
    metrics = {
        "peak_memory_gib": peak,
        "peak_device_gib": finite_or_none(trial_row.get("peak_device_gib")) if kind == outcome.GPU else None,
        "peak_rss_gib": finite_or_none(trial_row.get("peak_rss_gib")),
        "peak_torch_allocated_gib": finite_or_none(stat(column(steps, STEP.torch_peak_allocated_gib), "max")),
        "median_tokens_per_s": finite_or_none(stat(tokens, "median"))
        or finite_or_none(trial_row.get("median_tokens_per_s")),
        "median_step_s": finite_or_none(stat(step_s, "median"))
        or finite_or_none(trial_row.get("median_step_s")),
        "median_tokens_per_s_lo": estimate.low,
        "median_tokens_per_s_hi": estimate.high,
        "cycles_measured": float(estimate.cycles) if len(steps) else None,
        "budget_margin_gib": finite_or_none(trial_row.get("budget_margin_gib")),
        "budget_margin_pct": finite_or_none(trial_row.get("budget_margin_pct")),
        "tight": float(tight) if isinstance(tight, (bool, np.bool_)) else None,
        "final_reward": final_reward(steps),
        "sandbox_kills": sandbox_kills(steps),
        "steps_completed": finite_or_none(trial_row.get("steps_completed")),
        **{name: finite_or_none(trial_row.get(name)) for name in STARTUP_COLUMNS},
    }
    return {name: value for name, value in metrics.items() if value is not None}


def summary_table(outputs: SweepOutputs) -> pd.DataFrame:
    """One row per trial (every status): the original benchmark's ten columns first, then ours."""
    rows = []
    for _, trial in outputs.trials.iterrows():
        steps = trial_steps(outputs.steps, trial.get("trial_key"))
        speed = measured_steps(steps)
        tokens = column(speed, STEP.tokens_per_s)
        estimate = median_interval([tokens.tolist()])
        steps_completed = finite_or_none(trial.get("steps_completed"))
        peak, kind = trial_peak(trial, steps)
        rows.append(
            {
                "run_name": trial.get("trial_key"),
                "stack": trial.get("stack"),
                "mode": trial.get("mode"),
                "num_generations": trial.get("num_generations"),
                "batch_size": trial.get("batch_size"),
                "seed": trial.get("seed"),
                "step_count": steps_completed if steps_completed is not None else len(steps),
                "avg_step_time_sec": stat(column(speed, STEP.step_s), "mean"),
                "avg_estimated_tokens_per_sec": stat(tokens, "mean"),
                "peak_cuda_memory_allocated_gb": stat(column(steps, STEP.torch_peak_allocated_gib), "max"),
                "status": trial.get("status"),
                "status_detail": trial.get("status_detail"),
                "peak_device_gib": peak if kind == outcome.GPU else np.nan,
                "median_tokens_per_s": stat(tokens, "median")
                if len(tokens)
                else trial.get("median_tokens_per_s"),
                "median_tokens_per_s_lo": estimate.low,
                "median_tokens_per_s_hi": estimate.high,
                "cycles_measured": estimate.cycles if len(steps) else None,
                "p10_tokens_per_s": stat(tokens, "p10"),
                "budget_margin_gib": trial.get("budget_margin_gib"),
                "budget_margin_pct": trial.get("budget_margin_pct"),
                "tight": trial.get("tight"),
                "p90_tokens_per_s": stat(tokens, "p90"),
                "model": trial.get("model"),
                "task": trial.get("task"),
                "micro_batch_size": trial.get("micro_batch_size"),
                "max_completion_length": trial.get("max_completion_length"),
                "peak_rss_gib": peak if kind == outcome.RSS else trial.get("peak_rss_gib"),
                "median_step_s": stat(column(speed, STEP.step_s), "median")
                if len(speed)
                else trial.get("median_step_s"),
                "final_reward": final_reward(steps),
                "sandbox_kills": sandbox_kills(steps),
                "wall_s": trial.get("wall_s"),
                **{name: trial.get(name) for name in STARTUP_COLUMNS},
                "training_verdict": trial.get("training_verdict"),
                "training_verdict_detail": trial.get("training_verdict_detail"),
            }
        )
    table = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    for col in (
        "num_generations",
        "batch_size",
        "seed",
        "step_count",
        "cycles_measured",
        "micro_batch_size",
        "max_completion_length",
    ):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("Int64")
    return table
