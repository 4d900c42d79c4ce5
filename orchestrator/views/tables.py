"""Tables for the terminal that fit its width (a terminal's, or COLUMNS where the output is piped).

A column whose value is the same in every row is said once on a line above the table instead
(`same_line`); names (model ids) are shortened to what tells the rows apart where the full ones do not
fit (words.text.short_names); and a cell too long for its column wraps onto the next line rather than
being cut with an ellipsis, so no row loses what tells it apart from the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from rich.console import Console
from rich.table import Table

from orchestrator.words.text import short_names


@dataclass(frozen=True)
class Column:
    """One column: its header; `right`: right-aligned figures, never broken across lines; `name`: names that may be shortened
    where the table is too wide; `keep`: shown even where every row holds the same value; `optional`:
    left out where the table is too wide without it (what the other columns already tell apart);
    `short`: a shorter header for where the table is too wide with the full one."""

    header: str
    right: bool = False
    name: bool = False
    keep: bool = False
    optional: bool = False
    short: str | None = None


@dataclass(frozen=True)
class Laid:
    """A table laid out for a width: the columns the rows share (header, value), the table itself and
    the optional columns left out for want of room."""

    same: list[tuple[str, str]]
    table: Table
    left_out: list[str]

    def same_line(self) -> str:
        """'same in every row: stack trl, mode grpo' (empty when none is)."""
        if not self.same:
            return ""
        return "same in every row: " + ", ".join(f"{header} {value}" for header, value in self.same)


def lay_out(
    console: Console,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    title: str | None = None,
    **table_options,
) -> Laid:
    """`rows` (text cells, one per column) as a Table that fits `console`'s width (module docstring).
    Every column stays when there are fewer than two rows. Where the table is too wide: names shortened
    first, then optional columns left out, then short headers."""
    rows = [list(r) for r in rows]
    moved = [
        i
        for i, c in enumerate(columns)
        if not c.keep and len(rows) > 1 and len({r[i] for r in rows if r[i] != ""}) == 1
    ]
    same = [(columns[i].header, next(r[i] for r in rows if r[i] != "")) for i in moved]
    kept = [i for i in range(len(columns)) if i not in moved]
    left_out: list[str] = []

    def table() -> Table:
        return _table([columns[i] for i in kept], [[r[i] for i in kept] for r in rows], title, table_options)

    if not fits(console, table()):
        for i in (i for i in kept if columns[i].name):
            names = short_names(r[i] for r in rows)
            for r in rows:
                r[i] = names.get(r[i], r[i])
    if not fits(console, table()):
        left_out = [columns[i].header for i in kept if columns[i].optional]
        kept = [i for i in kept if not columns[i].optional]
    if not fits(console, table()):
        columns = [replace(c, header=c.short) if c.short else c for c in columns]
    return Laid(same, table(), left_out)


def _table(columns: Sequence[Column], rows: Sequence[Sequence[str]], title, options) -> Table:
    table = Table(title=title, title_justify="left", **options)
    for c in columns:
        # a figure never breaks across lines; words wrap, and a word too long for its column folds
        table.add_column(c.header, justify="right" if c.right else "left", overflow="fold", no_wrap=c.right)
    for r in rows:
        table.add_row(*r)
    return table


def fits(console: Console, renderable) -> bool:
    """Whether `renderable` at its natural width fits `console`'s width (measured unclamped: rich clamps a
    measurement to the width it is given)."""
    wide = console.options.update_width(1_000_000)
    return console.measure(renderable, options=wide).maximum <= console.width


def print_table(console: Console, table: Table) -> None:
    """Print `table` within the console's width: cells wrap (a console that soft-wraps its lines would
    otherwise let a table run past the width)."""
    console.print(table, soft_wrap=False)
