"""What fits: the feasibility matrix (peak memory or the outcome per K x B, and the budget it is held
against), the frontier (the largest configuration that fits, the smallest that does not), and both as
tables for people (one frontier table; one matrix per model with the stacks side by side: those tables are
_feasibility_tables.py's).
A peak is measured by a completed trial, or by a timeout on the steps it kept (a lower bound): such a
timeout fits on those steps, said in words where shown, or does not fit when it already passed the budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.judging.intervals import Margin, margin
from orchestrator.views.report._outputs import TRIAL_NUMERIC, column, numeric, parse_json
from orchestrator.words import outcome
from orchestrator.words.outcome import COMPLETED, MEMORY_LABELS, OOM, PRUNED, STATUS_LABELS
from orchestrator.words.verdicts import MARK, PROBLEMS, VERDICT_WORDS
from trainers.record import finite_or_none, first_kind


# ----------------------------------------------------------------------------------------------
# Feasibility matrix
# ----------------------------------------------------------------------------------------------
@dataclass
class FeasibilityGrid:
    """One (stack, mode, model): rows K, columns batch; labels for people, values for colour."""

    stack: str
    mode: str
    model: str
    memory_kind: str | None  # outcome.GPU, outcome.TORCH or outcome.RSS (process peak on CPU)
    labels: pd.DataFrame  # str: "12.3 GiB", "0.78 GiB ⚠ no signal", "OOM", "pruned", ...; "" where none ran
    values: pd.DataFrame  # float GiB for cells with a measured peak (completed, or a timeout's kept steps)
    statuses: pd.DataFrame  # the cell's outcome: a status, or "" where no trial ran
    budget_gib: float | None = None
    headroom_gib: float = 0.0  # memory.headroom_gib: what a fit must leave free under the budget
    num_processes: int = 1  # the GPU axis: GPUs (ranks) per trial and how they share the model
    distributed: str = "none"

    @property
    def title(self) -> str:
        return f"{self.stack} · {self.mode} · {self.model}" + (
            f" · {self.gpus}" if self.num_processes > 1 else ""
        )

    @property
    def gpus(self) -> str:
        return gpus_words(self.num_processes, self.distributed)

    def fits(self, k: Any, b: Any) -> bool:
        """A completed trial of the cell within the budget, or a timeout within it on the steps it kept."""
        in_grid = k in self.statuses.index and b in self.statuses.columns
        if not in_grid or self.over_budget(k, b):
            return False
        status = self.statuses.loc[k, b]
        return status == COMPLETED or (status == outcome.TIMEOUT and pd.notna(self.values.loc[k, b]))

    @property
    def memory_words(self) -> str:
        return memory_words({self.memory_kind} - {None})

    @property
    def verdict_note(self) -> str:
        """What the training-verdict mark means, when a cell carries it; else ""."""
        if not any(MARK in str(label) for label in self.labels.to_numpy().ravel()):
            return ""
        words = ", ".join(VERDICT_WORDS[v] for v in PROBLEMS)
        return (
            f"{MARK}: a completed trial of the cell ran but its training verdict flags it ({words}; the "
            "first that holds is shown): it fits, but check that it learns"
        )

    def over_budget(self, k: Any, b: Any) -> bool:
        """Measured (completed, or timed out: a lower bound), but its peak passed the budget less the
        headroom: it does not fit."""
        value = self.values.loc[k, b]
        return self.budget_gib is not None and pd.notna(value) and value > self.budget_gib - self.headroom_gib

    def margin(self, k: Any, b: Any) -> Margin | None:
        """The cell's peak against the budget less the headroom, what `fits` is judged against
        (intervals.margin); None without either."""
        value = self.values.loc[k, b]
        usable = None if self.budget_gib is None else self.budget_gib - self.headroom_gib
        return margin(float(value), usable) if pd.notna(value) else None

    def tight(self, k: Any, b: Any) -> bool:
        """Fits, by less than the run-to-run spread of its peak (intervals.Margin.tight)."""
        fit = self.margin(k, b)
        return fit is not None and fit.tight and not self.over_budget(k, b)


def memory_words(kinds: set[str]) -> str:
    """'peak memory, GPU (NVML), GiB' for the kinds of peak (outcome.PEAK_SOURCES) a table shows."""
    ordered = [MEMORY_LABELS[k] for k, _, _ in outcome.PEAK_SOURCES if k in kinds]
    return f"peak memory, {' / '.join(ordered)}, GiB" if ordered else "peak memory, GiB"


def set_budgets_gib(trials: pd.DataFrame) -> set[float]:
    """The memory budgets the sweep's trials were given (memory.budget_gib); empty when none was."""
    from_rows = (finite_or_none(v) for v in trials.get("memory_budget_gib", []))
    from_config = (
        finite_or_none(parse_json(v).get("memory_budget_gib")) for v in trials.get("effective_config", [])
    )
    return {b for b in (*from_rows, *from_config) if b}


