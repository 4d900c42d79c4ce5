"""rlsweep: sweep GRPO/GSPO trials (TRL, Unsloth) over K, B and stacks; measure memory and speed.

Exit codes, every verb: 0 done; 1 ran and something failed (a trial, a check, MLflow); 2 the input was
refused (a missing file or folder, invalid settings); 130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from orchestrator.cli.models import add_models
from orchestrator.judging.verdict import STOPPABLE, VerdictSettings, stop_check
from orchestrator.recording.outcome import GPU, MEMORY_LABELS, peak_memory
from orchestrator.running.guard import DEFAULTS as GUARD
from orchestrator.running.guard import GuardSettings
from orchestrator.running.submit import add_submit
from tasks.names import did_you_mean
from trainers import stacks
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
    from orchestrator.spec.plan import plan
    from orchestrator.spec.sweep import SweepError, load_sweep

    failed = refused = False
    for path in args.files:
        if not Path(path).is_file():
            refused = True
            out.print(f"[red]{path}: no such file[/red]; give a sweep YAML file (e.g. sweeps/cpu-smoke.yaml)")
            continue
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
        if args.list:
            print_plan(result.trials, output_dir)
    return 2 if refused else 1 if failed else 0


def print_plan(trials: list[TrialSpec], output_dir) -> None:
    """The planned trials in order, each with its estimated duration (orchestrator.spec.plan.estimate_durations)."""
    from rich.table import Table

    from orchestrator.views.progress import duration, estimate_durations

    estimates = estimate_durations(trials, output_dir)
    table = Table(title=f"{len(trials)} planned trials", title_justify="left")
    for column in ("#", "trial", "framework", "mode", "model", "K", "B", "steps", "estimated"):
        table.add_column(column, justify="right" if column in ("#", "K", "B", "steps") else "left")
    for i, spec in enumerate(trials, 1):
        seconds, basis = estimates[spec.trial_key]
        table.add_row(
            str(i), spec.trial_key, spec.framework, spec.mode, spec.model, str(spec.num_generations),
            str(spec.batch_size), str(spec.max_steps), "unknown" if seconds is None else f"{duration(seconds)} ({basis})",
        )  # fmt: skip
    out.print(table)
    known = [s for s, _ in estimates.values() if s is not None]
    if known:
        out.print(
            f"estimated total: {duration(sum(known))} for {len(known)} of {len(trials)} trials, run one at a time"
        )
    else:
        out.print("estimated total: unknown (no trial of this sweep has run in its output dir yet)")


# ------------------------------------------------------------------------------------------------
# run
# ------------------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from orchestrator.recording.runlock import OutputDirBusy
    from orchestrator.running.driver import run_sweep
    from orchestrator.spec.sweep import SweepError, load_sweep
    from orchestrator.views.report import ReportDiskFull

    if not Path(args.sweep).is_file():
        out.print(
            f"{args.sweep}: no such file; give a sweep YAML file (e.g. sweeps/cpu-smoke.yaml)", markup=False
        )
        return 2
    # Tune's notices that a callback was slow (the recorder writes Parquet and MLflow as a trial ends)
    # speak of Tune's internals, not of the sweep.
    logging.getLogger("ray.tune.utils.util").setLevel(logging.ERROR)
    if args.dry_run:
        return cmd_validate(
            argparse.Namespace(files=[args.sweep], set=args.set, output_dir=args.output_dir, list=True)
        )
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


# ------------------------------------------------------------------------------------------------
# predict
# ------------------------------------------------------------------------------------------------
VERDICT_STYLES = {"fits": "green", "does not fit": "red", "uncertain": "yellow", "unknown": "dim"}


def cmd_predict(args: argparse.Namespace) -> int:
    """Each planned trial's predicted peak memory, its interval and verdict against the budget, from
    the sweep's trials.parquet when it has one (else the prior); nothing runs."""
    from rich.table import Table

    from orchestrator.judging.memory import MemoryModel
    from orchestrator.recording.sinks import TrialsTable
    from orchestrator.spec.plan import plan
    from orchestrator.spec.sweep import SweepError, load_sweep

    try:
        sweep = load_sweep(args.sweep, args.set)
        result = plan(sweep)
        output_dir = sweep.resolved_output_dir(args.output_dir)
    except SweepError as exc:
        out.print(str(exc), markup=False)
        return 2
    if result.problems:
        out.print(f"{args.sweep}: {len(result.problems)} impossible combination(s)", markup=False)
        for problem in result.problems:
            out.print(f"  {problem}", markup=False)
        return 2
    ledger = output_dir / "trials.parquet"
    rows = TrialsTable(ledger).rows if ledger.exists() else {}
    # A sweep with a budget and GPUs per trial asks whether its trials fit a GPU, even on this host
    # without one, until its trials measured something else.
    gpu_question = sweep.resources.gpus_per_trial and sweep.memory.budget_gib is not None
    model = MemoryModel.fit(rows.values(), args.measure, unmeasured=GPU if gpu_question else None)
    budget = args.budget_gib if args.budget_gib is not None else sweep.memory.budget_gib
    source = f"{len(rows)} trial(s) of {ledger}" if rows else "no trials.parquet yet: the prior"
    out.print(f"{args.sweep}: {len(result.trials)} trials; peak {model.measure} predicted from {source}")
    table = Table(show_edge=False)
    for column in ("trial", "predicted GiB", "interval", "verdict", "basis", "measured GiB"):
        table.add_column(column, justify="right" if "GiB" in column else "left")
    reasons: dict[str, list[str]] = {}
    for spec in result.trials:
        prediction = model.predict(spec)
        verdict = prediction.verdict(budget)
        measured, _ = peak_memory(rows.get(spec.trial_key, {}))
        if prediction.unknown is not None:
            reasons.setdefault(prediction.unknown, []).append(spec.trial_key)
            figures = ("-", "-")
        else:
            figures = (f"{prediction.peak_gib:.3f}", f"{prediction.low_gib:.3f}-{prediction.high_gib:.3f}")
        basis = f"fitted on {prediction.n_fitted}" if prediction.basis == "fitted" else prediction.basis
        table.add_row(
            spec.trial_key,
            *figures,
            f"[{VERDICT_STYLES[verdict]}]{verdict}[/]",
            basis,
            "-" if measured is None else f"{measured:.3f}",
        )
    out.print(table)
    if budget is None:
        out.print("no budget: every verdict is uncertain; give --budget-gib X (or memory.budget_gib)")
    else:
        out.print(f"budget {budget:g} GiB: fits = the whole interval under it, does not fit = all above it")
    for reason, keys in reasons.items():
        out.print(f"unknown ({len(keys)} trials, e.g. {keys[0]}): {reason}", markup=False)
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

    peak, kind = peak_memory(row)
    memory = "-" if peak is None else f"{peak:.2f} GiB {MEMORY_LABELS[kind]}"
    return (
        f"step {row.get('step')}/{spec.max_steps}{' probe' if row.get('probe') else ''}  "
        f"step_s {f('step_s', '.2f')}  tokens/s {f('tokens_per_s', '.0f')}  loss {f('loss', '.4f')}  "
        f"reward {f('reward_mean')}  peak {memory}"
    )


