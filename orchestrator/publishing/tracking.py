"""MLflow sink: a recorder sink (orchestrator/recording/recorder.py) in the driver; trainers and supervisors never
talk to tracking.

One experiment per sweep (created once here, tagged as a model-development experiment so MLflow's UI
opens it on its runs), a parent run per output dir, one nested run per trial (tag mlflow.parentRunId,
tag rlsweep.trial_key, a short ASCII name such as `unsloth-gspo-k8-b2-<digest>`: run_name). Step
metrics go in one log_batch call per step. A run gets the tag `rlsweep.complete=true` as its last write; a run without it
is an interrupted attempt and is deleted before the trial's run is made again, so every trial_key has
exactly one run.

Metric names, one per figure (docs/results.md: MLflow):
  trial run  <TRL's name>                 a curve over steps for each step field TRL logs, named as TRL
                                          logs it (STEP_METRICS: reward, completions/mean_length, ...),
                                          and for one release also step/<step field> (STEP_ALIASES)
             step/<step field>            a curve for each other numeric field of the record's step rows
                                          but the wall-clock bounds (step/tokens_per_s, ...)
             <figure>                     the trial's figures, logged once at its end:
                                          orchestrator.views.report.summary_metrics's names and wall_s
  sweep run  trials/<status>              how many trials ended so
             best/<figure>                the best completed trial's figure (highest speed, lowest peak)

Tracking never fails a sweep: the first error disables the sink with a warning; Parquet is the source
of truth and `rlsweep sync-mlflow OUTPUT_DIR` logs what is missing.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.publishing._runs import (
    COMPLETE_TAG,
    EXPERIMENT_KIND,
    KILLED_STATUSES,
    OUTPUT_TAG,
    ROLE_TAG,
    SEARCH_PAGE,
    SKIPPED_TAG,
    STEP_ALIASES,  # noqa: F401  (the step metrics' old names, kept for one release)
    STEP_METRICS,  # noqa: F401  (the step metrics' names: this module's docstring lists them)
    TRIAL_KEY_TAG,
    VERDICT_TAGS,
    best_figures,
    row_tags,
    run_name,
    run_status,
    runs_url,
    step_metrics,
    sweep_params,
    trial_figures,
    trial_params,
    varying_axes,
    version_tags,
)
from orchestrator.recording.sinks import steps_path
from orchestrator.words.outcome import NO_GPU
from orchestrator.words.storage import StoragePath
from trainers.record import STEP
from trainers.trial import TrialSpec


def _quiet_mlflow_env() -> None:
    # A dead server must cost seconds, not MLflow's default minutes of retries.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    # MLflow's INFO lines (database set-up, migrations) are not rlsweep's output.
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _artifact_location(uri: str) -> str | None:
    """Artifacts of a sqlite store live next to the database, not in ./mlruns of whatever the cwd is."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///") :]).parent / "mlartifacts").resolve().as_uri()
    return None


