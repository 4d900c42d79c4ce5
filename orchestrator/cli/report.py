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
    if not (output_dir / "trials.parquet").exists() and (output_dir / "trial.json").is_file():
        output_dir = trial_folder_as_sweep(output_dir)  # `rlsweep trial`'s folder: its report in report/
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


def trial_folder_as_sweep(folder: Path) -> Path:
    """`rlsweep trial`'s folder (trial.json, steps.parquet) laid out as a one-trial sweep's output dir in
    folder/report (its trials.parquet row rebuilt from trial.json, its steps under steps/), for the
    report to read; the trial's own files are left as they are."""
    import json
    import shutil

    from orchestrator.recording.sinks import TrialsTable, steps_path
    from trainers.trial import KNOBS, TrialSpec

    record = json.loads((folder / "trial.json").read_text())
    config = record.get("config") or {}
    outcome = dict(record.get("outcome") or {})
    versions = outcome.pop("versions", None)
    spec = TrialSpec.from_dict(config)
    row = {
        **{k: v for k, v in config.items() if k in KNOBS},
        **outcome,
        "trial_key": config.get("trial_key") or folder.name,
        "config": json.dumps(config),
        "effective_config": json.dumps(record.get("effective_config")),
        "versions": json.dumps(versions),
    }
    spec.trial_key = row["trial_key"]
    report = folder / "report"
    report.mkdir(exist_ok=True)
    TrialsTable(report / "trials.parquet").upsert(row)
    if (folder / "steps.parquet").is_file():
        target = steps_path(report, spec)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / "steps.parquet", target)
    return report


def add_report(sub) -> None:
    p = sub.add_parser(
        "report",
        help="a sweep's report: what fits (frontier, side-by-side matrices) first, then report.md/html",
    )
    p.add_argument(
        "output_dir",
        help="a sweep's output dir (holds trials.parquet), or `rlsweep trial`'s folder (holds trial.json; "
        "the report goes in its report/)",
    )
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
