"""One answer to "does this configuration fit this card": the verdict (fits / does not fit / uncertain),
the peak, its interval and what that interval is, and the basis. `fits`, `predict`, `solve` (before its
probes) and `run --dry-run` judge memory through `answer`, so one configuration gets one answer; `fitmap`
searches the memory model `answer` falls back to, so where no measured row or simulated step answers, the
map's verdict at a point is `answer`'s (a simulated map is drawn from a fit over a few simulated shapes,
and near its boundary can differ).

    a = answer(spec, rows, budget_gib, measure, simulate=True)   # an Answer
    a.verdict, a.peak_gib, (a.low_gib, a.high_gib), a.interval, a.kind

In order: a measured row of exactly these settings on this card (`measured`), one that needs at least as
much and fitted or one that needs no more and ran out of memory (`implied`); then, with `simulate`, the
stack's own step simulated on meta tensors at exactly this shape (`simulated`: judged()); then the memory
model fitted on the rows of the model's family, else its prior (`predicted`). The interval is named for
what it is: a measured peak, a bound a measured trial sets, the simulator's error (on the GPU rows of the
model's family, or across families), or the memory model's 90% prediction interval.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from orchestrator.words.outcome import COMPLETED, GPU, IMPLIED, OOM, TIMEOUT
from trainers import stacks
from trainers.record import finite_or_none, peak_memory

# What a measured trial says of the card the map is drawn for.
MEASURED_FITS, MEASURED_OOM, MEASURED_UNDECIDED = "fits", "does not fit", "undecided"


def hub_name(model: str) -> str:
    """A model's name on the map: `random:X` is X (the same architecture, the same memory)."""
    return model.removeprefix("random:")


def _hub_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row with its config's model written as the map writes it (hub_name)."""
    config = json.loads(row["config"]) if isinstance(row.get("config"), str) else None
    if not config or "model" not in config:
        return dict(row)
    return {**row, "config": json.dumps({**config, "model": hub_name(config["model"])})}


def on_card(row: Mapping[str, Any], budget_gib: float) -> tuple[str, float | None, float | None]:
    """(what a measured row says of a card of budget_gib, its peak, the budget it ran under)."""
    peak, _ = peak_memory(row)
    ran_under = finite_or_none(row.get("memory_budget_gib")) or finite_or_none(row.get("gpu_total_gib"))
    status = row.get("status")
    if status == COMPLETED and peak is not None:
        return (MEASURED_FITS if peak <= budget_gib else MEASURED_OOM), peak, ran_under
    if status == IMPLIED and ran_under is not None and ran_under <= budget_gib:
        return MEASURED_FITS, peak, ran_under
    if status == OOM and ran_under is not None and ran_under >= budget_gib:
        return MEASURED_OOM, peak, ran_under
    if status in (TIMEOUT, OOM) and peak is not None and peak > budget_gib:
        return MEASURED_OOM, peak, ran_under
    return MEASURED_UNDECIDED, peak, ran_under


def answer_digits(budget: float | None) -> int:
    """The decimals every verb writes an answer's GiB with: 1 on a card, 3 under a budget below 4 GiB
    (a CPU host's, where tenths of a GiB decide)."""
    return 1 if budget is not None and budget >= 4 else 3


# The bases of an answer, in one word each (Answer.kind).
MEASURED, SIMULATED, PREDICTED = "measured", "simulated", "predicted"


@dataclasses.dataclass(frozen=True)
class Answer:
    """One stack's answer: its verdict, peak and interval (GiB, None where not known), basis in words."""

    stack: str
    verdict: str
    basis: str
    peak_gib: float | None = None
    low_gib: float | None = None
    high_gib: float | None = None
    interval: str = ""  # what the interval is: a measured peak, a bound, the simulator's error, a 90% one
    row: dict | None = dataclasses.field(default=None, compare=False, repr=False)  # the measured row

    @property
    def kind(self) -> str:
        """The basis in one word: measured, implied, simulated, predicted (or unknown)."""
        return self.basis.split(" ")[0].rstrip(":;") if self.verdict != "unknown" else "unknown"

    def peak_words(self, digits: int = 1) -> str:
        """'16.0 GiB', or '-' where no peak is known (an implied answer is a bound: interval_words)."""
        return "-" if self.peak_gib is None else f"{self.peak_gib:.{digits}f} GiB"

    def interval_words(self, digits: int = 1) -> str:
        """'12.4-19.2', '12.4 or more' (no upper bound), '<= 8.0', '> 4.0', the peak itself where measured,
        '-' where nothing is known: every verb writes an answer's interval this way."""
        low, high = self.low_gib, self.high_gib
        if low is not None and high is not None:
            if high == float("inf"):
                return f"{low:.{digits}f} or more"
            return f"{low:.{digits}f}" if low == high else f"{low:.{digits}f}-{high:.{digits}f}"
        if high is not None:
            return f"<= {high:.{digits}f}"
        return "-" if low is None else f"> {low:.{digits}f}"


