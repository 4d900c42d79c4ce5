"""The feasibility matrix and the frontier as rich tables for the terminal."""

from __future__ import annotations

from typing import Any

import pandas as pd
from rich.table import Table

from orchestrator import outcome
from orchestrator.outcome import COMPLETED, FAILED, OOM, PRUNED, STOPPED, UNAVAILABLE
from orchestrator.report._feasibility import FeasibilityGrid

CELL_STYLES = {
    OOM: "bold red",
    PRUNED: "magenta",
    FAILED: "bold yellow",
    UNAVAILABLE: "dim",
    STOPPED: "cyan",
}


def feasibility_tables(grids: list[FeasibilityGrid]) -> list[Table]:
    """rich tables of the matrix: green fits the budget, yellow ran but over it, red out of memory."""
    tables = []
    for grid in grids:
        title, caption = f"{grid.title}: {grid.memory_words}", grid.budget_caption
        if grid.verdict_note:
            caption += f"\n{grid.verdict_note}"
        # Wide enough that the title and caption do not wrap into a narrow column.
        table = Table(
            title=title, caption=caption, min_width=max(len(title), *map(len, caption.split("\n"))) + 2
        )
        table.add_column("K \\ B", justify="right", style="bold")
        for b in grid.labels.columns:
            table.add_column(f"B={b}", justify="right")
        for k in grid.labels.index:
            cells = []
            for b in grid.labels.columns:
                label, status = grid.labels.loc[k, b], grid.statuses.loc[k, b]
                if status == COMPLETED:
                    style = "green" if grid.budget_gib is None or grid.fits(k, b) else "yellow"
                else:
                    style = CELL_STYLES.get(status, "")
                cells.append(f"[{style}]{label}[/]" if style and label else (label or "·"))
            table.add_row(f"K={k}", *cells)
        tables.append(table)
    return tables


def _gib(value: Any) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.2f}"


def frontier_table(df: pd.DataFrame, title: str = "Feasibility frontier") -> Table:
    """The frontier (report.frontier) as a rich Table: peaks by outcome.peak_memory (GPU, else RSS)."""
    table = Table(title=title)
    for column in (
        "framework",
        "mode",
        "model",
        "quant",
        "largest fit",
        "peak GiB",
        "smallest oom",
        "peak GiB",
        "done/oom/pruned",
    ):
        table.add_column(column, justify="right" if column in ("peak GiB", "done/oom/pruned") else "left")
    for r in df.itertuples(index=False):
        fit, _ = outcome.peak_memory(
            {"peak_device_gib": r.fit_peak_device_gib, "peak_rss_gib": r.fit_peak_rss_gib}
        )
        oom, _ = outcome.peak_memory(
            {"peak_device_gib": r.oom_peak_device_gib, "peak_rss_gib": r.oom_peak_rss_gib}
        )
        table.add_row(
            str(r.framework),
            str(r.mode),
            str(r.model),
            str(r.quantization),
            "[red]none fit[/red]" if pd.isna(r.largest_fit) else r.largest_fit,
            _gib(fit),
            "[green]no oom[/green]" if pd.isna(r.smallest_oom) else r.smallest_oom,
            _gib(oom),
            f"{r.completed}/{r.oom}/{r.pruned}",
        )
    return table
