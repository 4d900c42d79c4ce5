"""The driver refuses, before any trial or Ray start, to resume into results of another configuration."""

import json

import pytest

from orchestrator.driver import run_sweep
from orchestrator.plan import expand
from orchestrator.sinks import TrialsTable, trial_row
from orchestrator.sweep import SweepError, parse_sweep


def test_a_resume_whose_ledger_holds_another_configuration_under_a_key_is_refused(tmp_path):
    sweep = parse_sweep({"name": "r", "fixed": {"max_steps": 3}, "tracking": {"enabled": False}})
    (spec,) = expand(sweep)
    row = trial_row(spec, None, status="completed", detail="3 steps")
    stored = json.loads(row["config"]) | {"learning_rate": 1e-5}  # what an earlier, different run stored
    TrialsTable(tmp_path / "trials.parquet").upsert(row | {"config": json.dumps(stored, sort_keys=True)})
    with pytest.raises(SweepError) as info:
        run_sweep(sweep, output_dir=tmp_path)
    assert "learning_rate: 1e-05 vs 0.0002" in str(info.value)
    assert not (tmp_path / "sweep.yaml").exists() and not (tmp_path / "ray").exists()  # nothing written
