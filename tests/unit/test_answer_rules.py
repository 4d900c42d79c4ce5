"""Rewards read what the prompts ask for: GSM8K thousands groups, Unicode minus signs, <answer> tags
required when the prompt asks for them (task_args.require_tags relaxes it), and the partial format
reward."""

import pytest

import tasks.reasoning_gym as rg_task
from orchestrator.recording.sinks import STEP_COLUMNS
from tasks import load_task, task_problems
from tasks.arithmetic import first_integer
from tasks.countdown import countdown_score
from tasks.gsm8k import last_integer
from tasks.rewards import FORMAT_SYSTEM_PROMPT, REWARD_NAMES, format_partial_score

MINUS_SIGNS = ["\u2212", "\u2012", "\u2013", "\u2014", "\u2015", "\ufe63", "\uff0d"]
ALL_TASKS = ["arithmetic", "countdown", "gsm8k", "reasoning_gym"]
needs_reasoning_gym = pytest.mark.skipif(
    not rg_task.installed(), reason="reasoning-gym not installed (extra 'reasoning')"
)


def gsm8k_file(tmp_path, answer: int = 42) -> str:
    path = tmp_path / "gsm8k.jsonl"
    path.write_text(f'{{"question": "2 + 40?", "answer": "2 + 40 = 42\\n#### {answer}"}}\n' * 4)
    return str(path)


def accuracy_of(task, text: str, row: dict) -> float:
    columns = {key: [value] for key, value in row.items()}
    return task.rewards["accuracy"][0](completions=[text], **columns)[0]


# -- GSM8K: only real thousands groups join ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("It costs 1,000 dollars.", 1000),
        ("<answer>1,000,000</answer>", 1_000_000),
        ("He counts 1,2,3", 3),  # three numbers, not 123
        ("the point (3,4)", 4),  # a pair, not 34
        ("10,5", 5),  # a list of two, not 105
    ],
)
def test_gsm8k_joins_only_real_thousands_groups(text, expected):
    assert last_integer(text) == expected


# -- Unicode minus signs read as '-' in every numeric answer -------------------------------------


@pytest.mark.parametrize("minus", MINUS_SIGNS, ids=[f"U+{ord(m):04X}" for m in MINUS_SIGNS])
def test_unicode_minus_signs_read_as_minus_in_arithmetic_gsm8k_and_countdown(minus):
    assert first_integer(f"{minus}57") == -57
    assert last_integer(f"It fell to {minus}3 degrees") == -3
    assert countdown_score(f"<answer>4 * 5 {minus} 6</answer>", [4, 5, 6], 14, allow_division=False) == 1.0


@needs_reasoning_gym
@pytest.mark.parametrize("minus", MINUS_SIGNS, ids=[f"U+{ord(m):04X}" for m in MINUS_SIGNS])
def test_unicode_minus_signs_read_as_minus_in_numeric_reasoning_gym_answers(minus):
    task = load_task(
        "reasoning_gym",
        {"datasets": ["basic_arithmetic"], "num_samples": 40, "num_eval": 0, "rewards": {"accuracy": 1.0}},
        seed=1,
    )
    negative = [row for row in task.train if row["answer"].startswith("-")]
    assert negative  # seed 1 draws negative answers
    for row in negative:
        assert accuracy_of(task, f"<answer>{minus}{row['answer'][1:]}</answer>", row) == 1.0


# -- <answer> tags are required when the prompt asks for them -------------------------------------


def test_countdown_requires_closed_answer_tags_unless_relaxed():
    # 3 + 5 * 2 = 13 uses each of 3, 5, 2 once.
    for untagged in ("3 + 5 * 2", "<answer>3 + 5 * 2"):
        assert countdown_score(untagged, [3, 5, 2], 13, allow_division=False) == 0.0
    assert countdown_score("<answer>3 + 5 * 2</answer>", [3, 5, 2], 13, allow_division=False) == 1.0
    assert countdown_score("3 + 5 * 2", [3, 5, 2], 13, allow_division=False, require_tags=False) == 1.0

    for args, expected in (({}, 0.0), ({"require_tags": False}, 1.0)):
        task = load_task("countdown", {"num_samples": 3, "num_eval": 0, **args})
        row = task.train[0]
        assert accuracy_of(task, f"so {row['solution']}", row) == expected, args


