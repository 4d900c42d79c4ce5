"""`rlsweep` command line: run, validate, trial, sync-mlflow (report, compare, submit, gpu-check: see COMMANDS)."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from orchestrator.guard import DEFAULTS as GUARD
from orchestrator.guard import GuardSettings
from orchestrator.outcome import peak_memory
from orchestrator.submit import add_submit
from orchestrator.verdict import STOPPABLE, VerdictSettings, stop_check
from trainers.events import STARTED, STEP
from trainers.spec import BOOKKEEPING, KNOBS, TrialSpec

# Piped to a file or CI log, rich would assume 80 columns and fold the tables: give them room.
_WIDTH = None if sys.stdout.isatty() else 150
console = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)
out = Console(highlight=False, soft_wrap=True, width=_WIDTH)


# ------------------------------------------------------------------------------------------------
# validate
# ------------------------------------------------------------------------------------------------
def cmd_validate(args: argparse.Namespace) -> int:
    from orchestrator.plan import plan
    from orchestrator.sweep import SweepError, load_sweep

    failed = False
    for path in args.files:
        try:
            sweep = load_sweep(path, args.set)
            result = plan(sweep)
            output_dir = sweep.resolved_output_dir(args.output_dir)
        except SweepError as exc:
            failed = True
            out.print(f"[red]{path}: {len(exc.errors)} error(s)[/red]")
            for error in exc.errors:
                out.print(f"  {error}", markup=False)
            continue
        if result.problems:
            failed = True
            out.print(f"[red]{path}: {len(result.problems)} impossible combination(s)[/red]")
            for problem in result.problems:
                out.print(f"  {problem}", markup=False)
            continue
        axes = ", ".join(f"{k}={len(v)}" for k, v in sweep.axes().items()) or "no grid"
        out.print(f"[green]{path}: ok[/green], {len(result.trials)} trials ({axes}) -> {output_dir}")
        for warning in result.warnings:
            out.print(f"  warning: {warning}", markup=False)
    return 1 if failed else 0


# ------------------------------------------------------------------------------------------------
# run
# ------------------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from orchestrator.driver import run_sweep
    from orchestrator.report import ReportDiskFull
    from orchestrator.runlock import OutputDirBusy
    from orchestrator.sweep import SweepError, load_sweep

    try:
        sweep = load_sweep(args.sweep, args.set)
        outcome = run_sweep(
            sweep, output_dir=args.output_dir, console=console, report_to=None if args.no_report else out
        )
    except (SweepError, OutputDirBusy) as exc:
        out.print(str(exc), markup=False)
        return 2
    except ReportDiskFull as exc:
        console.print(f"report: {exc.strerror}", markup=False, style="red")
        return 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(outcome.counts.items()))
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


# ------------------------------------------------------------------------------------------------
# trial
# ------------------------------------------------------------------------------------------------
ALIASES = {"model": ["--model-name"]}
# Bookkeeping knobs are not flags, except --trial-key: a standalone trial may be given its key.
TRIAL_SKIP = tuple(k for k in BOOKKEEPING if k != "trial_key")


def _knob_type(f: dataclasses.Field):
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if isinstance(default, bool):
        return None
    if isinstance(default, dict):
        return yaml.safe_load
    if default is None:
        return int if "int" in str(f.type) else float if "float" in str(f.type) else str
    return type(default)


def add_trial_knobs(parser: argparse.ArgumentParser, defaults: dict[str, Any]) -> None:
    """A flag per TrialSpec knob; `defaults` overrides TrialSpec's default of a knob (the guard's)."""
    group = parser.add_argument_group("trial settings (TrialSpec; defaults as shown)")
    for name, f in KNOBS.items():
        if name in TRIAL_SKIP:
            continue
        flags = [*ALIASES.get(name, []), "--" + name.replace("_", "-")]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        default = defaults.get(name, default)
        help_text = f"{f.metadata.get('help', '')} (default: {default!r})"
        if "choices" in f.metadata:
            help_text += f" [{'|'.join(f.metadata['choices'])}]"
        kind = _knob_type(f)
        if kind is None:
            group.add_argument(
                *flags,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=defaults.get(name),
                help=help_text,
            )
        else:
            group.add_argument(
                *flags, dest=name, type=kind, default=defaults.get(name), help=help_text, metavar=name.upper()
            )


def _step_line(spec: TrialSpec, row: dict[str, Any]) -> str:
    def f(key: str, fmt: str = ".3f") -> str:
        value = row.get(key)
        return "-" if value is None else format(value, fmt)

    peak, _ = peak_memory(row)
    return (
        f"step {row.get('step')}/{spec.max_steps}{' probe' if row.get('probe') else ''}  "
        f"step_s {f('step_s', '.2f')}  tokens/s {f('tokens_per_s', '.0f')}  loss {f('loss', '.4f')}  "
        f"reward {f('reward_mean')}  peak {'-' if peak is None else f'{peak:.2f}'} GiB"
    )


def trial_guard(args: argparse.Namespace) -> GuardSettings:
    """The guard settings of `rlsweep trial`'s flags."""
    return GuardSettings(
        budget_gib=args.memory_budget_gib,
        margin_gib=args.memory_margin_gib,
        sample_hz=args.sample_hz,
        timeout_s=args.timeout_s,
        probe_steps=args.probe_steps,
    )


