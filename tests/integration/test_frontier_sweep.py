"""The frontier search through Ray Tune with real `tiny` trainer children: of a K chain under a budget
all of it fits, the middle is probed first, the smaller one is recorded `implied` without a trainer, and
the larger one is probed."""

import pandas as pd
import pyarrow.parquet as pq
import pytest

from orchestrator.running.driver import run_sweep
from orchestrator.spec.load import load_sweep
from tests.helpers.sweeps import tiny_sweep

pytestmark = pytest.mark.slow


def test_a_trial_a_measured_fit_dominates_is_implied_without_a_trainer(ray_fake_gpus, tmp_path):
    path = tiny_sweep(
        tmp_path / "s.yaml",
        "frontier",
        {"num_generations": [2, 4, 8]},
        fixed={"max_steps": 3},
        memory={"budget_gib": 4},  # every K fits: the search needs probe only K=4 and K=8
        resources={"gpus_per_trial": 1, "cpus_per_trial": 1, "max_concurrent": 1},
        tracking={"enabled": False},
        phases=["memory"],
    )
    out = tmp_path / "out"
    outcome = run_sweep(load_sweep(path), output_dir=out)
    trials = pq.read_table(out / "trials.parquet").to_pandas().set_index("num_generations")
    k2, k4, k8 = (trials.loc[k] for k in (2, 4, 8))
    assert (k4.status, k8.status) == ("completed", "completed"), (k4.status_detail, k8.status_detail)
    assert k4.started_at < k8.started_at  # bisection: the middle of the chain first
    assert k2.status == "implied" and k2.implied_by == k4.trial_key
    assert k2.status_detail.startswith(f"fits: implied by {k4.trial_key} (measured ")
    assert k2.predicted_basis == "fitted" and k2.predicted_peak_gib < 4
    assert pd.isna(k2.wall_s) and pd.isna(k2.peak_rss_gib) and pd.isna(k2.steps_completed)
    assert sorted(p.name for p in (out / "trials").iterdir()) == sorted([k4.trial_key, k8.trial_key])
    assert outcome.counts == {"completed": 2, "implied": 1}
