"""`rlsweep report`: the frontier, the matrices, plots and report.html of a sweep, or of measured trials
read from --trials sources (a result file of `rlsweep export`, a team's tracking server's experiment, ...):
those hold one row per trial and no steps, so that report has no per-step tables or curves and says so."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.cli._common import console, out, stack_name
from orchestrator.cli._flags import add_budget, add_output_dir, add_trials
from trainers import stacks


def cmd_report(args: argparse.Namespace) -> int:
    from orchestrator.publishing.finish import finish_sweep
    from orchestrator.publishing.tracking import MlflowSink
    from orchestrator.views.report import ReportDiskFull

    mlflow = None  # a report of others' trials is logged nowhere
    if _is_source(args.output_dir) or args.trials or (args.output_dir is None and _trials_sources(None)):
        output_dir, code = trials_as_sweep(args)
        if output_dir is None:
            return code
    elif args.output_dir is None:
        from orchestrator.cli._common import refused

        return refused("report", ["give a sweep's output dir (e.g. rlsweep report outputs/my-sweep), a result "
                                  "file of `rlsweep export`, or --trials SOURCE"], "written")  # fmt: skip
    else:
        output_dir = Path(args.output_dir)
        if not (output_dir / "trials.parquet").exists() and (output_dir / "trial.json").is_file():
            output_dir = trial_folder_as_sweep(output_dir)  # `rlsweep trial`'s folder: its report in report/
        mlflow = MlflowSink.for_output(output_dir)
    try:
        finish_sweep(
            output_dir,
            console=out,
            mlflow=mlflow,
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


# The file a report of --trials sources keeps beside the rows it wrote: the sources and their provenance
# (views/report/_outputs.py reads it: no steps were recorded there).
SOURCES_FILE = "sources.json"


def _trials_sources(given) -> list[str]:
    from orchestrator.cli._trials import sources

    return sources(given)


def _is_source(text: str | None) -> bool:
    """A positional argument that names measured trials rather than a sweep's folder: a file (a result
    file of `rlsweep export`, a trials.parquet), s3://... or mlflow+http://..."""
    from orchestrator.publishing.served_rows import is_served
    from orchestrator.words.storage import URI

    return text is not None and (
        is_served(text) or bool(URI.match(text)) or Path(text).expanduser().is_file()
    )


def trials_as_sweep(args: argparse.Namespace) -> tuple[Path | None, int]:
    """The rows of the --trials sources (and of the positional source) laid out as a sweep's output dir,
    trials.parquet and sources.json, in --output-dir (default outputs/report/<the source's name>): (the
    folder, 0), or (None, 2) after printing why a source or the folder was refused."""
    import json

    from orchestrator.cli._common import refused
    from orchestrator.cli._trials import provenance_lines, read_trials, source_errors
    from orchestrator.recording.sinks import TRIAL_COLUMNS, TrialsTable

    given = [*([args.output_dir] if args.output_dir else []), *(args.trials or [])] or None
    names = _trials_sources(given)
    errors = source_errors(given)
    if args.output_dir is not None and not _is_source(args.output_dir):
        errors.append(f"{args.output_dir} with --trials: give one, a sweep's folder or --trials sources")
    first = names[0].rstrip("/").rsplit("/", 1)[-1].removesuffix(".parquet") if names else "trials"
    folder = Path(args.report_dir or Path("outputs") / "report" / (first if len(names) == 1 else "trials"))
    if (folder / "trials.parquet").exists() and not (folder / SOURCES_FILE).exists():
        errors.append(f"--output-dir {folder}: holds a sweep's trials.parquet; give another folder")
    if errors:
        return None, refused("report", errors, "written")
    args.trials = given
    rows, refusal = read_trials(args, "report", "written")
    if refusal is not None:
        return None, refusal
    if not rows:
        return None, refused("report", [f"--trials {', '.join(names)}: holds no trials; give a source with "
                                        "measured trials"], "written")  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    table = TrialsTable(folder / "trials.parquet")
    table.rows.clear()
    for row in rows:
        config = json.loads(row.get("config") or "{}")
        key, n = row["trial_key"], 1
        while key in table.rows:  # the same settings from another source (another machine): both kept
            n += 1
            key = f"{row['trial_key']}#{n}"
        row = {**row, "trial_key": key}
        table.rows[key] = {c: row[c] if row.get(c) is not None else config.get(c) for c in TRIAL_COLUMNS}
    table.write()
    lines = provenance_lines(rows, {r["trial_key"] for r in rows})
    (folder / SOURCES_FILE).write_text(json.dumps({"sources": names, "provenance": lines}, indent=2))
    return folder, 0


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
        nargs="?",
        help="a sweep's output dir (holds trials.parquet), `rlsweep trial`'s folder (holds trial.json; "
        "the report goes in its report/), or measured trials: a result file of `rlsweep export`, "
        "s3://BUCKET/PATH or mlflow+http://HOST:PORT/EXPERIMENT (as --trials)",
    )
    add_trials(p, "to report on instead of a sweep's folder (one row per trial: no steps, so no curves)")
    add_output_dir(
        p,
        "where a report of --trials sources goes (default outputs/report/<the source's name>)",
        dest="report_dir",
    )
    add_budget(
        p,
        ": completed configurations whose peak passed it are marked over budget in the frontier, the "
        "matrices and the plots (default: the sweep's memory.budget_gib, else the GPU's size)",
    )
    p.add_argument(
        "--base-stack",
        type=stack_name,
        default=stacks.BASE,
        help=f"the stack every other is compared against: {', '.join(stacks.names())} (default: %(default)s)",
    )
    p.set_defaults(func=cmd_report)
