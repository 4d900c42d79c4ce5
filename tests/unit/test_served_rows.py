"""A trial's row rebuilt from what its MLflow run holds (params, metrics, tags), without a server: the
run as the sink logs it gives back the row's settings, status, peaks, card, budget and versions; a run
logged before the row tag existed still gives its peaks and card from its figures and tags."""

import json
from pathlib import Path

from mlflow.entities import Metric, Param, Run, RunData, RunInfo, RunTag

from orchestrator.cli._trials import load
from orchestrator.judging.memory import spec_of
from orchestrator.publishing._runs import (
    COMPLETE_TAG,
    ROW_TAG,
    TRIAL_KEY_TAG,
    row_tags,
    trial_figures,
    trial_params,
    version_tags,
)
from orchestrator.publishing.served_rows import row_of

H100 = Path(__file__).parents[2] / "bench" / "data" / "h100-2026-11-26"


def _logged(row: dict, with_row_tag: bool = True, renamed: dict | None = None) -> Run:
    """The run the MLflow sink logs for `row` (tracking.MlflowSink._trial_finished's params and tags)."""
    spec = spec_of(row)
    tags = {TRIAL_KEY_TAG: row["trial_key"], COMPLETE_TAG: "true", "status": row["status"],
            "status_detail": row.get("status_detail") or "", "gpu": row.get("gpu_name") or "no GPU (CPU run)",
            **version_tags(row), **row_tags(row)}  # fmt: skip
    if not with_row_tag:
        tags.pop(ROW_TAG)
    metrics = [Metric(k, v, 0, 0) for k, v in trial_figures(row, []).items()]
    info = RunInfo("r" * 32, "1", "someone", "FINISHED", 1_795_000_000_000, 1_795_000_100_000, "active")
    params = [Param((renamed or {}).get(k, k), v) for k, v in trial_params(spec).items()]
    return Run(info, RunData(metrics, params, [RunTag(k, str(v)) for k, v in tags.items()]))


def _measured_rows() -> list[dict]:
    rows = [r for r in load([str(H100)]) if r["status"] == "completed" and r.get("peak_device_gib")]
    assert rows
    return rows


def test_a_run_gives_back_its_row_settings_status_peaks_card_budget_and_versions():
    for row in _measured_rows():
        back = row_of(_logged(row), "mlflow+http://team:5000/x")
        assert spec_of(back) == spec_of(row)
        for name in ("status", "peak_device_gib", "gpu_name", "gpu_total_gib", "memory_budget_gib"):
            assert back[name] == row[name], name
        assert json.loads(back["versions"]) == {k: v for k, v in json.loads(row["versions"]).items() if v}
        assert back["_provenance_run"] == "r" * 32


def test_a_run_logged_before_the_row_tag_still_gives_its_peak_and_card():
    row = _measured_rows()[0]
    back = row_of(_logged(row, with_row_tag=False), "mlflow+http://team:5000/x")
    assert back["peak_device_gib"] == row["peak_device_gib"] and back["gpu_name"] == row["gpu_name"]
    assert back["memory_budget_gib"] == row["memory_budget_gib"]  # a knob: from its params
    assert back["gpu_total_gib"] is None  # not logged before: null, never a guess


def test_an_unfinished_or_foreign_run_gives_no_row():
    row = _measured_rows()[0]
    run = _logged(row)
    run.data._tags.pop(COMPLETE_TAG)
    assert row_of(run, "mlflow+http://team:5000/x") is None
    other = _logged(row)
    other.data._tags.pop(TRIAL_KEY_TAG)
    assert row_of(other, "mlflow+http://team:5000/x") is None


def test_a_run_logged_before_the_stack_was_renamed_gives_its_stack_from_the_framework_param():
    row = next(r for r in _measured_rows() if spec_of(r).stack != "trl")  # not the default stack
    back = row_of(_logged(row, renamed={"stack": "framework"}), "mlflow+http://team:5000/x")
    assert spec_of(back) == spec_of(row)
    assert json.loads(back["config"])["stack"] == spec_of(row).stack