# A card with no budget emulated is the card asked about when its own memory (gpu_total_gib, torch's
# figure) is within this share of the card's: torch sees a little less than the maker's nominal figure.
SAME_CARD_SHARE = 0.03


def same_card(row: dict, budget: float, measure: str | None) -> bool:
    """Whether a measured row ran on the card asked about, its budget meaning the same: under a budget of
    `budget` GiB (memory_budget_gib), or with none on a card of that memory, its peak read the way the
    question reads it (`measure`, default the GPU's NVML peak: a CPU trial's RSS is not a card's)."""
    _, kind = peak_memory(row)
    if kind != (measure or GPU):
        return False
    emulated = finite_or_none(row.get("memory_budget_gib"))
    if emulated is not None:
        return abs(emulated - budget) < 0.01
    total = finite_or_none(row.get("gpu_total_gib"))
    return total is not None and abs(total - budget) <= SAME_CARD_SHARE * budget


def measured_as(row: dict, spec):
    """A measured row's settings as `spec`'s would be set (None where the row is no measurement, or of
    another stack or model): neither the budget it ran under nor how many steps it ran is a setting of the
    step, so its peak is judged against the card asked about."""
    from orchestrator.judging.memory import spec_of

    if not row.get("config") or row.get("status") not in (COMPLETED, OOM, TIMEOUT):
        return None  # measured rows only: an implied one is no measurement
    other = dataclasses.replace(
        spec_of(row), memory_budget_gib=spec.memory_budget_gib, max_steps=spec.max_steps,
        probe_steps=spec.probe_steps,
    )  # fmt: skip
    if other.stack != spec.stack or other.model.removeprefix("random:") != spec.model:
        return None
    return other


def _measured_answer(spec, rows: list[dict], budget: float, measure: str | None = None) -> Answer | None:
    """The answer measured rows give (on_card: what a row says of this card): a row of
    exactly these settings, else a fit of one that needs at least as much, else an out-of-memory of one
    that needs no more. Only a row of the same card (same_card) is `measured`; one of another card or
    budget only implies, as a dominating fit or a dominated out-of-memory does."""
    from orchestrator.judging.pruning import dominates

    label = stacks.label(spec.stack)
    found: dict[tuple[bool, str], tuple] = {}
    for row in rows:
        other = measured_as(row, spec)
        if other is None:
            continue
        said = (row, *on_card(row, budget))
        here = same_card(row, budget, measure)
        over, under = dominates(other, spec), dominates(spec, other)
        if over and under and said[1] in (MEASURED_FITS, MEASURED_OOM):
            found.setdefault((here, "same"), said)
        elif over and said[1] == MEASURED_FITS:
            found.setdefault((here, "bigger_fit"), said)
        elif under and said[1] == MEASURED_OOM:
            found.setdefault((here, "smaller_oom"), said)
    for here in (True, False):
        for kind in ("same", "bigger_fit", "smaller_oom"):
            if (here, kind) in found:
                how = MEASURED if here and kind == "same" else IMPLIED
                row = found[(here, kind)][0]
                a = _row_answer(label, how, *found[(here, kind)])
                if not here and kind == "same":
                    peak = found[(here, kind)][2]
                    said = f"measured {peak:.2f} GiB" if peak is not None else f"ended {row.get('status')}"
                    a = dataclasses.replace(a, basis=f"{IMPLIED}: {row.get('trial_key')}, these settings, "
                                            f"{said} on another card or budget: {_ran_on(row)}")  # fmt: skip
                elif not here:
                    a = dataclasses.replace(a, basis=f"{a.basis} (on another card or budget: {_ran_on(row)})")
                return dataclasses.replace(a, row=row)
    return None


def _ran_on(row: dict) -> str:
    budget, total = row.get("memory_budget_gib"), row.get("gpu_total_gib")
    card = row.get("gpu_name") or "CPU"
    if budget is not None:
        return f"{card} under a {budget:g} GiB budget"
    return f"{card}, {total:.2f} GiB" if total is not None else card


