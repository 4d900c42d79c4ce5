"""`rlsweep solve`: the largest value of one knob (K, B or the completion length) that fits a memory
budget, certified by real probe trials.

The candidates (a doubling ladder, or the values given) are searched by bisection on the assumption that
peak memory grows with the knob: a value that fits bounds the answer from below, one that does not
(`oom`, or completed over the budget) from above, and the search ends when the two are neighbours. A
first guess (`guess`: the candidate a prediction names) is probed first, then its neighbour on the side
the measurement points to, then bisection, so a right guess is certified by two trials; without one
the search starts in the middle.

Each probe is a trial run through the same supervised path as `rlsweep trial` (no Ray) under the
budget's guard, recorded like a sweep's (trials.parquet, steps/, one folder per trial under trials/),
so a second run on the same output dir measures no value twice. The pure search (`next_probe`,
`search`, `certify`) takes any measure function; orchestrator/running/solve.py's `run_solve` gives it
real trials.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.judging.intervals import Margin, margin
from orchestrator.judging.memory import Prediction
from orchestrator.spec.load import bound_problem, trial_set_errors
from orchestrator.spec.plan import trial_key
from orchestrator.words.names import model_short
from orchestrator.words.outcome import (
    COMPLETED,
    FAILED,
    OOM,
    STATUS_WORDS,
    STOPPED,
    TIMEOUT,
    UNAVAILABLE,
    peak_memory,
)
from orchestrator.words.settings import GUARD as GUARD_DEFAULTS
from orchestrator.words.settings import GuardSettings
from orchestrator.words.storage import local_output_dir
from tasks.names import did_you_mean
from trainers.trial import TrialSpec, check_value

SOLVABLE = ("num_generations", "batch_size", "max_completion_length", "num_processes")
# A knob's doubling ladder when no --values are given: (first, last) candidate.
LADDERS = {
    "num_generations": (2, 256),
    "batch_size": (1, 256),
    "max_completion_length": (32, 8192),
    "num_processes": (1, 8),
}
SYMBOLS = {"num_generations": "K", "batch_size": "B", "max_completion_length": "completion length",
           "num_processes": "GPUs"}  # fmt: skip
# Knobs whose memory (per GPU) falls as they grow: their candidates are searched from the largest down,
# so memory still grows along the list, and the answer is the fewest that fits ("fewest GPUs that fit").
FEWEST = ("num_processes",)


def ladder(first: int, last: int) -> list[int]:
    """first, 2 x first, 4 x first, ... up to last (last itself when the doubling does not land on it)."""
    values = [first]
    while values[-1] * 2 <= last:
        values.append(values[-1] * 2)
    if values[-1] != last:
        values.append(last)
    return values


@dataclass(frozen=True)
class Measured:
    """A candidate's probe trial. fits: True (completed within the budget), False (oom, or completed
    over it), None (the trial says nothing about memory: failed, unavailable)."""

    value: int
    fits: bool | None
    status: str
    detail: str
    peak_gib: float | None
    memory_kind: str | None
    trial_key: str


def measured_from_row(
    value: int, row: dict[str, Any], budget_gib: float, headroom_gib: float = 0.0
) -> Measured:
    """A trials.parquet row as a candidate's measurement against the budget, less the headroom a fit
    must leave free (--headroom-gib). A timeout's peak is a lower bound: over the budget less the headroom,
    it does not fit; under it, nothing is known. A probe that failed, was unavailable or stopped did not
    run its step: no peak is read from it (null), whatever its process's memory was."""
    status = row["status"]
    peak, kind = (None, None) if status in (FAILED, UNAVAILABLE, STOPPED) else peak_memory(row)
    if status == COMPLETED:
        fits = peak is not None and peak <= budget_gib - headroom_gib
    elif status == TIMEOUT and peak is not None and peak > budget_gib - headroom_gib:
        fits = False
    else:
        fits = False if status == OOM else None
    return Measured(value, fits, status, row.get("status_detail") or "", peak, kind, row["trial_key"])


def bounds(values: list[int], measured: dict[int, Measured]) -> tuple[int, int]:
    """(lo, hi): the index of the largest value measured to fit below the smallest measured not to fit
    (-1 if none), and that smallest index (len(values) if none)."""
    hi = min(
        (i for i, v in enumerate(values) if v in measured and measured[v].fits is False), default=len(values)
    )
    lo = max((i for i, v in enumerate(values[:hi]) if v in measured and measured[v].fits), default=-1)
    return lo, hi


