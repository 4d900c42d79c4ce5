"""`rlsweep solve`: the largest setting of one knob that fits a budget, by probe trials."""

from __future__ import annotations

import argparse

from orchestrator.cli._common import (
    add_guard_flags,
    card_unmeasurable,
    console,
    out,
    refused,
    simulated_for,
    simulating,
)
from orchestrator.cli._flags import (
    add_budget,
    add_card,
    add_knob,
    add_output_dir,
    add_simulate,
    add_stack,
    add_trials,
    taken,
)
from orchestrator.cli._trials import read_trials
from orchestrator.words.outcome import GPU
from orchestrator.words.settings import GUARD as GUARD
from orchestrator.words.settings import GuardSettings


def cmd_solve(args: argparse.Namespace) -> int:
    from orchestrator.cli._trials import source_errors
    from orchestrator.judging.solve import SolveError, make_request
    from orchestrator.running.solve import run_solve
    from orchestrator.words.runlock import OutputDirBusy

    budget, card_words = solve_budget(args)
    if budget is None:
        return 2
    bad = source_errors(args.trials)
    if bad:
        return refused("solve", bad, "started")
    settings = {k: getattr(args, k) for k in ("model", "stack", "mode") if getattr(args, k) is not None}
    guard = GuardSettings(
        margin_gib=args.memory_margin_gib, sample_hz=args.sample_hz, timeout_s=args.timeout_s
    )
    try:
        request = make_request(
            args.maximize, budget, settings=settings, sets=args.set, values=args.values,
            first=args.first, last=args.last, output_dir=args.output_dir, guard=guard,
            headroom_gib=args.headroom_gib, taken=taken(*settings, "memory_budget_gib"),
        )  # fmt: skip
    except SolveError as exc:
        console.print(f"invalid solve, nothing started ({len(exc.errors)} error(s)):", markup=False)
        for error in exc.errors:
            console.print(f"  {error}", markup=False)
        return 2
    rows, refusal = read_trials(args, "solve", "started")  # a bad --trials file refuses before any probe
    if refusal is not None:
        return refusal
    request.answered = answered_by(request, rows, budget)
    request.rows, request.measure = rows, probe_measure()
    request.simulate = simulating(args) and request.measure == GPU
    request.simulated = simulated_for(args, [request.spec(v) for v in request.values], budget)
    for note in request.notes:
        console.print(note, markup=False)
    console.print(
        f"solve {args.maximize} over {request.values} in {card_words or f'{budget:g} GiB'} -> {request.output_dir}",
        markup=False,
    )
    try:
        answer = run_solve(request, say=lambda line: console.print(line, markup=False))
    except OutputDirBusy as exc:
        console.print(str(exc), markup=False)
        return 2
    except KeyboardInterrupt:
        console.print("interrupted; trainer killed. The same command resumes, measuring no value twice")
        return 130
    for line in answer.lines():
        out.print(line, markup=False)
    if answer.sources:
        from orchestrator.cli._trials import provenance_lines

        used = {request.answered[v]["trial_key"] for v in answer.sources}
        for line in provenance_lines(list(request.answered.values()), used):
            out.print(line, markup=False)
    console.print(f"wrote {request.output_dir}/solve.json, trials.parquet, steps/")
    return 0 if answer.certified else 1


def answered_by(request, rows: list[dict], budget: float) -> dict[int, dict]:
    """The --trials rows that answer a candidate: measured (completed, oom, or timed out past the budget)
    for exactly its settings on the card or budget asked about (judging.answer.same_card, its peak read the way this
    host's probes read it: the GPU's where NVML finds one, else RSS); the first row of each value."""
    from orchestrator.judging.answer import measured_as, same_card
    from orchestrator.judging.pruning import dominates
    from orchestrator.judging.solve import measured_from_row

    measure = probe_measure()
    found: dict[int, dict] = {}
    for value in request.values:
        spec = request.spec(value)
        for row in rows:
            other = measured_as(row, spec)
            if other is None or row.get("basis") == "simulated" or not same_card(row, budget, measure):
                continue
            if not (dominates(other, spec) and dominates(spec, other)):
                continue
            if measured_from_row(value, row, budget, request.headroom_gib).fits is not None:
                found[value] = row
                break
    return found


def probe_measure() -> str:
    """The peak this host's probes read: the GPU's where NVML finds one, else the host's RSS."""
    from orchestrator.words.outcome import GPU, RSS
    from trainers.nvml import local_gpus

    return GPU if local_gpus() else RSS


def solve_budget(args: argparse.Namespace) -> tuple[float | None, str | None]:
    """(budget GiB, the card's words) of exactly one of --card and --budget-gib; (None, None) after printing
    why when neither or both are given."""
    from orchestrator.cli._flags import card_budget

    try:
        budget, words = card_budget(args)
    except ValueError as exc:
        console.print(f"invalid solve, nothing started: {exc}", markup=False)
        return None, None
    if budget is not None and args.card is not None:
        model = f" --model {args.model}" if args.model else ""
        stack = f" --stack {args.stack}" if args.stack else ""
        why = card_unmeasurable(
            args, "solve", f"rlsweep fits --card {args.card.typed or args.card.name}{model}{stack}"
        )
        if why is not None:
            console.print(f"invalid solve, nothing started: {why}", markup=False)
            return None, None
    if budget is None:
        console.print(
            "invalid solve, nothing started: give the budget as --card NAME (e.g. --card 24gb; rlsweep fitmap "
            "--help lists the cards) or --budget-gib GIB (e.g. --budget-gib 16)",
            markup=False,
        )
    return budget, words


def add_solve(sub) -> None:
    from orchestrator.judging.solve import LADDERS, SOLVABLE

    p = sub.add_parser(
        "solve",
        help="the largest K, B or completion length that fits a memory budget, certified by probe trials",
    )
    add_card(p)
    add_budget(p)
    p.add_argument(
        "--headroom-gib", type=float, default=0.0, help="GiB a fit must leave free under the budget"
    )
    p.add_argument("--maximize", required=True, choices=SOLVABLE, help="the setting to search")
    p.add_argument("--values", type=int, nargs="+", help="the candidates (default: a doubling ladder)")
    ladders = ", ".join(f"{k} {a}..{b}" for k, (a, b) in LADDERS.items())
    p.add_argument("--from", dest="first", type=int, help=f"the ladder's first value (default: {ladders})")
    p.add_argument("--to", dest="last", type=int, help="the ladder's last value")
    add_knob(p, "model")
    add_stack(p)
    add_knob(p, "mode")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="any other trial setting (YAML value), e.g. lora_r=8; max_steps defaults to probe_steps "
        f"({GUARD.probe_steps}): the probe steps are the worst case",
    )
    add_output_dir(p, "where the probes go (default outputs/solve/<knob>-<stack>-<mode>-<model>-<budget>gib)")
    add_guard_flags(p, "wall-clock limit of each probe trial in seconds")
    add_simulate(p)
    add_trials(p, "whose rows of exactly a candidate on this card or budget answer it instead of a probe")
    p.set_defaults(func=cmd_solve)