def _row_answer(label: str, how: str, row, said: str, peak, ran_under) -> Answer:
    """A measured row's answer for this card (`said`: on_card's), as measured or implied by it."""
    from orchestrator.judging.memory import DOES_NOT_FIT, FITS

    key = row.get("trial_key")
    if said == MEASURED_FITS:
        if how == MEASURED:
            return Answer(label, FITS, f"{MEASURED} ({key})", peak, peak, peak, "the measured peak")
        return Answer(
            label, FITS, f"{IMPLIED}: {key} needs at least as much and measured {peak:.2f} GiB",
            high_gib=peak, interval="at most the peak of a trial that needs at least as much",
        )  # fmt: skip
    ran_out = row.get("status") == OOM
    low = peak if peak is not None else ran_under
    bound = "the budget it ran out of memory under" if ran_out else "its measured peak"
    if how == MEASURED:
        said = f"out of memory under {ran_under:g} GiB" if ran_out else f"{key} measured {peak:.2f} GiB"
        return Answer(label, DOES_NOT_FIT, f"{MEASURED}: {said}", low_gib=low, interval=f"at least {bound}")
    said = f"ran out of memory under {ran_under:g} GiB" if ran_out else f"measured {peak:.2f} GiB"
    return Answer(
        label, DOES_NOT_FIT, f"{IMPLIED}: {key} needs no more and {said}", low_gib=low,
        interval=f"at least {bound.replace('its', 'the')} of a trial that needs no more",
    )  # fmt: skip


def simulated_answer(spec, budget: float) -> Answer | str:
    """The answer of `spec`'s step simulated on meta tensors (trainers/simulate) on a card of `budget` GiB
    (judged()); the reason where the stack or model cannot be simulated here."""
    from trainers.simulate import CannotSimulate, simulate

    try:
        step = simulate(spec)
    except CannotSimulate as exc:
        return str(exc)
    return judged(spec, step, budget)


def judged(spec, step, budget: float, error: tuple[float, float, str] | None = None) -> Answer:
    """A simulated step's answer on a card of `budget` GiB: its allocations replayed under the card's
    capacity for torch (the budget less what the processes hold outside torch's allocator, trainers/simulate/
    _outside.py's counted terms, and less what a
    colocated vLLM holds: memory._vllm), as the caching allocator runs there (it releases its cache and
    retries before it gives up: trainers/simulate/_allocator.py). It fits where the least it runs in
    (live tensors plus the fragmentation no release removes, + context + vLLM's), the trainer's part
    times the simulator's error on GPU rows of the model's family (or across families where none:
    memory._interval.simulated_error; `error` gives another), is under the budget in every phase. The
    peak shown is NVML's under that cap."""
    from orchestrator.judging.memory import DOES_NOT_FIT, FITS, UNCERTAIN
    from orchestrator.judging.memory._interval import architecture, simulated_error
    from orchestrator.judging.memory._vllm import beside_vllm
    from trainers.simulate._outside import counted_gib, outside, possible_gib

    # outside torch's allocator: the terms GPU rows measured (the CUDA context); the unmeasured are named
    terms = outside(spec)
    context = counted_gib(terms)
    unmeasured = [t.name for t in terms if t.gib is None]
    parts = beside_vllm(spec, step, budget, context)
    vllm, needed, reserved, beside = parts.vllm, parts.needed, parts.reserved, parts.beside
    capacity = budget - context - beside[1]
    capped = None if needed > capacity else min(reserved, capacity)
    peak = max((reserved if capped is None else capped) + beside[1], sum(parts.generating)) + context
    low_error, high_error, named = error or simulated_error(spec.stack, architecture(spec.model))
    low, high = parts.least(context, low_error, upper=False), parts.least(context, high_error)
    verdict = FITS if high <= budget else DOES_NOT_FIT if low > budget else UNCERTAIN
    if vllm is not None and vllm.refused:
        verdict = DOES_NOT_FIT
    if capped is None:
        cap = f"more than the {budget:g} GiB card leaves torch"
    elif capped < reserved:
        cap = f"under the card's cap reserved stays at {capped:.2f}, the cache released and retried"
    else:
        cap = "under the card's cap the same, the cache never released"
    said = (
        f"{SIMULATED} ({stacks.label(spec.stack)}'s own step on meta tensors: allocated "
        f"{step.allocated_gib:.2f} GiB in {step.phase}, reserved {step.reserved_gib:.2f} uncapped, "
        + (f"trainer {parts.trained:.2f} without generating, " if vllm else "")
        + f"{'the trainer ' if vllm else ''}runs in {needed:.2f} at least ({cap}), + context {context:.2f}"
        + (f"; {vllm.words}" if vllm and vllm.words else "")
        + (f"; refused: {vllm.refused}" if vllm and vllm.refused else "")
        + (
            f"; not counted, never measured: {', '.join(unmeasured)} (up to {possible_gib(terms) - context:.1f} GiB)"
            if unmeasured
            else ""
        )
        + f"; {'simulated before, read from disk' if step.simulated.get('cached') else f'{step.seconds:.0f} s'})"
    )
    interval = f"the least it runs in under the card's cap, times the simulator's error ({named})"
    return Answer(stacks.label(spec.stack), verdict, said, peak, low, high, interval)


