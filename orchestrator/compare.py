"""Compare two sweeps' outputs (two GPUs, or before and after an upgrade) trial key by trial key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from orchestrator.outcome import STATUS_LABELS, peak_memory
from orchestrator.report import load_outputs, summary_table

COMPARED = {  # measurement -> summary.csv column
    "tokens_per_s": "median_tokens_per_s",
    "step_s": "median_step_s",
    "peak_gib": "peak_memory_gib",
}


def _side(output_dir: str | Path) -> pd.DataFrame:
    summary = summary_table(load_outputs(output_dir))
    # Compare like with like: the ratio needs both sides' peaks of one kind (outcome.peak_memory).
    peaks = [peak_memory(row) for _, row in summary.iterrows()]
    summary["peak_memory_gib"] = pd.Series([value for value, _ in peaks], index=summary.index, dtype=float)
    summary["memory_kind"] = pd.Series([kind for _, kind in peaks], index=summary.index, dtype=object)
    columns = ["run_name", "framework", "mode", "num_generations", "batch_size", "seed", "status", "memory_kind",
               *COMPARED.values()]  # fmt: skip
    return summary[columns].rename(columns={"run_name": "trial_key"})


def compare_outputs(dir_a: str | Path, dir_b: str | Path, console: Console | None = None) -> pd.DataFrame:
    """One row per trial key in either sweep: both sides' status, speed and peak memory, and B / A ratios.

    `present` is "both", "only A" or "only B". Ratios are B divided by A: tokens/s above 1 means B is
    faster, step s and peak memory below 1 mean B is faster / leaner. A ratio is NaN where either side
    lacks the figure, and for memory also where the two sides measured different kinds (GPU vs RSS).
    """
    a, b = _side(dir_a), _side(dir_b)
    config = ["framework", "mode", "num_generations", "batch_size", "seed"]
    merged = a.merge(b, on="trial_key", how="outer", suffixes=("_a", "_b"), indicator=True)
    for col in config:  # the configuration columns from whichever side has the key
        merged[col] = merged[f"{col}_a"].combine_first(merged[f"{col}_b"])
    merged["present"] = merged["_merge"].map({"both": "both", "left_only": "only A", "right_only": "only B"})
    for name, col in COMPARED.items():
        merged[f"{name}_a"], merged[f"{name}_b"] = merged[f"{col}_a"], merged[f"{col}_b"]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = merged[f"{name}_b"].astype(float) / merged[f"{name}_a"].astype(float)
        merged[f"{name}_ratio"] = ratio.replace([np.inf, -np.inf], np.nan)
    same_kind = merged["memory_kind_a"] == merged["memory_kind_b"]
    merged.loc[~same_kind, "peak_gib_ratio"] = np.nan
    result_columns = [
        "trial_key",
        "present",
        *config,
        "status_a",
        "status_b",
        "memory_kind_a",
        "memory_kind_b",
    ]
    for name in COMPARED:
        result_columns += [f"{name}_a", f"{name}_b", f"{name}_ratio"]
    order = merged["present"].astype(str).map({"both": 0, "only A": 1, "only B": 2})
    result = merged.assign(_order=order).sort_values(["_order", "trial_key"])[result_columns]
    result = result.reset_index(drop=True)
    (console or Console()).print(comparison_table(result, Path(dir_a), Path(dir_b)))
    return result


def _num(value: float, digits: int = 1) -> str:
    if value is None or pd.isna(value):
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.{digits}f}"


def _ratio(value: float, higher_is_better: bool) -> str:
    if value is None or pd.isna(value):
        return "—"
    better = value > 1 if higher_is_better else value < 1
    style = "green" if better and abs(value - 1) > 0.02 else ("red" if abs(value - 1) > 0.02 else "")
    return f"[{style}]{value:.2f}×[/]" if style else f"{value:.2f}×"


def _status(row: pd.Series) -> str:
    a, b = (STATUS_LABELS.get(row[f"status_{side}"], "—") for side in ("a", "b"))
    return a if a == b else f"{a} → {b}"


def comparison_table(result: pd.DataFrame, dir_a: Path, dir_b: Path) -> Table:
    """Shared keys with A, B and B/A for each figure; keys only one sweep has listed under the table."""
    only = {side: result.loc[result["present"] == f"only {side}", "trial_key"].tolist() for side in "AB"}
    notes = [f"only in {side}: {', '.join(keys)}" for side, keys in only.items() if keys]
    table = Table(
        title=f"A = {dir_a}   B = {dir_b}",
        caption="\n".join(["B/A: green = B better (faster or leaner), red = B worse", *notes]),
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
            _ratio(row["tokens_per_s_ratio"], higher_is_better=True),
            _num(row["step_s_a"], 2),
            _num(row["step_s_b"], 2),
            _ratio(row["step_s_ratio"], higher_is_better=False),
            _num(row["peak_gib_a"]),
            _num(row["peak_gib_b"]),
            _ratio(row["peak_gib_ratio"], higher_is_better=False),
        )
    return table
