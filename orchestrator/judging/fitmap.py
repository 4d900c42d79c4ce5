"""The fit map: for each stack and model, the longest completion length that fits a card at each K and B,
predicted by the memory model (nothing runs), with the boundary's uncertainty, where the stacks part
(either way: where Unsloth or Liger fits what TRL cannot, and where TRL fits what it cannot; every
stack against the map's first, one line a model: FitMap.against_base), and the trials measured so far
placed on it, each said to be measured.

For one (stack, model, K, B) the lengths LENGTHS[0]..LENGTHS[1] are searched by bisection on the
predictor (a peak grows with the completion length), three times:
  likely    the longest length whose predicted peak is within the budget: the boundary;
  sure      the longest whose prediction interval's high end is within it: surely fits up to here;
  possible  the longest whose interval's low end is within it: surely out of memory above it.
So every length up to `sure` is predicted `fits`, every one above `possible` `does not fit`, and those
between are `uncertain` (Prediction.verdict). None: not even the shortest length fits that way; the
longest length: it fits at least that far.

    rows = TrialsTable(path).rows.values()           # measured trials (may be none)
    fm = fit_map(rows, TrialSpec(), ["Qwen/Qwen2.5-3B-Instruct"], list(stacks.names()), 15.6)
    fm.boundaries, fm.partings, fm.measured, fm.table()

A `random:` model has its hub twin's architecture and so its memory: the map writes both as the hub id,
so a map of Qwen/Qwen2.5-3B-Instruct draws (and is fitted on) the trials that ran random:Qwen/Qwen2.5-3B-Instruct.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from orchestrator.judging.answer import (  # what a measured row says of the card: one rule, the answer's
    MEASURED_FITS,
    MEASURED_OOM,
    MEASURED_UNDECIDED,
    _hub_row,
    hub_name,
    on_card,
)
from orchestrator.judging.memory import (
    DOES_NOT_FIT,
    FITS,
    SIMULATED,
    UNCERTAIN,
    MemoryModel,
    Prediction,
    family_label,
    simulated_rows,
    spec_of,
)
from orchestrator.words.outcome import COMPLETED, IMPLIED, OOM, TIMEOUT
from trainers import stacks
from trainers.trial import BOOKKEEPING, EXECUTION, TrialSpec

KS = (2, 4, 8, 16, 32, 64)
BS = (1, 2)
LENGTHS = (128, 8192)
# The map's axes: a measured trial is drawn where these put it.
AXES = ("stack", "model", "num_generations", "batch_size", "max_completion_length")
# Knobs that do not change a trial's peak memory (nor the memory model's terms): a measured trial that
# differs from the map's settings only in these (and the axes) is drawn on it.
NOT_MEMORY = (
    *AXES, *BOOKKEEPING, *EXECUTION, "memory_budget_gib", "max_steps", "probe_steps", "seed", "data_seed",
    "learning_rate", "lr_scheduler", "temperature", "num_iterations", "task", "task_args", "eval_every",
    "eval_at_end", "eval_samples", "eval_k", "warmup_ratio", "epsilon", "epsilon_high", "scale_rewards",
    "mask_truncated_completions",
)  # fmt: skip


@dataclass(frozen=True)
class Boundary:
    """One (stack, model, K, B): the longest completion lengths that fit (module doc), or unknown and why."""

    stack: str
    model: str
    k: int
    b: int
    likely: int | None
    sure: int | None
    possible: int | None
    lo: int
    hi: int
    unknown: str | None = None

    def words(self) -> str:
        """'517 (480-560)': the boundary with the lengths that surely fit up to and surely do not past."""
        if self.unknown is not None:
            return "unknown"
        return f"{length_words(self.likely, self.lo, self.hi)} ({length_words(self.sure, self.lo, self.hi)}–" \
               f"{length_words(self.possible, self.lo, self.hi)})"  # fmt: skip


def length_words(length: int | None, lo: int, hi: int) -> str:
    if length is None:
        return f"<{lo}"
    return f"≥{hi}" if length >= hi else str(length)


@dataclass(frozen=True)
class Parting:
    """Where `other` fits what `base` cannot at one (model, K, B): completion lengths from..to (both
    likely boundaries); surely: even the sure ends part (other surely fits where base surely does not).
    Either way round: `base` is the stack that stops first, the map's base stack or not."""

    model: str
    k: int
    b: int
    base: str
    other: str
    from_length: int
    to_length: int
    hi: int
    surely: bool

    def words(self) -> str:
        to = length_words(self.to_length, 0, self.hi)
        surely = ", surely" if self.surely else ""
        return f"{self.from_length}: {stacks.label(self.other)} to {to}{surely}"


