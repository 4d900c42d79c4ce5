"""report.html read back as its outline: headings and tables in page order (stdlib html.parser)."""

from __future__ import annotations

from html.parser import HTMLParser


class _Outline(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.items: list[tuple[str, object]] = []  # ("h2", "text") or ("table", [header cells])
        self.scrolling: list[bool] = []  # per table: inside a box whose class is "scroll"
        self._open: list[tuple[str, dict]] = []
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self._open.append((tag, dict(attrs)))
        if tag in ("h1", "h2", "h3", "th"):
            self._text = []
        if tag == "table":
            self.items.append(("table", []))
            self.scrolling.append(any(t == "div" and a.get("class") == "scroll" for t, a in self._open[:-1]))

    def handle_endtag(self, tag):
        if tag in ("h1", "h2", "h3"):
            self.items.append((tag, "".join(self._text).strip()))
        if tag == "th" and self.items and self.items[-1][0] == "table":
            self.items[-1][1].append("".join(self._text).strip())
        while self._open and self._open.pop()[0] != tag:
            pass

    def handle_data(self, data):
        self._text.append(data)


def outline(page: str) -> _Outline:
    parser = _Outline()
    parser.feed(page)
    return parser
