"""The plan a sweep makes, as validate, run --dry-run and predict print it: each trial's knobs and memory
answer, the ledger's trials already run, and the sweep's time on the card assumed (--card, else the GPU
detected, else an H100)."""

from __future__ import annotations

import argparse
import os
import re

from orchestrator.cli._common import out
from orchestrator.cli._flags import add_card as add_shared_card
from trainers.trial import TrialSpec

# A plan longer than this is listed by its first LIST_HEAD and last LIST_TAIL trials; the totals cover
# every trial. A 100,000-trial table took minutes to lay out and is no use read on a terminal.
LIST_HEAD, LIST_TAIL = 40, 10


def listed(count: int) -> list[int]:
    """The 0-based positions of a plan of `count` trials that its listing shows (all up to
    LIST_HEAD + LIST_TAIL, else the first LIST_HEAD and the last LIST_TAIL)."""
    if count <= LIST_HEAD + LIST_TAIL:
        return list(range(count))
    return [*range(LIST_HEAD), *range(count - LIST_TAIL, count)]


# The plan's columns after the trial's stack, mode and model: the knobs people size a run by, then any
# other axis of the sweep's grid; a column the same in every trial is said once above the table.
PLAN_KNOBS = {
    "num_generations": "K",
    "batch_size": "B",
    "max_completion_length": "length",
    "max_steps": "steps",
}


def print_plan(trials: list[TrialSpec], output_dir, h100=None, axes=(), answers=None) -> None:
    """The planned trials in order, each with its estimated duration (orchestrator.views.progress.
    estimate_durations: from the trials recorded in the output dir); a trial those cannot time gets the
    sweep's estimate (`h100`, an orchestrator.judging.duration.Estimate, on the card it assumed) labelled
    by where its figures come from (measured, extrapolated or predicted); a long plan by its first and
    last trials (listed). The columns: the trial's stack, mode, model, K, B, length, steps and the
    sweep's other grid `axes`, those the same in every trial said once above the table, then, given
    `answers` (trial key -> judging.answer's Answer), each one's memory verdict, peak and interval; it fits
    the terminal's width (orchestrator.views.tables)."""
    from orchestrator.views.progress import duration, estimate_durations
    from orchestrator.views.tables import Column, lay_out

    estimates = estimate_durations(trials, output_dir)
    label = "estimated"
    if h100 is not None:
        timed = [
            k for k, (seconds, _) in estimates.items() if seconds is None and h100.seconds.get(k) is not None
        ]
        # the card in the header where every time is the card's, else beside each of its times
        alone = len(timed) == len(estimates)
        label = f"estimated ({h100.card_label()})" if alone else label
        for key in timed:
            basis = h100.basis[key] if alone else f"({h100.card_label()}, {h100.basis[key]})"
            estimates[key] = (h100.seconds[key], basis)
    shown = listed(len(trials))
    title = f"{len(trials)} planned trials"
    if len(shown) < len(trials):
        title += f" (the first {LIST_HEAD} and the last {LIST_TAIL} listed)"
    knobs, knob_columns = trial_columns(axes, trials)
    memory = [Column("memory", keep=True), Column("GiB", right=True), Column("interval", right=True)]
    columns = [
        Column("#", right=True, keep=True),
        Column("trial", optional=True),
        *knob_columns,
        *(memory if answers else []),
        Column(label, keep=True),
    ]
    rows = []
    for i in shown:
        if i == len(trials) - LIST_TAIL and len(shown) < len(trials):
            rows.append(["...", f"{len(trials) - len(shown):,} more trials", *[""] * (len(columns) - 2)])
        spec = trials[i]
        seconds, basis = estimates[spec.trial_key]
        rows.append([
            str(i + 1), spec.trial_key, *trial_cells(spec, knobs), *_memory_cells(answers, spec.trial_key),
            "unknown" if seconds is None else f"{duration(seconds)} {basis}",
        ])  # fmt: skip
    print_laid(lay_out(out, columns, rows, title))
    known = [s for s, _ in estimates.values() if s is not None]
    if known:
        out.print(
            f"estimated total: {duration(sum(known))} for {len(known)} of {len(trials)} trials, run one at a time"
            + (f" ({h100.card_label()} figures: measured from its rows, extrapolated from them, or predicted by the "
               "speed model, as each trial says)" if h100 is not None else "")
        )  # fmt: skip
    else:
        out.print("estimated total: unknown (no trial of this sweep has run in its output dir yet)")