def answer_check(spec, asked: dict, rows: list[dict], budget: float, measure: str | None, simulate: bool):
    """`answer` as remedies' check (spec, budget) -> Answer, remembered, seeded with the answers given."""
    memo = {(dataclasses.replace(spec, stack=f).to_json(), budget): a for f, a in asked.items()}

    def check(candidate, budget_gib):
        key = (candidate.to_json(), budget_gib)
        if key not in memo:
            memo[key] = answer(candidate, rows, budget_gib, measure, simulate)
        return memo[key]

    return check


def answer(
    spec,
    rows: list[dict],
    budget: float | None,
    measure: str | None = None,
    simulate: bool = False,
    model=None,
) -> Answer:
    """One stack's answer for `spec` (a TrialSpec) against `budget` GiB of `measure` (default the GPU's):
    measured rows first, then (with `simulate`, GPU memory only) its step simulated at exactly this shape,
    then the memory model fitted on the rows (`model`: one the caller fitted on the same rows and measure,
    to save refitting it per answer). With no budget (None) the memory model alone answers, `uncertain`."""
    from orchestrator.judging.memory import MemoryModel

    rows = rows if isinstance(rows, _Hubbed) else [_hub_row(r) for r in rows]
    found = None if budget is None else _measured_answer(spec, rows, budget, measure)
    if found is not None:
        return found
    why_not = None
    if simulate and budget is not None and (measure or GPU) == GPU:
        simulated = simulated_answer(spec, budget)
        if isinstance(simulated, Answer):
            return simulated
        why_not = simulated
    if model is None:
        model = MemoryModel.fit(rows, measure or GPU, unmeasured=GPU)
    p = model.predict(spec)
    label = stacks.label(spec.stack)
    if p.unknown is not None:
        return Answer(label, "unknown", p.unknown)
    if p.basis == "fitted":
        basis, named = f"{PREDICTED} (fitted on {p.n_fitted} trials)", f"fitted on {p.n_fitted} trials"
    elif p.basis == SIMULATED:
        basis = f"{PREDICTED} (fitted on {p.n_fitted} shapes simulated on meta tensors)"
        named = f"fitted on {p.n_fitted} simulated shapes"
    else:
        basis, named = f"{PREDICTED} (the prior: no trial of its family measured)", "the prior"
    basis += f"; not simulated: {why_not}" if why_not else ""
    interval = f"the memory model's 90% prediction interval ({named})"
    return Answer(label, p.verdict(budget), basis, p.peak_gib, p.low_gib, p.high_gib, interval)


def simulate_unmeasured(specs: list, rows: list[dict], budget: float, measure: str | None) -> None:
    """The steps of `specs` that no measured row answers simulated at once, in worker processes
    (trainers.simulate.simulate_each), so that `answer` then reads each as simulated, from disk."""
    from trainers.simulate import simulate_each

    rows = rows if isinstance(rows, _Hubbed) else [_hub_row(r) for r in rows]
    simulate_each([s for s in specs if _measured_answer(s, rows, budget, measure) is None])


class _Hubbed(list):
    """Rows whose models are already written as hub ids (_hub_row): answer() takes them as they are."""


# A plan of up to this many trials has each one's step simulated at its shape, as `rlsweep fits` answers
# (about 10 s a shape the first time on a 2-core host, then read from disk); a larger one, unless
# simulation is asked for outright, is answered by the memory model alone (seconds), and says so.
EACH_UP_TO = 24


def answers_for(specs, rows, budget, model, simulate: bool | None, progress=None):
    """([Answer per spec], a note or None): every trial of a plan answered by `answer` (rows: the measured
    rows, `model`: the memory model fitted on them with the measure asked about). simulate: True (each
    step simulated), False (none), None (the default: each where the plan is small, EACH_UP_TO, else
    none; the note says so and how to have each simulated). Only GPU memory under a budget is simulated."""
    from orchestrator.judging.memory._simulated import enabled

    rows = _Hubbed(_hub_row(r) for r in rows)  # written as the map writes models, once for every answer
    wanted = enabled(simulate) and budget is not None and model.measure == GPU
    each = wanted and (simulate is True or len(specs) <= EACH_UP_TO)
    note = None
    if wanted and not each:
        note = (
            f"{len(specs)} trials: each answered by the memory model, not by its own step simulated as "
            f"`rlsweep fits` answers (up to {EACH_UP_TO} trials; --simulate simulates each, about 10 s a "
            "trial the first time)"
        )
    elif each and progress is not None:
        progress(f"simulating the step of each of {len(specs)} trials on meta tensors (kept on disk)...")
    if each:
        simulate_unmeasured(specs, rows, budget, model.measure)
    return [answer(s, rows, budget, model.measure, each, model) for s in specs], note