@needs_reasoning_gym
def test_reasoning_gym_scores_untagged_last_lines_only_when_relaxed():
    settings = {"datasets": ["basic_arithmetic"], "num_samples": 6, "num_eval": 0}
    strict = load_task("reasoning_gym", settings)
    relaxed = load_task("reasoning_gym", {**settings, "require_tags": False})
    for row in strict.train:
        assert accuracy_of(strict, f"<answer>{row['answer']}</answer>", row) == 1.0
        assert accuracy_of(strict, f"thinking...\n{row['answer']}", row) == 0.0
        assert accuracy_of(relaxed, f"thinking...\n{row['answer']}", row) == 1.0


def test_gsm8k_requires_tags_when_its_prompt_asks_for_them(tmp_path):
    path = gsm8k_file(tmp_path)
    tagged = load_task("gsm8k", {"path": path, "num_eval": 1})  # default rewards include format
    relaxed = load_task("gsm8k", {"path": path, "num_eval": 1, "require_tags": False})
    plain = load_task("gsm8k", {"path": path, "num_eval": 1, "rewards": {"accuracy": 1.0}})
    assert tagged.train[0]["prompt"][0]["content"] == FORMAT_SYSTEM_PROMPT
    assert plain.train[0]["prompt"][0]["content"] != FORMAT_SYSTEM_PROMPT
    row = tagged.train[0]
    assert accuracy_of(tagged, "<think>2 + 40</think><answer>42</answer>", row) == 1.0
    assert accuracy_of(tagged, "2 + 40 = 42", row) == 0.0
    assert accuracy_of(relaxed, "2 + 40 = 42", row) == 1.0
    assert accuracy_of(plain, "2 + 40 = 42", row) == 1.0  # its prompt asks for no tags


def test_arithmetic_requires_tags_only_with_the_format_prompt():
    plain = load_task("arithmetic", {"num_samples": 2, "num_eval": 0})
    tagged = load_task(
        "arithmetic", {"num_samples": 2, "num_eval": 0, "rewards": {"accuracy": 1, "format": 0.1}}
    )
    row = plain.train[0]
    assert accuracy_of(plain, str(row["answer"]), row) == 1.0
    assert accuracy_of(tagged, str(row["answer"]), row) == 0.0
    assert accuracy_of(tagged, f"<answer>{row['answer']}</answer>", row) == 1.0


@pytest.mark.parametrize("task", ALL_TASKS)
def test_a_non_bool_require_tags_names_the_arg_value_rule_and_fix(task):
    if task == "reasoning_gym" and not rg_task.installed():
        pytest.skip("reasoning-gym not installed (extra 'reasoning')")
    assert task_problems(task, {"require_tags": "no"}) == [
        "task_args.require_tags: must be bool, got 'no' (Input should be a valid boolean); give a bool "
        "(true or false, unquoted in YAML) or leave it out for the default True"
    ]
    assert task_problems(task, {"require_tags": False}) == []


# -- format_partial: a share per well-formed tag pair ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>a</think><answer>b</answer>", 1.0),
        ("<think>a</think> so 42", 0.5),
        ("<answer>42</answer>", 0.5),
        ("<think>a</think> text <answer>b</answer> trailing", 1.0),  # strict format gives 0 here
        ("<think>a</think><answer>1</answer><answer>2</answer>", 0.5),  # two answers: that pair fails
        ("</think>a<think><answer>b", 0.0),  # closed before opened; never closed
        ("<answer>42", 0.0),
        ("", 0.0),
    ],
)
def test_format_partial_gives_a_share_per_well_formed_tag_pair(text, expected):
    assert format_partial_score(text) == expected


def test_format_partial_is_selectable_and_gets_its_own_step_column():
    task = load_task(
        "arithmetic", {"num_samples": 2, "num_eval": 0, "rewards": {"accuracy": 1, "format_partial": 0.5}}
    )
    assert list(task.rewards) == ["accuracy", "format_partial"]
    func, weight = task.rewards["format_partial"]
    assert (func.__name__, weight) == ("format_partial", 0.5)  # TRL logs rewards/format_partial/mean
    assert func(completions=["<think>x</think> 7", "7"]) == [0.5, 0.0]
    assert task.train[0]["prompt"][0]["content"] == FORMAT_SYSTEM_PROMPT
    assert "format_partial" in REWARD_NAMES and "rewards/format_partial/mean" in STEP_COLUMNS
