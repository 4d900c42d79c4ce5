"""report.html: the document's blocks as one self-contained page (CSS inline, images embedded)."""

from __future__ import annotations

import base64
import html
import re

import pandas as pd

from orchestrator.views.report._document import Block, fmt
from orchestrator.views.report._feasibility import OVER_BUDGET
from orchestrator.words.outcome import FAILED, IMPLIED, OOM, PRUNED, STATUS_LABELS, STATUS_WORDS, TIMEOUT

# Numbers, ranges ("72.9–90.0"), sizes ("4.3 GiB"), ratios ("0.62×"), counts ("3 / 1 / 0") and "—" align
# right; words left.
NUMERIC_CELL = re.compile(r"—|-?[\d.,]+(–-?[\d.,]+)?( GiB|×)?|\d+( / \d+)*")


def _html_table(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = []
    for row in df.itertuples(index=False):
        cells = []
        for v in row:
            text = fmt(v)
            css = " ".join(c for c in (_status_css(text), "num" if NUMERIC_CELL.fullmatch(text) else "") if c)
            cells.append(
                f'<td class="{css}">{html.escape(text)}</td>' if css else f"<td>{html.escape(text)}</td>"
            )
        rows.append("<tr>" + "".join(cells) + "</tr>")
    # A table wider than the window scrolls inside its box rather than pushing columns off the page.
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


# A cell that starts with an outcome's word or label gets that status as its CSS class (HTML_STYLE).
_STATUS_CSS = (
    (STATUS_WORDS[OOM], OOM),
    (STATUS_LABELS[OOM].lower(), OOM),
    (STATUS_LABELS[FAILED], FAILED),
    (STATUS_LABELS[TIMEOUT], TIMEOUT),
    (STATUS_LABELS[PRUNED], PRUNED),
    (STATUS_LABELS[IMPLIED], IMPLIED),
)


def _status_css(text: str) -> str:
    lowered = text.lower()
    status = next((css for word, css in _STATUS_CSS if lowered.startswith(word)), "")
    if not status and lowered.endswith((OVER_BUDGET, STATUS_WORDS[OOM])):  # a configuration that does not fit
        return "over"
    return status


HTML_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1150px;
       color: #1d2330; background: #fff; line-height: 1.45; padding: 0 1em; }
h1 { border-bottom: 3px solid #2f6fb3; padding-bottom: .3em; }
h2 { margin-top: 2em; color: #2f6fb3; border-bottom: 1px solid #d5dbe5; }
div.scroll { overflow-x: auto; max-width: 100%; margin: 1em 0; }
table { border-collapse: collapse; font-size: 0.92em; }
th, td { border: 1px solid #d5dbe5; padding: .35em .7em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #eef2f8; }
tbody tr:nth-child(even) { background: #f8fafc; }
td.oom { background: #fde2e1; color: #a1181d; font-weight: 600; }
td.failed { background: #fff3cd; }
td.timeout { background: #fde9cc; }
td.pruned { background: #f3e5f5; }
td.implied { background: #e5f5e0; font-style: italic; }
td.over { background: #fde2e1; color: #a1181d; }
img { max-width: 100%; border: 1px solid #e3e7ee; margin: .5em 0; }
details { margin: 1em 0; } summary { cursor: pointer; font-weight: 600; }
p.note { color: #5a6270; font-size: .9em; }
"""


def render_html(blocks: list[Block], title: str) -> str:
    body = _html_blocks(blocks)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{HTML_STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def _html_blocks(blocks: list[Block]) -> str:
    parts = []
    for block in blocks:
        if block.kind in ("h1", "h2", "h3"):
            parts.append(f"<{block.kind}>{html.escape(block.text)}</{block.kind}>")
        elif block.kind == "p":
            parts.append(f"<p>{_inline_html(block.text)}</p>")
        elif block.kind == "table" and block.table is not None:
            parts.append(_html_table(block.table))
        elif block.kind == "image" and block.path is not None:
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            parts.append(f'<img alt="{html.escape(block.text)}" src="data:image/png;base64,{data}">')
        elif block.kind == "details":
            parts.append(
                f"<details><summary>{html.escape(block.text)}</summary>{_html_blocks(block.children)}</details>"
            )
    return "\n".join(parts)


def _inline_html(text: str) -> str:
    # The Markdown paragraphs use only **bold**, `code` and [links](target); render those three.
    escaped = html.escape(text)
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)
    escaped = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', escaped)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", escaped)
