"""MLflow sink: a recorder sink (orchestrator/recorder.py) in the driver; trainers and supervisors never
talk to tracking.

One experiment per sweep (created once here), a parent run per output dir, one nested run per trial
(tag mlflow.parentRunId, run name = trial_key). Step metrics go in one log_batch call per step. A run
gets the tag `rlsweep.complete=true` as its last write; a run without it is an interrupted attempt and
is deleted before the trial's run is made again, so every trial_key has exactly one run.

Tracking never fails a sweep: the first error disables the sink with a warning; Parquet is the source
of truth and `rlsweep sync-mlflow OUTPUT_DIR` logs what is missing.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.outcome import COMPLETED, NO_GPU
from orchestrator.sinks import normalize_step, steps_path
from orchestrator.storage import StoragePath
from trainers.spec import BOOKKEEPING, TrialSpec

TRIAL_KEY_TAG = "rlsweep.trial_key"
COMPLETE_TAG = "rlsweep.complete"
ROLE_TAG = "rlsweep.role"
OUTPUT_TAG = "rlsweep.output_dir"
# Bookkeeping knobs and the model cache are not run parameters, except the sweep's name (a run filter).
PARAM_SKIP = (*(k for k in BOOKKEEPING if k != "sweep"), "model_cache_dir")
METRIC_SKIP = ("trial_key", "step", "probe", "extra", "t_start", "t_end")
SUMMARY_METRICS = (
    "steps_completed",
    "peak_device_gib",
    "peak_torch_reserved_gib",
    "peak_rss_gib",
    "median_step_s",
    "median_tokens_per_s",
    "wall_s",
)

VERDICT_TAGS = ("training_verdict", "training_verdict_detail")


def _quiet_mlflow_env() -> None:
    # A dead server must cost seconds, not MLflow's default minutes of retries.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def _artifact_location(uri: str) -> str | None:
    """Artifacts of a sqlite store live next to the database, not in ./mlruns of whatever the cwd is."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///") :]).parent / "mlartifacts").resolve().as_uri()
    return None


def step_metrics(stored: dict[str, Any]) -> dict[str, float]:
    """A step's MLflow metrics from its steps-file row (orchestrator.sinks.normalize_step's shape), with
    the numbers kept in `extra` among them: a run logged live and one logged by sync-mlflow get the same."""
    row = {**json.loads(stored.get("extra") or "{}"), **stored}
    return {
        k: float(v)
        for k, v in row.items()
        if k not in METRIC_SKIP and isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
    }