def cmd_trial(args: argparse.Namespace) -> int:
    from orchestrator.outcome import COMPLETED
    from orchestrator.plan import trial_key
    from orchestrator.sinks import TRIAL_COLUMNS, metrics_csv_rows, steps_table, trial_row, write_table_atomic
    from orchestrator.supervisor import run_trial

    values = {k: v for k, v in vars(args).items() if k in KNOBS and v is not None}
    spec = TrialSpec(**values)
    problems = spec.problems()
    if problems:
        out.print(f"invalid trial, nothing started ({len(problems)} problem(s)):", markup=False)
        for problem in problems:
            out.print(f"  {problem}", markup=False)
        return 2
    spec.trial_key = spec.trial_key or trial_key(spec)
    output = Path(args.output_dir or Path("outputs") / "trials" / spec.trial_key).resolve()
    output.mkdir(parents=True, exist_ok=True)
    console.print(f"trial {spec.trial_key} -> {output}")

    def show(kind: str, row: dict[str, Any]) -> None:
        if kind == STEP:
            out.print(_step_line(spec, row), markup=False)
        elif kind == STARTED:
            console.print(f"started on {row.get('device') or row.get('gpu_name') or 'cpu'}")

    verdict = VerdictSettings(stop_on=tuple(args.stop_on))
    try:
        result = run_trial(
            spec, trial_dir=output, guard=trial_guard(args), on_event=show, cpus=spec.num_threads,
            stop_check=stop_check(verdict),
        )  # fmt: skip
    except KeyboardInterrupt:
        console.print("interrupted; trainer killed")
        return 130
    write_table_atomic(steps_table(spec.trial_key, result.steps), output / "steps.parquet")
    rows = metrics_csv_rows(spec.trial_key, result.steps)
    with open(output / "metrics.csv", "w", newline="") as f:
        if rows:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    row = trial_row(spec, result, verdict=verdict)
    outcome = {k: row[k] for k in TRIAL_COLUMNS if k not in KNOBS and k not in ("config", "effective_config")}
    trial_json = {
        "config": json.loads(row["config"]),
        "effective_config": result.started.get("effective_config"),
        "outcome": {**outcome, "versions": result.started.get("versions")},
    }
    (output / "trial.json").write_text(json.dumps(trial_json, indent=2, default=str))
    colour = "green" if result.status == COMPLETED else "red"
    console.print(f"[{colour}]{result.status}[/{colour}]: {result.status_detail}", markup=True)
    if row.get("training_verdict"):
        console.print(f"training verdict {row['training_verdict_detail']}", markup=False)
    console.print(f"wrote {output}/steps.parquet, metrics.csv, trial.json")
    return 0 if result.status == COMPLETED else 1


# ------------------------------------------------------------------------------------------------
# sync-mlflow
# ------------------------------------------------------------------------------------------------
def cmd_sync_mlflow(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    from orchestrator.sinks import steps_path
    from orchestrator.sweep import load_sweep
    from orchestrator.tracking import MlflowSink

    output = Path(args.output_dir).resolve()
    if not (output / "trials.parquet").exists():
        out.print(f"{output}: no trials.parquet; is this a sweep's output dir?", markup=False)
        return 2
    sweep = load_sweep(output / "sweep.yaml")
    uri = args.tracking_uri or sweep.tracking_uri()
    sink = MlflowSink(uri, sweep.experiment_name(), output, sweep.name)
    sink.start_sweep((output / "sweep.yaml").read_text())
    logged = present = 0
    for row in pq.read_table(output / "trials.parquet").to_pylist():
        if not sink.enabled:
            break
        if sink.has_complete_run(row["trial_key"]):
            present += 1
            continue
        spec = TrialSpec.from_dict(json.loads(row["config"]))
        path = steps_path(output, spec)
        steps = pq.read_table(path).to_pylist() if path.exists() else []
        sink.log_whole_trial(spec, row, steps, path)
        logged += sink.enabled
    if sink.enabled:
        statuses = {}
        for row in pq.read_table(output / "trials.parquet", columns=["status"]).to_pylist():
            statuses[row["status"]] = statuses.get(row["status"], 0) + 1
        sink.end_sweep(statuses, interrupted=False)
    if not sink.enabled:
        out.print(f"MLflow at {uri} failed: {sink.error}", markup=False)
        return 1
    out.print(f"{uri}: logged {logged} trial run(s), {present} already there", markup=False)
    return 0


# ------------------------------------------------------------------------------------------------
# Parser. To add a verb (report, compare, submit, gpu-check): write cmd_<verb>(args) -> int and an
# add_<verb>(subparsers) that registers it, and append it to COMMANDS.
# ------------------------------------------------------------------------------------------------
def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting (dotted key, YAML value), e.g. memory.budget_gib=8 or "
        "grid.num_generations=[2,4] or max_steps=3 (a bare trial knob goes to fixed)",
    )


