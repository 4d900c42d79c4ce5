"""What fits: the feasibility matrix (peak memory or the outcome per K x B, and the budget it is held
against) and the frontier (the largest configuration that completed, the smallest that ran out of
memory)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from orchestrator import outcome
from orchestrator.outcome import COMPLETED, OOM, PRUNED, STATUS_LABELS
from orchestrator.report._outputs import TRIAL_NUMERIC, column, finite, numeric, parse_json
from orchestrator.verdict import MARK, PRECEDENCE, VERDICT_WORDS


# ----------------------------------------------------------------------------------------------
# Feasibility matrix
# ----------------------------------------------------------------------------------------------
@dataclass
class FeasibilityGrid:
    """One (framework, mode, model): rows K, columns batch; labels for people, values for colour."""

    framework: str
    mode: str
    model: str
    memory_kind: str | None  # outcome.GPU, outcome.TORCH or outcome.RSS (process peak on CPU)
    labels: pd.DataFrame  # str: "12.3 GiB", "0.78 GiB ⚠ no signal", "OOM", "pruned", ...; "" where none ran
    values: pd.DataFrame  # float GiB for cells with a completed trial, NaN elsewhere
    statuses: pd.DataFrame  # the cell's outcome: a status, or "" where no trial ran
    budget_gib: float | None = None

    @property
    def title(self) -> str:
        return f"{self.framework} · {self.mode} · {self.model}"

    @property
    def memory_words(self) -> str:
        if self.memory_kind == outcome.GPU:
            return "peak GPU memory (GiB)"
        if self.memory_kind == outcome.RSS:
            return "peak process memory, RSS (GiB; CPU run, no GPU)"
        return "peak memory (GiB)"

    @property
    def budget_caption(self) -> str:
        if self.budget_gib is None:
            return "no memory budget known: pass budget_gib to mark what fits"
        fitting = sum(self.fits(k, b) for k in self.values.index for b in self.values.columns)
        ran = int((self.statuses != "").to_numpy().sum())
        return f"fits in {self.budget_gib:g} GiB: {fitting} of {ran} configurations"

    @property
    def verdict_note(self) -> str:
        """What the training-verdict mark means, when a cell carries it; else ""."""
        if not any(MARK in str(label) for label in self.labels.to_numpy().ravel()):
            return ""
        words = ", ".join(VERDICT_WORDS[v] for v in PRECEDENCE)
        return (
            f"{MARK}: a completed trial of the cell ran but its training verdict flags it ({words}; the "
            "first that holds is shown): it fits, but check that it learns"
        )

    def fits(self, k: Any, b: Any) -> bool:
        value = self.values.loc[k, b]
        return self.budget_gib is not None and pd.notna(value) and value <= self.budget_gib


def infer_budget_gib(trials: pd.DataFrame) -> float | None:
    """The memory budget a sweep ran under: the emulated budget if one was set, else the GPU's size."""
    from_rows = (finite(v) for v in trials.get("memory_budget_gib", []))
    from_config = (finite(parse_json(v).get("memory_budget_gib")) for v in trials.get("effective_config", []))
    budgets = {b for b in (*from_rows, *from_config) if b}
    if len(budgets) == 1:
        return budgets.pop()
    totals = column(trials, "gpu_total_gib")
    return float(totals.min()) if len(totals) else None


def feasibility_matrix(trials_df: pd.DataFrame, budget_gib: float | None = None) -> list[FeasibilityGrid]:
    """Per (framework, mode, model): rows K, columns batch, cells peak GiB or the outcome in a word.
    A group's cells show one kind of peak: the first its trials measured, by outcome.peak_memory."""
    trials = numeric(trials_df, TRIAL_NUMERIC)
    if trials.empty:
        return []
    trials["model"] = trials["model"].fillna("?").astype(str)
    peaks = [outcome.peak_memory(row) for _, row in trials.iterrows()]
    trials["_peak"] = [value for value, _ in peaks]
    trials["_kind"] = [kind for _, kind in peaks]
    grids = []
    for (framework, mode, model), group in trials.groupby(["framework", "mode", "model"], sort=True):
        ks = sorted(int(k) for k in group["num_generations"].dropna().unique())
        bs = sorted(int(b) for b in group["batch_size"].dropna().unique())
        labels = pd.DataFrame("", index=ks, columns=bs, dtype=object)
        statuses = pd.DataFrame("", index=ks, columns=bs, dtype=object)
        values = pd.DataFrame(np.nan, index=ks, columns=bs, dtype=float)
        kinds = set(group["_kind"].dropna())
        kind = next((k for k, _, _ in outcome.PEAK_SOURCES if k in kinds), None)
        for (k, b), cell in group.groupby(["num_generations", "batch_size"]):
            status, value, label = _cell(cell, kind)
            labels.loc[int(k), int(b)], statuses.loc[int(k), int(b)] = label, status
            values.loc[int(k), int(b)] = value
        for frame in (labels, values, statuses):
            frame.index.name, frame.columns.name = "K", "B"
        grids.append(
            FeasibilityGrid(str(framework), str(mode), str(model), kind, labels, values, statuses, budget_gib)
        )
    return grids