class MlflowSink:
    def __init__(self, uri: str, experiment: str, output_dir: StoragePath, sweep_name: str):
        self.uri = uri
        self.experiment = experiment
        self.root = output_dir
        self.output_dir = str(output_dir)
        self.sweep_name = sweep_name
        self.enabled = True
        self.client = None
        self.experiment_id: str | None = None
        self.parent_id: str | None = None
        self.runs: dict[str, str] = {}  # trial_key -> run id of the attempt in progress
        self.error: str | None = None

    # -- failure policy ---------------------------------------------------------------------------
    def _guard(self, what: str, fn, *args, **kwargs):
        if not self.enabled:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            self.enabled = False
            self.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            print(
                f"warning: MLflow ({self.uri}) failed during {what}: {self.error}. The sweep goes on; "
                f"Parquet has everything. Later: rlsweep sync-mlflow {self.output_dir}",
                file=sys.stderr,
            )
            return None

    # -- sweep --------------------------------------------------------------------------------------
    def start_sweep(self, resolved_yaml: str) -> None:
        self._guard("start", self._start_sweep, resolved_yaml)

    def _start_sweep(self, resolved_yaml: str) -> None:
        _quiet_mlflow_env()
        from mlflow.tracking import MlflowClient

        if self.uri.startswith("sqlite:///"):
            Path(self.uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=self.uri)
        exp = self.client.get_experiment_by_name(self.experiment)
        self.experiment_id = (
            exp.experiment_id
            if exp
            else self.client.create_experiment(
                self.experiment, artifact_location=_artifact_location(self.uri)
            )
        )
        parent = self._find_parent()
        if parent:
            self.parent_id = parent
            self.client.update_run(self.parent_id, status="RUNNING")
        else:
            run = self.client.create_run(
                self.experiment_id,
                run_name=self.sweep_name,
                tags={ROLE_TAG: "sweep", OUTPUT_TAG: self.output_dir, "rlsweep.sweep": self.sweep_name},
            )
            self.parent_id = run.info.run_id
        self.client.log_text(self.parent_id, resolved_yaml, "sweep.yaml")

    def end_sweep(self, counts: dict[str, int], interrupted: bool) -> None:
        def end():
            self.client.log_batch(
                self.parent_id,
                metrics=[_metric(f"trials_{k}", v) for k, v in counts.items()],
            )
            self.client.set_terminated(self.parent_id, status="KILLED" if interrupted else "FINISHED")

        self._guard("end of sweep", end)

    # -- trials -------------------------------------------------------------------------------------
    def _existing(self, key: str) -> list:
        return self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{TRIAL_KEY_TAG}` = '{key}' and tags.`mlflow.parentRunId` = '{self.parent_id}'",
        )

    def has_complete_run(self, key: str) -> bool:
        runs = self._guard("search", self._existing, key) or []
        return any(r.data.tags.get(COMPLETE_TAG) == "true" for r in runs)

    @classmethod
    def for_output(cls, output_dir: Path) -> MlflowSink | None:
        """The sink of the sweep that wrote output_dir (its sweep.yaml), or None when it tracks nothing."""
        from orchestrator.sweep import SweepError, load_sweep

        resolved = output_dir / "sweep.yaml"
        if not resolved.exists():
            return None
        try:
            sweep = load_sweep(str(resolved), [])
        except SweepError:
            return None
        if not sweep.tracking.enabled:
            return None
        return cls(sweep.tracking_uri(), sweep.experiment_name(), output_dir.resolve(), sweep.name)

    # -- recorder sink ------------------------------------------------------------------------------
    def on_start(self, spec: TrialSpec) -> None:
        self._guard("trial start", self._trial_started, spec)

    def _trial_started(self, spec: TrialSpec) -> None:
        from mlflow.entities import Param

        for old in self._existing(spec.trial_key):  # interrupted attempts or a completed run being replaced
            self.client.delete_run(old.info.run_id)
        run = self.client.create_run(
            self.experiment_id,
            run_name=spec.trial_key,
            tags={
                "mlflow.parentRunId": self.parent_id,
                TRIAL_KEY_TAG: spec.trial_key,
                "framework": spec.framework,
                "mode": spec.mode,
                "model": spec.model,
                "status": "running",
            },
        )
        self.runs[spec.trial_key] = run.info.run_id
        params = [
            Param(k, json.dumps(v) if isinstance(v, (dict, list)) else str(v))
            for k, v in spec.to_dict().items()
            if k not in PARAM_SKIP
        ]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(run.info.run_id, params=params[i : i + 100])

    def on_step(self, spec: TrialSpec, row: dict[str, Any]) -> None:
        run_id = self.runs.get(spec.trial_key)
        if run_id:
            self._guard("step logging", self._log_step, run_id, normalize_step(spec.trial_key, row))

    def _log_step(self, run_id: str, row: dict[str, Any]) -> None:
        """row: a steps-file row, as the live path (on_step) and sync-mlflow (log_whole_trial) both give."""
        step = int(row.get("step") or 0)
        stamp = int(1000 * (row.get("t_end") or time.time()))
        metrics = [_metric(k, v, step, stamp) for k, v in step_metrics(row).items()]
        if metrics:
            self.client.log_batch(run_id, metrics=metrics)

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        run_id = self.runs.pop(spec.trial_key, None)
        path = steps_path(self.root, spec)
        steps_file = path if isinstance(path, Path) else None  # MLflow uploads local files only
        if run_id:
            self._guard("trial end", self._trial_finished, run_id, row, steps_file)

    def _trial_finished(self, run_id: str, row: dict[str, Any], steps_file: Path | None) -> None:
        from mlflow.entities import RunTag

        from orchestrator.report import prediction_metrics

        summary = [_metric(k, row[k]) for k in SUMMARY_METRICS if row.get(k) is not None]
        summary += [_metric(k, v) for k, v in prediction_metrics(row).items()]  # when one was made
        tags = {
            "status": row["status"],
            "status_detail": (row.get("status_detail") or "")[:5000],
            "gpu": row.get("gpu_name") or NO_GPU,
        }
        for name in VERDICT_TAGS:  # a completed trial's training verdict (orchestrator/verdict.py)
            if row.get(name):
                tags[name] = row[name][:5000]
        self.client.log_batch(run_id, metrics=summary, tags=[RunTag(k, str(v)) for k, v in tags.items()])
        if steps_file is not None and steps_file.exists():
            self.client.log_artifact(run_id, str(steps_file))
        if row.get("effective_config"):
            self.client.log_text(run_id, row["effective_config"], "effective_config.json")
        self.client.set_tag(run_id, COMPLETE_TAG, "true")
        self.client.set_terminated(run_id, status="FINISHED" if row["status"] == COMPLETED else "FAILED")

    def log_report(self, paths: dict, outputs: Any) -> None:
        """At a sweep's end: the report (write_report's paths) on the parent run, summary metrics on
        each trial run (outputs: orchestrator.report.load_outputs), so MLflow's run table and compare
        view sort and chart by them."""
        self._guard("report", self._log_report, paths, outputs)

    def _log_report(self, paths: dict, outputs: Any) -> None:
        from orchestrator.report import prediction_pairs, prediction_summary, summary_metrics

        if self.parent_id is None:
            self._start_sweep_lookup()
        for key in ("summary_csv", "report_html", "report_md", "prediction_errors_csv"):
            if paths.get(key):
                self.client.log_artifact(self.parent_id, str(paths[key]))
        errors = prediction_summary(prediction_pairs(outputs.trials, outputs.steps))
        if errors:
            self.client.log_batch(self.parent_id, metrics=[_metric(k, v) for k, v in errors.items()])
        for plot in paths.get("plots", []):
            self.client.log_artifact(self.parent_id, str(plot), artifact_path="plots")
        for _, trial in outputs.trials.iterrows():
            runs = self._existing(str(trial["trial_key"]))
            metrics = summary_metrics(trial, outputs.steps)
            for run in runs:
                batch = [_metric(f"summary/{k}", v) for k, v in metrics.items() if v is not None]
                if batch:
                    self.client.log_batch(run.info.run_id, metrics=batch)

    def _start_sweep_lookup(self) -> None:
        _quiet_mlflow_env()
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.uri)
        exp = self.client.get_experiment_by_name(self.experiment)
        if exp is None:
            raise LookupError(f"experiment {self.experiment!r} not found; run `rlsweep sync-mlflow` first")
        self.experiment_id = exp.experiment_id
        self.parent_id = self._find_parent()
        if self.parent_id is None:
            raise LookupError(f"no sweep run for {self.output_dir}; run `rlsweep sync-mlflow` first")

    def _find_parent(self) -> str | None:
        """The sweep's parent run: one per output dir, so a resumed sweep reuses it."""
        parents = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{ROLE_TAG}` = 'sweep' and tags.`{OUTPUT_TAG}` = '{self.output_dir}'",
        )
        return parents[0].info.run_id if parents else None

    def log_whole_trial(
        self, spec: TrialSpec, row: dict[str, Any], steps: list[dict], steps_file: Path
    ) -> None:
        """sync-mlflow: a trial's run from its Parquet rows, in one go."""

        def log():
            self._trial_started(spec)
            run_id = self.runs[spec.trial_key]
            for step_row in steps:
                self._log_step(run_id, step_row)
            self.runs.pop(spec.trial_key)
            self._trial_finished(run_id, row, steps_file)

        self._guard(f"sync of {spec.trial_key}", log)


def _metric(key: str, value: float, step: int = 0, stamp: int | None = None):
    from mlflow.entities import Metric

    return Metric(key, float(value), stamp or int(time.time() * 1000), step)
