"""The report's tables for the terminal: a table for people (a DataFrame of words) as a rich Table,
its cells coloured by the outcome they name; the frontier table, the same one `rlsweep run` prints."""

from __future__ import annotations

import pandas as pd
from rich.table import Table
from rich.text import Text

from orchestrator.views.report._configs import CONFIG_WORDS
from orchestrator.views.report._document import fmt
from orchestrator.views.report._feasibility import OVER_BUDGET
from orchestrator.views.report._feasibility_tables import frontier_view
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
from orchestrator.words.text import short_names

MODEL_COLUMN = CONFIG_WORDS["model"]  # "Model", in every table that names the model
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
    """A people's table (columns of words and figures) as a rich Table; its model names shortened to what
    tells them apart within it (a narrow terminal would cut 'random:Qwen/Qwen3-1.7B' and
    'random:Qwen/Qwen3-4B' to the same 'random:Qwen/Qwen3…'), a column the same in every row said in its
    title, and cells that wrap rather than being cut."""
    df = short_models(df)
    same = same_in_every_row(df)
    if same:
        title = f"{title} ({', '.join(f'{c} {fmt(df[c].iloc[0])}' for c in same)} in every row)".lstrip()
        df = df.drop(columns=same)
    table = Table(title=title or None, title_justify="left")
    for column in df.columns:
        numeric = pd.api.types.is_numeric_dtype(df[column])
        # a cell too long for its column wraps rather than being cut: '0.78 (0.66–0.86)' stays whole
        table.add_column(str(column), justify="right" if numeric else "left", overflow="fold")
    for row in df.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    return table


def same_in_every_row(df: pd.DataFrame) -> list[str]:
    """The columns of a table of two or more rows that hold one value in every row (said once in its
    title instead, so a narrow terminal keeps its room for what tells the rows apart)."""
    if len(df) < 2:
        return []
    return [c for c in df.columns if df[c].map(fmt).nunique(dropna=False) == 1]


def short_models(df: pd.DataFrame) -> pd.DataFrame:
    """The table with its Model column's names shortened, each unique within it (words.text.short_names)."""
    if MODEL_COLUMN not in df:
        return df
    names = short_names(df[MODEL_COLUMN])
    return df.assign(
        **{MODEL_COLUMN: [names.get(m, m) if isinstance(m, str) else m for m in df[MODEL_COLUMN]]}
    )


def frontier_table(df: pd.DataFrame, title: str = "Feasibility frontier") -> Table:
    """The frontier (report.frontier) as a rich Table: frontier_view's columns, as in report.md/html."""
    return rich_table(frontier_view(df), title)
