"""rlsweep: sweep GRPO/GSPO trials (TRL, Unsloth) over K, B and stacks; measure memory and speed.

Exit codes, every verb: 0 done; 1 ran and something failed (a trial, a check, MLflow); 2 the input was
refused (a missing file or folder, invalid settings); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import tomllib
from pathlib import Path

from orchestrator.cli.calibrate import add_calibrate
from orchestrator.cli.compare import add_compare
from orchestrator.cli.export import add_export
from orchestrator.cli.fitmap import add_fitmap
from orchestrator.cli.fits import add_fits
from orchestrator.cli.gpu_check import add_gpu_check
from orchestrator.cli.models import add_models
from orchestrator.cli.predict import add_predict
from orchestrator.cli.report import add_report
from orchestrator.cli.run import add_run
from orchestrator.cli.score import add_score
from orchestrator.cli.solve import add_solve
from orchestrator.cli.submit import add_submit
from orchestrator.cli.sync_mlflow import add_sync_mlflow
from orchestrator.cli.trial import add_trial
from orchestrator.cli.validate import add_validate
from tasks.names import did_you_mean

COMMANDS = [
    add_run,
    add_validate,
    add_fits,
    add_predict,
    add_fitmap,
    add_calibrate,
    add_trial,
    add_sync_mlflow,
    add_report,
    add_compare,
    add_export,
    add_gpu_check,
    add_submit,
    add_solve,
    add_models,
    add_score,
]


def version() -> str:
    """rlsweep's version: the installed distribution's, else (a source checkout on PYTHONPATH, as on an
    offline GPU host) pyproject.toml's, said as such."""
    try:
        return importlib.metadata.version("rlsweep")
    except importlib.metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        try:
            found = tomllib.loads(pyproject.read_text())["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown (not installed, no pyproject.toml beside the source)"
        return f"{found} (source checkout, not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlsweep", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"rlsweep {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    parser.verbs = list(sub.choices)
    return parser


def unknown_verb(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The error for a first word that is no verb (`rlsweep reprot`), with the nearest verbs."""
    verbs = parser.verbs
    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None or word in verbs:
        return None
    return f"rlsweep: unknown command {word!r}; {did_you_mean(word, verbs)}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    error = unknown_verb(parser, argv)
    if error:
        print(error, file=sys.stderr)
        return 2
    from trainers.simulate._pool import problem  # the environment a verb simulates under, before any work

    if problem():
        print(f"rlsweep: {problem()}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    return args.func(args)