def infer_budget_gib(trials: pd.DataFrame) -> float | None:
    """The memory budget a sweep ran under: the emulated budget if one was set, else the GPU's size."""
    budgets = set_budgets_gib(trials)
    if len(budgets) == 1:
        return budgets.pop()
    totals = column(trials, "gpu_total_gib")
    return float(totals.min()) if len(totals) else None


def feasibility_matrix(
    trials_df: pd.DataFrame, budget_gib: float | None = None, headroom_gib: float = 0.0
) -> list[FeasibilityGrid]:
    """Per (stack, mode, model): rows K, columns batch, cells peak GiB or the outcome in a word.
    A group's cells show one kind of peak: the first its trials measured, by outcome.peak_memory."""
    trials = numeric(trials_df, TRIAL_NUMERIC)
    if trials.empty:
        return []
    trials = with_gpu_axis(trials)
    trials["model"] = trials["model"].fillna("?").astype(str)
    peaks = [outcome.peak_memory(row) for _, row in trials.iterrows()]
    trials["_peak"] = [value for value, _ in peaks]
    trials["_kind"] = [kind for _, kind in peaks]
    grids = []
    by = ["stack", "mode", "model", *GPU_AXIS]
    for (stack, mode, model, n, distributed), group in trials.groupby(by, sort=True):
        ks = sorted(int(k) for k in group["num_generations"].dropna().unique())
        bs = sorted(int(b) for b in group["batch_size"].dropna().unique())
        labels = pd.DataFrame("", index=ks, columns=bs, dtype=object)
        statuses = pd.DataFrame("", index=ks, columns=bs, dtype=object)
        values = pd.DataFrame(np.nan, index=ks, columns=bs, dtype=float)
        kind = first_kind(group["_kind"].dropna())
        for (k, b), cell in group.groupby(["num_generations", "batch_size"]):
            status, value, label = _cell(cell, kind)
            labels.loc[int(k), int(b)], statuses.loc[int(k), int(b)] = label, status
            values.loc[int(k), int(b)] = value
        for frame in (labels, values, statuses):
            frame.index.name, frame.columns.name = "K", "B"
        grids.append(
            FeasibilityGrid(
                str(stack), str(mode), str(model), kind, labels, values, statuses, budget_gib,
                headroom_gib, int(n), str(distributed),
            )
        )  # fmt: skip
    return grids


def kept_steps(rows: pd.DataFrame) -> pd.Series:
    """Timeouts that kept a step and measured a peak (`_peak`): they fit, or not, on those steps."""
    steps = pd.to_numeric(rows["steps_completed"], errors="coerce") if "steps_completed" in rows else np.nan
    return (rows["status"] == outcome.TIMEOUT) & (steps > 0) & rows["_peak"].notna()


def kept_words(row: pd.Series, words=outcome.cut_short) -> str:
    """'the 19 of 20 steps measured before the time limit' for a timeout's row (words=steps_of: '19 of 20
    steps', in a matrix cell)."""
    asked = finite_or_none(row.get("max_steps"))
    return words(int(finite_or_none(row.get("steps_completed")) or 0), int(asked) if asked else None)


