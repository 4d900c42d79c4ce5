"""Frontier search: the memory phase probes only the configurations that decide the feasibility frontier.

Implied fits, the mirror of pruning (orchestrator/judging/pruning.py): when a measured trial `f` fits
its budget and dominates a configuration `x` (every size knob of `x` <= `f`'s, the rest equal:
`dominates(f, x)`), `x` needs at most `f`'s memory and fits too. Such an `x` is not probed: it is
recorded with status `implied`, `implied_by` = `f`'s trial key, its predicted peak from the memory
model and null for everything measured. Only a measured fit implies (dominance is transitive, so a
trial an implied one would imply is implied by the measured trial itself).

Honesty check: where the memory model, refitted on the trials measured so far, predicts `x`'s peak
above the budget (`model_disagrees`), the implication is not taken and `x` is probed.

Order (`bisection_order`): of the configurations still undecided (neither implied by a fit nor pruned
by an oom), the next probed is the one whose verdict decides the most of them in the worse case:
max over candidates c of min(up(c), down(c)), where down(c) counts the undecided configurations c
dominates (implied if c fits) and up(c) those that dominate c (pruned if c runs out of memory). On one
axis this is bisection; on a grid it walks the frontier. Once the memory model is fitted on at least
FITTED_FROM measured trials of the family, its chance that c fits (p, `fit_chance`) steers the choice:
the score is then the expected number decided, p x down(c) + (1 - p) x up(c), which sends the probes to
where the model puts the frontier (the verdicts still come from probes and dominance alone, so a wrong
model costs probes, never a wrong verdict). Ties go to the larger up(c) (the probe whose oom would prune
most), then to plan order (smallest first: the cheaper probe). A configuration comparable with
a trial still in flight waits for it (`frontier_waits`): that trial's verdict may decide it. The
probed trials then grow with the frontier (its maximal fits and minimal ooms must each be probed),
not with the grid.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.judging.memory import FITTED, Prediction
from orchestrator.judging.memory._model import Z
from orchestrator.judging.pruning import OomGate, _as_dict, dominates, group_ranks
from orchestrator.words.outcome import COMPLETED, FINAL_STATUSES, IMPLIED, PRUNED
from trainers.record import finite_or_none, peak_memory

# Measured trials of a family before its fitted model steers the order (fit_chance).
FITTED_FROM = 2


def unfinished(row: Mapping[str, Any] | None) -> bool:
    """No memory verdict yet: no row, or one that is not final (`stopped`)."""
    return row is None or row.get("status") not in FINAL_STATUSES


class Skip(str):
    """A gate's answer for a trial it does not run: the status detail (a str, as a pruning detail has
    always been), with the status it ends with and, for an implied fit, the measured trial that implies
    it."""

    status: str = PRUNED
    implied_by: str | None = None

    def __new__(cls, detail: str, status: str = PRUNED, implied_by: str | None = None) -> Skip:
        skip = super().__new__(cls, detail)
        skip.status, skip.implied_by = status, implied_by
        return skip


def skip_status(verdict: str) -> tuple[str, str | None]:
    """(status, implied_by) of a gate's skip verdict: a plain string is a pruning detail."""
    return getattr(verdict, "status", PRUNED), getattr(verdict, "implied_by", None)


@dataclass(frozen=True)
class FitVerdict:
    """A measured trial that fits its budget: its key, config and measured peak (GiB, None when not
    measured)."""

    trial_key: str
    config: dict[str, Any]
    peak_gib: float | None


def measured_fit(row: Mapping[str, Any]) -> bool:
    """A trials.parquet row that says its trial fits, from a measurement: `completed` (not implied),
    with its measured peak (outcome.peak_memory) within its budget where both are known."""
    if row.get("status") != COMPLETED or not row.get("config"):
        return False
    peak, _ = peak_memory(row)
    budget = finite_or_none(row.get("memory_budget_gib"))
    return peak is None or budget is None or peak <= budget


def implying(config: Any, fits: Iterable[FitVerdict]) -> FitVerdict | None:
    """The first measured fit that dominates `config` (so `config` fits too), or None. A trial never
    implies itself."""
    config = _as_dict(config)
    for fit in fits:
        if fit.trial_key != config.get("trial_key") and dominates(fit.config, config):
            return fit
    return None


def model_disagrees(prediction: Prediction | None, budget_gib: float | None) -> bool:
    """True when the memory model predicts the trial's peak above its budget: an implied fit is then not
    taken, and the trial is probed. No prediction (unknown, or none made) or no budget: no disagreement."""
    if prediction is None or prediction.unknown is not None or budget_gib is None:
        return False
    return prediction.peak_gib > budget_gib


def implied_detail(fit: FitVerdict, prediction: Prediction | None) -> str:
    """'fits: implied by <key> (measured 0.70 GiB), which dominates it; predicted 0.66 GiB (0.64-0.68);
    not probed'."""
    measured = f" (measured {fit.peak_gib:.2f} GiB)" if fit.peak_gib is not None else ""
    predicted = f"; {prediction.describe()}" if prediction is not None else ""
    return f"fits: implied by {fit.trial_key}{measured}, which dominates it{predicted}; not probed"


def frontier_waits(candidate: Any, in_flight: Iterable[Any]) -> bool:
    """True when `candidate` is comparable with a trial in flight: if it dominates that trial, an oom
    there prunes it; if it is dominated by it, a fit there implies it."""
    return any(dominates(candidate, r) or dominates(r, candidate) for r in in_flight)


