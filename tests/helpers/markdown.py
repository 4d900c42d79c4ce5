"""report.md's tables read back: the cells of the first table after a heading."""

import re

# A cell boundary: a pipe that is not escaped as \|
_PIPE = re.compile(r"(?<!\\)\|")


def table_after(text: str, heading: str) -> tuple[list[str], list[list[str]]]:
    """The first table after the line `heading` (with its #s): its header cells and its rows' cells."""
    lines = text.splitlines()
    start = lines.index(heading)
    first = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("|"))
    end = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    header, _separator, *rows = ([c.strip() for c in _PIPE.split(line)[1:-1]] for line in lines[first:end])
    return header, rows
