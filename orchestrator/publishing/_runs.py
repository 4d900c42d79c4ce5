"""What a sweep's MLflow runs hold, apart from talking to MLflow (tracking.py does that): the tags, a
trial run's name, params and figures, the step metrics' names, a sweep run's params and best figures.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from orchestrator.recording.sinks import STEP_RECORD
from orchestrator.words.names import NAMED, axis_part, key_digest, name_parts
from orchestrator.words.outcome import COMPLETED, IMPLIED, PRUNED, STOPPED, UNAVAILABLE
from trainers.record import EPOCH_S, FLOAT64, SPEC, TRIAL_FIELDS, finite_or_none, trl_name
from trainers.trial import BOOKKEEPING, TrialSpec

TRIAL_KEY_TAG = "rlsweep.trial_key"
COMPLETE_TAG = "rlsweep.complete"
ROLE_TAG = "rlsweep.role"
OUTPUT_TAG = "rlsweep.output_dir"
# Bookkeeping knobs and the model cache are not run parameters, except the sweep's name (a run filter).
PARAM_SKIP = (*(k for k in BOOKKEEPING if k != "sweep"), "model_cache_dir")
STEP_PREFIX = "step/"
# Each step field (trainers/record.py) MLflow draws as a curve -> its metric name: the numbers, not the
# wall-clock bounds (MLflow stamps each point with t_end). A field TRL logs keeps TRL's name (`reward`,
# `completions/mean_length`: trainers.record.TRL_NAMES), so TRL's dashboards and searches line up; one
# only rlsweep measures is step/<field>.
STEP_METRICS = {
    f.name: trl_name(f.name) or STEP_PREFIX + f.name
    for f in STEP_RECORD
    if f.type == FLOAT64 and f.unit != EPOCH_S
}
# The names the TRL-named curves had before (step/<field>), logged too for one release so that saved
# searches and charts keep working; the release after drops them (docs/schema.md, MLflow).
STEP_ALIASES = {
    field: STEP_PREFIX + field for field, metric in STEP_METRICS.items() if metric != STEP_PREFIX + field
}
# MLflow's UI opens an experiment of this kind on its runs table, not on the GenAI overview.
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
# Trials that never ran (pruned, implied by a measured fit, no node could host them) or were cut short:
# MLflow's KILLED, read as "skipped" with the tag SKIPPED_TAG; FAILED stays for trials that ran and broke
# (oom, failed) or ran out of time (timeout: its figures are logged).
KILLED_STATUSES = (PRUNED, IMPLIED, UNAVAILABLE, STOPPED)
SKIPPED_TAG = "rlsweep.skipped"
# best/<figure> on the sweep's run: the figure and whether higher is better.
BEST = {"median_tokens_per_s": True, "median_step_s": False, "peak_memory_gib": False, "final_reward": True}

VERDICT_TAGS = ("training_verdict", "training_verdict_detail")
# A trial run's record beyond its params (the knobs) and its other tags: every trial field (trainers/record.py)
# no knob sets, as JSON, so `--trials mlflow+http://...` rebuilds the trials.parquet row from the run
# (publishing/served_rows.py). CARD_TAG and BUDGET_TAG say the card and budget it ran on at a glance.
ROW_TAG = "rlsweep.row"
CARD_TAG = "rlsweep.card"
BUDGET_TAG = "rlsweep.budget_gib"
SCHEMA_TAG = "rlsweep.schema"
EFFECTIVE_TAG = "rlsweep.effective_config"
TAG_LIMIT = 5000  # characters of a tag's value every MLflow store keeps
ROW_TAG_FIELDS = tuple(
    f.name
    for f in TRIAL_FIELDS
    if f.measured_by != SPEC and f.name not in ("status", "status_detail", "effective_config", *VERDICT_TAGS)
)
SEARCH_PAGE = 1000  # runs per page of a search (MLflow's largest page for a SQL store is 50,000)


def step_metrics(row: dict[str, Any]) -> dict[str, float]:
    """A step's MLflow metrics (STEP_METRICS' names, and STEP_ALIASES' for the fields that have one) from
    its normalised row (a steps-file row): a run logged live and one logged by sync-mlflow get the same.
    A field not measured is not logged."""
    values = {name: finite_or_none(row.get(name)) for name in STEP_METRICS}
    measured = {name: value for name, value in values.items() if value is not None}
    return {STEP_METRICS[name]: value for name, value in measured.items()} | {
        STEP_ALIASES[name]: value for name, value in measured.items() if name in STEP_ALIASES
    }


def trial_figures(row: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, float]:
    """A trial's figures for its run: orchestrator.views.report.summary_metrics of its row and normalised
    step rows (so the run and summary.csv agree), its wall time and its probe session's start-up."""
    import pandas as pd

    from orchestrator.views.report import summary_metrics

    frame = pd.DataFrame(steps) if steps else None
    figures = summary_metrics(row, frame)
    for name in ("wall_s", "session_startup_s"):  # the latter on a probe session's first trial only
        value = finite_or_none(row.get(name))
        if value is not None:
            figures[name] = value
    return figures


