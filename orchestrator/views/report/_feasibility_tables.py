"""The feasibility matrix and the frontier (_feasibility.py) as the tables people read: one frontier table,
and one matrix per model with the stacks side by side, each with its caption."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from orchestrator.judging.intervals import TIGHT, TIGHT_SPREAD, Margin
from orchestrator.views.report._feasibility import OVER_BUDGET, FeasibilityGrid, gpus_words, memory_words
from orchestrator.words import outcome
from orchestrator.words.outcome import MEMORY_LABELS, OOM, STATUS_LABELS, STATUS_WORDS


def _gib(value: Any) -> str:
    return "—" if value is None or pd.isna(value) else f"{value:.2f} GiB"


# A frontier side no trial answered: none measured a peak or ran out of memory (stopped, failed, ...).
NO_ANSWER = "unknown (no trial completed, kept a step before its time limit or ran out of memory)"
NOT_RUN = "·"


def frontier_view(df: pd.DataFrame) -> pd.DataFrame:
    """The frontier (frontier()) as the one table people read, in the report and on the terminal; the
    model, quantization and GPUs columns only where they vary (a one-model sweep names its model in the
    matrix heading below)."""
    rows = []
    for r in df.itertuples(index=False):
        kinds = [k for k in (r.fit_memory_kind, r.oom_memory_kind) if isinstance(k, str)]
        why = OVER_BUDGET if r.oom_over_budget else STATUS_WORDS[OOM]
        fit, no_fit = isinstance(r.largest_fit, str), isinstance(r.smallest_oom, str)
        rows.append(
            {
                "Stack": r.stack,
                "Mode": r.mode,
                "Model": r.model,
                "Quantization": r.quantization,
                "GPUs": gpus_words(r.num_processes, r.distributed),
                "Largest that fits": _fit_words(r) if fit else "none fit" if no_fit else NO_ANSWER,
                "Its peak": _gib(r.fit_peak_gib) + _margin_words(r),
                "Smallest that does not": f"{r.smallest_oom}: {why}"
                if no_fit
                else "all fit"
                if fit
                else NO_ANSWER,
                "Peak there": _gib(r.oom_peak_gib),
                "Memory": " / ".join(dict.fromkeys(MEMORY_LABELS[k] for k in kinds)) or "—",
                "Completed / OOM / pruned": f"{r.completed} / {r.oom} / {r.pruned}"
                + (f" (+{r.timeout} timed out)" if r.timeout else ""),
            }
        )
    view = pd.DataFrame(rows)
    # The model and the quantization only where they tell rows apart (a column per page is precious).
    same = [c for c in ("Model", "Quantization", "GPUs") if c in view and view[c].astype(str).nunique() <= 1]
    return view.drop(columns=same)


def _fit_words(r: Any) -> str:
    """The largest fit, and for a timeout the steps it fits on: 'K=4 B=2 (8 completions/step), fits on the
    19 of 20 steps measured before the time limit'."""
    return f"{r.largest_fit}, fits on {r.fit_kept}" if isinstance(r.fit_kept, str) else r.largest_fit


def _margin_words(r: Any) -> str:
    """'; tight: 0.01 GiB (1.4%) to spare' after a fit's peak, or its margin; '' without a budget."""
    if r.fit_margin_gib is None or pd.isna(r.fit_margin_gib) or r.fit_peak_gib is None:
        return ""
    return "; " + Margin(r.fit_margin_gib, r.fit_margin_pct, TIGHT_SPREAD * r.fit_peak_gib).words()


@dataclass
class MatrixView:
    model: str
    table: pd.DataFrame
    caption: str  # what the cells are, the budget, what a verdict mark means