class MlflowSink:
    """goes_on: what the warning of a failure says carries on without MLflow (the verb's own work)."""

    def __init__(
        self,
        uri: str,
        experiment: str,
        output_dir: StoragePath,
        sweep_name: str,
        goes_on: str = "the sweep goes on",
    ):
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
        # trial_key -> ids of its runs under the sweep's run, read once when the sweep starts and kept
        # up to date after (one search per trial grew with the runs in the store); None: search
        self.trial_runs: dict[str, list[str]] | None = None
        self.varying: list[str] = []  # the sweep's grid axes with several values (run_name)
        self.goes_on = goes_on
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
                f"warning: MLflow ({self.uri}) failed during {what}: {self.error}. {self.goes_on.capitalize()}"
                f" without it; Parquet has everything. Later: rlsweep sync-mlflow {self.output_dir}",
                file=sys.stderr,
            )
            return None

    # -- sweep --------------------------------------------------------------------------------------
    def start_sweep(self, resolved_yaml: str) -> None:
        self._guard("start", self._start_sweep, resolved_yaml)

    def _start_sweep(self, resolved_yaml: str) -> None:
        _quiet_mlflow_env()
        from mlflow.entities import Param
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
        if not exp or exp.tags.get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
            self.client.set_experiment_tag(self.experiment_id, *EXPERIMENT_KIND)
        self.varying = varying_axes(resolved_yaml)
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
        # Params cannot change: a resumed sweep's run keeps the values it has and gains new settings only.
        logged = self.client.get_run(self.parent_id).data.params
        params = [Param(k, v) for k, v in sweep_params(resolved_yaml).items() if k not in logged]
        self._log_params(self.parent_id, params)
        self.client.log_text(self.parent_id, resolved_yaml, "sweep.yaml")
        self.trial_runs = self._runs_by_trial()

    def _runs_by_trial(self) -> dict[str, list[str]]:
        """trial_key -> ids of the sweep run's trial runs now in the store (every page of them)."""
        found: dict[str, list[str]] = {}
        token = None
        while True:
            page = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`mlflow.parentRunId` = '{self.parent_id}'",
                max_results=SEARCH_PAGE,
                page_token=token,
            )
            for run in page:
                key = run.data.tags.get(TRIAL_KEY_TAG)
                if key:
                    found.setdefault(key, []).append(run.info.run_id)
            token = page.token
            if not token:
                return found

    def _log_params(self, run_id: str, params: list) -> None:
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(run_id, params=params[i : i + 100])

    def runs_url(self) -> str | None:
        """The experiment's runs table in MLflow's UI (None before the sweep's run is found)."""
        return runs_url(self.uri, self.experiment_id) if self.experiment_id else None

    def end_sweep(self, counts: dict[str, int], interrupted: bool) -> None:
        def end():
            self.client.log_batch(
                self.parent_id,
                metrics=[_metric(f"trials/{k}", v) for k, v in counts.items()],
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
    def for_output(cls, output_dir: Path, goes_on: str = "the report is written") -> MlflowSink | None:
        """The sink of the sweep that wrote output_dir (its sweep.yaml), or None when it tracks nothing or
        its sqlite store does not exist: a reader of a sweep creates no store (say so on stderr)."""
        from orchestrator.spec.load import load_sweep
        from orchestrator.spec.sweep import SweepError

        resolved = output_dir / "sweep.yaml"
        if not resolved.exists():
            return None
        try:
            sweep = load_sweep(str(resolved), [])
        except SweepError:
            return None
        if not sweep.tracking.enabled:
            return None
        out = output_dir.resolve()
        uri = sweep.tracking_uri(out)
        if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).exists():
            print(
                f"note: no MLflow store at {uri}, so nothing goes to MLflow; {goes_on} without it "
                f"(`rlsweep sync-mlflow {out}` makes the store and logs the sweep)",
                file=sys.stderr,
            )
            return None
        return cls(uri, sweep.experiment_name(), out, sweep.name, goes_on)

    # -- recorder sink ------------------------------------------------------------------------------
    def on_start(self, spec: TrialSpec) -> None:
        self._guard("trial start", self._trial_started, spec)

    def _trial_started(self, spec: TrialSpec) -> None:
        from mlflow.entities import Param

        if self.trial_runs is None:
            old_ids = [old.info.run_id for old in self._existing(spec.trial_key)]
        else:
            old_ids = self.trial_runs.pop(spec.trial_key, [])
        for old_id in old_ids:  # interrupted attempts or a completed run being replaced
            self.client.delete_run(old_id)
        run = self.client.create_run(
            self.experiment_id,
            run_name=run_name(spec, self.varying),
            tags={
                "mlflow.parentRunId": self.parent_id,
                TRIAL_KEY_TAG: spec.trial_key,
                "stack": spec.stack,
                "mode": spec.mode,
                "model": spec.model,
                "status": "running",
            },
        )
        self.runs[spec.trial_key] = run.info.run_id
        if self.trial_runs is not None:
            self.trial_runs[spec.trial_key] = [run.info.run_id]
        self._log_params(run.info.run_id, [Param(k, v) for k, v in trial_params(spec).items()])

    def on_step(self, spec: TrialSpec, row: dict[str, Any]) -> None:
        run_id = self.runs.get(spec.trial_key)
        if run_id:
            self._guard("step logging", self._log_step, run_id, row)

    def _log_step(self, run_id: str, row: dict[str, Any]) -> None:
        """row: a steps-file row, as the live path (on_step) and sync-mlflow (log_whole_trial) both give."""
        step = int(row.get("step") or 0)
        stamp = int(1000 * (row.get(STEP.t_end) or time.time()))
        metrics = [_metric(k, v, step, stamp) for k, v in step_metrics(row).items()]
        if metrics:
            self.client.log_batch(run_id, metrics=metrics)

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        run_id = self.runs.pop(spec.trial_key, None)
        path = steps_path(self.root, spec)
        steps_file = path if isinstance(path, Path) else None  # MLflow uploads local files only
        if run_id:
            self._guard("trial end", self._trial_finished, run_id, row, steps, steps_file)

    def _trial_finished(
        self, run_id: str, row: dict[str, Any], steps: list[dict[str, Any]], steps_file: Path | None
    ) -> None:
        from mlflow.entities import RunTag

        from orchestrator.views.report import prediction_metrics

        figures = [_metric(k, v) for k, v in trial_figures(row, steps).items()]
        figures += [_metric(k, v) for k, v in prediction_metrics(row).items()]  # when one was made
        detail = (row.get("status_detail") or "")[:5000]
        tags = {"status": row["status"], "status_detail": detail, "gpu": row.get("gpu_name") or NO_GPU}
        tags |= version_tags(row) | row_tags(row)
        if isinstance(row.get("session"), str):  # its probe session (orchestrator/running/session.py)
            tags["session"] = row["session"]
        for name in VERDICT_TAGS:  # a judged trial's training verdict (orchestrator/judging/verdict.py)
            if row.get(name):
                tags[name] = row[name][:5000]
        if row["status"] in KILLED_STATUSES:
            tags[SKIPPED_TAG] = "true"
            tags["mlflow.note.content"] = f"{row['status']}: {detail}"  # the run page's description
        if steps_file is not None and steps_file.exists():
            self.client.log_artifact(run_id, str(steps_file))
        if row.get("effective_config"):
            self.client.log_text(run_id, row["effective_config"], "effective_config.json")
        # The figures and tags with the complete tag, in one write after the artifacts: still the last
        # thing but the run's end, one database transaction less per trial.
        tags[COMPLETE_TAG] = "true"
        self.client.log_batch(run_id, metrics=figures, tags=[RunTag(k, str(v)) for k, v in tags.items()])
        self.client.set_terminated(run_id, status=run_status(row["status"]))

    def log_report(self, paths: dict, outputs: Any) -> None:
        """At a sweep's end: the report (write_report's paths) on the parent run, with the best completed
        trial's figures as best/<figure> (outputs: orchestrator.views.report.load_outputs)."""
        self._guard("report", self._log_report, paths, outputs)

    def _log_report(self, paths: dict, outputs: Any) -> None:
        from orchestrator.views.report import prediction_pairs, prediction_summary

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
        best = [_metric(f"best/{k}", v) for k, v in best_figures(outputs).items()]
        if best:
            self.client.log_batch(self.parent_id, metrics=best)

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
            self._trial_finished(run_id, row, steps, steps_file)

        self._guard(f"sync of {spec.trial_key}", log)


def _metric(key: str, value: float, step: int = 0, stamp: int | None = None):
    from mlflow.entities import Metric

    return Metric(key, float(value), stamp or int(time.time() * 1000), step)


def print_runs_urls(uri: str) -> None:
    """Each rlsweep experiment's runs table in a store, as `make ui` serves it (nothing for a missing store)."""
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).exists():
        print(f"no MLflow store at {uri} yet: `make sweep` makes one")
        return
    _quiet_mlflow_env()
    from mlflow.tracking import MlflowClient

    for exp in MlflowClient(uri).search_experiments():
        if exp.tags.get(EXPERIMENT_KIND[0]) == EXPERIMENT_KIND[1]:
            print(f"{exp.name}: {runs_url('http://127.0.0.1:5000', exp.experiment_id)}")
