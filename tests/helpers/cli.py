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
