"""The command outputs README.md and docs/*.md quote, run again and compared line for line.

A quote is a fenced ```console block: each line `$ rlsweep VERB ...` is a command, and the lines under
it, up to the next `$ ` line or the block's end, are what it printed (stdout and stderr together). Only
the fast verbs that run nothing are quoted this way (QUOTABLE: fitmap, predict, fits, models, validate,
run --dry-run); a console block of any other command is left alone. A command may end in a pipe to
`head`, `tail`, `grep` or `sed` to quote part of its output. In a quoted line `...` stands for any
text (a figure that changes from run to run, such as a timing); every other character must match.

Each command runs in a scratch folder holding links to the checkout's files, with this checkout's code
as `rlsweep`, COLUMNS=WIDTH and no network; the scratch folder's path is printed as a relative one.

    .venv/bin/python tools/quoted_outputs.py            # run every quote; list those that no longer match (exit 1)
    .venv/bin/python tools/quoted_outputs.py --update   # rewrite the quoted outputs from what the commands print now
    .venv/bin/python tools/quoted_outputs.py docs/oom.md README.md   # only these pages

--update keeps a quoted line with `...` where the new output still matches it. tests/unit/
test_docs_commands.py runs the check.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 100  # the terminal width the quotes are printed at
WILDCARD = "..."
QUOTABLE = ("fitmap", "predict", "fits", "models", "validate")  # and `run --dry-run`
FILTERS = ("head", "tail", "grep", "sed")  # what a quoted command may pipe its output through
TIMEOUT_S = 180
WORKERS = 2


@dataclass(frozen=True)
class Quote:
    page: Path
    line: int  # the `$ ` line's index in the page (0-based)
    command: str  # after the `$ `
    output: tuple[str, ...]  # the quoted lines under it
    indent: str = ""  # the block's indentation in the page

    @property
    def where(self) -> str:
        return f"{_shown(self.page)}:{self.line + 1}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _shown(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def quotable(command: str) -> bool:
    """A command the docs may quote with its output: `rlsweep` with a verb that runs nothing, piped
    only through FILTERS."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars="|")
    lexer.whitespace_split = True
    stages: list[list[str]] = [[]]
    try:
        for token in lexer:
            if token == "|":
                stages.append([])
            else:
                stages[-1].append(token)
    except ValueError:  # an unclosed quote: no command to run
        return False
    first = stages[0]
    if len(first) < 2 or first[0] != "rlsweep":
        return False
    fast = first[1] in QUOTABLE or (first[1] == "run" and "--dry-run" in first)
    return fast and all(stage and stage[0] in FILTERS for stage in stages[1:])


def find_quotes(page: Path) -> list[Quote]:
    """The page's quotes: each `$ rlsweep ...` line of a ```console block with the lines under it (a
    block indented under a list item counts, its indentation left out)."""
    lines = page.read_text().splitlines()
    quotes: list[Quote] = []
    indent: str | None = None  # the open console block's indentation; None outside one
    fenced = False
    current: tuple[int, str] | None = None
    output: list[str] = []

    def close() -> None:
        nonlocal current
        if current is not None and quotable(current[1]):
            quotes.append(Quote(page, current[0], current[1], tuple(output), indent or ""))
        current = None

    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            close()
            fenced = not fenced
            indent = (
                line[: len(line) - len(line.lstrip())] if fenced and line.strip() == "```console" else None
            )
            continue
        if indent is None:
            continue
        text = line.removeprefix(indent)
        if text.startswith("$ "):
            close()
            current, output = (i, text[2:].strip()), []
        elif current is not None:
            output.append(text)
    return quotes


def matches(quoted: str, printed: str) -> bool:
    """A quoted line against a printed one: equal, `...` standing for any text."""
    if WILDCARD not in quoted:
        return quoted == printed
    pattern = ".*".join(re.escape(part) for part in quoted.split(WILDCARD))
    return re.fullmatch(pattern, printed, re.S) is not None


def agrees(quoted: Iterable[str], printed: Iterable[str]) -> bool:
    quoted, printed = list(quoted), list(printed)
    return len(quoted) == len(printed) and all(matches(q, p) for q, p in zip(quoted, printed, strict=True))


def refreshed(quoted: tuple[str, ...], printed: list[str]) -> tuple[str, ...]:
    """The new quote: what was printed, keeping a quoted line with `...` where it still matches."""
    return tuple(
        quoted[i] if i < len(quoted) and WILDCARD in quoted[i] and matches(quoted[i], line) else line
        for i, line in enumerate(printed)
    )


