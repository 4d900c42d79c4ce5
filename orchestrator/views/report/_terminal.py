"""The report's tables for the terminal: a table for people (a DataFrame of words) as a rich Table,
its cells coloured by the outcome they name; the frontier table, the same one `rlsweep run` prints."""

from __future__ import annotations

import pandas as pd
from rich.table import Table
from rich.text import Text

from orchestrator.views.report._document import fmt
from orchestrator.views.report._feasibility import OVER_BUDGET, frontier_view
from orchestrator.words.outcome import (
    FAILED,
    IMPLIED,
    OOM,
    PRUNED,
    STATUS_LABELS,
    STATUS_WORDS,
    STOPPED,
    TIMEOUT,
    UNAVAILABLE,
)

# A cell that names an outcome gets its style; "over budget" reads as not fitting, like out of memory.
CELL_STYLES = (
    (OVER_BUDGET, "bold red"),
    (STATUS_WORDS[OOM], "bold red"),
    (STATUS_LABELS[OOM], "bold red"),
    ("none fit", "bold red"),
    (STATUS_LABELS[FAILED], "bold yellow"),
    (STATUS_LABELS[TIMEOUT], "dark_orange"),
    (STATUS_LABELS[PRUNED], "magenta"),
    (STATUS_LABELS[IMPLIED], "green"),
    (STATUS_LABELS[UNAVAILABLE], "dim"),
    (STATUS_LABELS[STOPPED], "cyan"),
)


def _cell(value) -> Text:
    text = fmt(value)
    style = next((style for word, style in CELL_STYLES if text.startswith(word) or text.endswith(word)), "")
    return Text(text, style=style)


def rich_table(df: pd.DataFrame, title: str = "") -> Table:
    """A people's table (columns of words and figures) as a rich Table."""
    table = Table(title=title or None, title_justify="left")
    for column in df.columns:
        numeric = pd.api.types.is_numeric_dtype(df[column])
        table.add_column(str(column), justify="right" if numeric else "left")
    for row in df.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    return table


def frontier_table(df: pd.DataFrame, title: str = "Feasibility frontier") -> Table:
    """The frontier (report.frontier) as a rich Table: frontier_view's columns, as in report.md/html."""
    return rich_table(frontier_view(df), title)
