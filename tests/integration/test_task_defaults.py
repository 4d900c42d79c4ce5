"""Every shipped task trains one step on `tiny` with its own defaults and the default
max_prompt_length, through the real trainer child; a prompt over a user's own limit is refused with
a message, not a traceback."""

import json
from pathlib import Path

import pytest

from orchestrator.running.supervisor import run_trial
from orchestrator.words.settings import GuardSettings
from tasks import available_tasks, task_problems
from trainers.trial import TrialSpec

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
# Kept short where the knob is not what is tested: one step, two completions of 8 tokens.
SHORT = {
    "model": "tiny",
    "max_steps": 1,
    "num_generations": 2,
    "batch_size": 1,
    "max_completion_length": 8,
    "quantization": "none",
    "num_threads": 1,
    "model_cache_dir": str(ROOT / ".cache"),
}


def gsm8k_file(folder: Path) -> str:
    """GSM8K comes from the Hugging Face hub, which this machine cannot reach: a local JSONL of
    GSM8K-shaped rows (task_args.path) stands in for it; every other setting is the default."""
    question = (
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?"
    )
    row = {"question": question, "answer": "Natalia sold 48/2 = 24 clips in May.\n#### 72"}
    path = folder / "gsm8k.jsonl"
    path.write_text("\n".join(json.dumps(row) for _ in range(80)) + "\n")
    return str(path)


@pytest.mark.parametrize("task", available_tasks())
def test_every_shipped_task_completes_a_step_on_its_defaults(tmp_path, task):
    task_args = {"path": gsm8k_file(tmp_path)} if task == "gsm8k" else {}
    if task_problems(task, task_args):
        pytest.skip(f"{task}: {task_problems(task, task_args)}")  # reasoning-gym not installed
    spec = TrialSpec(**SHORT, task=task, task_args=task_args, trial_key=f"defaults-{task}")
    assert spec.max_prompt_length == 256  # the default, not raised for the test
    result = run_trial(spec, trial_dir=tmp_path / "trial", guard=GuardSettings(timeout_s=540))
    assert result.status == "completed", result.status_detail
    assert [row["step"] for row in result.steps] == [1]
    assert result.started["effective_config"]["longest_prompt_tokens"] <= spec.max_prompt_length


def test_a_prompt_over_the_users_limit_fails_with_a_message_not_a_traceback(tmp_path):
    spec = TrialSpec(**SHORT, task="countdown", max_prompt_length=16, trial_key="refused")
    result = run_trial(spec, trial_dir=tmp_path, guard=GuardSettings(timeout_s=300))
    assert result.status == "failed"
    detail = result.status_detail
    assert detail.startswith("max_prompt_length: the task's longest prompt is "), detail
    longest = int(detail.split("longest prompt is ")[1].split(" tokens")[0])
    assert longest > 16 and f"over the limit of 16; raise max_prompt_length to at least {longest}" in detail
    assert "Traceback" not in detail and "trainer output" not in detail
