"""Every scoring call is bounded in time: over task_args.reward_timeout_s it scores 0 and is counted, and
the count reaches the step row."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tasks import load_task, task_problems
from tasks.bounded import SCORING
from tasks.reasoning_gym import generate, installed
from tasks.rewards import correctness, reward_function
from tools.inputs.adversarial import NESTED_LOG, POWER_PRODUCT, negations
from trainers.events import EventWriter
from trainers.measure import StepMeter

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 0.5
SLACK_S = 5.0  # a shared machine: the bound checked is the limit plus a wide margin
needs_reasoning_gym = pytest.mark.skipif(not installed(), reason="reasoning-gym is not installed")


def slow_or_one(text, row):
    if text == "slow":
        time.sleep(60)
    return 1.0


def score_once(task, text: str, reward: str = "accuracy") -> tuple[list[float], float]:
    row = task.train[0]
    columns = {key: [value] for key, value in row.items()}
    SCORING.reset()
    start = time.perf_counter()
    scores = task.rewards[reward][0](prompts=columns["prompt"], completions=[text], **columns)
    return scores, time.perf_counter() - start


@needs_reasoning_gym
@pytest.mark.parametrize(
    ("dataset", "answer"),
    [
        ("simple_integration", POWER_PRODUCT),
        ("intermediate_integration", POWER_PRODUCT),
        ("simple_integration", NESTED_LOG),
    ],
    ids=["power-product-simple", "power-product-intermediate", "nested-log"],
)
def test_an_explosive_symbolic_answer_scores_zero_at_its_limit_and_is_counted(dataset, answer):
    task = load_task(
        "reasoning_gym", {"datasets": [dataset], "num_samples": 1, "num_eval": 0, "reward_timeout_s": LIMIT_S}
    )
    variable = generate({dataset: 1.0}, 1, 42, "train", {})[0]["metadata"]["variable"]
    scores, elapsed = score_once(task, f"<answer>{answer.replace('x', variable)}</answer>")
    assert scores == [0.0]
    assert (SCORING.calls, SCORING.timeouts) == (1, 1)
    assert elapsed < LIMIT_S + SLACK_S


@needs_reasoning_gym
def test_two_thousand_negations_in_propositional_logic_score_zero_at_the_limit_and_are_counted():
    task = load_task(
        "reasoning_gym",
        {"datasets": ["propositional_logic"], "num_samples": 1, "num_eval": 0, "reward_timeout_s": LIMIT_S},
    )
    variable = generate({"propositional_logic": 1.0}, 1, 42, "train", {})[0]["metadata"]["variables"][0]
    scores, elapsed = score_once(task, f"<answer>{negations(variable)}</answer>")
    assert scores == [0.0]
    assert (SCORING.calls, SCORING.timeouts) == (1, 1)
    assert elapsed < LIMIT_S + SLACK_S


def test_only_the_calls_over_the_limit_score_zero_and_the_rest_keep_their_scores():
    reward = reward_function(slow_or_one, "accuracy", timeout_s=LIMIT_S)
    SCORING.reset()
    assert reward(completions=["slow", "a", "slow", "b"]) == [0.0, 1.0, 0.0, 1.0]
    assert (SCORING.calls, SCORING.timeouts) == (4, 2)


def test_a_held_out_check_over_the_limit_is_not_correct_and_is_counted():
    is_correct = correctness(slow_or_one, timeout_s=LIMIT_S)
    SCORING.reset()
    assert [is_correct("slow", {}), is_correct("a", {})] == [False, True]
    assert (SCORING.calls, SCORING.timeouts) == (2, 1)


def test_scoring_is_bounded_in_a_process_with_torch_threads_running():
    # The trainer child scores in-process while torch's intra-op pool and other threads run.
    script = textwrap.dedent(
        """
        import json, threading, time
        import torch
        from tasks.bounded import SCORING
        from tasks.rewards import reward_function

        def slow_or_one(text, row):
            if text == "slow":
                time.sleep(60)
            return 1.0

        torch.set_num_threads(2)
        stop = threading.Event()
        def busy():
            a = torch.randn(256, 256)
            while not stop.is_set():
                a = torch.tanh(a @ a)
        thread = threading.Thread(target=busy)
        thread.start()
        reward = reward_function(slow_or_one, "accuracy", timeout_s=0.5)
        results = [reward(completions=["slow", "a"]) for _ in range(3)]
        stop.set()
        thread.join()
        print(json.dumps({"results": results, "timeouts": SCORING.timeouts}))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"results": [[0.0, 1.0]] * 3, "timeouts": 3}


@pytest.mark.parametrize("task", ["arithmetic", "countdown", "gsm8k", "reasoning_gym"])
@pytest.mark.parametrize("value", [0, -1.0, 601, float("nan")])
def test_a_reward_timeout_outside_its_range_is_refused_with_the_rule(task, value):
    if task == "reasoning_gym" and not installed():
        pytest.skip("reasoning-gym is not installed")
    problems = task_problems(task, {"reward_timeout_s": value})
    assert problems == [
        f"task_args.reward_timeout_s: must be seconds in (0, 600], got {value!r}; "
        "give e.g. 1.0 (the default) or leave it out"
    ]


def test_a_reward_timeout_that_is_not_a_number_is_refused():
    (problem,) = task_problems("arithmetic", {"reward_timeout_s": "1s"})
    assert problem.startswith("task_args.reward_timeout_s: must be float, got '1s'")


# What StepMeter reads of GRPOConfig for the original benchmark's token estimate.
TRL_ARGS = SimpleNamespace(max_completion_length=8, num_generations=2, per_device_train_batch_size=2)


def test_the_step_row_carries_the_step_s_timeouts_and_null_without_scoring():
    reward = reward_function(slow_or_one, "accuracy", timeout_s=LIMIT_S)
    meter = StepMeter(EventWriter(""), max_prompt_length=16)
    state = SimpleNamespace(global_step=0, max_steps=3)
    meter.on_step_begin(None, state, None)
    reward(completions=["slow", "a", "slow"])
    state.global_step = 1
    meter.on_step_end(TRL_ARGS, state, None)
    assert meter.pending["reward_timeouts"] == 2
    meter.on_step_begin(None, state, None)  # a step that reuses its cycle's completions scores nothing
    state.global_step = 2
    meter.on_step_end(TRL_ARGS, state, None)
    assert meter.pending["reward_timeouts"] is None
    meter.on_step_begin(None, state, None)
    reward(completions=["a"])
    state.global_step = 3
    meter.on_step_end(TRL_ARGS, state, None)
    assert meter.pending["reward_timeouts"] == 0
