"""Compare two sweeps' outputs (two GPUs, or before and after an upgrade) trial by trial.

Trials are matched by trial key, then on what they compute: their settings but the bookkeeping and
execution knobs (orchestrator.spec.plan.configuration) and MACHINE_KNOBS, so the same configuration swept
on two machines pairs up even where its trial keys differ. A trial without a match is listed with the settings that
separate it from the nearest trial of the other sweep.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from orchestrator.judging.intervals import MemoryRatio, median_interval, memory_ratio_interval, ratio_interval
from orchestrator.spec.plan import configuration
from orchestrator.views.report import load_outputs, summary_table
from orchestrator.views.report._outputs import column, measured_steps, trial_steps
from orchestrator.words.outcome import STATUS_LABELS, peak_memory
from trainers.record import STEP
from trainers.trial import KNOBS, TrialSpec

COMPARED = {  # measurement -> summary.csv column
    STEP.tokens_per_s: "median_tokens_per_s",
    STEP.step_s: "median_step_s",
    "peak_gib": "peak_memory_gib",
}
# Settings that describe the machine a sweep emulates, not the trial: two sweeps differing only there
# ran the same trials.
MACHINE_KNOBS = ("memory_budget_gib",)


def meaning(trial: dict[str, Any]) -> dict[str, Any]:
    """The settings a trial is matched on: its stored config (trials.parquet `config`, over the defaults),
    else the knob columns of its row, less what does not change the trial (see the module doc)."""
    stored = trial.get("config")
    if isinstance(stored, str) and stored:
        settings = {**TrialSpec().to_dict(), **json.loads(stored)}
    else:
        settings = {k: trial[k] for k in KNOBS if k in trial and not _missing(trial[k])}
    return {k: _plain(v) for k, v in configuration(settings).items() if k not in MACHINE_KNOBS}


def _missing(value: Any) -> bool:
    return value is None or (np.isscalar(value) and not isinstance(value, str) and bool(pd.isna(value)))


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def separating(a: dict[str, Any], b: dict[str, Any]) -> str:
    """'seed 1 vs 2; lora_r 16 vs 8' for the settings where two trials differ."""
    return "; ".join(
        f"{k} {a.get(k, '(unset)')} vs {b.get(k, '(unset)')}"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    )


def nearest(settings: dict[str, Any], others: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The trial among `others` that differs from `settings` in the fewest settings."""
    if not others:
        return None
    return min(others, key=lambda o: sum(settings.get(k) != o.get(k) for k in set(settings) | set(o)))


def _side(output_dir: str | Path) -> pd.DataFrame:
    outputs = load_outputs(output_dir)
    summary = summary_table(outputs)
    settings = {row["trial_key"]: meaning(row) for row in outputs.trials.to_dict("records")}
    summary["settings"] = summary["run_name"].map(settings)
    summary["match"] = "settings " + summary["settings"].map(
        lambda s: json.dumps(s, sort_keys=True, default=str)
    )
    # Compare like with like: the ratio needs both sides' peaks of one kind (outcome.peak_memory).
    peaks = [peak_memory(row) for _, row in summary.iterrows()]
    summary["peak_memory_gib"] = pd.Series([value for value, _ in peaks], index=summary.index, dtype=float)
    summary["memory_kind"] = pd.Series([kind for _, kind in peaks], index=summary.index, dtype=object)
    # Each trial's measured cycles (tokens/s), for the intervals of its median and of the B/A ratio.
    measured = [measured_steps(trial_steps(outputs.steps, key)) for key in summary["run_name"]]
    summary["speeds"] = [column(steps, STEP.tokens_per_s).tolist() for steps in measured]
    summary["step_times"] = [column(steps, STEP.step_s).tolist() for steps in measured]
    columns = ["run_name", "match", "settings", "stack", "mode", "num_generations", "batch_size", "seed",
               "status", "memory_kind", "speeds", "step_times", *COMPARED.values()]  # fmt: skip
    return summary[columns].rename(columns={"run_name": "trial_key"})