def next_probe(values: list[int], measured: dict[int, Measured], guess: int | None = None) -> int | None:
    """The index of the next candidate to measure, or None when the answer is settled (lo and hi are
    neighbours). guess: the index a prediction names as the largest that fits."""
    lo, hi = bounds(values, measured)
    if hi - lo <= 1:
        return None
    if guess is not None:
        if lo < guess < hi:
            return guess
        if lo == guess and guess + 1 < hi:  # the guess fits: does the next one up?
            return guess + 1
        if hi == guess and guess - 1 > lo:  # the guess does not fit: does the next one down?
            return guess - 1
    return (lo + hi) // 2


@dataclass
class Answer:
    """The certified answer: the largest value measured to fit and the next value above it, measured
    (or, above the last candidate, none), with every probe behind it."""

    knob: str
    budget_gib: float
    values: list[int]
    fit: Measured | None
    above: Measured | None
    probes: list[Measured] = field(default_factory=list)
    stopped_by: Measured | None = None  # a probe that says nothing about memory ended the search
    beyond: str | None = None  # the next value past the last candidate, predicted (when that one fits)
    contradictions: list[str] = field(default_factory=list)
    headroom_gib: float = 0.0  # what a fit must leave free under the budget (--headroom-gib)
    # values a --trials row answered instead of a probe: value -> the row's provenance (source, run, card,
    # date, versions)
    sources: dict[int, str] = field(default_factory=dict)

    @property
    def certified(self) -> bool:
        return self.stopped_by is None and not self.contradictions

    def lines(self) -> list[str]:
        """The answer in sentences, the certificate first."""
        name = SYMBOLS[self.knob]
        budget = f"{self.budget_gib:g} GiB" + (
            f" less {self.headroom_gib:g} GiB headroom" if self.headroom_gib else ""
        )
        if self.stopped_by is not None:
            m = self.stopped_by
            return [
                f"no answer: the probe of {name}={m.value} ended {STATUS_WORDS.get(m.status, m.status)} "
                f"({_first_line(m.detail)}), which says nothing about its memory, so the search stops. "
                f"Fix the cause (trials/{m.trial_key}/trainer.log), then run again with a fresh --output-dir"
            ]
        lines = []
        fewest = self.knob in FEWEST
        most, first, beyond, past = (
            ("fewest", "largest", "smaller", "smaller --from")
            if fewest
            else ("largest", "smallest", "larger", "larger --to")
        )
        if self.fit is None:
            lines.append(
                f"none fits {budget}: the {first} candidate {name}={self.values[0]} "
                f"does not ({_measured_words(self.above, budget)})"
            )
        else:
            lines.append(
                f"{most} {name} that fit{'' if fewest else 's'} {budget}: {self.fit.value}, measured "
                f"{_peak_words(self.fit)}, {self.margin.words()} ({self.fit.trial_key})"
                + (": another run may not fit (docs/benchmarks.md)" if self.margin.tight else "")
            )
            if self.above is not None:
                lines.append(
                    f"next {name} {'below' if fewest else 'above'} it: {self.above.value}, does not fit "
                    f"({_measured_words(self.above, budget)}; {self.above.trial_key})"
                )
            else:
                lines.append(
                    f"{self.fit.value} is the {most} candidate; a {beyond} {name} was not tried: give a "
                    f"{past} (or --values) to look further"
                    + (f". Next: {self.beyond}" if self.beyond else "")
                )
        lines += [f"not certain: {c}" for c in self.contradictions]
        probed = {m.value for m in self.probes}
        lines += [
            f"{name}={v}: not probed, measured by a --trials row from {where}"
            for v, where in self.sources.items()
            if v in probed
        ]
        return lines

    @property
    def margin(self) -> Margin | None:
        """The largest fit's margin to the budget (intervals.margin: GiB, %, tight)."""
        return None if self.fit is None else margin(self.fit.peak_gib, self.budget_gib)

    def to_dict(self) -> dict[str, Any]:
        fit = self.margin
        return {
            **asdict(self),
            "certified": self.certified,
            "budget_margin_gib": None if fit is None else fit.gib,
            "budget_margin_pct": None if fit is None else fit.pct,
            "tight": None if fit is None else fit.tight,
            "answer": self.lines(),
        }


def gib_text(value: float | None) -> str:
    return "unmeasured" if value is None else f"{value:.2f} GiB"


def _peak_words(m: Measured) -> str:
    """'0.81 GiB RSS peak'; the kind (outcome.peak_memory's) left out when nothing was measured."""
    return " ".join(p for p in (gib_text(m.peak_gib), m.memory_kind, "peak") if p)


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else "no detail"


def _measured_words(m: Measured | None, budget: str) -> str:
    if m is None:
        return "not measured"
    if m.status == OOM:
        return f"out of memory: {_first_line(m.detail)}"
    return f"completed at {_peak_words(m)}, over {budget}"


