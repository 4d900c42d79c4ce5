"""What a trial's MLflow run is called and carries, without MLflow: short distinct names keeping K and B,
params without unset knobs, the sweep's settings as dotted params, MLflow's status for each outcome."""

from __future__ import annotations

import json

from orchestrator.publishing.tracking import (
    run_name,
    run_status,
    runs_url,
    sweep_params,
    trial_params,
    varying_axes,
)
from orchestrator.spec.load import parse_sweep, resolved_yaml
from orchestrator.spec.plan import plan
from orchestrator.words.outcome import COMPLETED, FAILED, OOM, PRUNED, STOPPED, UNAVAILABLE
from trainers.trial import TrialSpec


def test_run_names_are_short_distinct_and_keep_k_and_b():
    sweep = parse_sweep({
        "name": "names",
        "grid": {"framework": ["trl", "unsloth"], "num_generations": [2, 8], "seed": [1, 2],
                 "model": ["Qwen/Qwen2.5-0.5B-Instruct", "random:Qwen/Qwen3-0.6B"]},
        "fixed": {"batch_size": 2, "mode": "gspo"},
    })  # fmt: skip
    trials = plan(sweep).trials
    varying = varying_axes(resolved_yaml(sweep))
    names = [run_name(t, varying) for t in trials]
    assert len(set(names)) == len(trials) == 16
    assert "unsloth·gspo·qwen2.5-0.5b·k8·b2·seed=2" in names
    assert "trl·gspo·rand-qwen3-0.6b·k2·b2·seed=1" in names


def test_a_sweep_of_one_model_leaves_the_model_out_of_run_names():
    assert run_name(TrialSpec(framework="unsloth", mode="gspo", num_generations=8, batch_size=2), []) == (
        "unsloth·gspo·k8·b2"
    )


def test_trial_params_leave_unset_knobs_out_and_carry_b_times_k():
    spec = TrialSpec(num_generations=6, batch_size=3, trial_key="k", sweep="s")
    params = trial_params(spec)
    assert params["BxK"] == "18"
    assert "None" not in params.values() and "micro_batch_size" not in params
    assert "trial_key" not in params and params["sweep"] == "s"
    assert "BxK" not in trial_params(TrialSpec(grad_accum=4))  # batch_size then counts completions


def test_the_sweeps_settings_become_dotted_params():
    sweep = parse_sweep({"name": "p", "grid": {"num_generations": [2, 4]}, "memory": {"budget_gib": 8}})
    params = sweep_params(resolved_yaml(sweep))
    assert json.loads(params["grid.num_generations"]) == [2, 4]
    assert params["memory.budget_gib"] == "8.0" and params["name"] == "p"
    assert "None" not in params.values()


def test_only_trials_that_ran_and_broke_are_failed_runs():
    statuses = {s: run_status(s) for s in (COMPLETED, OOM, FAILED, PRUNED, UNAVAILABLE, STOPPED)}
    assert statuses == {COMPLETED: "FINISHED", OOM: "FAILED", FAILED: "FAILED", PRUNED: "KILLED",
                        UNAVAILABLE: "KILLED", STOPPED: "KILLED"}  # fmt: skip


def test_the_runs_url_is_the_servers_or_make_uis():
    assert runs_url("http://mlflow:5000/", "7") == "http://mlflow:5000/#/experiments/7/runs"
    assert runs_url("sqlite:////x/mlflow.db", "7") == "http://127.0.0.1:5000/#/experiments/7/runs"