@dataclass(frozen=True)
class MeasuredPoint:
    """A measured trial on the map, and what it says of the card: fits (completed within it),
    does not fit (out of memory under a budget at least the card's, or a peak past it), or undecided
    (out of memory under a smaller budget, or timed out below the card). predicted: the map's verdict
    for its configuration."""

    stack: str
    model: str
    k: int
    b: int
    length: int
    status: str
    peak_gib: float | None
    budget_gib: float | None
    on_card: str
    predicted: str
    trial_key: str

    @property
    def agrees(self) -> bool | None:
        """Whether the prediction agreed (None where either side is undecided)."""
        if self.on_card == MEASURED_UNDECIDED or self.predicted not in (FITS, DOES_NOT_FIT):
            return None
        return self.on_card == self.predicted


@dataclass
class FitMap:
    budget_gib: float
    measure: str
    boundaries: list[Boundary]
    partings: list[Parting]
    measured: list[MeasuredPoint]
    basis: dict[tuple[str, str], str]  # (stack, model): "prior" or "fitted on N"
    not_drawn: int = 0  # measured trials of other settings than the map's
    card: str | None = None
    lengths: tuple[int, int] = LENGTHS
    stacks: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    model: MemoryModel | None = None  # the memory model the map was predicted by

    def boundary(self, stack: str, model: str, k: int, b: int) -> Boundary:
        key = (stack, model, k, b)
        return next(x for x in self.boundaries if (x.stack, x.model, x.k, x.b) == key)

    def table(self) -> pd.DataFrame:
        """One row per model, K and B: each stack's longest completion that fits, and where the stacks part."""
        rows = []
        parts: dict[tuple[str, int, int], list[Parting]] = {}
        for p in self.partings:
            parts.setdefault((p.model, p.k, p.b), []).append(p)
        for model in self.models:
            ks = sorted({x.k for x in self.boundaries if x.model == model})
            bs = sorted({x.b for x in self.boundaries if x.model == model})
            for k in ks:
                for b in bs:
                    row: dict[str, Any] = {"model": model, "K": k, "B": b}
                    for stack in self.stacks:
                        header = f"{stacks.label(stack)}: longest completion (sure–OOM above)"
                        row[header] = self.boundary(stack, model, k, b).words()
                    if len(self.stacks) > 1:
                        parting = parts.get((model, k, b))
                        row["stacks part at"] = "; ".join(p.words() for p in parting) if parting else "—"
                    rows.append(row)
        return pd.DataFrame(rows)

    def against_base(self) -> list[str]:
        """One line per model: where each other stack fits longer completions than the map's first (the
        base) and where shorter, by their likely boundaries over the (K, B) cells both could predict;
        none with one stack."""
        lines = []
        for model in self.models if len(self.stacks) > 1 else []:
            clauses = []
            for other in self.stacks[1:]:
                longer, shorter, cells = [], [], 0
                for x in self.boundaries:
                    if x.stack != other or x.model != model or x.unknown is not None:
                        continue
                    base = self.boundary(self.stacks[0], model, x.k, x.b)
                    if base.unknown is not None:
                        continue
                    cells += 1
                    if _reach(x) != _reach(base):
                        (longer if _reach(x) > _reach(base) else shorter).append((base, x))
                if cells:
                    clauses.append(
                        f"{stacks.label(other)} fits longer completions than {stacks.label(self.stacks[0])} "
                        f"at {_cells(longer, cells, True)}, shorter at {_cells(shorter, cells, False)}"
                    )
            if clauses:
                lines.append(f"{model}: " + "; ".join(clauses))
        return lines

    def measured_table(self) -> pd.DataFrame:
        """The measured trials on the map: their configuration, outcome, what they say of the card, and
        the map's prediction."""
        return pd.DataFrame(
            [
                {
                    "stack": stacks.label(p.stack),
                    "model": p.model,
                    "K": p.k,
                    "B": p.b,
                    "completion": p.length,
                    "measured": p.status,
                    "peak GiB": p.peak_gib,
                    "budget GiB": p.budget_gib,
                    "on this card": p.on_card,
                    "predicted": p.predicted,
                    "agrees": "—" if p.agrees is None else "yes" if p.agrees else "no",
                }
                for p in self.measured
            ]
        )