def _memory_cells(answers, key: str) -> list[str]:
    """A trial's answer in the plan: verdict, peak and interval (none without answers)."""
    if not answers:
        return []
    a, digits = answers[key]
    return [a.verdict, a.peak_words(digits).removesuffix(" GiB"), a.interval_words(digits)]


def ledger_rows(output_dir) -> list[dict]:
    """The trials.parquet rows already in a sweep's output dir (none on a remote one, or none yet)."""
    from orchestrator.recording.sinks import TrialsTable
    from orchestrator.words.storage import is_remote

    path = None if is_remote(output_dir) else output_dir / "trials.parquet"
    return list(TrialsTable(path).rows.values()) if path is not None and path.exists() else []


def plan_answers(sweep, trials, rows, card, simulate):
    """({trial key: (Answer, digits)} or None, {trial key: Answer} at the budget the trials run under or
    None): each trial's memory answer (judging.answer, as `fits` gives it) for the card asked about
    (`card`: --card's AssumedCard, its usable memory) or, without one, under the sweep's memory.budget_gib;
    none where neither is given. Said above the plan: what the answers are for, and where the sweep's own
    budget is not the card's."""
    from orchestrator.cli._answers import say
    from orchestrator.cli._common import progress
    from orchestrator.judging.answer import answer_digits, answers_for
    from orchestrator.judging.memory import MemoryModel
    from orchestrator.words.outcome import GPU

    runs = sweep.memory.budget_gib
    budget = card.usable_gib if card else runs
    if budget is None:
        return None, None
    gpu = card or sweep.resources.gpus_per_trial  # a card, or GPUs per trial: GPU memory, on any host
    measure = GPU if card or (gpu and not rows) else None  # a card: GPU memory, whatever rows measured
    model = MemoryModel.fit(rows, measure, unmeasured=GPU if gpu else None)
    said, note = answers_for(trials, rows, budget, model, simulate, progress)
    if card and runs is not None and abs(runs - budget) > 0.005:
        say(
            f"memory: each trial answered for the card ({card.name}, {budget:g} GiB); the sweep runs its "
            f"trials under memory.budget_gib {runs:g} GiB, and the expected time below counts that budget's "
            f"answers (--set memory.budget_gib={budget:g} runs them under the card's)"
        )
        at_runs, _ = answers_for(trials, rows, runs, model, simulate, None)
    else:
        where = f"the card ({card.name}, {budget:g} GiB)" if card else f"memory.budget_gib {budget:g} GiB"
        say(f"memory: each trial answered for {where}, as `rlsweep fits` answers, peak {model.measure}")
        at_runs = said if runs is not None else None
    if note:
        say(note)
    digits = answer_digits(budget)
    keys = [t.trial_key for t in trials]
    answers = {k: (a, digits) for k, a in zip(keys, said, strict=True)}
    return answers, None if at_runs is None else dict(zip(keys, at_runs, strict=True))


def trial_columns(axes, trials):
    """(knob -> header, the Columns) of a table of `trials`: stack, mode, model, K, B, length, steps,
    then any other of the sweep's grid `axes` (orchestrator.views.tables.Column); figures right-aligned,
    and a knob that varies over all of `trials` kept as a column though the rows listed may share it."""
    from orchestrator.views.tables import Column

    knobs = {"stack": "stack", "mode": "mode", "model": "model", **PLAN_KNOBS}
    knobs |= {axis: axis for axis in axes if axis not in knobs}
    columns = []
    for knob, header in knobs.items():
        values = [getattr(t, knob, None) for t in trials]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        varying = len({_cell(v) for v in values}) > 1
        columns.append(Column(header, right=numeric, name=knob == "model", keep=varying))
    return knobs, columns


def trial_cells(spec, knobs) -> list[str]:
    """A trial's cells under trial_columns' knobs."""
    return [_cell(getattr(spec, knob, None)) for knob in knobs]


def print_laid(laid) -> None:
    """A table laid out for the terminal (orchestrator.views.tables.lay_out): the line of what every row
    shares, the table, and what was left out to fit."""
    from orchestrator.views.tables import print_table

    if laid.same:
        out.print(laid.same_line(), markup=False)
    print_table(out, laid.table)
    if laid.left_out:
        out.print(
            f"({', '.join(laid.left_out)} left out to fit {out.width} columns: a wider terminal or COLUMNS shows it)",
            markup=False,
        )