def _cell(cell: pd.DataFrame, kind: str | None) -> tuple[str, float, str]:
    counts = cell["status"].value_counts()
    completed = cell[cell["status"] == COMPLETED]
    measured = completed if len(completed) else cell[kept_steps(cell)]
    status = COMPLETED if len(completed) else outcome.TIMEOUT if len(measured) else None
    outcomes = [s for s in STATUS_LABELS if s not in (COMPLETED, status) and s in counts]  # in their order
    if status is not None:
        peaks = measured.loc[measured["_kind"] == kind, "_peak"].dropna()
        value = float(peaks.max()) if len(peaks) else np.nan
        label = f"{value:.2f} GiB" if len(peaks) else STATUS_LABELS[status]
        if status == outcome.TIMEOUT and len(peaks):  # "0.78 GiB (timeout: 19 of 20 steps)"
            row = measured.loc[peaks.idxmax()]
            label += f" ({STATUS_LABELS[outcome.TIMEOUT]}: {kept_words(row, outcome.steps_of)})"
        verdicts = set(measured.get("training_verdict", pd.Series(dtype=object)).dropna())
        flagged = [v for v in PROBLEMS if v in verdicts]
        if flagged:
            label += f" {MARK} {VERDICT_WORDS[flagged[0]]}"
        if outcomes:
            label += f" (+{', '.join(f'{counts[s]} {STATUS_LABELS[s]}' for s in outcomes)})"
        return status, value, label
    if outcomes:
        return outcomes[0], np.nan, STATUS_LABELS[outcomes[0]]
    return str(cell["status"].iloc[0]), np.nan, str(cell["status"].iloc[0])


# ----------------------------------------------------------------------------------------------
# Frontier
# ----------------------------------------------------------------------------------------------
# The GPU axis: a configuration fits or not per GPU count and strategy. Rows from before the
# axis existed ran on one GPU, strategy none.
GPU_AXIS = {"num_processes": 1, "distributed": "none"}
FRONTIER_GROUP = ("stack", "mode", "model", "quantization", *GPU_AXIS)
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
    "fit_kept",
    "fit_trial_key",
    "fit_peak_device_gib",
    "fit_peak_rss_gib",
    "fit_peak_gib",
    "fit_memory_kind",
    "fit_margin_gib",
    "fit_margin_pct",
    "fit_tight",
    "smallest_oom",
    "oom_trial_key",
    "oom_peak_device_gib",
    "oom_peak_rss_gib",
    "oom_peak_gib",
    "oom_memory_kind",
    "oom_over_budget",
    "oom_detail",
    COMPLETED,
    outcome.TIMEOUT,
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
    peaks = [outcome.peak_memory(row) for _, row in g.iterrows()]
    g["_peak"] = [np.nan if value is None else value for value, _ in peaks]
    g["_kind"] = [kind for _, kind in peaks]
    columns = [g.get(c, zero) for c in _SIZE_COLUMNS]
    g["_size"] = list(zip(g["_completions"], *columns, g["_peak"].fillna(0.0), strict=True))
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


