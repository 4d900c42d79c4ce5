"""Trial rows from an MLflow tracking server: `--trials mlflow+http://HOST:PORT/EXPERIMENT`.

Each finished trial run (the tag rlsweep.complete=true) becomes the trials.parquet row it was logged
from: the knobs from its params (each parsed as --set parses it), status, detail, verdicts and versions
from its tags, every other trial field from the ROW_TAG its trial logs (_runs.row_tags); a run logged
before that tag existed gives what its figures and tags hold (peaks, median step, the card's name), so
it still answers where those suffice. Each row carries its provenance: the server, the run id, the card,
the date and the versions. Nothing in a run is executed: params and tags are text, parsed as YAML/JSON data.
"""

from __future__ import annotations

import json
import urllib.parse
from datetime import UTC, datetime
from typing import Any

from orchestrator.publishing._runs import (
    COMPLETE_TAG,
    EFFECTIVE_TAG,
    ROW_TAG,
    ROW_TAG_FIELDS,
    SEARCH_PAGE,
    TRIAL_KEY_TAG,
    VERDICT_TAGS,
)
from orchestrator.recording.sinks import TRIAL_SCHEMA
from orchestrator.words.outcome import NO_GPU, STATUSES
from trainers.record import TRIAL_FIELDS, renamed_keys
from trainers.trial import KNOBS, canonical, check_value

SCHEME = "mlflow+"
# Figures a trial's run logs as metrics under a trial field's own name (views.report.summary_metrics).
METRIC_FIELDS = tuple(f.name for f in TRIAL_FIELDS if f.name in ROW_TAG_FIELDS)
TIMESTAMPS = tuple(f.name for f in TRIAL_FIELDS if f.type == "timestamp[ms, UTC]")


class ServedTrialsError(ValueError):
    """The server or experiment named by --trials cannot give rows: the message says why and the fix."""


def is_served(text: str) -> bool:
    return text.startswith(SCHEME)


def split(text: str) -> tuple[str, str]:
    """(tracking URI, experiment name) of `mlflow+http://host:port/EXPERIMENT`."""
    uri = text.removeprefix(SCHEME)
    parsed = urllib.parse.urlsplit(uri)
    experiment = urllib.parse.unquote(parsed.path.lstrip("/"))
    if parsed.scheme not in ("http", "https") or not parsed.netloc or not experiment:
        raise ServedTrialsError(
            f"--trials {text}: an MLflow source is mlflow+http://HOST:PORT/EXPERIMENT (the tracking "
            "server and the sweep's experiment, e.g. mlflow+http://10.0.0.5:5000/frontier-16gb)"
        )
    return f"{parsed.scheme}://{parsed.netloc}", experiment


def _knobs(params: dict[str, str]) -> dict[str, Any]:
    import yaml

    config = {}
    for name, text in renamed_keys(params)[0].items():  # a run logged before a knob was renamed
        if name not in KNOBS:
            continue  # BxK and whatever else a run holds beside the knobs
        try:  # JSON first (`1e-05` is a number there, a string to YAML 1.1), then YAML (`True`)
            value = canonical(name, json.loads(text))
        except ValueError:
            try:
                value = canonical(name, yaml.safe_load(text))
            except yaml.YAMLError:
                continue
        if check_value(name, value) is None:
            config[name] = value
    return config


def _when(value: Any) -> datetime | None:
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value / 1000, UTC)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


def row_of(run, server: str) -> dict[str, Any] | None:
    """The trials.parquet row a finished trial run was logged from (None: not a finished trial run)."""
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    key = tags.get(TRIAL_KEY_TAG)
    if not key or tags.get(COMPLETE_TAG) != "true" or tags.get("status") not in STATUSES:
        return None
    config = {**_knobs(params), "trial_key": key, "sweep": params.get("sweep", "")}
    row: dict[str, Any] = {name: None for name in TRIAL_SCHEMA.names}
    row |= {name: metrics[name] for name in METRIC_FIELDS if name in metrics}
    gpu = tags.get("gpu")
    row["gpu_name"] = gpu if gpu and gpu != NO_GPU else None
    try:
        logged = json.loads(tags.get(ROW_TAG) or "{}")
    except ValueError:
        logged = {}
    if isinstance(logged, dict):
        row |= {k: v for k, v in logged.items() if k in ROW_TAG_FIELDS}
    for name in TIMESTAMPS:
        row[name] = _when(row.get(name))
    row["started_at"] = row["started_at"] or _when(run.info.start_time)
    row["ended_at"] = row["ended_at"] or _when(run.info.end_time)
    versions = {k.removeprefix("version."): v for k, v in tags.items() if k.startswith("version.")}
    row |= {
        "trial_key": key,
        "status": tags["status"],
        "status_detail": tags.get("status_detail"),
        "config": json.dumps(config, sort_keys=True),
        "versions": json.dumps(versions, sort_keys=True) if versions else None,
        "effective_config": tags.get(EFFECTIVE_TAG),
        **{name: tags.get(name) for name in VERDICT_TAGS},
        **{name: config.get(name) for name in TRIAL_SCHEMA.names if name in KNOBS and name in config},
    }
    row["_provenance_run"] = run.info.run_id
    row["_source"] = server
    return row


def served_rows(text: str) -> list[dict[str, Any]]:
    """The rows of every finished trial run in the experiment `text` names (mlflow+http://HOST/EXPERIMENT)."""
    from orchestrator.publishing.tracking import _quiet_mlflow_env

    _quiet_mlflow_env()  # a dead server costs seconds, not MLflow's minutes of retries
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri, experiment = split(text)
    client = MlflowClient(tracking_uri=uri)
    try:
        exp = client.get_experiment_by_name(experiment)
    except MlflowException as exc:
        raise ServedTrialsError(
            f"--trials {text}: the tracking server at {uri} did not answer ({str(exc).splitlines()[0][:160]}); "
            "check it runs (`mlflow server --host 0.0.0.0 --port 5000`) and is reachable from here"
        ) from None
    if exp is None:
        names = [e.name for e in client.search_experiments(max_results=50)]
        raise ServedTrialsError(
            f"--trials {text}: no experiment {experiment!r} on {uri}; its experiments: "
            f"{', '.join(names) or 'none'} (a sweep's experiment is its name)"
        )
    rows, token = [], None
    while True:
        page = client.search_runs(
            [exp.experiment_id], filter_string=f"tags.`{COMPLETE_TAG}` = 'true'",
            max_results=SEARCH_PAGE, page_token=token,
        )  # fmt: skip
        rows += [r for r in (row_of(run, text) for run in page) if r is not None]
        token = page.token
        if not token:
            return rows