def matrix_views(grids: list[FeasibilityGrid]) -> list[MatrixView]:
    """One table per model: a row per configuration (K, B) that any stack ran, fewest completions
    first; a column per mode and stack, the stacks of a mode next to each other; cells the
    grid's label (peak or outcome), with "over budget" where a completed peak passed the budget."""
    views = []
    for model in sorted({g.model for g in grids}):
        mine = sorted(
            (g for g in grids if g.model == model),
            key=lambda g: (g.mode, g.stack, g.num_processes, g.distributed),
        )
        several = len({g.gpus for g in mine}) > 1
        configs = sorted(
            {(k, b) for g in mine for k in g.labels.index for b in g.labels.columns if g.labels.loc[k, b]},
            key=lambda kb: (kb[0] * kb[1], kb[0]),
        )
        table = pd.DataFrame({"K × B": [f"K={k} B={b} ({k * b}/step)" for k, b in configs]})
        for g in mine:
            cells = []
            for k, b in configs:
                label = g.labels.loc[k, b] if k in g.labels.index and b in g.labels.columns else ""
                over = bool(label) and g.over_budget(k, b)
                if over:
                    cells.append(f"{label}: {OVER_BUDGET}")
                elif label and g.tight(k, b):  # with its margin: "0.70 GiB; tight: 0.02 GiB (2.1%) to spare"
                    cells.append(f"{label}; {g.margin(k, b).words()}")
                else:
                    cells.append(label or NOT_RUN)
            table[f"{g.mode} · {g.stack}" + (f" · {g.gpus}" if several else "")] = cells
        caption = _matrix_caption(mine) + (" " + fewest_gpus(mine, configs) if several else "")
        views.append(MatrixView(model, table, caption))
    return views


def fewest_gpus(grids: list[FeasibilityGrid], configs: list[tuple[Any, Any]]) -> str:
    """Per stack and configuration run on more than one GPU count, the fewest GPUs it fits on:
    "grpo · trl: K=8 B=1 needs 2 GPUs · zero3; K=16 B=1 fits on none tried"."""
    parts = []
    for stack in dict.fromkeys((g.mode, g.stack) for g in grids):
        mine = sorted((g for g in grids if (g.mode, g.stack) == stack), key=lambda g: g.num_processes)
        said = []
        for k, b in configs:
            ran = [g for g in mine if k in g.labels.index and b in g.labels.columns and g.labels.loc[k, b]]
            if len({g.gpus for g in ran}) < 2:
                continue
            fit = next((g for g in ran if g.fits(k, b)), None)
            said.append(f"K={k} B={b} " + (f"needs {fit.gpus}" if fit else "fits on none tried"))
        if said:
            parts.append(f"{stack[0]} · {stack[1]}: {'; '.join(said)}")
    return f"Fewest GPUs that fit: {'. '.join(parts)}." if parts else ""


def _matrix_caption(grids: list[FeasibilityGrid]) -> str:
    budget = grids[0].budget_gib
    parts = [
        f"Cells: {memory_words({g.memory_kind for g in grids} - {None})}, or the outcome; {NOT_RUN} not run."
    ]
    if budget is None:
        parts.append("No memory budget is known: pass --budget-gib to mark what fits.")
    else:
        cells = [(g, k, b) for g in grids for k in g.values.index for b in g.values.columns]
        over = sum(g.over_budget(k, b) for g, k, b in cells)
        headroom = grids[0].headroom_gib
        kept = f" less {headroom:g} GiB headroom (memory.headroom_gib)" if headroom else ""
        parts.append(
            f"Budget {budget:g} GiB{kept}: {over} completed configuration(s) over it, marked “{OVER_BUDGET}”."
        )
        if any(g.tight(k, b) for g, k, b in cells):
            parts.append(
                f"“{TIGHT}”: fits by less than the run-to-run spread of peaks ({TIGHT_SPREAD:.1%} of the peak)."
            )
    if any(((g.statuses == outcome.TIMEOUT) & g.values.notna()).to_numpy().any() for g in grids):
        parts.append(
            f"“{STATUS_LABELS[outcome.TIMEOUT]}: N of M steps”: killed at its time limit; its peak is that "
            f"of the N steps measured before it, a lower bound (it fits on those steps unless “{OVER_BUDGET}”)."
        )
    parts += [f"{note}." for note in dict.fromkeys(g.verdict_note for g in grids if g.verdict_note)]
    return " ".join(parts)
