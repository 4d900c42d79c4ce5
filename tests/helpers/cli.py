"""Running `rlsweep` verbs in-process, as a user's shell would see them."""

from __future__ import annotations

from orchestrator.cli import main


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """(exit code, stdout + stderr) of `rlsweep ARGV`; argparse's own refusals exit through SystemExit."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def answer_block(text: str, label: str) -> str:
    """A stack's answer in `fits`' output: its short line and the details wrapped under it, as one line."""
    lines = text.splitlines()
    (start,) = [i for i, x in enumerate(lines) if x.startswith(f"  {label} ")]
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        block.append(line)
    return " ".join(" ".join(block).split())
