"""What a sweep keeps of its trials: the events of every trial, handed to each sink in turn.

No Ray here. The Tune callback (driver.py), `rlsweep trial` and `rlsweep solve` forward each trial's
start, step rows (shaped by orchestrator.running.supervisor.step_row) and final TrialResult (without its
step rows) to a Recorder. The Recorder normalises each step row once (sinks.normalize_step: the record's
fields, trainers/record.py) and builds the trial's trials.parquet row once from those rows; every sink
reads the same rows, in order: the steps file, the pruning gate (before trials.parquet, so a verdict
on disk never lags the row that made it), trials.parquet, the progress display and MLflow. A sink is
anything with on_start / on_step / on_end (`Sink`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from orchestrator.judging.memory import Prediction
from orchestrator.judging.pruning import OomGate
from orchestrator.recording.sinks import (
    TRIAL_COLUMNS,
    TrialsTable,
    metrics_csv_rows,
    normalize_step,
    steps_table,
    trial_row,
    write_steps,
    write_table_atomic,
)
from orchestrator.words.outcome import PRUNED, STOPPED, TrialResult
from orchestrator.words.phases import speed_pending
from orchestrator.words.settings import VERDICT as VERDICT_DEFAULTS
from orchestrator.words.settings import VerdictSettings
from trainers.trial import KNOBS, TrialSpec


class Sink(Protocol):
    def on_start(self, spec: TrialSpec) -> None: ...

    def on_step(self, spec: TrialSpec, row: dict[str, Any]) -> None: ...

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        """row: the trial's trials.parquet row; steps: its normalised step rows in step order (empty
        when it did not run)."""


class _EndOnly:
    def on_start(self, spec: TrialSpec) -> None:
        pass

    def on_step(self, spec: TrialSpec, row: dict[str, Any]) -> None:
        pass


class StepsFiles(_EndOnly):
    """steps/stack=<f>/mode=<m>/<trial_key>.parquet, written once a trial ends."""

    def __init__(self, output_dir: Path):
        self.output_dir = output_dir

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        if row["status"] == STOPPED and not steps:
            return  # nothing to keep; an earlier phase's steps stay
        write_steps(self.output_dir, spec, steps)


class TrialsFile(_EndOnly):
    """trials.parquet: the row of every ended trial (the resume state)."""

    def __init__(self, table: TrialsTable):
        self.table = table

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        if row["status"] == STOPPED and speed_pending(self.table.rows.get(spec.trial_key)):
            return  # an interrupted speed phase keeps its memory phase's verdict; a resume runs it again
        self.table.upsert(row)


class TrialFolder(_EndOnly):
    """`rlsweep trial`'s folder: steps.parquet, metrics.csv (the original benchmark's columns first,
    sinks.metrics_csv_rows) and trial.json (its config, the effective config and the outcome columns of
    its trials.parquet row)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        write_table_atomic(steps_table(steps), self.folder / "steps.parquet")
        rows = metrics_csv_rows(steps)
        with open(self.folder / "metrics.csv", "w", newline="") as f:
            if rows:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
        json_columns = ("config", "effective_config", "versions")
        outcome = {k: row[k] for k in TRIAL_COLUMNS if k not in KNOBS and k not in json_columns}
        trial_json = {
            "config": json.loads(row["config"]),
            "effective_config": json.loads(row["effective_config"] or "null"),
            "outcome": {**outcome, "versions": json.loads(row["versions"] or "null")},
        }
        (self.folder / "trial.json").write_text(json.dumps(trial_json, indent=2, default=str))


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
        self.steps: dict[str, dict[int, dict[str, Any]]] = {}  # running trial -> step -> normalised row

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
        seen[step] = normalized = normalize_step(key, row)
        for sink in self.sinks:
            sink.on_step(self.specs[key], normalized)

    def end(
        self,
        key: str,
        result: TrialResult | None,
        status: str | None = None,
        detail: str = "",
        implied_by: str | None = None,
    ) -> None:
        """A trial's end: its supervisor's result, or (result None) the status it ends with, its
        supervisor's rows unfinished. Its steps are the normalised rows `step` was given (the result's
        own are not read again); none without a result, as a trial that ended so keeps no figures."""
        seen = self.steps.pop(key, None)
        if seen is None:
            return
        spec = self.specs[key]
        steps = [seen[s] for s in sorted(seen)] if result is not None else []
        row = trial_row(
            spec,
            result,
            steps,
            status=status,
            detail=detail,
            verdict=self.verdict,
            prediction=self.predictions.get(key),
            implied_by=implied_by,
        )
        for sink in self.sinks:
            sink.on_end(spec, row, steps)

    def skip(self, spec: TrialSpec, detail: str, status: str = PRUNED, implied_by: str | None = None) -> None:
        """A trial the searcher decided not to run (pruned; implied, by the measured fit `implied_by`;
        or unavailable: no node can host it): a row and a run like any trial."""
        self.specs[spec.trial_key] = spec
        self.start(spec.trial_key)
        self.end(spec.trial_key, None, status=status, detail=detail, implied_by=implied_by)

    def stop_running(self, detail: str) -> None:
        """Every trial still running ends `stopped` (a resumed sweep runs it again)."""
        for key in self.running:
            self.end(key, None, status=STOPPED, detail=detail)