def _longest(fits: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """The longest length in lo..hi for which fits() holds, fits being true up to a point; None when
    not even lo."""
    if not fits(lo):
        return None
    if fits(hi):
        return hi
    good, bad = lo, hi
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good


def boundary(
    model: MemoryModel, base: TrialSpec, budget_gib: float, lengths: tuple[int, int] = LENGTHS
) -> Boundary:
    """The boundary of base's (stack, model, K, B) over completion lengths (module doc)."""
    lo, hi = lengths
    key = (base.stack, hub_name(base.model), base.num_generations, base.batch_size)
    problems = dataclasses.replace(base, max_completion_length=lo).problems()
    if problems:
        return Boundary(*key, None, None, None, lo, hi, unknown="; ".join(problems))
    predictions: dict[int, Prediction] = {}

    def predict(length: int) -> Prediction:
        if length not in predictions:
            predictions[length] = model.predict(dataclasses.replace(base, max_completion_length=length))
        return predictions[length]

    first = predict(lo)
    if first.unknown is not None:
        return Boundary(*key, None, None, None, lo, hi, unknown=first.unknown)
    likely = _longest(lambda n: predict(n).peak_gib <= budget_gib, lo, hi)
    # sure <= likely <= possible: each searched only on its side of the likely boundary
    sure = _longest(lambda n: predict(n).high_gib <= budget_gib, lo, likely if likely is not None else lo)
    possible = _longest(lambda n: predict(n).low_gib <= budget_gib, likely if likely is not None else lo, hi)
    return Boundary(*key, likely, sure, possible, lo, hi)


def _reach(x: Boundary) -> int:
    """How far a boundary reaches: its likely length, lo - 1 where not even lo fits, hi where hi does."""
    return x.lo - 1 if x.likely is None else min(x.likely, x.hi)


def _cells(pairs: list[tuple[Boundary, Boundary]], cells: int, longer: bool) -> str:
    """'3 of 12 (K, B) (2-8 completions a step, surely at 2; most at K=2 B=1: 3551 -> ≥8192 tokens)':
    the (base, other) cells where other reaches past the base (longer) or falls short of it, or 'none'."""
    if not pairs:
        return "none"
    sizes = sorted(x.k * x.b for _, x in pairs)
    span = f"{sizes[0]}" if sizes[0] == sizes[-1] else f"{sizes[0]}-{sizes[-1]}"
    ordered = [(base, x) if longer else (x, base) for base, x in pairs]  # (stops first, goes on)
    surely = sum(1 for first, on in ordered if getattr(_part(first, on), "surely", False))
    _, (base, x) = max(
        zip(ordered, pairs, strict=True), key=lambda p: _reach(p[0][1]) / max(_reach(p[0][0]), 1)
    )
    most = f"K={x.k} B={x.b}: {length_words(base.likely, x.lo, x.hi)} -> {length_words(x.likely, x.lo, x.hi)} tokens"
    sure = f", surely at {surely}" if surely else ""
    return f"{len(pairs)} of {cells} (K, B) ({span} completions a step{sure}; most at {most})"


def _part(base: Boundary, other: Boundary) -> Parting | None:
    if base.unknown or other.unknown or other.likely is None:
        return None
    base_likely = base.likely if base.likely is not None else base.lo - 1
    if other.likely <= base_likely:
        return None
    base_possible = base.possible if base.possible is not None else base.lo - 1
    surely = other.sure is not None and other.sure > base_possible
    return Parting(
        other.model, other.k, other.b, base.stack, other.stack, base_likely + 1, other.likely,
        other.hi, surely,
    )  # fmt: skip


def _comparable(spec: TrialSpec) -> dict[str, Any]:
    values = dataclasses.asdict(spec)
    values["dtype"] = spec.effective_dtype
    values.pop("stack_dtype")
    return {k: v for k, v in values.items() if k not in NOT_MEMORY}


def fit_map(
    rows: Iterable[Mapping[str, Any]],
    base: TrialSpec,
    models: list[str],
    stack_names: list[str],
    budget_gib: float,
    ks: Iterable[int] = KS,
    bs: Iterable[int] = BS,
    lengths: tuple[int, int] = LENGTHS,
    measure: str | None = None,
    unmeasured: str | None = None,
    card: str | None = None,
    simulate: bool = False,
    progress: Callable[[str], None] | None = None,
) -> FitMap:
    """The fit map of each stack and model on a card of budget_gib, predicted by a memory model
    fitted on `rows` (trials.parquet rows: the measured trials, maybe none), with the rows of the map's
    settings placed on it. base: the other knobs of every configuration (its K, B, completion length,
    stack and model are the map's). measure, unmeasured: as MemoryModel.fit. simulate: a family with
    no measured row is drawn from its stack's step simulated at a handful of shapes near the budget
    (memory._simulated; `progress` hears each)."""
    rows = [_hub_row(r) for r in rows]
    model = MemoryModel.fit(rows, measure, unmeasured=unmeasured)
    models = [hub_name(m) for m in models]
    ks, bs = list(ks), list(bs)
    not_simulated: dict[str, str] = {}
    if simulate:
        asked = [
            dataclasses.replace(
                base, stack=f, model=name, num_generations=k, batch_size=b, max_completion_length=length
            )
            for name in models for f in stack_names for k in ks for b in bs for length in lengths
        ]  # fmt: skip
        simulated, not_simulated = simulated_rows(asked, rows, model.measure, progress, budget_gib)
        if simulated:
            rows = rows + simulated
            model = MemoryModel.fit(rows, model.measure)
    boundaries: list[Boundary] = []
    basis: dict[tuple[str, str], str] = {}
    for name in models:
        for stack in stack_names:
            for k in ks:
                for b in bs:
                    spec = dataclasses.replace(base, stack=stack, model=name, num_generations=k, batch_size=b)
                    boundaries.append(boundary(model, spec, budget_gib, lengths))
            whole = dataclasses.replace(base, stack=stack, model=name)
            probe = model.predict(whole)
            basis[(stack, name)] = (
                f"fitted on {probe.n_fitted}" if probe.basis == "fitted"
                else f"{SIMULATED} at {probe.n_fitted} shapes" if probe.basis == SIMULATED
                else probe.basis
            )  # fmt: skip
            why = not_simulated.get(family_label(whole))
            if why and probe.basis != SIMULATED:
                basis[(stack, name)] += f" (not simulated: {why})"
    partings = []
    by_key = {(x.stack, x.model, x.k, x.b): x for x in boundaries}
    for x in boundaries:
        if x.stack != stack_names[0]:
            base_x = by_key[(stack_names[0], x.model, x.k, x.b)]
            parting = _part(base_x, x) or _part(x, base_x)  # either stack may go on where the other stops
            if parting is not None:
                partings.append(parting)
    measured, not_drawn = [], 0
    wanted = _comparable(base)
    for row in rows:
        if not row.get("config") or row.get("basis") == SIMULATED:
            continue
        spec = spec_of(row)
        if spec.stack not in stack_names or spec.model not in models or _comparable(spec) != wanted:
            not_drawn += 1
            continue
        says, peak, ran_under = on_card(row, budget_gib)
        if row.get("status") not in (COMPLETED, IMPLIED, OOM, TIMEOUT):
            continue
        measured.append(
            MeasuredPoint(
                spec.stack, spec.model, spec.num_generations, spec.batch_size, spec.max_completion_length,
                str(row.get("status")), peak, ran_under, says, model.predict(spec).verdict(budget_gib),
                str(row.get("trial_key") or spec.trial_key),
            )
        )  # fmt: skip
    return FitMap(
        budget_gib, model.measure, boundaries, partings, measured, basis, not_drawn, card, lengths,
        list(stack_names), models, model,
    )  # fmt: skip


__all__ = [
    "AXES",
    "BS",
    "DOES_NOT_FIT",
    "FITS",
    "KS",
    "LENGTHS",
    "MEASURED_FITS",
    "MEASURED_OOM",
    "MEASURED_UNDECIDED",
    "UNCERTAIN",
    "Boundary",
    "FitMap",
    "MeasuredPoint",
    "Parting",
    "boundary",
    "fit_map",
    "hub_name",
    "on_card",
]