class _StepLines:
    """`rlsweep trial`'s recorder sink for the terminal: a line per step; keeps the trial's row."""

    row: dict[str, Any] = {}

    def on_start(self, spec: TrialSpec) -> None:
        pass

    def on_step(self, spec: TrialSpec, row: dict[str, Any]) -> None:
        out.print(_step_line(spec, row), markup=False)

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        self.row = row


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
    from orchestrator.recording.outcome import COMPLETED
    from orchestrator.recording.recorder import Recorder, TrialFolder
    from orchestrator.running.supervisor import run_trial
    from orchestrator.spec.plan import trial_key

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
    console.print("starting the trainer: model build, then the first generation (no step line until then)")

    verdict = VerdictSettings(stop_on=tuple(args.stop_on))
    lines = _StepLines()
    recorder = Recorder([spec], [TrialFolder(output), lines], verdict=verdict)  # a sweep's writer

    def show(kind: str, row: dict[str, Any]) -> None:
        if kind == STEP:
            recorder.step(spec.trial_key, row)
        elif kind == STARTED:
            console.print(f"started on {row.get('device') or row.get('gpu_name') or 'cpu'}")

    recorder.start(spec.trial_key)
    try:
        result = run_trial(
            spec, trial_dir=output, guard=trial_guard(args), on_event=show, cpus=spec.num_threads,
            stop_check=stop_check(verdict),
        )  # fmt: skip
    except KeyboardInterrupt:
        console.print("interrupted; trainer killed")
        return 130
    recorder.end(spec.trial_key, result)
    row = lines.row
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

    from orchestrator.recording.sinks import steps_path
    from orchestrator.recording.tracking import MlflowSink
    from orchestrator.spec.sweep import load_sweep

    output = Path(args.output_dir).resolve()
    for name in ("trials.parquet", "sweep.yaml"):
        if not (output / name).exists():
            out.print(f"{output}: no {name}; give a sweep's output dir (it holds both)", markup=False)
            return 2
    sweep = load_sweep(output / "sweep.yaml")
    uri = args.tracking_uri or sweep.tracking_uri(output)
    sink = MlflowSink(uri, sweep.experiment_name(), output, sweep.name, goes_on="the sync stops")
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
    p.add_argument("sweep", help="sweep YAML file, e.g. sweeps/cpu-smoke.yaml")
    _add_set(p)
    p.add_argument("--output-dir", help="default: the sweep's output_dir, else outputs/<name>")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="list the planned trials with an estimated duration each (from the trials already in the "
        "output dir); nothing runs or is written",
    )
    p.add_argument(
        "--no-report",
        action="store_true",
        help="end without the report (plots, report.md/html, summary.csv); `rlsweep report DIR` makes it later",
    )
    p.set_defaults(func=cmd_run)


