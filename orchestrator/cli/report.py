"""`rlsweep report`: the frontier, the matrices, plots and report.html of a sweep."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.cli._common import budget_gib, console, out, stack_name
from trainers import stacks


def cmd_report(args: argparse.Namespace) -> int:
    from orchestrator.publishing.finish import finish_sweep
    from orchestrator.publishing.tracking import MlflowSink
    from orchestrator.views.report import ReportDiskFull

    output_dir = Path(args.output_dir)
    try:
        finish_sweep(
            output_dir,
            console=out,
            mlflow=MlflowSink.for_output(output_dir),
            budget_gib=args.budget_gib,
            base_stack=args.base_stack,
        )
    except ReportDiskFull as exc:
        console.print(f"report: {exc.strerror}", markup=False, style="red")
        return 1
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/red]", markup=True)
        return 2
    return 0


def add_report(sub) -> None:
    p = sub.add_parser(
        "report",
        help="a sweep's report: what fits (frontier, side-by-side matrices) first, then report.md/html",
    )
    p.add_argument("output_dir", help="a sweep's output dir (holds trials.parquet)")
    p.add_argument(
        "--budget-gib",
        type=budget_gib,
        default=None,
        help="memory budget in GiB to judge what fits: completed configurations whose peak passed it are "
        "marked over budget in the frontier, the matrices and the plots (default: the sweep's "
        "memory.budget_gib, else the GPU's size)",
    )
    p.add_argument(
        "--base-stack",
        type=stack_name,
        default=stacks.BASE,
        help=f"the stack every other is compared against: {', '.join(stacks.names())} (default: %(default)s)",
    )
    p.set_defaults(func=cmd_report)