def add_run(sub) -> None:
    p = sub.add_parser("run", help="run a sweep (resumes when the output dir has state)")
    p.add_argument("sweep", help="sweep YAML file")
    _add_set(p)
    p.add_argument("--output-dir", help="default: the sweep's output_dir, else outputs/<name>")
    p.add_argument(
        "--no-report",
        action="store_true",
        help="end without the report (plots, report.md/html, summary.csv); `rlsweep report DIR` makes it later",
    )
    p.set_defaults(func=cmd_run)


def add_validate(sub) -> None:
    p = sub.add_parser("validate", help="check sweep files; every error at once, nothing runs or is written")
    p.add_argument("files", nargs="+", metavar="FILE")
    _add_set(p)
    p.add_argument("--output-dir", help="check this output dir, as `run --output-dir` would use it")
    p.set_defaults(func=cmd_validate)


def add_trial(sub) -> None:
    p = sub.add_parser(
        "trial", help="run one trial without Ray; writes steps.parquet, metrics.csv, trial.json"
    )
    p.add_argument("--output-dir", help="default outputs/trials/<trial_key>")
    p.add_argument(
        "--timeout-s",
        type=float,
        default=GUARD.timeout_s,
        help=f"wall-clock limit in seconds (default: {GUARD.timeout_s:g})",
    )
    p.add_argument(
        "--memory-margin-gib",
        type=float,
        default=GUARD.margin_gib,
        help=f"budget guard allowance over the budget in GiB (default: {GUARD.margin_gib:g})",
    )
    p.add_argument(
        "--sample-hz",
        type=float,
        default=GUARD.sample_hz,
        help=f"memory sampling rate (default: {GUARD.sample_hz:g})",
    )
    p.add_argument(
        "--stop-on",
        nargs="+",
        choices=STOPPABLE,
        default=[],
        help="end the trial as soon as one of these training verdicts holds (it stays completed; "
        "thresholds: the verdict section's defaults, docs/schema.md)",
    )
    add_trial_knobs(p, {"probe_steps": GUARD.probe_steps})
    p.set_defaults(func=cmd_trial)


def add_sync_mlflow(sub) -> None:
    p = sub.add_parser("sync-mlflow", help="log to MLflow what a sweep's Parquet holds and MLflow lacks")
    p.add_argument("output_dir")
    p.add_argument("--tracking-uri", help="default: the sweep's tracking URI")
    p.set_defaults(func=cmd_sync_mlflow)


# ------------------------------------------------------------------------------------------------
# report, compare, gpu-check
# ------------------------------------------------------------------------------------------------
def cmd_report(args: argparse.Namespace) -> int:
    from orchestrator.finish import finish_sweep
    from orchestrator.report import ReportDiskFull
    from orchestrator.tracking import MlflowSink

    output_dir = Path(args.output_dir)
    try:
        finish_sweep(
            output_dir, console=out, mlflow=MlflowSink.for_output(output_dir), budget_gib=args.budget_gib
        )
    except ReportDiskFull as exc:
        console.print(f"report: {exc.strerror}", markup=False, style="red")
        return 1
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/red]", markup=True)
        return 2
    return 0


def add_report(sub) -> None:
    p = sub.add_parser("report", help="summary.csv, feasibility matrix, plots, report.md/html for a sweep")
    p.add_argument("output_dir", help="a sweep's output dir (holds trials.parquet)")
    p.add_argument("--budget-gib", type=float, default=None, help="budget line (default: the sweep's budget)")
    p.set_defaults(func=cmd_report)


def cmd_compare(args: argparse.Namespace) -> int:
    from orchestrator.compare import compare_outputs

    try:
        compare_outputs(args.dir_a, args.dir_b, console=out)
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    return 0


def add_compare(sub) -> None:
    p = sub.add_parser("compare", help="two sweeps' shared trials side by side, with B/A ratios")
    p.add_argument("dir_a")
    p.add_argument("dir_b")
    p.set_defaults(func=cmd_compare)


def cmd_gpu_check(args: argparse.Namespace) -> int:
    from orchestrator import gpu_check

    return gpu_check.run(args)


def add_gpu_check(sub) -> None:
    from orchestrator.gpu_check import add_arguments

    p = sub.add_parser("gpu-check", help="TRL vs Unsloth, GRPO vs GSPO on this GPU: one table (needs a GPU)")
    add_arguments(p)
    p.set_defaults(func=cmd_gpu_check)


COMMANDS = [
    add_run,
    add_validate,
    add_trial,
    add_sync_mlflow,
    add_report,
    add_compare,
    add_gpu_check,
    add_submit,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlsweep", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
