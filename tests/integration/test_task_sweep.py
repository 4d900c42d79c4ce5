"""End to end: one sweep over grid.task, real trainers on `tiny`, per-reward and eval
columns in the steps data of every task."""

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from orchestrator.running.driver import run_sweep
from orchestrator.spec.load import load_sweep
from tests.helpers.sweeps import tiny_sweep

pytestmark = pytest.mark.slow


def test_sweep_over_tasks_logs_each_reward_and_evaluation(ray_fake_gpus, tmp_path):
    gsm8k = tmp_path / "gsm8k.jsonl"
    gsm8k.write_text(
        "".join(
            json.dumps(
                {
                    "question": f"Tom has {i} apples and buys {i + 2}. How many?",
                    "answer": f"... #### {2 * i + 2}",
                }
            )
            + "\n"
            for i in range(12)
        )
    )
    path = tiny_sweep(
        tmp_path / "tasks.yaml",
        "tasks",
        {"task": ["arithmetic", "countdown", "reasoning_gym", "gsm8k"]},
        fixed={
            "max_steps": 3,
            "batch_size": 2,
            "num_generations": 2,
            "max_prompt_length": 512,
            "max_completion_length": 8,
            "eval_every": 2,
            "eval_at_end": True,
            "eval_samples": 3,
            "eval_k": 2,
        },
        task_args={"num_samples": 8, "num_eval": 3, "rewards": {"accuracy": 1.0, "format": 0.2}},
        task_settings={
            "reasoning_gym": {
                "datasets": {"syllogism": 1.0, "base_conversion": 0.5},
                "eval_datasets": ["family_relationships"],
            },
            "gsm8k": {"path": str(gsm8k)},
        },
        tracking={"enabled": False},
    )
    outcome = run_sweep(load_sweep(path), output_dir=tmp_path / "out")
    trials = pq.read_table(outcome.output_dir / "trials.parquet").to_pandas()
    assert sorted(trials.task) == ["arithmetic", "countdown", "gsm8k", "reasoning_gym"]
    assert (trials.status == "completed").all(), trials[["task", "status_detail"]].to_dict("records")

    steps = pd.read_parquet(outcome.output_dir / "steps")
    by_task = steps.merge(trials[["trial_key", "task"]], on="trial_key")
    for task, rows in by_task.groupby("task"):
        rows = rows.sort_values("step")
        assert list(rows.step) == [1, 2, 3], task
        scored = rows[rows.probe_kind != "synthetic"]  # a synthetic probe's rewards are random: not recorded
        assert len(scored) >= 2 and rows.probe_kind.eq("synthetic").any(), task
        assert (
            scored["rewards/accuracy/mean"].notna().all() and scored["rewards/format/mean"].notna().all()
        ), task
        assert rows[rows.probe_kind == "synthetic"]["rewards/accuracy/mean"].isna().all(), task
        assert rows["rewards/digits/mean"].isna().all(), task  # not requested: null, not 0
        evaluated = rows[rows.eval_pass_at_1.notna()]
        assert list(evaluated.step) == [2, 3], task  # every 2 steps and at the end
        assert evaluated.eval_pass_at_1.between(0, 1).all() and (evaluated.eval_k == 2).all(), task
        assert (evaluated.eval_pass_at_k >= evaluated.eval_pass_at_1).all(), task
    # Each trial evaluated its held-out prompts once before its first step too: the baseline.
    assert trials.eval_before_pass_at_1.between(0, 1).all() and (trials.eval_before_prompts == 3).all()
