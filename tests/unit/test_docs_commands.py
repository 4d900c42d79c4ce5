"""The commands README.md and docs/*.md quote with their output still print it: each ```console block's
`$ rlsweep ...` line (a verb that runs nothing: fitmap, predict, fits, models, validate, run --dry-run)
is run again by tools/quoted_outputs.py and its output compared with the lines quoted under it, `...`
standing for any text. A change that alters an output on purpose refreshes the quotes with
`.venv/bin/python tools/quoted_outputs.py --update`."""

from __future__ import annotations

import shlex
from pathlib import Path

from tools.quoted_outputs import (
    Quote,
    agrees,
    difference,
    find_quotes,
    matches,
    pages,
    quotable,
    stale,
    update,
)

QUOTES = [quote for page in pages() for quote in find_quotes(page)]


def _verb(quote: Quote) -> str:
    words = shlex.split(quote.command.split("|")[0])
    return "run --dry-run" if words[1] == "run" else words[1]


def test_every_quoted_command_prints_what_the_docs_quote():
    differ = stale(QUOTES)
    report = "\n\n".join(difference(quote, printed) for quote, printed in differ)
    assert not differ, (
        f"{report}\n\nMeant? .venv/bin/python tools/quoted_outputs.py --update rewrites the quotes."
    )


def test_the_docs_quote_every_verb_that_runs_nothing_with_its_output():
    assert {_verb(q) for q in QUOTES} >= {"fitmap", "predict", "fits", "models", "validate", "run --dry-run"}
    assert all(q.output for q in QUOTES)


def test_only_verbs_that_run_nothing_piped_through_a_text_filter_are_quotable():
    assert quotable("rlsweep fitmap --card 16gb | head -n 3")
    assert quotable('rlsweep run --dry-run sweeps/x.yaml | grep -E "a|b"')
    assert not quotable("rlsweep run sweeps/x.yaml")  # a real run
    assert not quotable("rlsweep fits --model tiny | sh")
    assert not quotable("make sweep")


def test_a_quote_is_a_console_blocks_dollar_line_and_the_lines_under_it(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```console\n$ rlsweep models tiny\nline 1\nline 2\n$ rlsweep validate x.yaml\nok\n```\n"
        "- item\n  ```console\n  $ rlsweep fits --model tiny\n    indented\n  ```\n"
        "```\n$ rlsweep models tiny\nnot a console block\n```\n```console\n$ make sweep\nleft alone\n```\n"
    )
    found = [(q.line, q.command, q.output, q.indent) for q in find_quotes(page)]
    assert found == [
        (2, "rlsweep models tiny", ("line 1", "line 2"), ""),
        (5, "rlsweep validate x.yaml", ("ok",), ""),
        (10, "rlsweep fits --model tiny", ("  indented",), "  "),
    ]


def test_dots_in_a_quoted_line_stand_for_any_text_and_nothing_else_may_differ():
    assert matches("(... s, nothing ran)", "(2.0 s, nothing ran)")
    assert matches("on 16GB (...):", "on 16GB (16.00 GiB usable; not measured):")
    assert not matches("fits 7.3 GiB", "fits 7.4 GiB")
    assert not agrees(["a", "b"], ["a", "b", "c"])  # a line more is a difference


def _page_with_two_quotes(tmp_path: Path) -> Path:
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n```console\n$ rlsweep models tiny\nold\ntook ... s\n```\n\nprose\n\n"
        "  ```console\n  $ rlsweep validate x.yaml\n  current\n  ```\n"
    )
    return page


def test_update_rewrites_a_stale_quote_and_keeps_the_dots_that_still_match(tmp_path):
    page = _page_with_two_quotes(tmp_path)
    printed = {
        "rlsweep models tiny": ["new", "took 3.1 s", "one more"],
        "rlsweep validate x.yaml": ["current"],
    }
    changed = update(find_quotes(page), runner=lambda commands: [printed[c] for c in commands])
    assert [q.command for q in changed] == ["rlsweep models tiny"]
    assert page.read_text() == (
        "# Page\n\n```console\n$ rlsweep models tiny\nnew\ntook ... s\none more\n```\n\nprose\n\n"
        "  ```console\n  $ rlsweep validate x.yaml\n  current\n  ```\n"
    )
    assert stale(find_quotes(page), runner=lambda commands: [printed[c] for c in commands]) == []


def test_a_stale_quote_is_shown_as_a_diff_naming_its_page_line_and_command(tmp_path):
    page = _page_with_two_quotes(tmp_path)
    quote = find_quotes(page)[0]
    shown = difference(quote, ["new", "took 3.1 s"])
    assert shown.startswith(f"{page}:4: $ rlsweep models tiny\n")
    assert "-old" in shown and "+new" in shown


def test_a_page_that_does_not_exist_is_refused_with_exit_2_naming_it(tmp_path, capsys):
    from tools.quoted_outputs import main

    assert main([str(tmp_path / "nowhere.md")]) == 2
    assert f"pages: no such file: {tmp_path / 'nowhere.md'}" in capsys.readouterr().err


def test_a_quoted_command_runs_without_what_imports_wrote_into_this_processs_environment(monkeypatch):
    from tools.quoted_outputs import run_all

    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")  # as importing vLLM or Unsloth sets it
    monkeypatch.setenv("RLSWEEP_CACHE", "/nowhere")
    printed = run_all(["env | grep -E '^(TORCHINDUCTOR|RLSWEEP|HOME=)' | cut -d= -f1"])
    assert printed == [["HOME"]]
