"""`rlsweep run`: a sweep, resumed where its output dir has state."""

from __future__ import annotations

import argparse
import logging
import shlex
from pathlib import Path

from orchestrator.cli._common import console, out
from orchestrator.cli._flags import add_output_dir, add_set, add_simulate
from orchestrator.cli._plan import add_card
from orchestrator.cli.validate import cmd_validate


def cmd_run(args: argparse.Namespace) -> int:
    if not Path(args.sweep).is_file():
        out.print(
            f"{args.sweep}: no such file; give a sweep YAML file (e.g. sweeps/cpu-smoke.yaml)", markup=False
        )
        return 2
    if args.dry_run:  # before the driver's imports (Ray, MLflow, the report): a plan needs none of them
        return cmd_validate(
            argparse.Namespace(
                files=[args.sweep],
                set=args.set,
                output_dir=args.output_dir,
                list=True,
                card=args.card,
                simulate=args.simulate,
            )  # fmt: skip
        )
    from orchestrator.running.driver import run_sweep
    from orchestrator.spec.load import load_sweep
    from orchestrator.spec.sweep import SweepError
    from orchestrator.views.report import ReportDiskFull
    from orchestrator.words.runlock import OutputDirBusy

    # Tune's notices that a callback was slow (the recorder writes Parquet and MLflow as a trial ends)
    # speak of Tune's internals, not of the sweep.
    logging.getLogger("ray.tune.utils.util").setLevel(logging.ERROR)
    try:
        sweep = load_sweep(args.sweep, args.set)
        _estimate(sweep, args.output_dir, args.card)
        outcome = run_sweep(
            sweep, output_dir=args.output_dir, console=console, report_to=None if args.no_report else out
        )
    except (SweepError, OutputDirBusy) as exc:
        console.print(str(exc), markup=False)
        return 2
    except ReportDiskFull as exc:
        console.print(f"report: {exc.strerror}", markup=False, style="red")
        return 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(outcome.counts.items())) or "none"
    console.print(f"trials: {counts}")
    console.print(f"results: {outcome.output_dir}/trials.parquet, steps in {outcome.output_dir}/steps/")
    if args.no_report:
        console.print(f"report skipped (--no-report); make it with: rlsweep report {outcome.output_dir}")
    if outcome.interrupted:
        again = [
            "rlsweep",
            "run",
            args.sweep,
            *[f"--set={s}" for s in args.set],
            "--output-dir",
            str(outcome.output_dir),
        ]
        console.print(
            f"[yellow]interrupted; finished trials are kept. Resume with:[/yellow] {shlex.join(again)}"
        )
        return 130
    return 0


def _estimate(sweep, output_dir: str | None, card: str | None) -> None:
    """The estimate (orchestrator.judging.duration) on the card assumed (--card, else the one detected,
    else the H100) before any trial starts; a sweep the plan refuses is left to run_sweep to report."""
    from orchestrator.cli._plan import assumed_card, print_estimate
    from orchestrator.spec.plan import plan

    planned = plan(sweep)
    if not planned.problems:
        where = sweep.resolved_output_dir(output_dir)
        print_estimate(sweep, planned.trials, where, to=console, card=assumed_card(card))


def add_run(sub) -> None:
    p = sub.add_parser("run", help="run a sweep (resumes when the output dir has state)")
    p.add_argument("sweep", help="sweep YAML file, e.g. sweeps/cpu-smoke.yaml")
    add_set(p)
    add_output_dir(p, "where the sweep's results go (default: the sweep's output_dir, else outputs/<name>)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="list the planned trials with an estimated duration each (from the trials already in the "
        "output dir); nothing runs or is written",
    )
    add_card(p)
    add_simulate(p)  # --dry-run's memory answers
    p.add_argument(
        "--no-report",
        action="store_true",
        help="end without the report (plots, report.md/html, summary.csv); `rlsweep report DIR` makes it later",
    )
    p.set_defaults(func=cmd_run)
