"""What a trial's MLflow run is called and carries: short distinct ASCII names keeping K and B,
params without unset knobs, the sweep's settings as dotted params, MLflow's status for each outcome; in a
real sqlite store, a trial's curves under the names TRL logs them by and, for one release, their old ones."""

from __future__ import annotations

import json
import re

from mlflow.tracking import MlflowClient

from orchestrator.publishing.tracking import (
    MlflowSink,
    run_name,
    run_status,
    runs_url,
    sweep_params,
    trial_params,
    varying_axes,
)
from orchestrator.spec.load import parse_sweep, resolved_yaml
from orchestrator.spec.plan import plan
from orchestrator.words.names import axis_part
from orchestrator.words.outcome import COMPLETED, FAILED, OOM, PRUNED, STOPPED, UNAVAILABLE
from tools.inputs.learning_traces import LEARNING_TRACES, load_learning_trace
from trainers.trial import TrialSpec


def test_run_names_are_short_distinct_ascii_and_keep_k_b_the_varying_axes_and_the_keys_digest():
    sweep = parse_sweep({
        "name": "names",
        "grid": {"stack": ["trl", "unsloth"], "num_generations": [2, 8], "seed": [1, 2],
                 "model": ["Qwen/Qwen2.5-0.5B-Instruct", "random:Qwen/Qwen3-0.6B"],
                 "max_completion_length": [128, 256]},
        "fixed": {"batch_size": 2, "mode": "gspo"},
    })  # fmt: skip
    trials = plan(sweep).trials
    varying = varying_axes(resolved_yaml(sweep))
    names = {t.trial_key: run_name(t, varying) for t in trials}
    assert len(set(names.values())) == len(trials) == 32
    assert all(name.isascii() and re.fullmatch(r"[a-z0-9.=_-]+", name) for name in names.values())
    one = next(t for t in trials if (t.stack, t.model, t.num_generations, t.seed, t.max_completion_length)
               == ("unsloth", "Qwen/Qwen2.5-0.5B-Instruct", 8, 2, 256))  # fmt: skip
    assert names[one.trial_key] == f"unsloth-gspo-qwen2.5-0.5b-k8-b2-seed2-len256-{one.trial_key[-12:]}"


def test_a_sweep_of_one_model_leaves_the_model_out_of_run_names():
    spec = TrialSpec(stack="unsloth", mode="gspo", num_generations=8, batch_size=2)
    assert run_name(spec, []) == "unsloth-gspo-k8-b2"  # a spec without a planned key: no digest


def test_an_axis_without_a_short_label_reads_axis_equals_value_in_ascii():
    assert axis_part("temperature", 0.7) == "temperature=0.7"
    assert axis_part("learning_rate", 2e-4) == "lr0.0002"
    assert axis_part("task_args", {"operand_digits": 2, "answer_rule": "last"}) == (
        "task_args=operand_digits_2_answer_rule_last"
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


def test_a_real_trials_run_in_sqlite_carries_trls_metric_names_the_old_ones_and_an_ascii_name(tmp_path):
    """The default CPU sweep's real SmolLM2 steps (bench/data/learning), logged by the MLflow sink."""
    sweep = parse_sweep(
        {"name": "trl-names", "fixed": {"max_completion_length": 8}, "grid": {"seed": [1, 2]}}
    )
    spec = plan(sweep).trials[0]
    steps = load_learning_trace(LEARNING_TRACES / "learning-smollm2-learning.parquet")[:3]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sink = MlflowSink(uri, "trl-names", tmp_path, "trl-names")
    sink.start_sweep(resolved_yaml(sweep))
    sink.on_start(spec)
    for row in steps:
        sink.on_step(spec, row)
    sink.on_end(spec, {"trial_key": spec.trial_key, "status": COMPLETED}, steps)

    client = MlflowClient(uri)
    (run,) = client.search_runs([sink.experiment_id], filter_string="attributes.run_name LIKE 'trl-grpo-k%'")
    assert (
        run.info.run_name
        == f"trl-grpo-k{spec.num_generations}-b{spec.batch_size}-seed1-{spec.trial_key[-12:]}"
    )
    assert run.info.run_name.isascii()
    trl = {"reward": "reward_mean", "reward_std": "reward_std", "completions/mean_length": "completion_len_mean",
           "completions/clipped_ratio": "clipped_ratio", "entropy": "entropy", "loss": "loss",
           "grad_norm": "grad_norm", "learning_rate": "learning_rate",
           "rewards/accuracy/mean": "rewards/accuracy/mean"}  # fmt: skip
    for name, field in trl.items():
        curve = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, name)]
        alias = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, f"step/{field}")]
        assert sorted(curve) == sorted(alias) == [(row["step"], row[field]) for row in steps], name
    assert "kl" not in run.data.metrics  # beta 0: TRL logged no KL, so no curve (never 0)
    assert "step/tokens_per_s" in run.data.metrics and "tokens_per_s" not in run.data.metrics