# What a user's shell passes a command that the docs quote; nothing else of this process's environment,
# which the libraries a test imported have written into (importing vLLM or Unsloth sets
# TORCHINDUCTOR_COMPILE_THREADS=1, PYTORCH_ALLOC_CONF and some thirty more), so a quote reads the same
# whichever tests ran before it.
USERS_ENV = ("HOME", "PATH", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")


def _scratch(folder: Path) -> dict[str, str]:
    """A folder of links to the checkout's top-level files (so the commands' relative paths resolve and
    what they write stays out of it), with `rlsweep` running this checkout's code; the environment: the
    user's (USERS_ENV) and these."""
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "outputs", "fitmap"):
            (folder / entry.name).symlink_to(entry)
    bin_dir = folder / ".quoted-bin"
    bin_dir.mkdir()
    shim = bin_dir / "rlsweep"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m orchestrator.cli "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k in USERS_ENV}
    env |= {
        "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
        "COLUMNS": str(WIDTH),
        "NO_COLOR": "1",
        "TERM": "dumb",
        "HF_HUB_OFFLINE": "1",
        "PYTHONWARNINGS": "ignore",
    }
    return env


def run_command(command: str, folder: Path, env: dict[str, str]) -> list[str]:
    """What a quoted command prints now, as the docs quote it: lines without trailing spaces, the
    scratch folder's path made relative, no trailing blank lines."""
    done = subprocess.run(
        ["bash", "-c", command], cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    text = (done.stdout + done.stderr).replace(f"{folder}/", "").replace(str(folder), ".")
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


Runner = Callable[[list[str]], list[list[str]]]


def run_all(commands: list[str]) -> list[list[str]]:
    """Each command's printed lines, in order; WORKERS at a time."""
    with tempfile.TemporaryDirectory(prefix="rlsweep-quotes-") as tmp:
        folder = Path(tmp).resolve()
        env = _scratch(folder)
        with ThreadPoolExecutor(WORKERS) as pool:
            return list(pool.map(lambda c: run_command(c, folder, env), commands))


def stale(quotes: list[Quote], runner: Runner = run_all) -> list[tuple[Quote, list[str]]]:
    """The quotes whose command prints something else now, each with what it prints."""
    printed = runner([q.command for q in quotes])
    return [(q, p) for q, p in zip(quotes, printed, strict=True) if not agrees(q.output, p)]


def difference(quote: Quote, printed: list[str]) -> str:
    diff = difflib.unified_diff(list(quote.output), printed, "quoted", "printed now", lineterm="", n=1)
    return f"{quote.where}: $ {quote.command}\n" + "\n".join(diff)


def update(quotes: list[Quote], runner: Runner = run_all) -> list[Quote]:
    """Rewrite each stale quote's output in its page; the quotes rewritten."""
    pairs = stale(quotes, runner)
    for page in {q.page for q, _ in pairs}:
        text = page.read_text()
        lines = text.splitlines()
        # bottom up, so an earlier quote's line numbers still hold
        for quote, printed in sorted((p for p in pairs if p[0].page == page), key=lambda p: -p[0].line):
            start = quote.line + 1
            new = refreshed(quote.output, printed)
            lines[start : start + len(quote.output)] = [quote.indent + line if line else "" for line in new]
        page.write_text("\n".join(lines) + ("\n" if text.endswith("\n") else ""))
    return [q for q, _ in pairs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "pages", nargs="*", type=Path, help="pages to check (default README.md and docs/*.md)"
    )
    parser.add_argument("--update", action="store_true", help="rewrite the quoted outputs from the commands")
    args = parser.parse_args(argv)
    chosen = [p.resolve() for p in args.pages] or pages()
    missing = [str(p) for p in chosen if not p.is_file()]
    if missing:
        print(f"pages: no such file: {', '.join(missing)}; give README.md or docs/*.md", file=sys.stderr)
        return 2
    quotes = [q for page in chosen for q in find_quotes(page)]
    if args.update:
        changed = update(quotes)
        for quote in changed:
            print(f"updated {quote.where}: $ {quote.command}")
        print(f"{len(changed)} of {len(quotes)} quoted outputs rewritten")
        return 0
    differ = stale(quotes)
    for quote, printed in differ:
        print(difference(quote, printed) + "\n")
    print(f"{len(differ)} of {len(quotes)} quoted outputs differ from what the commands print now"
          + (": .venv/bin/python tools/quoted_outputs.py --update rewrites them" if differ else ""))  # fmt: skip
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
