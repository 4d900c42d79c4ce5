"""A sweep's predictions: each trial's, made just before it runs from the trials finished before it,
and the order in which the unrun trials teach the model most."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from orchestrator.judging.memory._model import MemoryModel, Prediction, family_of
from trainers.trial import TrialSpec


class Forecast:
    """Predictions over a live ledger (trials.parquet rows by trial key): the model is refitted when
    the ledger has changed since the last prediction; `made` keeps, per trial key, the prediction made
    last before that trial ran (or was skipped)."""

    def __init__(
        self,
        rows: Mapping[str, Mapping[str, Any]],
        measure: str | None = None,
        version: Callable[[], Any] | None = None,
        simulated: Iterable[Mapping[str, Any]] = (),
    ):
        """version: a value that changes whenever `rows` does (TrialsTable.version); without it the
        rows' keys and statuses are compared, which costs a sort of the ledger per prediction.
        simulated: rows of steps simulated on meta (memory._simulated), for the families `rows` has not
        measured yet."""
        self.rows = rows
        self.simulated = list(simulated)
        self.measure = measure
        self.made: dict[str, Prediction] = {}
        self._model: MemoryModel | None = None
        self._seen: Any = None
        self._version = version

    def model(self) -> MemoryModel:
        if self._version is not None:
            seen = self._version()
        else:
            seen = tuple(sorted((key, row.get("status")) for key, row in self.rows.items()))
        if self._model is None or seen != self._seen:
            self._model = MemoryModel.fit([*self.rows.values(), *self.simulated], self.measure)
            self.measure, self._seen = self._model.measure, seen
        return self._model

    def before(self, spec: TrialSpec) -> Prediction:
        """The prediction for `spec` from the trials finished so far, kept in `made`."""
        prediction = self.model().predict(spec)
        self.made[spec.trial_key] = prediction
        return prediction


def informative_order(specs: list[TrialSpec], model: MemoryModel) -> list[TrialSpec]:
    """The trials reordered so each family's extremes run first: its smallest and largest predicted
    peak, then each time the trial farthest (in predicted peak) from those already chosen; families
    take turns. Trials without a number keep their place after the others, in their given order."""
    families: dict[tuple, list[tuple[float, int]]] = {}
    unknown = []
    for index, spec in enumerate(specs):
        peak = model.predict(spec).peak_gib
        if peak is None:
            unknown.append(index)
        else:
            families.setdefault(family_of(spec), []).append((peak, index))
    queues = [_spread_first(sorted(members)) for members in families.values()]
    order: list[int] = []
    while any(queues):
        for queue in queues:
            if queue:
                order.append(queue.pop(0))
    return [specs[i] for i in order + unknown]


def _spread_first(members: list[tuple[float, int]]) -> list[int]:
    """Indices of (peak, index) pairs sorted by peak: the smallest, the largest, then greedily the one
    whose peak is farthest from every one chosen (ties: the smaller)."""
    chosen = [members[0]] + ([members[-1]] if len(members) > 1 else [])
    rest = members[1:-1]
    while rest:
        best = max(rest, key=lambda m: (min(abs(m[0] - c[0]) for c in chosen), -m[0]))
        rest.remove(best)
        chosen.append(best)
    return [index for _, index in chosen]