def add_predict(sub) -> None:
    from orchestrator.judging.memory import MEASURES

    p = sub.add_parser(
        "predict",
        help="predict each planned trial's peak memory and whether it fits the budget; nothing runs",
    )
    p.add_argument("sweep", help="sweep YAML file")
    _add_set(p)
    p.add_argument("--budget-gib", type=float, help="the budget to judge against; default memory.budget_gib")
    p.add_argument(
        "--output-dir", help="where the sweep's trials.parquet is read from; default its output dir"
    )
    p.add_argument(
        "--measure",
        choices=MEASURES,
        help="which peak to predict; default what the sweep's trials measured, else GPU for a sweep "
        "with memory.budget_gib and resources.gpus_per_trial, else RSS on a host without a GPU and "
        "GPU on one with",
    )
    p.set_defaults(func=cmd_predict)


def add_validate(sub) -> None:
    p = sub.add_parser("validate", help="check sweep files; every error at once, nothing runs or is written")
    p.add_argument("files", nargs="+", metavar="FILE", help="sweep YAML files, e.g. sweeps/*.yaml")
    _add_set(p)
    p.add_argument("--output-dir", help="check this output dir, as `run --output-dir` would use it")
    p.add_argument(
        "--list", action="store_true", help="also list the planned trials, as `run --dry-run` does"
    )
    p.set_defaults(func=cmd_validate)


def _add_guard_flags(parser: argparse.ArgumentParser, timeout_help: str) -> None:
    """The guard's flags of a verb that runs trials without a sweep file (trial_guard reads them)."""
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=GUARD.timeout_s,
        help=f"{timeout_help} (default: {GUARD.timeout_s:g})",
    )
    parser.add_argument(
        "--memory-margin-gib",
        type=float,
        default=GUARD.margin_gib,
        help=f"budget guard allowance over the budget in GiB (default: {GUARD.margin_gib:g})",
    )
    parser.add_argument(
        "--sample-hz",
        type=float,
        default=GUARD.sample_hz,
        help=f"memory sampling rate (default: {GUARD.sample_hz:g})",
    )


def add_trial(sub) -> None:
    p = sub.add_parser(
        "trial", help="run one trial without Ray; writes steps.parquet, metrics.csv, trial.json"
    )
    p.add_argument("--output-dir", help="default outputs/trials/<trial_key>")
    _add_guard_flags(p, "wall-clock limit in seconds")
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
    p.add_argument("output_dir", help="a sweep's output dir (holds trials.parquet and sweep.yaml)")
    p.add_argument(
        "--tracking-uri",
        help="default: the sweep's tracking.mlflow_uri, else MLFLOW_TRACKING_URI, else mlflow.db next to "
        "the output dir",
    )
    p.set_defaults(func=cmd_sync_mlflow)


# ------------------------------------------------------------------------------------------------
# report, compare, gpu-check
# ------------------------------------------------------------------------------------------------
def cmd_report(args: argparse.Namespace) -> int:
    from orchestrator.recording.finish import finish_sweep
    from orchestrator.recording.tracking import MlflowSink
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
        type=float,
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


def stack_name(value: str) -> str:
    """A registered stack's name (argparse type), else the error with the nearest names."""
    if value not in stacks.STACKS:
        raise argparse.ArgumentTypeError(f"unknown stack {value!r}; {did_you_mean(value, stacks.STACKS)}")
    return value


def cmd_compare(args: argparse.Namespace) -> int:
    from orchestrator.views.compare import compare_outputs

    try:
        result = compare_outputs(args.dir_a, args.dir_b, console=None if args.csv or args.json else out)
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    if args.csv:
        result.to_csv(sys.stdout, index=False)
    elif args.json:
        print(result.to_json(orient="records", indent=1))
    return 0