def varying_axes(resolved_yaml: str) -> list[str]:
    """The grid axes of a sweep (its resolved YAML) that take more than one value."""
    data = yaml.safe_load(resolved_yaml) or {}
    grid = data.get("grid") if isinstance(data, dict) and isinstance(data.get("grid"), dict) else {}
    return [k for k, v in grid.items() if isinstance(v, list) and len(v) > 1]


def run_name(spec: TrialSpec, varying: list[str]) -> str:
    """A trial run's short name, ASCII and searchable in MLflow (`attributes.run_name LIKE 'trl-grpo-k8%'`):
    stack, mode, K and B always; the model when the sweep has several; each other grid axis that varies
    (`len256` for max_completion_length 256, `seed2`, `temperature=0.7`: names.axis_part); then the
    trial key's digest, so the name is distinct and names its trial: `trl-grpo-k8-b2-len256-87c22b4f9e1d`."""
    parts = name_parts(spec, model="model" in varying)
    parts += [axis_part(axis, getattr(spec, axis)) for axis in varying if axis not in NAMED]
    return "-".join([*parts, *key_digest(spec.trial_key)])


def trial_params(spec: TrialSpec) -> dict[str, str]:
    """A trial run's params: its knobs (not bookkeeping, not unset ones) and BxK, completions per step
    (absent with grad_accum, where batch_size counts completions, not prompts)."""
    params = {
        k: json.dumps(v) if isinstance(v, (dict, list)) else str(v)
        for k, v in spec.to_dict().items()
        if k not in PARAM_SKIP and v is not None
    }
    if spec.grad_accum is None:
        params["BxK"] = str(spec.batch_size * spec.num_generations)
    return params


def sweep_params(resolved_yaml: str) -> dict[str, str]:
    """The sweep's settings as params of its run: dotted keys (grid.num_generations, memory.budget_gib),
    lists and mappings of values as JSON, unset settings left out."""
    params: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value and prefix not in ("task_args", "fixed.task_args"):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        elif value is not None and value != {}:
            params[prefix] = json.dumps(value) if isinstance(value, (dict, list)) else str(value)

    walk("", yaml.safe_load(resolved_yaml) or {})
    return params


def row_tags(row: dict[str, Any]) -> dict[str, str]:
    """The tags that let a reader rebuild a trial's row from its run: ROW_TAG (ROW_TAG_FIELDS' values; the
    longest text left out until it fits TAG_LIMIT), the card, the budget and the effective settings."""
    from datetime import datetime

    values = {}
    for name in ROW_TAG_FIELDS:
        value = row.get(name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, float) and finite_or_none(value) is None:
            value = None
        if value is not None:
            values[name] = value
    text = json.dumps(values, sort_keys=True, default=str)
    while len(text) > TAG_LIMIT:
        longest = max((k for k, v in values.items() if isinstance(v, str)), key=lambda k: len(values[k]))
        values.pop(longest)
        text = json.dumps(values, sort_keys=True, default=str)
    budget = finite_or_none(row.get("memory_budget_gib"))
    tags = {
        ROW_TAG: text,
        CARD_TAG: row.get("gpu_name") or "cpu",
        BUDGET_TAG: f"{budget:g}" if budget is not None else "the card's own",
    }
    effective = row.get("effective_config")
    if isinstance(effective, str) and len(effective) <= TAG_LIMIT:
        tags[EFFECTIVE_TAG] = effective
    return tags


def version_tags(row: dict[str, Any]) -> dict[str, str]:
    """version.<package> tags from a trial row's `versions` (the trainer's stack)."""
    versions = json.loads(row.get("versions") or "null") or {}
    return {f"version.{name}": str(v) for name, v in versions.items() if v is not None}


def runs_url(uri: str, experiment_id: str) -> str:
    """Where the experiment's runs table is: on the tracking server, or on `make ui` for a sqlite store."""
    base = uri.rstrip("/") if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    return f"{base}/#/experiments/{experiment_id}/runs"


def run_status(status: str) -> str:
    """MLflow's run status for a trial's: FINISHED, KILLED (skipped or cut short) or FAILED."""
    return "FINISHED" if status == COMPLETED else "KILLED" if status in KILLED_STATUSES else "FAILED"


def best_figures(outputs: Any) -> dict[str, float]:
    """best/<figure> of the sweep's run: over completed trials, the highest or lowest of each figure (BEST)."""
    from orchestrator.views.report import summary_metrics

    done = outputs.trials[outputs.trials["status"] == COMPLETED]
    figures = [summary_metrics(trial, outputs.steps) for _, trial in done.iterrows()]
    best = {}
    for name, higher in BEST.items():
        values = [f[name] for f in figures if f.get(name) is not None]
        if values:
            best[name] = max(values) if higher else min(values)
    return best
