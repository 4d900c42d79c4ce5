"""`rlsweep calibrate`: a handful of synthetic probes of one model and stack on this machine, chosen to pin
the memory model's terms for them (orchestrator/judging/calibrate.py), then the fit map drawn from them."""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from orchestrator.cli._common import (
    add_guard_flags,
    card_unmeasurable,
    console,
    out,
    refused,
    simulated_for,
    stack_name,
)
from orchestrator.cli._flags import (
    add_budget,
    add_card,
    add_knob,
    add_length_range,
    add_output_dir,
    add_set,
    add_simulate,
    add_stack,
    add_trials,
    axis_values,
    base_spec,
    card_budget,
    length_errors,
    taken,
)
from orchestrator.cli._trials import read_trials
from orchestrator.cli.fitmap import cmd_fitmap
from orchestrator.words.settings import GuardSettings
from trainers import stacks

# What calibrate's own flags set, or what it chooses per probe, and so no --set: each with what to do instead.
CALIBRATE_TAKEN = {
    **taken("stack", "model", "num_generations", "batch_size", "max_completion_length", "memory_budget_gib"),
    "max_steps": "each probe is one step (max_steps 1, probe_steps 1): drop this --set",
    "probe_steps": "each probe is one step (max_steps 1, probe_steps 1): drop this --set",
}


def _output_dir(args: argparse.Namespace, budget: float, errors: list[str]) -> Path:
    from orchestrator.words.names import model_short
    from orchestrator.words.storage import local_output_dir

    text = args.output_dir or str(
        Path("outputs") / "calibrate" / f"{args.stack}-{model_short(args.model)}-{budget:g}gib"
    )
    return local_output_dir(text, "--output-dir", "calibrate runs its probes", errors)


def _model_errors(base) -> list[str]:
    """Why the model cannot be calibrated here (no architecture to predict from), with its fix (the fetch
    command, a stand-in, the nearest names)."""
    from orchestrator.judging.memory import MemoryModel

    why = MemoryModel.fit([], "RSS").predict(base).unknown
    if why is None or not why.startswith("model:"):
        return []
    return [f"--model {base.model}: {why} (`rlsweep models` lists the models it knows)"]


def request_of(args: argparse.Namespace):
    """The calibration of the flags, or (None, every error: field, value, rule and fix)."""
    from orchestrator.running.calibrate import CalibrationRequest
    from orchestrator.spec.sweep import SweepError

    try:
        budget, _ = card_budget(args)
    except ValueError as exc:
        return None, [str(exc)]
    if budget is None:
        return None, ["name the card (--card 24GB; rlsweep fitmap --help lists them) or --budget-gib GIB"]
    errors: list[str] = []
    if args.card is not None:
        predict = f"rlsweep fitmap --card {args.card.typed or args.card.name} --model {args.model} --stack {args.stack}"
        errors += [why] if (why := card_unmeasurable(args, "calibrate", predict)) else []
    base = None
    try:
        base = base_spec(args.set, CALIBRATE_TAKEN)
    except SweepError as exc:
        errors += exc.errors
    axes = {}
    for knob in ("num_generations", "batch_size"):
        try:
            axes[knob] = axis_values(getattr(args, knob), knob)
        except ValueError as exc:
            errors += str(exc).splitlines()
    errors += length_errors(args.min_length, args.max_length)
    from orchestrator.cli._trials import source_errors

    errors += source_errors(getattr(args, "trials", None))
    try:
        if "," in args.stack:
            raise argparse.ArgumentTypeError(
                "calibrate probes one stack; give one (e.g. --stack trl) and run calibrate again for the next"
            )
        args.stack = stack_name(args.stack)  # as the trial holds it: `--stack TRL` is trl
    except argparse.ArgumentTypeError as exc:
        errors.append(f"--stack {args.stack}: {exc}")
        base = None
    output = _output_dir(args, budget, errors)
    if base is not None:
        base = dataclasses.replace(base, stack=args.stack, model=args.model)
        errors += _model_errors(base)
    if errors:
        return None, errors
    guard = GuardSettings(budget, args.memory_margin_gib, args.sample_hz, args.timeout_s, 1)
    return CalibrationRequest(
        base,
        budget,
        output,
        guard,
        args.probes,
        axes["num_generations"],
        min(axes["batch_size"]),
        (args.min_length, args.max_length),
        session=args.session,
    ), []


