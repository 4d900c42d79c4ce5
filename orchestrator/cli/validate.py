"""`rlsweep validate`: every error of a sweep file at once, and the planned trials."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.cli._common import console as err
from orchestrator.cli._common import out
from orchestrator.cli._flags import add_output_dir, add_set, add_simulate
from orchestrator.cli._plan import (
    add_card,
    assumed_card,
    ledger_rows,
    plan_answers,
    print_estimate,
    print_plan,
    sweep_estimate,
)


def cmd_validate(args: argparse.Namespace) -> int:
    from orchestrator.spec.load import load_sweep
    from orchestrator.spec.plan import plan
    from orchestrator.spec.sweep import SweepError

    refused = False  # every failure here is refused input: exit 2, as every verb's
    for path in args.files:
        if not Path(path).is_file():
            refused = True
            err.print(f"[red]{path}: no such file[/red]; give a sweep YAML file (e.g. sweeps/cpu-smoke.yaml)")
            continue
        try:
            sweep = load_sweep(path, args.set)
            result = plan(sweep)
            output_dir = sweep.resolved_output_dir(args.output_dir)
        except SweepError as exc:
            refused = True
            err.print(f"[red]{path}: {len(exc.errors)} error(s)[/red]")
            for error in exc.errors:
                err.print(f"  {error}", markup=False)
            continue
        if result.problems:
            refused = True
            err.print(f"[red]{path}: {len(result.problems)} impossible combination(s)[/red]")
            for problem in result.problems:
                err.print(f"  {problem}", markup=False)
            continue
        axes = ", ".join(f"{k}={len(v)}" for k, v in sweep.axes().items()) or "no grid"
        out.print(f"[green]{path}: ok[/green], {len(result.trials)} trials ({axes}) -> {output_dir}")
        for warning in result.warnings:
            out.print(f"  warning: {warning}", markup=False)
        if args.list:
            typed = getattr(args, "card", None)
            card = assumed_card(typed)
            rows = ledger_rows(output_dir)
            simulate = getattr(args, "simulate", None)
            answers, runs_under = plan_answers(sweep, result.trials, rows, typed and card, simulate)
            estimate = sweep_estimate(sweep, result.trials, output_dir, card, runs_under)
            print_plan(result.trials, output_dir, estimate, list(sweep.axes()), answers)
            print_estimate(sweep, result.trials, output_dir, estimate=estimate)
    return 2 if refused else 0


def add_validate(sub) -> None:
    p = sub.add_parser("validate", help="check sweep files; every error at once, nothing runs or is written")
    p.add_argument("files", nargs="+", metavar="FILE", help="sweep YAML files, e.g. sweeps/*.yaml")
    add_set(p)
    add_output_dir(p, "check this output dir, as `run --output-dir` would use it")
    p.add_argument(
        "--list", action="store_true", help="also list the planned trials, as `run --dry-run` does"
    )
    add_card(p)
    add_simulate(p)  # --list's memory answers
    p.set_defaults(func=cmd_validate)
