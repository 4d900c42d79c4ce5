"""What a sweep keeps of its trials: the events of every trial, handed to each sink in turn.

No Ray here. The Tune callback (driver.py) forwards each trial's start, clean step rows (shaped by
orchestrator.running.supervisor.step_row) and final TrialResult to a Recorder; the Recorder builds the trial's
trials.parquet row once and hands it to its sinks, in order: the steps file, the pruning gate (before
the ledger, so a verdict on disk never lags the row that made it), the ledger, the progress display
and MLflow. A sink is anything with on_start / on_step / on_end (`Sink`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from orchestrator.judging.memory import Prediction
from orchestrator.judging.pruning import OomGate
from orchestrator.judging.verdict import DEFAULTS as VERDICT_DEFAULTS
from orchestrator.judging.verdict import VerdictSettings
from orchestrator.recording.outcome import PRUNED, STOPPED, TrialResult
from orchestrator.recording.sinks import TrialsTable, trial_row, write_steps
from orchestrator.running.phases import speed_pending
from trainers.spec import TrialSpec


class Sink(Protocol):
    def on_start(self, spec: TrialSpec) -> None: ...

    def on_step(self, spec: TrialSpec, row: dict[str, Any]) -> None: ...

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        """row: the trial's trials.parquet row; steps: its step rows (empty when it did not run)."""


class _EndOnly:
    def on_start(self, spec: TrialSpec) -> None:
        pass

    def on_step(self, spec: TrialSpec, row: dict[str, Any]) -> None:
        pass


class StepsFiles(_EndOnly):
    """steps/framework=<f>/mode=<m>/<trial_key>.parquet, written once a trial ends."""

    def __init__(self, output_dir: Path):
        self.output_dir = output_dir

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        if row["status"] == STOPPED and not steps:
            return  # nothing to keep; an earlier phase's steps stay
        write_steps(self.output_dir, spec, steps)


class Ledger(_EndOnly):
    """trials.parquet: the row of every ended trial (the resume state)."""

    def __init__(self, table: TrialsTable):
        self.table = table

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        if row["status"] == STOPPED and speed_pending(self.table.rows.get(spec.trial_key)):
            return  # an interrupted speed phase keeps its memory phase's verdict; a resume runs it again
        self.table.upsert(row)


class PruningGate(_EndOnly):
    """The pruning gate learns of every `oom` trial as it ends (OomGate.record)."""

    def __init__(self, gate: OomGate):
        self.gate = gate

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        self.gate.record(spec, row)


class Recorder:
    """Feeds each trial's events to the sinks; a step reported twice (Tune may repeat its last report)
    counts once, and a trial ends once. verdict: the thresholds of each completed trial's training
    verdict (the sweep's `verdict:` section); predictions: trial key -> the memory prediction made
    before it ran (orchestrator.judging.memory.Forecast.made), read when its row is built."""

    def __init__(
        self,
        specs: Iterable[TrialSpec],
        sinks: Sequence[Sink],
        verdict: VerdictSettings = VERDICT_DEFAULTS,
        predictions: Mapping[str, Prediction] | None = None,
    ):
        self.specs = {s.trial_key: s for s in specs}
        self.sinks = list(sinks)
        self.verdict = verdict
        self.predictions = predictions if predictions is not None else {}
        self.steps: dict[str, dict[int, dict[str, Any]]] = {}  # running trial -> step -> row

    @property
    def running(self) -> list[str]:
        return list(self.steps)

    def start(self, key: str) -> None:
        self.steps[key] = {}
        for sink in self.sinks:
            sink.on_start(self.specs[key])

    def step(self, key: str, row: dict[str, Any]) -> None:
        seen = self.steps.get(key)
        step = int(row.get("step") or 0)
        if seen is None or step in seen:
            return
        seen[step] = row
        for sink in self.sinks:
            sink.on_step(self.specs[key], row)

    def end(self, key: str, result: TrialResult | None, status: str | None = None, detail: str = "") -> None:
        """A trial's end: its supervisor's result, or (result None) the status it ends with unrun."""
        if self.steps.pop(key, None) is None:
            return
        spec = self.specs[key]
        row = trial_row(
            spec,
            result,
            status=status,
            detail=detail,
            verdict=self.verdict,
            prediction=self.predictions.get(key),
        )
        steps = result.steps if result else []
        for sink in self.sinks:
            sink.on_end(spec, row, steps)

    def skip(self, spec: TrialSpec, detail: str, status: str = PRUNED) -> None:
        """A trial the searcher decided not to run (pruned, or unavailable: no node can host it): a row
        and a run like any trial."""
        self.specs[spec.trial_key] = spec
        self.start(spec.trial_key)
        self.end(spec.trial_key, None, status=status, detail=detail)

    def stop_running(self, detail: str) -> None:
        """Every trial still running ends `stopped` (a resumed sweep runs it again)."""
        for key in self.running:
            self.end(key, None, status=STOPPED, detail=detail)
