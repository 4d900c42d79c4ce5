"""The report as a document: one list of blocks (headings, paragraphs, tables, images, folded details),
rendered as Markdown here and as HTML by orchestrator.views.report._html; and how a cell value reads."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


@dataclass
class Block:
    kind: str  # "h1", "h2", "h3", "p", "table", "image", "details"
    text: str = ""
    table: pd.DataFrame | None = None
    path: Path | None = None
    children: list[Block] = field(default_factory=list)
    # Says only that there was nothing to say (a section's "no trial measured ..."): a learning sweep's
    # report leaves such blocks out, and a section left with nothing but its heading (_content.build_blocks).
    filler: bool = False


def fmt(value: Any, digits: int = 1) -> str:
    """A cell as people read it: "—" for nothing measured, large numbers with thousands separators."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)) or value is pd.NA:
        return "—"
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if abs(number) >= 100:
            return f"{number:,.0f}"
        return f"{number:.{digits}f}"
    return str(value)


def shorten(text: Any, limit: int = 180) -> str:
    """Whitespace collapsed, cut to `limit` characters with an ellipsis."""
    words = " ".join(str(text or "").split())
    return words if len(words) <= limit else words[: limit - 1] + "…"


def _md_table(df: pd.DataFrame) -> str:
    def cell(v: Any) -> str:
        return fmt(v).replace("|", "\\|")

    head = "| " + " | ".join(cell(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def render_markdown(blocks: list[Block], base: Path) -> str:
    parts = []
    for block in blocks:
        if block.kind in ("h1", "h2", "h3"):
            parts.append("#" * int(block.kind[1]) + " " + block.text)
        elif block.kind == "p":
            parts.append(block.text)
        elif block.kind == "table" and block.table is not None:
            parts.append(_md_table(block.table))
        elif block.kind == "image" and block.path is not None:
            parts.append(f"![{block.text}]({block.path.relative_to(base).as_posix()})")
        elif block.kind == "details":
            parts.append(f"**{block.text}**")
            parts.append(render_markdown(block.children, base))
    return "\n\n".join(parts) + "\n"
