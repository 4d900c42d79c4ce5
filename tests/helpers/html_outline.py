"""report.html read back as its outline: headings and tables (header and body cells) in page order
(stdlib html.parser)."""

from __future__ import annotations

from html.parser import HTMLParser


class _Outline(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.items: list[tuple[str, object]] = []  # ("h2", "text") or ("table", [header cells])
        self.scrolling: list[bool] = []  # per table: inside a box whose class is "scroll"
        self.rows: list[list[list[str]]] = []  # per table: its rows' <td> texts
        self._open: list[tuple[str, dict]] = []
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self._open.append((tag, dict(attrs)))
        if tag in ("h1", "h2", "h3", "th", "td"):
            self._text = []
        if tag == "table":
            self.items.append(("table", []))
            self.rows.append([])
            self.scrolling.append(any(t == "div" and a.get("class") == "scroll" for t, a in self._open[:-1]))
        if tag == "tr" and self.rows:
            self.rows[-1].append([])

    def handle_endtag(self, tag):
        if tag in ("h1", "h2", "h3"):
            self.items.append((tag, "".join(self._text).strip()))
        if tag == "th" and self.items and self.items[-1][0] == "table":
            self.items[-1][1].append("".join(self._text).strip())
        if tag == "td" and self.rows and self.rows[-1]:
            self.rows[-1][-1].append("".join(self._text).strip())
        if tag == "tr" and self.rows and self.rows[-1] and not self.rows[-1][-1]:
            self.rows[-1].pop()  # the header row: its cells are the table's item
        while self._open and self._open.pop()[0] != tag:
            pass

    def handle_data(self, data):
        self._text.append(data)


def outline(page: str) -> _Outline:
    parser = _Outline()
    parser.feed(page)
    return parser


def table_after(page: _Outline, heading: str) -> tuple[list[str], list[list[str]]]:
    """The first table after the heading `heading`: its header cells and its rows' cells."""
    at = next(i for i, item in enumerate(page.items) if item[0] in ("h1", "h2", "h3") and item[1] == heading)
    tables = [i for i, (kind, _) in enumerate(page.items) if kind == "table"]
    n = next(n for n, i in enumerate(tables) if i > at)
    return page.items[tables[n]][1], page.rows[n]
