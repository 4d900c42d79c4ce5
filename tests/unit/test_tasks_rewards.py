"""Shared rewards: the format reward, composition by weights, the TRL signature, and every task's
rewards on adversarial completions."""

import pytest

from tasks import TASKS, load_task, task_problems
from tasks.rewards import FORMAT_SYSTEM_PROMPT, compose_rewards, format_score, reward_function
from tools.inputs.adversarial import ADVERSARIAL

# Small settings that build each task in well under a second without network.
SMALL = {
    "arithmetic": {"num_samples": 4, "num_eval": 2},
    "code": {"num_samples": 4, "num_eval": 2, "reward_timeout_s": 1.0},
    "countdown": {"num_samples": 4, "num_eval": 2, "allow_division": True},
    "reasoning_gym": {
        "datasets": ["syllogism", "string_insertion", "number_filtering"],
        "eval_datasets": ["family_relationships", "maze", "base_conversion"],
        "num_samples": 6,
        "num_eval": 6,
    },
}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    path = tmp_path_factory.mktemp("gsm8k") / "gsm8k.jsonl"
    path.write_text('{"question": "2 + 40?", "answer": "2 + 40 = 42\\n#### 42"}\n' * 6)
    args = dict(SMALL, gsm8k={"path": str(path), "num_eval": 2, "rewards": {"accuracy": 1.0, "format": 0.5}})
    if task_problems("reasoning_gym", {}):  # not installed: covered by test_tasks_reasoning_gym
        args.pop("reasoning_gym")
    return {name: load_task(name, task_args) for name, task_args in args.items()}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>a</think><answer>b</answer>", 1.0),
        ("  <think>\nsteps\n</think>\n <answer> 42 </answer>\n", 1.0),
        ("<think></think><answer></answer>", 1.0),
        ("<answer>42</answer>", 0.0),
        ("<think>a</think>", 0.0),
        ("<think>a</think> text <answer>b</answer>", 0.0),
        ("<answer>b</answer><think>a</think>", 0.0),
        ("<think>a</think><answer>b</answer> trailing", 0.0),
        ("<think><think>a</think><answer>b</answer>", 0.0),
        ("<think>a</think><answer>b</answer><answer>c</answer>", 0.0),
        ("", 0.0),
    ],
)
def test_format_score(text, expected):
    assert format_score(text) == expected


def test_composition_names_weights_and_trl_signature():
    rewards = compose_rewards(
        lambda text, row: float(text == row["answer"]), {"accuracy": 1.0, "format": 0.25}, {}
    )
    assert list(rewards) == ["accuracy", "format"]
    assert [w for _, w in rewards.values()] == [1.0, 0.25]
    # TRL names the logged metric rewards/<__name__>/mean after each function.
    assert [f.__name__ for f, _ in rewards.values()] == ["accuracy", "format"]
    accuracy, fmt = rewards["accuracy"][0], rewards["format"][0]
    chat = [
        [{"role": "assistant", "content": "<think>x</think><answer>y</answer>"}],
        [{"role": "assistant", "content": "7"}],
    ]
    # Dataset columns arrive as lists, one entry per completion; other kwargs are not columns.
    assert accuracy(prompts=[None, None], completions=chat, answer=["no", "7"], trainer_state=object()) == [
        0.0,
        1.0,
    ]
    assert fmt(prompts=[None, None], completions=chat) == [1.0, 0.0]


def test_a_raising_score_counts_zero():
    def boom(text, row):
        raise RuntimeError(text)

    assert reward_function(boom, "boom")(completions=["a", "b"]) == [0.0, 0.0]
    assert reward_function(lambda text, row: float("nan"), "nan")(completions=["a"]) == [0.0]


@pytest.mark.parametrize("task", ["arithmetic", "countdown", "gsm8k", "reasoning_gym"])
def test_rewards_setting_is_validated_for_every_task(task):
    problems = task_problems(task, {"rewards": {"acuracy": 1.0, "format": -1}})
    assert any("task_args.rewards.acuracy: unknown reward; did you mean 'accuracy'" in p for p in problems)
    assert any("task_args.rewards.format: weight must be a number >= 0, got -1" in p for p in problems)
    assert task_problems(task, {"rewards": {"accuracy": 0, "format": 0}}) != []


def test_every_task_sets_eval_and_is_correct(tasks):
    assert set(tasks) | {"reasoning_gym"} == set(TASKS)
    for name, task in tasks.items():
        assert task.eval is not None and len(task.eval) > 0, name
        assert set(task.eval.column_names) == set(task.train.column_names), name
        assert callable(task.is_correct), name
        assert task.is_correct("", task.eval[0]) is False, name


def test_format_reward_switches_the_system_prompt(tasks):
    with_format = load_task(
        "arithmetic", {"num_samples": 2, "num_eval": 1, "rewards": {"accuracy": 1.0, "format": 0.1}}
    )
    assert with_format.train[0]["prompt"][0]["content"] == FORMAT_SYSTEM_PROMPT
    assert tasks["arithmetic"].train[0]["prompt"][0]["content"] != FORMAT_SYSTEM_PROMPT
    assert list(tasks["gsm8k"].rewards) == ["accuracy", "format"]
    assert tasks["gsm8k"].train[0]["prompt"][0]["content"] == FORMAT_SYSTEM_PROMPT


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_every_reward_scores_adversarial_text_in_range(tasks, text):
    # Their time is bounded by tasks/bounded.py (tests/unit/test_reward_timeouts.py) and measured by
    # bench/cost/rewards.py.
    for name, task in tasks.items():
        # Every train and eval row: reasoning-gym's scorers differ per dataset, eval-only ones included.
        rows = [row for data in (task.train, task.eval) for row in data]
        for row in rows:
            columns = {key: [value] for key, value in row.items()}
            for reward_name, (func, _) in task.rewards.items():
                for completion in (text, [{"role": "assistant", "content": text}]):
                    scores = func(prompts=columns["prompt"], completions=[completion], **columns)
                    assert len(scores) == 1 and 0.0 <= scores[0] <= 1.0, (name, reward_name)
            assert task.is_correct(text, row) in (True, False)