def compare_outputs(dir_a: str | Path, dir_b: str | Path, console: Console | None = None) -> pd.DataFrame:
    """One row per trial in either sweep, matched on their settings (the module doc): both sides' trial
    keys, status, speed and peak memory, and B / A ratios; printed as a table on `console` when given.

    `present` is "both", "only A" or "only B"; `trial_key` is A's key where A has the trial, else B's.
    `separated_by` (unmatched trials): the settings where it differs from the nearest trial of the other
    sweep. Ratios are B divided by A: tokens/s above 1 means B is faster, step s and peak memory below 1
    mean B is faster / leaner. A ratio is NaN where either side lacks the figure, and for memory also
    where the two sides measured different kinds (GPU vs RSS). Tokens/s carries each side's 95% interval
    (tokens_per_s_{a,b}_lo/_hi) and cycles (cycles_{a,b}), and the ratio's (tokens_per_s_ratio_lo/_hi;
    null below intervals.MIN_CYCLES cycles a side) with tokens_per_s_words: the ratio as people read it
    (intervals.Ratio.words: "no clear difference", "too few cycles to compare").
    """
    a, b = _side(dir_a), _side(dir_b)
    # One trial key is one configuration (orchestrator.spec.plan.trial_key): a key both have pairs as is.
    shared = set(a["trial_key"]) & set(b["trial_key"])
    for side in (a, b):
        side.loc[side["trial_key"].isin(shared), "match"] = "key " + side["trial_key"]
    config = ["trial_key", "stack", "mode", "num_generations", "batch_size", "seed"]
    merged = a.merge(b, on="match", how="outer", suffixes=("_a", "_b"), indicator=True)
    for col in config:  # the configuration columns from whichever side has the trial
        merged[col] = merged[f"{col}_a"].combine_first(merged[f"{col}_b"])
    merged["present"] = merged["_merge"].map({"both": "both", "left_only": "only A", "right_only": "only B"})
    for name, col in COMPARED.items():
        merged[f"{name}_a"], merged[f"{name}_b"] = merged[f"{col}_a"], merged[f"{col}_b"]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = merged[f"{name}_b"].astype(float) / merged[f"{name}_a"].astype(float)
        merged[f"{name}_ratio"] = ratio.replace([np.inf, -np.inf], np.nan)
    for side in ("a", "b"):
        estimates = [median_interval([_list(v)]) for v in merged[f"speeds_{side}"]]
        merged[f"tokens_per_s_{side}_lo"] = [e.low for e in estimates]
        merged[f"tokens_per_s_{side}_hi"] = [e.high for e in estimates]
        merged[f"cycles_{side}"] = [e.cycles for e in estimates]
    for name, samples in ((STEP.tokens_per_s, "speeds"), (STEP.step_s, "step_times")):
        ranges = [
            ratio_interval([_list(b)], [_list(a)])
            for a, b in zip(merged[f"{samples}_a"], merged[f"{samples}_b"], strict=True)
        ]
        _put_ranges(merged, name, ranges)
    same_kind = merged["memory_kind_a"] == merged["memory_kind_b"]
    merged.loc[~same_kind, "peak_gib_ratio"] = np.nan
    memory = [
        memory_ratio_interval([b], [a]) if same else MemoryRatio(None, None, None, (0, 0))
        for a, b, same in zip(merged["peak_gib_a"], merged["peak_gib_b"], same_kind, strict=True)
    ]
    _put_ranges(merged, "peak_gib", memory)
    sides = {"a": a["settings"].tolist(), "b": b["settings"].tolist()}
    merged["separated_by"] = [
        separating(mine, nearest(mine, sides["b" if side == "a" else "a"]) or {}) if present != "both" else ""
        for present, side, mine in zip(
            merged["present"],
            ["a" if p == "only A" else "b" for p in merged["present"]],
            merged["settings_a"].combine_first(merged["settings_b"]),
            strict=True,
        )
    ]
    result_columns = [
        "present",
        *config,
        "trial_key_b",
        "separated_by",
        "status_a",
        "status_b",
        "memory_kind_a",
        "memory_kind_b",
    ]
    for name in COMPARED:
        result_columns += [f"{name}_a", f"{name}_b", f"{name}_ratio"]
        if name == STEP.tokens_per_s:
            result_columns += ["tokens_per_s_a_lo", "tokens_per_s_a_hi", "cycles_a", "tokens_per_s_b_lo",
                               "tokens_per_s_b_hi", "cycles_b", "tokens_per_s_ratio_lo", "tokens_per_s_ratio_hi",
                               "tokens_per_s_words"]  # fmt: skip
        elif name == STEP.step_s:
            result_columns += ["step_s_ratio_lo", "step_s_ratio_hi", "step_s_words"]
        else:
            result_columns += [f"{name}_ratio_lo", f"{name}_ratio_hi", f"{name}_words"]
    order = merged["present"].astype(str).map({"both": 0, "only A": 1, "only B": 2})
    result = merged.assign(_order=order).sort_values(["_order", "trial_key"])[result_columns]
    result = result.reset_index(drop=True)
    if console is not None:
        console.print(comparison_table(result, Path(dir_a), Path(dir_b)))
    return result