def _cell(value) -> str:
    return "" if value is None else str(value)


def sweep_estimate(sweep, trials: list[TrialSpec], output_dir, card=None, answers=None):
    """The sweep's estimate (orchestrator.judging.duration.estimate_sweep) on `card` (an
    orchestrator.judging.card_speed.AssumedCard; default the H100) with the rows already in its output
    dir, or None (no trial asks for a GPU, or none has figures). answers: each trial's memory answer
    under the sweep's budget (plan_answers), which the expected memory phase counts."""
    from orchestrator.judging.duration import estimate_sweep

    return estimate_sweep(sweep, trials, ledger_rows(output_dir), card=card, answers=answers)


def print_estimate(sweep, trials: list[TrialSpec], output_dir, to=None, estimate=None, card=None) -> None:
    """The sweep's estimate (orchestrator.judging.duration) on `card`, worst case and expected, before
    anything runs (`estimate`, else worked out here); nothing where there is none (a CPU sweep)."""
    estimate = estimate or sweep_estimate(sweep, trials, output_dir, card)
    if estimate is not None:
        for line in estimate.lines():
            (to or out).print(line, markup=False, highlight=False)


def card_text(value: str) -> str:
    """A card's name as typed (argparse type), kept as typed (`4090` names the RTX 4090's speed where the
    registry's card is `24GB`); else the error naming the value, the known cards and the fix."""
    from orchestrator.judging.cards import CARDS, UnknownCard, card

    try:
        card(value)
    except UnknownCard:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a known card; known: {', '.join(CARDS)} (or an alias: 4090, rtx3090, l40s, "
            "a100-80gb, h100...); give one of them, e.g. --card 4090"
        ) from None
    return value


# --card's words on run and validate: the card each trial's answer, the packing and the times are for.
RUN_CARD = (
    " (as `rlsweep fits --card` answers; said where the sweep's memory.budget_gib differs) and the memory "
    "phase is packed into, its speed for the times (scaled from the H100's); default: the GPU detected "
    "here, else an H100"
)


def add_card(parser: argparse.ArgumentParser) -> None:
    """run's and validate's --card: the name as typed (card_text), the shared flag's meaning."""
    add_shared_card(parser, RUN_CARD, type=card_text)


# Words a GPU's name as NVML gives it holds beyond the card's name ('NVIDIA GeForce RTX 4090').
_MAKER_WORDS = re.compile(r"\b(nvidia|geforce|tesla|quadro)\b", re.IGNORECASE)


def detected_gpu() -> str | None:
    """The name NVML gives this host's first visible GPU ('NVIDIA GeForce RTX 4090'), or None (no GPU,
    no NVML)."""
    from trainers.nvml import import_pynvml, open_visible_device, text

    try:
        nvml = import_pynvml()
        handle = open_visible_device(nvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except Exception:  # noqa: BLE001 - no driver, no library, no device: nothing detected
        return None
    try:
        return text(nvml.nvmlDeviceGetName(handle))
    except Exception:  # noqa: BLE001 - a name NVML cannot read: nothing detected
        return None
    finally:
        nvml.nvmlShutdown()


def assumed_card(typed: str | None):
    """The card an estimate assumes (orchestrator.judging.card_speed.AssumedCard): the one named with
    --card, else the GPU detected here where the registry knows it, else the H100 the times were
    measured on; `how` says which."""
    from orchestrator.judging.card_speed import MEASURED_CARD, AssumedCard, speed_of
    from orchestrator.judging.cards import UnknownCard, card

    if typed is not None:
        found = card(typed)
        return AssumedCard(found.name, found.usable_gib, speed_of(typed, found.name), f"--card {typed}")
    name = detected_gpu()
    how = "no GPU detected here"
    if name is not None:
        short = " ".join(_MAKER_WORDS.sub(" ", name).split())
        try:
            found = card(short)
        except UnknownCard:
            how = f"detected {name}, a card it has no figures for"
        else:
            return AssumedCard(
                found.name, found.usable_gib, speed_of(short, found.name), f"detected here: {name}"
            )
    h100 = card(MEASURED_CARD)
    how += ": the card the times were measured on; --card NAME for another"
    return AssumedCard(h100.name, h100.usable_gib, speed_of(MEASURED_CARD, h100.name), how)