def cmd_calibrate(args: argparse.Namespace) -> int:
    from collections import Counter

    from orchestrator.judging.calibrate import CalibrationError
    from orchestrator.running.calibrate import run_calibration
    from orchestrator.words.outcome import COMPLETED
    from orchestrator.words.runlock import OutputDirBusy

    started = time.monotonic()
    request, errors = request_of(args)
    if request is None:
        return refused("calibrate", errors, "run")
    _, refusal = read_trials(args, "calibrate", "run")  # a bad --trials file refuses before any probe
    if refusal is not None:
        return refusal
    asked = [
        dataclasses.replace(request.base, num_generations=k, batch_size=request.b, max_completion_length=length)
        for k in request.ks for length in request.lengths
    ]  # fmt: skip
    request.simulated = simulated_for(args, asked, request.budget_gib)
    console.print(f"calibrate {args.stack} {args.model} -> {request.output_dir}", markup=False)
    try:
        results = run_calibration(request, say=lambda line: console.print(line, markup=False))
    except CalibrationError as exc:
        console.print(f"calibrate: nothing run: {exc}", markup=False)
        return 2
    except OutputDirBusy as exc:
        console.print(str(exc), markup=False)
        return 2
    except KeyboardInterrupt:
        console.print("interrupted; trainer killed. The same command resumes, measuring no probe twice")
        return 130
    _summary(results)
    from orchestrator.cli._trials import sources as trial_sources

    ran = [r for r in results if r.ran]
    if not ran:
        for r in results:
            console.print(f"probe {r.probe.role} ({r.probe.words()}) {r.words()}", markup=False)
        console.print(
            "calibrate: no probe ran its step, so nothing was measured and no map is drawn; fix what stopped "
            "it (above) and run the same command again",
            markup=False,
        )
        return 1
    kinds = Counter(r.memory_kind for r in ran if r.memory_kind is not None)
    fitmap = argparse.Namespace(
        card=args.card, budget_gib=args.budget_gib, model=[args.model], stacks=args.stack, num_generations=args.num_generations, batch_size=args.batch_size,
        min_length=args.min_length, max_length=args.max_length, set=args.set, trials=[str(request.output_dir), *trial_sources(args.trials)],
        measure=kinds.most_common(1)[0][0] if kinds else None, output_dir=request.output_dir, no_plot=args.no_plot, after_probes=True,
    )  # fmt: skip
    drawn = cmd_fitmap(fitmap)
    again = " ".join(
        [
            f"rlsweep fitmap --trials {request.output_dir} --model {args.model} --stack {args.stack}",
            f"--card {args.card.name}" if args.card is not None else f"--budget-gib {args.budget_gib:g}",
            *(f"--set {s}" for s in args.set),
        ]
    )
    out.print(f"Draw this map again, or for another card (--card NAME): {again}", markup=False)
    failed = [r for r in results if r.status != COMPLETED]
    for r in failed:
        out.print(f"probe {r.probe.role} ({r.probe.words()}) did not complete: {r.words()}", markup=False)
    of = (
        ""
        if len(ran) == len(results)
        else f" from {len(ran)} of {len(results)} probes (the rest measured nothing)"
    )
    console.print(f"calibrated{of} in {time.monotonic() - started:.0f} s", markup=False)
    return 1 if failed or drawn != 0 else 0


def _summary(results) -> None:
    from rich.table import Table

    table = Table(show_edge=False)
    for column in ("probe", "K", "B", "completion", "status", "peak GiB", "predicted GiB", "error", "s"):
        table.add_column(column, justify="left" if column in ("probe", "status") else "right")
    for r in results:
        s, p = r.probe.spec, r.probe.prediction
        table.add_row(
            r.probe.role, str(s.num_generations), str(s.batch_size), str(s.max_completion_length), r.status,
            "-" if r.peak_gib is None else f"{r.peak_gib:.2f}",
            f"{p.peak_gib:.2f} ({p.low_gib:.2f}-{p.high_gib:.2f})",
            "-" if r.error is None else f"{r.error:+.1%}",
            "measured before" if r.seconds is None else f"{r.seconds:.0f}",
        )  # fmt: skip
    out.print("Probes: each measured peak against its prediction made just before it ran", markup=False)
    out.print(table)


def add_calibrate(sub) -> None:
    from orchestrator.judging.calibrate import DEFAULT_PROBES, PROBES
    from orchestrator.judging.fitmap import BS, KS, LENGTHS

    p = sub.add_parser(
        "calibrate",
        help="run a handful of synthetic probes of one model and stack on this machine, chosen to pin the "
        "memory model, then draw the fit map from them",
    )
    add_knob(p, "model", "the model (a hub id, tiny, smollm2, random:ID, a folder)", required=True)
    add_stack(
        p, dest="stack", type=str, required=True, help=f"the stack to probe: {', '.join(stacks.names())}"
    )
    add_card(p)
    add_budget(p)
    p.add_argument(
        "--probes", type=int, choices=PROBES, default=DEFAULT_PROBES,
        help="how many probes: 3 pin the constant, per-sequence and per-token terms; a 4th, near the "
        "budget, checks them (default %(default)s)",
    )  # fmt: skip
    add_knob(
        p,
        "num_generations",
        "K values the probes and the map take",
        axis=True,
        default=",".join(map(str, KS)),
    )
    add_knob(
        p, "batch_size", "B values of the map; the probes take the smallest", axis=True,
        default=",".join(map(str, BS)),
    )  # fmt: skip
    add_length_range(p, *LENGTHS, what="probed and searched")
    add_set(p, sweep=False)
    add_output_dir(
        p, "where the probes' trials and the map go (default outputs/calibrate/<stack>-<model>-<budget>gib)"
    )
    p.add_argument("--no-plot", action="store_true", help="print the map's table only")
    add_trials(p, "to draw the map from besides the probes")
    p.add_argument(
        "--session",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the probes in one probe session, the model loaded once (a sweep's oom.session; "
        "trials.parquet's `session`); --no-session: one process per probe (default: session)",
    )
    add_guard_flags(p, "wall-clock limit of each probe in seconds")
    add_simulate(p)
    p.set_defaults(func=cmd_calibrate)