def _put_ranges(merged: pd.DataFrame, name: str, ranges: list) -> None:
    """A B/A ratio's range and words as columns: {name}_ratio_lo/_hi and {name}_words."""
    merged[f"{name}_ratio_lo"] = [r.low for r in ranges]
    merged[f"{name}_ratio_hi"] = [r.high for r in ranges]
    merged[f"{name}_words"] = [r.words() for r in ranges]


def _list(value: Any) -> list[float]:
    """A side's cycles; an empty list where the trial is missing from that side (NaN after the merge)."""
    return value if isinstance(value, list) else []


def _num(value: float, digits: int = 1) -> str:
    if value is None or pd.isna(value):
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.{digits}f}"


def _peak(value: float) -> str:
    return "—" if value is None or pd.isna(value) else f"{value:.2f}"


def _clear_ratio(row: pd.Series, name: str, higher_is_better: bool) -> str:
    """B/A of step time or peak memory in words with its range, coloured only where the range excludes 1
    (green where B is better)."""
    low, high, words = row[f"{name}_ratio_lo"], row[f"{name}_ratio_hi"], row[f"{name}_words"]
    if low is None or pd.isna(low) or low <= 1 <= high:
        return words
    better = (row[f"{name}_ratio"] > 1) == higher_is_better
    return f"[{'green' if better else 'red'}]{words}[/]"


def _speed_ratio(row: pd.Series) -> str:
    """B/A tokens/s with its interval, coloured only where the interval excludes 1."""
    if row["tokens_per_s_ratio_lo"] is None or pd.isna(row["tokens_per_s_ratio_lo"]):
        return row["tokens_per_s_words"]
    words = row["tokens_per_s_words"]
    clear = not row["tokens_per_s_ratio_lo"] <= 1 <= row["tokens_per_s_ratio_hi"]
    return f"[{'green' if row['tokens_per_s_ratio'] > 1 else 'red'}]{words}[/]" if clear else words


def _status(row: pd.Series) -> str:
    a, b = (STATUS_LABELS.get(row[f"status_{side}"], "—") for side in ("a", "b"))
    return a if a == b else f"{a} → {b}"


def comparison_table(result: pd.DataFrame, dir_a: Path, dir_b: Path) -> Table:
    """Shared keys with A, B and B/A for each figure; keys only one sweep has listed under the table."""
    notes = [
        f"only in {row['present'][-1]}: {row['trial_key']} (nearest in {'B' if row['present'] == 'only A' else 'A'} "
        f"differs in {row['separated_by'] or 'nothing'})"
        for _, row in result[result["present"] != "both"].iterrows()
    ]
    table = Table(
        title=f"A = {dir_a}   B = {dir_b}",
        caption="\n".join(
            [
                "B/A: green = B better (faster or leaner), red = B worse, coloured only where its range "
                "excludes 1: tokens/s and step s with their 95% interval (bootstrap over the steps), peak "
                "memory with the run-to-run spread of a peak",
                *notes,
            ]
        ),
    )
    table.add_column("Trial", overflow="fold")
    table.add_column("Status (A → B)")
    for header in ("tokens/s A", "B", "B/A", "step s A", "B", "B/A", "peak GiB A", "B", "B/A"):
        table.add_column(header, justify="right")
    for _, row in result[result["present"] == "both"].iterrows():
        table.add_row(
            str(row["trial_key"]),
            _status(row),
            _num(row["tokens_per_s_a"]),
            _num(row["tokens_per_s_b"]),
            _speed_ratio(row),
            _num(row["step_s_a"], 2),
            _num(row["step_s_b"], 2),
            _clear_ratio(row, "step_s", higher_is_better=False),
            _peak(row["peak_gib_a"]),
            _peak(row["peak_gib_b"]),
            _clear_ratio(row, "peak_gib", higher_is_better=False),
        )
    return table