def certify(knob: str, values: list[int], measured: dict[int, Measured], budget_gib: float) -> Answer:
    """The answer the measurements certify (search's end, or a resumed search's start)."""
    lo, hi = bounds(values, measured)
    contradictions = [
        f"{SYMBOLS[knob]}={values[i]} fits ({gib_text(measured[values[i]].peak_gib)}) above "
        f"{SYMBOLS[knob]}={values[hi]}, which does not: memory is not monotone in {knob} here, so the "
        f"bisection's answer is a lower bound"
        for i in range(hi + 1, len(values))
        if values[i] in measured and measured[values[i]].fits
    ]
    return Answer(
        knob,
        budget_gib,
        values,
        fit=measured[values[lo]] if lo >= 0 else None,
        above=measured[values[hi]] if hi < len(values) else None,
        probes=[measured[v] for v in values if v in measured],
        contradictions=contradictions,
    )


def search(
    knob: str,
    values: list[int],
    measure: Callable[[int], Measured],
    budget_gib: float,
    known: dict[int, Measured] | None = None,
    guess: int | None = None,
) -> Answer:
    """Measure candidates (measure(value) -> Measured) until the answer is settled; `known` holds values
    measured before (a resumed search), which are never measured again."""
    measured = dict(known or {})
    while (i := next_probe(values, measured, guess)) is not None:
        # a value known to say nothing about memory (a failed trial before a resume) is not run again
        result = measured[values[i]] if values[i] in measured else measure(values[i])
        measured[values[i]] = result
        if result.fits is None:
            answer = certify(knob, values, measured, budget_gib)
            answer.stopped_by = result
            return answer
    return certify(knob, values, measured, budget_gib)


# ------------------------------------------------------------------------------------------------
# The request: settings checked, candidates made
# ------------------------------------------------------------------------------------------------
class SolveError(ValueError):
    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__(f"{len(errors)} error(s):\n  " + "\n  ".join(errors))


@dataclass
class SolveRequest:
    knob: str
    values: list[int]
    base: TrialSpec  # every other knob; the searched one is set per candidate
    guard: GuardSettings
    output_dir: Path
    notes: list[str] = field(default_factory=list)  # ladder values left out, and why
    headroom_gib: float = 0.0  # what a fit must leave free under the budget
    simulated: list[dict] = field(default_factory=list)  # rows of steps simulated on meta (memory._simulated)
    # --trials rows measured for exactly a candidate on this card and budget (cli/solve.py's answered_by):
    # value -> row (with its _provenance); each answers its value instead of a probe
    answered: dict[int, dict] = field(default_factory=dict)
    # what each candidate is answered from before any probe (judging.answer, as fits answers it): every
    # --trials row, the peak its probes read (GPU where NVML finds one, else RSS), its own step simulated
    rows: list[dict] = field(default_factory=list)
    measure: str | None = None
    simulate: bool = False

    def spec(self, value: int) -> TrialSpec:
        spec = TrialSpec(
            **{**candidate(self.knob, value, self.base.to_dict()), "sweep": self.output_dir.name}
        )
        spec.trial_key = trial_key(spec)
        return spec


def candidate(knob: str, value: int, base: dict[str, Any]) -> dict[str, Any]:
    """The settings of one candidate: base with the knob at value; one GPU shares nothing (distributed
    none), whatever strategy the others use."""
    settings = {**base, knob: value}
    if knob == "num_processes" and value == 1:
        settings["distributed"] = "none"
    return settings


def make_request(
    knob: str,
    budget_gib: float,
    *,
    settings: dict[str, Any] | None = None,
    sets: list[str] | None = None,
    values: list[int] | None = None,
    first: int | None = None,
    last: int | None = None,
    output_dir: str | None = None,
    guard: GuardSettings = GUARD_DEFAULTS,
    headroom_gib: float = 0.0,
    taken: dict[str, str] | None = None,
) -> SolveRequest:
    """The request of `rlsweep solve`'s flags, every error at once (SolveError). settings: knobs given
    as their own flags (model, stack, mode), each refused in sets with taken's text (the verb's);
    sets: --set KNOB=VALUE items (YAML values); values:
    --values, else the doubling ladder first..last (LADDERS' defaults), whose candidates a trial
    cannot hold are left out with a note. Trials run max_steps = probe_steps unless set: the probe
    steps are the worst case. guard: margin, sampling rate and timeout (its budget is budget_gib)."""
    errors: list[str] = []
    if knob not in SOLVABLE:
        raise SolveError([f"--maximize: {knob!r} cannot be searched; {did_you_mean(knob, SOLVABLE)}"])
    if not budget_gib > 0 or budget_gib == float("inf"):
        errors.append(f"--budget-gib: {budget_gib:g} is not a size; give the memory to fit in GiB, e.g. 16")
    elif not 0 <= headroom_gib < budget_gib:
        errors.append(
            f"--headroom-gib: {headroom_gib:g} must be at least 0 and below --budget-gib {budget_gib:g}; "
            f"give the GiB a fit must leave free, e.g. {budget_gib / 10:g}"
        )
    base = {"memory_budget_gib": budget_gib, **(settings or {})}
    errors += _set_errors(knob, sets or [], base, taken or {})
    base.setdefault("probe_steps", guard.probe_steps)
    if isinstance(base["probe_steps"], int):
        base.setdefault("max_steps", max(1, base["probe_steps"]))
    candidates, notes = _candidates(knob, values, first, last, base, errors)
    out = _output_dir(knob, budget_gib, base, output_dir, errors)
    if errors:
        raise SolveError(errors)
    spec = TrialSpec(**base)
    guard = GuardSettings(budget_gib, guard.margin_gib, guard.sample_hz, guard.timeout_s, spec.probe_steps)
    return SolveRequest(knob, candidates, spec, guard, out, notes, headroom_gib)


