"""A real Ray sweep of real `tiny` trainers under a memory budget: the budget guard ends the large
trial `oom` on its RSS, the larger one is pruned without a trainer, the small one completes; a
resumed sweep keeps those decisions."""

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from orchestrator.cli import main
from orchestrator.judging.pruning import Pruner
from orchestrator.running.driver import run_sweep
from orchestrator.spec.load import load_sweep
from tests.helpers.sweeps import tiny_sweep

pytestmark = pytest.mark.slow

# Measured in this sweep without a budget (tiny, quantization none, 16-token completions, one probe
# step): RSS peak 0.69-0.71 GiB at K=2 (0.75-0.78 in a fresh venv), 0.88 GiB at K=32, over 0.9 GiB at
# K=64; memory grows with K x (prompt + completion) x vocabulary (the logits). 0.85 GiB lies between.
BUDGET_GIB = 0.85


@pytest.mark.heavy
def test_budget_ooms_prunes_and_resume_keeps_the_decisions(ray_fake_gpus, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    path = tiny_sweep(
        tmp_path / "s.yaml",
        "oomsweep",
        {"num_generations": [2, 64, 128]},
        fixed={"max_steps": 1, "max_completion_length": 16},
        resources={"gpus_per_trial": 1, "cpus_per_trial": 1, "max_concurrent": 1},  # plan order
        # plan order, smallest first (the frontier search would probe K=64 first: test_frontier_sweep)
        oom={"probe_steps": 1, "frontier": False},
        memory={"budget_gib": BUDGET_GIB},
        tracking={"mlflow_uri": uri},
    )
    out = tmp_path / "out"
    outcome = run_sweep(load_sweep(path), output_dir=out)
    trials = pq.read_table(out / "trials.parquet").to_pandas().set_index("num_generations")
    small, large, larger = (trials.loc[k] for k in (2, 64, 128))

    assert small.status == "completed", small.status_detail
    assert small.peak_rss_gib < BUDGET_GIB
    assert large.status == "oom", large.status_detail
    assert large.status_detail.startswith("guard: RSS ") and f"passed budget {BUDGET_GIB:.2f} GiB" in (
        large.status_detail
    )
    assert larger.status == "pruned"
    assert larger.status_detail.startswith(f"dominated by {large.trial_key} (oom at RSS ")
    assert f"budget {BUDGET_GIB:.2f} GiB)" in larger.status_detail

    # Each row holds the memory prediction made before it ran, from the trials finished before it:
    # the first from the prior, the next two fitted on the one measured trial (the oom one a bound).
    assert [(t.predicted_basis, t.predicted_from_trials) for t in (small, large, larger)] == [
        ("prior", 0),
        ("fitted", 1),
        ("fitted", 1),
    ]
    assert all(
        t.predicted_low_gib < t.predicted_peak_gib < t.predicted_high_gib for t in (small, large, larger)
    )

    # The pruned trial never had a trainer: no trial folder, an empty steps file; the other two ran.
    trial_dirs = out / "trials"
    assert sorted(p.name for p in trial_dirs.iterdir()) == sorted([small.trial_key, large.trial_key])
    assert outcome.ran == [small.trial_key, large.trial_key, larger.trial_key]  # what was left to decide
    (pruned_steps,) = (out / "steps").rglob(f"{larger.trial_key}.parquet")
    assert pq.read_table(pruned_steps).num_rows == 0
    assert pd.isna(larger.wall_s) and pd.isna(larger.peak_rss_gib)  # null: nothing ran

    # The verdict is on disk, and MLflow has a run for every trial, the pruned one included.
    verdicts = Pruner.load(out / "pruning.json").verdicts
    assert [v.trial_key for v in verdicts] == [large.trial_key]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("oomsweep").experiment_id])
    tags = {r.data.tags["rlsweep.trial_key"]: r.data.tags for r in runs if "rlsweep.trial_key" in r.data.tags}
    assert {k: t["status"] for k, t in tags.items()} == dict(
        zip(trials.trial_key, trials.status, strict=True)
    )
    assert tags[larger.trial_key]["status_detail"] == larger.status_detail

    # The frontier was printed at the end (once: the report's, which opens on it).
    printed = capsys.readouterr()
    shown = printed.err + printed.out
    assert shown.count("Feasibility frontier") == 1 and "K=2" in shown and "K=64" in shown

    # Resume: the same command again starts no trainer and changes no decision.
    events = {p: p.stat().st_mtime_ns for p in trial_dirs.rglob("events.jsonl")}
    assert main(["run", str(path), "--output-dir", str(out)]) == 0
    again = pq.read_table(out / "trials.parquet").to_pandas()
    assert again.trial_key.is_unique and len(again) == 3
    assert dict(zip(again.trial_key, again.status_detail, strict=True)) == dict(
        zip(trials.trial_key, trials.status_detail, strict=True)
    )
    assert {p: p.stat().st_mtime_ns for p in trial_dirs.rglob("events.jsonl")} == events
    assert sorted(p.name for p in trial_dirs.iterdir()) == sorted([small.trial_key, large.trial_key])
    printed = capsys.readouterr()
    assert "3 of 3 trials already finished" in printed.err and "Feasibility frontier" in printed.out
    assert json.loads((out / "pruning.json").read_text())["verdicts"][0]["trial_key"] == large.trial_key
