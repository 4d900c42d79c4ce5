"""`rlsweep predict`: each trial's predicted peak memory; nothing runs."""

from __future__ import annotations

import argparse

from orchestrator.cli._answers import say, speed_line
from orchestrator.cli._common import (
    config_source,
    console,
    examples,
    out,
    progress,
    refused,
)
from orchestrator.cli._flags import (
    add_budget,
    add_card,
    add_measure,
    add_output_dir,
    add_set,
    add_simulate,
    add_trials,
    card_budget,
)
from orchestrator.cli._plan import print_laid, trial_cells, trial_columns
from orchestrator.cli._trials import read_trials
from orchestrator.views.tables import Column, lay_out
from orchestrator.words.outcome import GPU, peak_memory

# The figures' headers where the table is too wide with the full ones (a figure never wraps).
SHORT = {"peak GiB": "GiB", "interval": "interval", "measured GiB": "measured"}
KEPT = ("peak GiB", "interval", "verdict")  # shown even where every trial's is the same
VERDICT_STYLES = {"fits": "green", "does not fit": "red", "uncertain": "yellow", "unknown": "dim"}


def cmd_predict(args: argparse.Namespace) -> int:
    """Each planned trial's predicted peak memory, its interval and verdict against the budget, from
    the sweep's trials.parquet when it has one (else the prior); nothing runs."""

    from orchestrator.judging.answer import SIMULATED, answer_digits, answers_for
    from orchestrator.judging.memory import UNCERTAIN, UNKNOWN, MemoryModel
    from orchestrator.recording.sinks import TrialsTable
    from orchestrator.spec.load import load_sweep
    from orchestrator.spec.plan import plan
    from orchestrator.spec.sweep import SweepError

    try:
        sweep = load_sweep(args.sweep, args.set)
        result = plan(sweep)
        output_dir = sweep.resolved_output_dir(args.output_dir)
    except SweepError as exc:
        console.print(str(exc), markup=False)
        return 2
    if result.problems:
        console.print(f"{args.sweep}: {len(result.problems)} impossible combination(s)", markup=False)
        for problem in result.problems:
            console.print(f"  {problem}", markup=False)
        return 2
    sources, unreadable = [], []
    for name in dict.fromkeys(spec.model for spec in result.trials):
        line, why = config_source(name)
        sources += [line] if line else []
        unreadable += [why] if why else []
    if unreadable:
        return refused("predict", unreadable, "predicted")
    from orchestrator.cli._trials import source_errors
    from orchestrator.cli._trials import sources as trial_sources

    bad = source_errors(args.trials)
    if bad:
        return refused("predict", bad, "predicted")
    shared, refusal = read_trials(args, "predict", "predicted")
    if refusal is not None:
        return refusal
    ledger = output_dir / "trials.parquet"
    rows_by_key = TrialsTable(ledger).rows if ledger.exists() else {}
    # --trials' rows (a team's server, result files) after the sweep's own: the model is fitted on both.
    rows_by_key = {**{f"shared:{i}": row for i, row in enumerate(shared)}, **rows_by_key}
    try:
        budget, card_words = card_budget(args)
    except ValueError as exc:
        out.print(str(exc), markup=False)
        return 2
    # A sweep with a budget and GPUs per trial (or a --card: a GPU) asks whether its trials fit a GPU,
    # even on this host without one, until its trials measured something else.
    gpu_question = args.card is not None or (
        sweep.resources.gpus_per_trial and sweep.memory.budget_gib is not None
    )
    # a card is answered in GPU memory whatever the rows measured (a CPU host's RSS is no card's)
    measure = args.measure or (GPU if args.card is not None else None)
    model = MemoryModel.fit(rows_by_key.values(), measure, unmeasured=GPU if gpu_question else None)
    budget = budget if budget is not None else sweep.memory.budget_gib
    own = len(rows_by_key) - len(shared)
    source = f"{own} trial(s) of {ledger}" if own else "no trials.parquet yet"
    if shared:
        source += f", and {len(shared)} of {', '.join(trial_sources(args.trials))}"
    elif not own:
        source += ": the prior"
    if args.explain:
        told = explain(args.sweep, result.trials, args.trial, model, budget, source)
        if told == 0 and (args.trial is not None or len(result.trials) == 1):  # the verbs' one answer too
            spec = next(s for s in result.trials if args.trial in (None, s.trial_key))
            (said,), _ = answers_for([spec], rows_by_key.values(), budget, model, args.simulate, progress)
            digits = answer_digits(budget)
            say(
                f"answer (as fits, fitmap, solve and run --dry-run give it): {said.verdict}, "
                f"{said.peak_words(digits)} ({said.interval_words(digits)}), {said.kind}; interval: "
                f"{said.interval}"
            )
        return told
    if args.trial is not None:
        out.print("--trial selects the trial --explain explains; add --explain", markup=False)
        return 2
    answers, note = answers_for(result.trials, rows_by_key.values(), budget, model, args.simulate, progress)
    if any(a.kind == SIMULATED for a in answers):
        source += "; where no row measured a trial, its own step simulated on meta tensors"
    out.print(f"{args.sweep}: {len(result.trials)} trials; peak {model.measure} predicted from {source}")
    if note:
        say(note)
    if card_words is not None:
        out.print(f"card: {card_words}", markup=False)
        if sweep.memory.budget_gib is not None and abs(sweep.memory.budget_gib - budget) > 0.005:
            say(
                f"the sweep runs its trials under memory.budget_gib {sweep.memory.budget_gib:g} GiB; these "
                f"answers are for the card ({budget:g} GiB): --set memory.budget_gib={budget:g} runs them so"
            )
        pairs = dict.fromkeys((spec.stack, spec.model) for spec in result.trials)
        out.print(speed_line(args.card, list(pairs)), markup=False)
    knobs, knob_columns = trial_columns(list(sweep.axes()), result.trials)
    figures = ("peak GiB", "interval", "verdict", "basis", "measured GiB")
    columns = [
        Column("trial", optional=True), *knob_columns,
        *(Column(c, right=c in SHORT, keep=c in KEPT, short=SHORT.get(c)) for c in figures),
    ]  # fmt: skip
    rows = []
    for line in sources:
        out.print(line, markup=False)
    reasons: dict[str, list[str]] = {}
    intervals: dict[str, str] = {}
    digits = answer_digits(budget)
    for spec, said in zip(result.trials, answers, strict=True):
        measured, _ = peak_memory(rows_by_key.get(spec.trial_key, {}))
        if said.verdict == UNKNOWN:
            reasons.setdefault(said.basis, []).append(spec.trial_key)
            verdict = UNKNOWN
        else:
            intervals.setdefault(said.interval, said.kind)
            if "; not simulated: " in said.basis:
                reasons.setdefault(said.basis.split("; not simulated: ")[1], []).append(spec.trial_key)
            verdict = said.verdict if budget is not None else UNCERTAIN
        rows.append([
            spec.trial_key, *trial_cells(spec, knobs), said.peak_words(digits).removesuffix(" GiB"),
            said.interval_words(digits), f"[{VERDICT_STYLES[verdict]}]{verdict}[/]", said.kind,
            "-" if measured is None else f"{measured:.3f}",
        ])  # fmt: skip
    print_laid(lay_out(out, columns, rows, show_edge=False))
    if budget is None:
        out.print("no budget: every verdict is uncertain; give --budget-gib X (or memory.budget_gib)")
    else:
        out.print(f"budget {budget:g} GiB: fits = the whole interval under it, does not fit = all above it")
    for named, kind in intervals.items():
        say(f"interval ({kind}): {named}")
    for reason, keys in reasons.items():
        say(f"unknown or not simulated ({len(keys)} trials, e.g. {keys[0]}): {reason}")
    return 0