def fit_chance(prediction: Prediction | None, budget_gib: float | None) -> float | None:
    """The chance the trial fits by the memory model: its predicted peak against the budget, in units of
    the prediction's interval (a normal with the interval as +-Z sd); None without a budget, or without
    a prediction fitted on at least FITTED_FROM measured trials of its family (the prior alone can be
    far off, so it does not steer the order)."""
    if prediction is None or prediction.unknown is not None or budget_gib is None:
        return None
    if prediction.basis != FITTED or prediction.n_fitted < FITTED_FROM:
        return None
    sd = (prediction.high_gib - prediction.low_gib) / (2 * Z)
    if sd <= 0:
        return float(prediction.peak_gib <= budget_gib)
    return 0.5 * (1 + math.erf((budget_gib - prediction.peak_gib) / (sd * math.sqrt(2))))


def bisection_order(
    specs: Sequence[Any],
    decided: Callable[[Any], bool],
    in_flight: Iterable[Any] = (),
    chance: Callable[[Any], float | None] | None = None,
    group: Callable[[Any], str] | None = None,
    current: str | None = None,
) -> list[Any]:
    """`specs` in the order the frontier search takes them: the ones `decided` already (their skip is
    recorded at once) first in their given order, then the undecided by the bisection score (module
    docstring), the ones waiting on a trial in flight last. `chance`: a trial's chance to fit
    (fit_chance), where known; the score is then the expected number decided, p x down + (1 - p) x up,
    so the probes go where the model puts the frontier. `group`: a trial's probe session
    (trainers.session.session_key): the undecided of the `current` group (the last one run), then of
    each other group in the order of its first trial, go before the next group's (pruning.group_ranks),
    so one session runs its shapes one after another. No trial dominates one of another
    group (they differ beyond the size knobs), so the order within each group, and the probes the
    search needs, are the same."""
    configs = [_as_dict(s) for s in specs]
    done = [decided(s) for s in specs]
    flying = [_as_dict(r) for r in in_flight]
    undecided = [i for i, d in enumerate(done) if not d]
    scores: dict[int, tuple[int, float, int]] = {}
    for i in undecided:
        down = sum(dominates(configs[i], configs[j]) for j in undecided)
        up = sum(dominates(configs[j], configs[i]) for j in undecided)
        waits = frontier_waits(configs[i], flying)
        p = chance(specs[i]) if chance else None
        value = min(up, down) if p is None else p * down + (1 - p) * up
        scores[i] = (0 if waits else 1, value, up)
    ranks = group_ranks([specs[i] for i in undecided], group, current)
    rank = dict(zip(undecided, ranks, strict=True))
    ranked = sorted(undecided, key=lambda i: (rank[i], *(-v for v in scores[i]), i))
    return [specs[i] for i, d in enumerate(done) if d] + [specs[i] for i in ranked]


class FrontierGate(OomGate):
    """OomGate (prune what dominates an oom) plus the frontier search, for trials whose memory verdict is
    not known yet: one a measured fit dominates is skipped as `implied` (unless the memory model
    disagrees), one comparable with a trial in flight waits for it, and the searcher asks about the
    trials in bisection order. A trial whose ledger row is final (a speed phase after the memory phase)
    gets OomGate's rules alone."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._fits: tuple[tuple, list[FitVerdict]] | None = None
        self._order: tuple[tuple, list[Any]] | None = None

    def _ledger_state(self) -> tuple:
        return tuple(sorted((key, row.get("status")) for key, row in self.ledger.rows.items()))

    def _unsettled(self, spec: Any) -> bool:
        return unfinished(self.ledger.rows.get(spec.trial_key))

    def fits(self) -> list[FitVerdict]:
        """The ledger's measured fits (measured_fit), refreshed when the ledger changed."""
        state = self._ledger_state()
        if self._fits is None or self._fits[0] != state:
            fits = [
                FitVerdict(key, json.loads(row["config"]), peak_memory(row)[0])
                for key, row in self.ledger.rows.items()
                if measured_fit(row)
            ]
            self._fits = (state, fits)
        return self._fits[1]

    def implied(self, spec: Any, prediction: Callable[[], Any]) -> str | None:
        if not self._unsettled(spec):
            return None
        fit = implying(spec, self.fits())
        if fit is None:
            return None
        predicted = prediction()
        if model_disagrees(predicted, spec.memory_budget_gib):
            return None
        return Skip(implied_detail(fit, predicted), IMPLIED, fit.trial_key)

    def waits(self, spec: Any) -> bool:
        if not self._unsettled(spec):
            return super().waits(spec)
        flying = self.in_flight()
        return super().waits(spec) or any(dominates(r, spec) for r in flying)

    def decided(self, spec: Any) -> bool:
        """True when asking about `spec` skips it at once: its verdict is known (final row), or a
        recorded oom prunes it, or a measured fit implies it (the model's veto is checked when asked)."""
        if not self._unsettled(spec):
            return True
        return self.pruner.pruned_by(spec) is not None or implying(spec, self.fits()) is not None

    def order(self, specs: list[Any]) -> list[Any]:
        flying = self.in_flight()
        state = (
            self.current,
            tuple(s.trial_key for s in specs),
            self._ledger_state(),
            tuple(r.trial_key for r in flying),
            len(self.pruner.verdicts),
        )
        if self._order is None or self._order[0] != state:
            chance = None
            if self.forecast is not None:
                model = self.forecast.model()
                chance = lambda spec: fit_chance(model.predict(spec), spec.memory_budget_gib)  # noqa: E731
            order = bisection_order(specs, self.decided, flying, chance, self.group, self.current)
            self._order = (state, order)
        return list(self._order[1])