def _set_errors(knob: str, sets: list[str], base: dict[str, Any], flags: dict[str, str]) -> list[str]:
    """Errors of --set items; the good ones go into base. flags: the knobs the verb's flags set, each
    with its refusal."""
    taken = {
        "memory_budget_gib": "the budget is --budget-gib or --card; give it there and drop this --set",
        **flags,
        knob: f"{knob} is the setting --maximize searches; give its candidates with --values or "
        "--from/--to instead",
    }
    return trial_set_errors(sets, base, taken)


def _candidates(
    knob: str, values: list[int] | None, first: int | None, last: int | None, base: dict, errors: list[str]
) -> tuple[list[int], list[str]]:
    """(candidates, notes): --values checked, or the ladder with the values no trial can hold left out."""
    given = values is not None
    if given and (first is not None or last is not None):
        errors.append("--values with --from/--to: give the candidates one way, a list or a ladder")
        return [], []
    if given and not values:
        errors.append("--values: no candidates; give at least one value, e.g. --values 2 4 8")
        return [], []
    if given:
        flags = [(f"--values {v}", v) for v in values]
    else:
        first = LADDERS[knob][0] if first is None else first
        last = LADDERS[knob][1] if last is None else last
        flags = [("--from", first), ("--to", last)]
    bad = [
        f"{flag}: {knob} {p}" for flag, v in flags if (p := bound_problem(knob, v) or check_value(knob, v))
    ]
    if bad:
        errors += bad
        return [], []
    if not given and first > last:
        errors.append(f"--from {first} is above --to {last}; give --from at most --to")
        return [], []
    candidates = sorted(set(values)) if given else ladder(first, last)
    if knob in FEWEST:
        candidates.reverse()
    if errors:
        return candidates, []  # the trial's own rules need well-formed settings and budget
    problems = {v: TrialSpec(**candidate(knob, v, base)).problems() for v in candidates}
    shared = set.intersection(*(set(p) for p in problems.values()))
    errors += sorted(shared)  # wrong whatever the candidate: a setting's own problem
    notes = []
    for v in candidates:
        own = [p for p in problems[v] if p not in shared]
        if own and given:
            errors += [f"--values {v}: {p}" for p in own]
        elif own:
            notes.append(f"{SYMBOLS[knob]}={v} left out of the ladder: {own[0]}")
    kept = [v for v in candidates if not problems[v]]
    if not kept and not given and not shared:
        errors.append(
            f"--from/--to: no candidate of the ladder {candidates} can run ({notes[0]}); give others"
        )
    return kept, notes


def _output_dir(knob: str, budget_gib: float, base: dict, output_dir: str | None, errors: list[str]) -> Path:
    spec = TrialSpec()
    stack, mode = base.get("stack", spec.stack), base.get("mode", spec.mode)
    model = model_short(str(base.get("model", spec.model)))
    text = output_dir or str(Path("outputs") / "solve" / f"{knob}-{stack}-{mode}-{model}-{budget_gib:g}gib")
    return local_output_dir(text, "--output-dir", "solve runs its trials", errors)


# ------------------------------------------------------------------------------------------------
# The first guess: the memory model's prediction
# ------------------------------------------------------------------------------------------------
def predicted_guess(predictions: list[Prediction], budget_gib: float) -> int | None:
    """The index of the largest candidate whose predicted peak is within the budget (0 when every
    candidate with a number is predicted over it), or None when no candidate has one."""
    known = [i for i, p in enumerate(predictions) if p.unknown is None]
    if not known:
        return None
    return max((i for i in known if predictions[i].peak_gib <= budget_gib), default=0)
