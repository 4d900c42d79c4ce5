"""`rlsweep validate`: every error of a sweep file at once, and the planned trials."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.cli._common import add_set, out
from trainers.trial import TrialSpec


def cmd_validate(args: argparse.Namespace) -> int:
    from orchestrator.spec.load import load_sweep
    from orchestrator.spec.plan import plan
    from orchestrator.spec.sweep import SweepError

    refused = False  # every failure here is refused input: exit 2, as every verb's
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
            refused = True
            out.print(f"[red]{path}: {len(exc.errors)} error(s)[/red]")
            for error in exc.errors:
                out.print(f"  {error}", markup=False)
            continue
        if result.problems:
            refused = True
            out.print(f"[red]{path}: {len(result.problems)} impossible combination(s)[/red]")
            for problem in result.problems:
                out.print(f"  {problem}", markup=False)
            continue
        axes = ", ".join(f"{k}={len(v)}" for k, v in sweep.axes().items()) or "no grid"
        out.print(f"[green]{path}: ok[/green], {len(result.trials)} trials ({axes}) -> {output_dir}")
        for warning in result.warnings:
            out.print(f"  warning: {warning}", markup=False)
        if args.list:
            estimate = sweep_estimate(sweep, result.trials, output_dir)
            print_plan(result.trials, output_dir, estimate)
            print_estimate(sweep, result.trials, output_dir, estimate=estimate)
    return 2 if refused else 0


# A plan longer than this is listed by its first LIST_HEAD and last LIST_TAIL trials; the totals cover
# every trial. A 100,000-trial table took minutes to lay out and is no use read on a terminal.
LIST_HEAD, LIST_TAIL = 40, 10


def listed(count: int) -> list[int]:
    """The 0-based positions of a plan of `count` trials that its listing shows (all up to
    LIST_HEAD + LIST_TAIL, else the first LIST_HEAD and the last LIST_TAIL)."""
    if count <= LIST_HEAD + LIST_TAIL:
        return list(range(count))
    return [*range(LIST_HEAD), *range(count - LIST_TAIL, count)]


def print_plan(trials: list[TrialSpec], output_dir, h100=None) -> None:
    """The planned trials in order, each with its estimated duration (orchestrator.views.progress.
    estimate_durations: from the trials recorded in the output dir); a trial those cannot time gets its
    H100 estimate (`h100`, an orchestrator.judging.duration.Estimate) labelled by where its figures come
    from (H100 rows measured, or the speed model's prediction); a long plan by its first and last trials
    (listed)."""
    from rich.table import Table

    from orchestrator.views.progress import duration, estimate_durations

    estimates = estimate_durations(trials, output_dir)
    if h100 is not None:
        for key, (seconds, _) in estimates.items():
            if seconds is None and h100.seconds.get(key) is not None:
                estimates[key] = (h100.seconds[key], f"H100, {h100.basis[key]}")
    shown = listed(len(trials))
    title = f"{len(trials)} planned trials"
    if len(shown) < len(trials):
        title += f" (the first {LIST_HEAD} and the last {LIST_TAIL} listed)"
    table = Table(title=title, title_justify="left")
    for column in ("#", "trial", "framework", "mode", "model", "K", "B", "steps", "estimated"):
        table.add_column(column, justify="right" if column in ("#", "K", "B", "steps") else "left")
    for i in shown:
        if i == len(trials) - LIST_TAIL and len(shown) < len(trials):
            table.add_row("...", f"{len(trials) - len(shown):,} more trials", *[""] * 7)
        spec = trials[i]
        seconds, basis = estimates[spec.trial_key]
        table.add_row(
            str(i + 1), spec.trial_key, spec.framework, spec.mode, spec.model, str(spec.num_generations),
            str(spec.batch_size), str(spec.max_steps), "unknown" if seconds is None else f"{duration(seconds)} ({basis})",
        )  # fmt: skip
    out.print(table)
    known = [s for s, _ in estimates.values() if s is not None]
    if known:
        out.print(
            f"estimated total: {duration(sum(known))} for {len(known)} of {len(trials)} trials, run one at a time"
            + (" (H100 figures: measured from its rows, or predicted by the speed model, as each trial says)"
               if any(b.startswith("H100") for _, b in estimates.values()) else "")
        )  # fmt: skip
    else:
        out.print("estimated total: unknown (no trial of this sweep has run in its output dir yet)")


def sweep_estimate(sweep, trials: list[TrialSpec], output_dir):
    """The sweep's H100 estimate (orchestrator.judging.duration.estimate_sweep) with the rows already in
    its output dir, or None (no trial asks for a GPU, or none has figures)."""
    from orchestrator.judging.duration import estimate_sweep
    from orchestrator.recording.sinks import TrialsTable
    from orchestrator.words.storage import is_remote

    path = None if is_remote(output_dir) else output_dir / "trials.parquet"
    rows = list(TrialsTable(path).rows.values()) if path is not None and path.exists() else []
    return estimate_sweep(sweep, trials, rows)


def print_estimate(sweep, trials: list[TrialSpec], output_dir, to=None, estimate=None) -> None:
    """The sweep's H100 estimate (orchestrator.judging.duration), worst case and expected, before anything
    runs (`estimate`, else worked out here); nothing where there is none (a CPU sweep)."""
    estimate = estimate or sweep_estimate(sweep, trials, output_dir)
    if estimate is not None:
        for line in estimate.lines():
            (to or out).print(line, markup=False, highlight=False)


def add_validate(sub) -> None:
    p = sub.add_parser("validate", help="check sweep files; every error at once, nothing runs or is written")
    p.add_argument("files", nargs="+", metavar="FILE", help="sweep YAML files, e.g. sweeps/*.yaml")
    add_set(p)
    p.add_argument("--output-dir", help="check this output dir, as `run --output-dir` would use it")
    p.add_argument(
        "--list", action="store_true", help="also list the planned trials, as `run --dry-run` does"
    )
    p.set_defaults(func=cmd_validate)
