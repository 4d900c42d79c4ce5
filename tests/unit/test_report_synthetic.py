"""The synthetic sweep the report tests read is laid out like a real sweep's outputs."""

import pyarrow.parquet as pq

from orchestrator.recording.sinks import STEP_SCHEMA, TRIAL_SCHEMA
from tests.helpers.synthetic_sweep import write_synthetic_sweep


def test_synthetic_sweep_has_every_status_and_one_step_file_per_trial_that_ran(tmp_path):
    trials = write_synthetic_sweep(tmp_path)
    stored = pq.read_table(tmp_path / "trials.parquet").to_pandas()
    assert pq.read_schema(tmp_path / "trials.parquet").remove_metadata() == TRIAL_SCHEMA  # a sweep's files
    assert set(stored["status"]) == {"completed", "oom", "pruned", "failed", "unavailable", "stopped"}
    with_steps = trials[trials["steps_completed"] > 0]
    for _, trial in with_steps.iterrows():
        path = (
            tmp_path
            / "steps"
            / f"stack={trial.stack}"
            / f"mode={trial['mode']}"
            / f"{trial.trial_key}.parquet"
        )
        steps = pq.read_table(path).to_pandas()
        assert pq.read_schema(path).remove_metadata() == STEP_SCHEMA
        assert len(steps) == trial.steps_completed