def add_compare(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="two sweeps' trials side by side, matched on their settings, with B/A ratios; "
        "unmatched trials with the settings that separate them",
    )
    p.add_argument("dir_a", help="sweep output dir A (holds trials.parquet)")
    p.add_argument("dir_b", help="sweep output dir B; ratios are B / A")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--csv", action="store_true", help="print the comparison as CSV (one row per trial)")
    form.add_argument("--json", action="store_true", help="print the comparison as JSON records")
    p.set_defaults(func=cmd_compare)


def cmd_gpu_check(args: argparse.Namespace) -> int:
    from orchestrator.running import gpu_check

    return gpu_check.run(args)


def add_gpu_check(sub) -> None:
    from orchestrator.running.gpu_check import add_arguments

    p = sub.add_parser(
        "gpu-check",
        help="the registered stacks (TRL, Unsloth), GRPO vs GSPO on this GPU: one table (needs a GPU)",
    )
    add_arguments(p)
    p.set_defaults(func=cmd_gpu_check)


def cmd_solve(args: argparse.Namespace) -> int:
    from orchestrator.judging.solve import SolveError, make_request, run_solve
    from orchestrator.recording.runlock import OutputDirBusy

    settings = {k: getattr(args, k) for k in ("model", "framework", "mode") if getattr(args, k) is not None}
    guard = GuardSettings(
        margin_gib=args.memory_margin_gib, sample_hz=args.sample_hz, timeout_s=args.timeout_s
    )
    try:
        request = make_request(
            args.maximize, args.budget_gib, settings=settings, sets=args.set, values=args.values,
            first=args.first, last=args.last, output_dir=args.output_dir, guard=guard,
            headroom_gib=args.headroom_gib,
        )  # fmt: skip
    except SolveError as exc:
        out.print(f"invalid solve, nothing started ({len(exc.errors)} error(s)):", markup=False)
        for error in exc.errors:
            out.print(f"  {error}", markup=False)
        return 2
    for note in request.notes:
        console.print(note, markup=False)
    console.print(
        f"solve {args.maximize} over {request.values} in {args.budget_gib:g} GiB -> {request.output_dir}"
    )
    try:
        answer = run_solve(request, say=lambda line: console.print(line, markup=False))
    except OutputDirBusy as exc:
        out.print(str(exc), markup=False)
        return 2
    except KeyboardInterrupt:
        console.print("interrupted; trainer killed. The same command resumes, measuring no value twice")
        return 130
    for line in answer.lines():
        out.print(line, markup=False)
    console.print(f"wrote {request.output_dir}/solve.json, trials.parquet, steps/")
    return 0 if answer.certified else 1


def add_solve(sub) -> None:
    from orchestrator.judging.solve import LADDERS, SOLVABLE

    p = sub.add_parser(
        "solve",
        help="the largest K, B or completion length that fits a memory budget, certified by probe trials",
    )
    p.add_argument("--budget-gib", type=float, required=True, help="the memory to fit in, GiB")
    p.add_argument(
        "--headroom-gib", type=float, default=0.0, help="GiB a fit must leave free under the budget"
    )
    p.add_argument("--maximize", required=True, choices=SOLVABLE, help="the setting to search")
    p.add_argument("--values", type=int, nargs="+", help="the candidates (default: a doubling ladder)")
    ladders = ", ".join(f"{k} {a}..{b}" for k, (a, b) in LADDERS.items())
    p.add_argument("--from", dest="first", type=int, help=f"the ladder's first value (default: {ladders})")
    p.add_argument("--to", dest="last", type=int, help="the ladder's last value")
    for name in ("model", "framework", "mode"):
        p.add_argument(f"--{name}", help=KNOBS[name].metadata["help"])
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="any other trial setting (YAML value), e.g. lora_r=8; max_steps defaults to probe_steps "
        f"({GUARD.probe_steps}): the probe steps are the worst case",
    )
    p.add_argument("--output-dir", help="default outputs/solve/<knob>-<framework>-<mode>-<model>-<budget>gib")
    _add_guard_flags(p, "wall-clock limit of each probe trial in seconds")
    p.set_defaults(func=cmd_solve)


COMMANDS = [
    add_run,
    add_validate,
    add_predict,
    add_trial,
    add_sync_mlflow,
    add_report,
    add_compare,
    add_gpu_check,
    add_submit,
    add_solve,
    add_models,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlsweep", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--version", action="version", version=f"rlsweep {importlib.metadata.version('rlsweep')}"
    )
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
    args = parser.parse_args(argv)
    return args.func(args)