def _cell(cell: pd.DataFrame, kind: str | None) -> tuple[str, float, str]:
    counts = cell["status"].value_counts()
    outcomes = [s for s in STATUS_LABELS if s != COMPLETED and s in counts]  # in STATUS_LABELS' order
    completed = cell[cell["status"] == COMPLETED]
    if len(completed):
        peaks = completed.loc[completed["_kind"] == kind, "_peak"].dropna()
        value = float(peaks.max()) if len(peaks) else np.nan
        label = f"{value:.2f} GiB" if len(peaks) else STATUS_LABELS[COMPLETED]
        verdicts = set(completed.get("training_verdict", pd.Series(dtype=object)).dropna())
        flagged = [v for v in PRECEDENCE if v in verdicts]
        if flagged:
            label += f" {MARK} {VERDICT_WORDS[flagged[0]]}"
        if outcomes:
            label += f" (+{', '.join(f'{counts[s]} {STATUS_LABELS[s]}' for s in outcomes)})"
        return COMPLETED, value, label
    if outcomes:
        return outcomes[0], np.nan, STATUS_LABELS[outcomes[0]]
    return str(cell["status"].iloc[0]), np.nan, str(cell["status"].iloc[0])


# ----------------------------------------------------------------------------------------------
# Frontier
# ----------------------------------------------------------------------------------------------
FRONTIER_GROUP = ("framework", "mode", "model", "quantization")
_SIZE_COLUMNS = ("max_completion_length", "max_prompt_length", "lora_r")
_LABEL_NAMES = {
    "num_generations": "K",
    "batch_size": "B",
    "micro_batch_size": "micro",
    "max_prompt_length": "prompt",
    "max_completion_length": "completion",
    "lora_r": "r",
}
FRONTIER_COLUMNS = (
    *FRONTIER_GROUP,
    "largest_fit",
    "fit_trial_key",
    "fit_peak_device_gib",
    "fit_peak_rss_gib",
    "smallest_oom",
    "oom_trial_key",
    "oom_peak_device_gib",
    "oom_peak_rss_gib",
    "oom_detail",
    COMPLETED,
    OOM,
    PRUNED,
)


def _sized(group: pd.DataFrame) -> pd.DataFrame:
    g = group.copy()
    g["_completions"] = g["num_generations"] * g["batch_size"]
    if "micro_batch_size" in g:
        g["_micro"] = g["micro_batch_size"].fillna(g["_completions"])
    # memory grows with completions per step first, then lengths and rank
    zero = pd.Series(0.0, index=g.index)
    # ties (K=4 B=2 against K=8 B=1) go by the measured peak (outcome.peak_memory)
    peak = [outcome.peak_memory(row)[0] or 0.0 for _, row in g.iterrows()]
    columns = [g.get(c, zero) for c in _SIZE_COLUMNS]
    g["_size"] = list(zip(g["_completions"], *columns, peak, strict=True))
    return g


def _varies(g: pd.DataFrame, column: str) -> bool:
    if column in ("num_generations", "batch_size"):
        return True
    if column == "micro_batch_size":  # the default micro batch (B x K) says nothing K and B do not
        return bool((g["_micro"] != g["_completions"]).any())
    return g[column].nunique() > 1


def _label(row: pd.Series, varying: list[str]) -> str:
    parts = [f"{_LABEL_NAMES[c]}={row['_micro'] if c == 'micro_batch_size' else row[c]:g}" for c in varying]
    return f"{' '.join(parts)} ({row['_completions']:g} completions/step)"


def frontier(trials: pd.DataFrame) -> pd.DataFrame:
    """Per (framework, mode, model, quantization): the largest completed and the smallest
    out-of-memory configuration, with their peaks, from trials.parquet's rows. Configurations are
    ordered by completions per step (K x B), then completion length, prompt length, LoRA rank and
    the measured peak.
    A side that no trial reached is null."""
    missing = [c for c in (*FRONTIER_GROUP, "num_generations", "batch_size", "status") if c not in trials]
    if missing:
        raise ValueError(
            f"frontier: trials table lacks column(s) {', '.join(missing)}; "
            f"pass trials.parquet's rows (its columns: docs/schema.md)"
        )
    rows = []
    for key, group in trials.groupby(list(FRONTIER_GROUP), dropna=False, sort=True, observed=True):
        g = _sized(group)
        varying = [c for c in _LABEL_NAMES if c in g and _varies(g, c)]
        row: dict[str, Any] = dict(zip(FRONTIER_GROUP, key, strict=True))
        fit = _extreme(g[g["status"] == COMPLETED], max)
        oom = _extreme(g[g["status"] == OOM], min)
        for side, best in (("fit", fit), ("oom", oom)):
            row[f"{side}_trial_key"] = _value(best, "trial_key")
            row[f"{side}_peak_device_gib"] = _value(best, "peak_device_gib")
            row[f"{side}_peak_rss_gib"] = _value(best, "peak_rss_gib")
        row["largest_fit"] = None if fit is None else _label(fit, varying)
        row["smallest_oom"] = None if oom is None else _label(oom, varying)
        row["oom_detail"] = _value(oom, "status_detail")
        for status in (COMPLETED, OOM, PRUNED):
            row[status] = int((g["status"] == status).sum())
        rows.append(row)
    return pd.DataFrame(rows, columns=list(FRONTIER_COLUMNS))


def _extreme(rows: pd.DataFrame, pick) -> pd.Series | None:
    return None if rows.empty else rows.loc[pick(rows.index, key=lambda i: rows.at[i, "_size"])]


def _value(row: pd.Series | None, column: str) -> Any:
    value = None if row is None else row.get(column)
    return None if value is None or pd.isna(value) else value