def frontier(
    trials: pd.DataFrame, budget_gib: float | None = None, headroom_gib: float = 0.0
) -> pd.DataFrame:
    """Per (stack, mode, model, quantization): the largest configuration that fits and the smallest
    that does not, with their peaks (outcome.peak_memory), from trials.parquet's rows. Without a budget,
    "fits" means completed and "does not" out of memory; with one, a completed trial whose peak passed
    it does not fit either (oom_over_budget). A timeout that kept steps is measured on them (fit_kept says
    so; its peak, a lower bound, over the budget does not fit). Configurations are ordered by completions
    per step (K x B), then completion length, prompt length, LoRA rank and the measured peak.
    headroom_gib (memory.headroom_gib): a peak must leave this much of the budget free to fit.
    fit_margin_gib/_pct, fit_tight: the largest fit's margin to the budget (intervals.margin).
    A side that no trial reached is null."""
    required = (*FRONTIER_GROUP[:4], "num_generations", "batch_size", "status")
    missing = [c for c in required if c not in trials]
    if missing:
        raise ValueError(
            f"frontier: trials table lacks column(s) {', '.join(missing)}; "
            f"pass trials.parquet's rows (its columns: docs/schema.md)"
        )
    trials = with_gpu_axis(trials)
    rows = []
    for key, group in trials.groupby(list(FRONTIER_GROUP), dropna=False, sort=True, observed=True):
        g = _sized(group)
        varying = [c for c in _LABEL_NAMES if c in g and _varies(g, c)]
        row: dict[str, Any] = dict(zip(FRONTIER_GROUP, key, strict=True))
        measured = (g["status"] == COMPLETED) | kept_steps(g)
        limit = None if budget_gib is None else budget_gib - headroom_gib
        over = measured & (g["_peak"] > limit) if limit is not None else measured & False
        fit = _extreme(g[measured & ~over], max)
        oom = _extreme(g[(g["status"] == OOM) | over], min)
        for side, best in (("fit", fit), ("oom", oom)):
            row[f"{side}_trial_key"] = _value(best, "trial_key")
            row[f"{side}_peak_device_gib"] = _value(best, "peak_device_gib")
            row[f"{side}_peak_rss_gib"] = _value(best, "peak_rss_gib")
            row[f"{side}_peak_gib"] = _value(best, "_peak")
            row[f"{side}_memory_kind"] = _value(best, "_kind")
        fit_margin = None if fit is None else margin(_value(fit, "_peak"), limit)
        row["fit_margin_gib"] = None if fit_margin is None else fit_margin.gib
        row["fit_margin_pct"] = None if fit_margin is None else fit_margin.pct
        row["fit_tight"] = None if fit_margin is None else fit_margin.tight
        row["largest_fit"] = None if fit is None else _label(fit, varying)
        row["fit_kept"] = kept_words(fit) if fit is not None and fit["status"] == outcome.TIMEOUT else None
        row["smallest_oom"] = None if oom is None else _label(oom, varying)
        row["oom_over_budget"] = None if oom is None else bool(oom["status"] != OOM)
        done = (
            "completed" if oom is None or oom["status"] == COMPLETED else f"timed out, on {kept_words(oom)}"
        )
        row["oom_detail"] = (
            f"{done}, but its peak {oom['_peak']:.2f} GiB passed the {budget_gib:g} GiB budget"
            + (f" less the {headroom_gib:g} GiB headroom" if headroom_gib else "")
            if row["oom_over_budget"]
            else _value(oom, "status_detail")
        )
        for status in (COMPLETED, outcome.TIMEOUT, OOM, PRUNED):
            row[status] = int((g["status"] == status).sum())
        rows.append(row)
    return pd.DataFrame(rows, columns=list(FRONTIER_COLUMNS))


def with_gpu_axis(trials: pd.DataFrame) -> pd.DataFrame:
    """trials with num_processes and distributed filled where a row (or the table) predates them."""
    out = trials.copy()
    for name, default in GPU_AXIS.items():
        out[name] = out[name].fillna(default) if name in out else default
    out["num_processes"] = out["num_processes"].astype(int)
    return out


def gpus_words(num_processes: Any, distributed: Any) -> str:
    """'1 GPU', or '2 GPUs · zero3'."""
    n = int(num_processes)
    return "1 GPU" if n == 1 and distributed == "none" else f"{n} GPUs · {distributed}"


def _extreme(rows: pd.DataFrame, pick) -> pd.Series | None:
    return None if rows.empty else rows.loc[pick(rows.index, key=lambda i: rows.at[i, "_size"])]


def _value(row: pd.Series | None, column: str) -> Any:
    value = None if row is None else row.get(column)
    return None if value is None or pd.isna(value) else value


# The word for a completed peak over the budget: it does not fit (the tables for people, the frontier table
# and the side-by-side matrices, are _feasibility_tables.py's).
OVER_BUDGET = "over budget"
