"""A 2-step trial with the code task completes on both stacks on CPU: per-reward columns (tests,
perfect, format) and the completions the sandbox killed in every step row, pass@1 and pass@k at the end."""

import json

import pandas as pd
import pytest

from orchestrator.cli import main

pytestmark = pytest.mark.slow
TASK_ARGS = {"num_samples": 8, "num_eval": 2, "reward_timeout_s": 1.0, "reward_workers": 2}


@pytest.mark.parametrize("framework", ["trl", "unsloth"])
def test_a_code_trial_records_each_reward_and_pass_at_k(framework, tmp_path, capsys):
    args = f"--framework {framework} --mode grpo --model-name tiny --max-steps 2 --num-generations 2"
    args += (
        " --batch-size 2 --max-completion-length 16 --max-prompt-length 256 --quantization none --lora-r 4"
    )
    args += " --eval-at-end --eval-samples 2 --eval-k 2 --probe-steps 0"  # every step scored
    code = main(
        [
            "trial",
            *args.split(),
            "--task",
            "code",
            "--task-args",
            json.dumps(TASK_ARGS),
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert code == 0, capsys.readouterr()
    steps = pd.read_parquet(tmp_path / "steps.parquet").sort_values("step")
    assert list(steps.step) == [1, 2]
    for name in ("tests", "perfect", "format"):
        assert steps[f"rewards/{name}/mean"].notna().all(), name
        assert steps[f"rewards/{name}/mean"].between(0, 1).all(), name
    assert steps["rewards/accuracy/mean"].isna().all()  # not a reward of this task: null, not 0
    # every step scored its completions in the sandbox, and the sandbox killed none of them: 0, not null
    assert list(steps.sandbox_kills) == [0.0, 0.0]
    last = steps.iloc[-1]
    assert last.eval_k == 2 and last.eval_prompts == 2
    # a random tiny model writes no fenced block that passes a problem's tests
    assert last.eval_pass_at_1 == 0.0 and last.eval_pass_at_k == 0.0
    trial = json.loads((tmp_path / "trial.json").read_text())
    assert trial["outcome"]["status"] == "completed"