def explain(sweep: str, trials: list, key: str | None, model, budget: float | None, source: str) -> int:
    """One trial's prediction term by term (2 when the trial is not one configuration of the sweep)."""
    from rich.table import Table

    from orchestrator.judging.memory import PARTS

    keys = [spec.trial_key for spec in trials]
    if key is None and len(trials) != 1:
        out.print(
            f"--explain: {sweep} plans {len(trials)} trials and --explain explains one; pick it with "
            f"--trial KEY (e.g. --trial {keys[0]}) or pin the grid with --set grid.KNOB=[VALUE]",
            markup=False,
        )
        return 2
    if key is not None and key not in keys:
        out.print(
            f"--trial {key}: not a trial of {sweep}; its trials: {', '.join(keys[:5])}"
            + (f" and {len(keys) - 5} more (rlsweep predict {sweep} lists them)" if len(keys) > 5 else ""),
            markup=False,
        )
        return 2
    spec = trials[keys.index(key)] if key is not None else trials[0]
    prediction = model.predict(spec)
    out.print(f"{spec.trial_key}: peak {model.measure} predicted from {source}", markup=False)
    if prediction.unknown is not None:
        out.print(f"unknown: {prediction.unknown}", markup=False)
        return 0
    table = Table(show_edge=False)
    for column in ("term", "part", "bytes", "GiB", "coefficient", "counted GiB"):
        table.add_column(column, justify="right" if "GiB" in column or column == "coefficient" else "left")
    for line in model.explain(spec):
        table.add_row(
            line.term, line.part, line.formula, f"{line.gib:.3f}", f"{line.coefficient:.2f}",
            f"{line.counted_gib:.3f}",
        )  # fmt: skip
    out.print(table)
    parts = ", ".join(f"{part} {prediction.terms[part]:.3f}" for part in PARTS)
    basis = f"fitted on {prediction.n_fitted}" if prediction.basis == "fitted" else prediction.basis
    verdict = prediction.verdict(budget)
    against = f"budget {budget:g} GiB: {verdict}" if budget is not None else "no budget (give --budget-gib)"
    out.print(f"total: {prediction.describe()} ({basis}; {parts}); {against}", markup=False)
    return 0


def add_predict(sub) -> None:

    p = sub.add_parser(
        "predict",
        help="predict each planned trial's peak memory and whether it fits the budget; nothing runs",
        **examples(
            "rlsweep predict sweeps/cpu-smoke.yaml --budget-gib 1",
            "rlsweep predict sweeps/workstation-16gb.yaml --card 4090",
            "rlsweep predict sweeps/cpu-smoke.yaml --set memory.budget_gib=8 --set 'grid.num_generations=[2,4]'",
        ),
    )
    p.add_argument("sweep", help="sweep YAML file")
    add_set(p)
    add_budget(p, "; default memory.budget_gib")
    add_card(p)
    add_output_dir(p, "where the sweep's trials.parquet is read from; default its output dir")
    add_measure(
        p,
        "what the sweep's trials measured, else GPU for a sweep with memory.budget_gib and "
        "resources.gpus_per_trial, else RSS on a host without a GPU and GPU on one with",
    )
    p.add_argument(
        "--explain",
        action="store_true",
        help="print one trial's prediction term by term (bytes in words, GiB, coefficient) against the "
        "budget: the sweep's only trial, or the one --trial names",
    )
    p.add_argument("--trial", metavar="KEY", help="the trial --explain explains (a key predict lists)")
    add_trials(p, "to fit the memory model on besides the sweep's own")
    add_simulate(p)
    p.set_defaults(func=cmd_predict)
