import re
import time

import pytest

from tasks import load_task
from tasks.arithmetic import exact_answer_reward, first_integer, make_problems

ADVERSARIAL = [
    "",
    "   ",
    "no digits here",
    "9" * 100_000,
    "x" * 100_000 + "42",
    "__import__('os').system('echo pwned')",
    "9**9**9**9",
    "(" * 10_000 + "1" + ")" * 10_000,
    "\u0664\u0662",  # Arabic-Indic digits "42": not ASCII, not the answer
    "\x00\x01\udcff",
    "-57",
    "The answer is 57.",
]


def test_same_seed_same_data_other_seed_other_data():
    a = load_task("arithmetic", {"num_samples": 32}, seed=7).train
    b = load_task("arithmetic", {"num_samples": 32}, seed=7).train
    c = load_task("arithmetic", {"num_samples": 32}, seed=8).train
    assert a["answer"] == b["answer"] and a["prompt"] == b["prompt"]
    assert a["answer"] != c["answer"]
    assert all(10 <= x <= 99 and 10 <= y <= 99 for x, y in make_problems(200, seed=1))


def test_prompt_is_conversational_and_answer_matches():
    row = load_task("arithmetic", {"num_samples": 4}, seed=3).train[0]
    assert row["prompt"][-1]["role"] == "user"
    a, b = row["prompt"][-1]["content"].removeprefix("What is ").removesuffix("?").split("+")
    assert int(a) + int(b) == row["answer"]


@pytest.mark.parametrize("text", ADVERSARIAL)
def test_reward_never_raises_and_is_bounded(text):
    start = time.perf_counter()
    chat = [[{"role": "assistant", "content": text}]]
    assert exact_answer_reward(prompts=[None], completions=chat, answer=[57])[0] in (0.0, 1.0)
    assert exact_answer_reward(prompts=[None], completions=[text], answer=[57])[0] in (0.0, 1.0)
    assert time.perf_counter() - start < 0.1


def test_reward_scores_first_integer_only():
    completions = ["57", "The answer is 57.", "56 no wait 57", "\u0665\u0667", "-57", "", None]
    assert exact_answer_reward(completions=completions, answer=[57] * 7) == [
        1.0,
        1.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ]
    assert first_integer("abc 123 456") == 123
    assert first_integer("nothing") is None


def test_reward_survives_malformed_rows():
    assert exact_answer_reward(completions=["12"], answer=["not a number"]) == [0.0]
    assert exact_answer_reward(completions=["12"], answer=None) == [0.0]
    assert exact_answer_reward(completions=None, answer=None) == []


def test_plain_prompt_style_is_the_original_text_and_refuses_format_rewards():
    row = load_task("arithmetic", {"num_samples": 1, "num_eval": 0, "prompt_style": "plain"}, seed=3).train[0]
    question = row["prompt"].split("Question: What is ", 1)[1].removesuffix("?\nAnswer:")
    a, b = question.split(" + ")
    assert isinstance(row["prompt"], str) and int(a) + int(b) == row["answer"]
    with pytest.raises(ValueError, match="task_args.prompt_style: plain"):
        load_task("arithmetic", {"prompt_style": "plain", "rewards": {"accuracy": 1.0, "format": 0.5}})


# -- answer_rule original: the original benchmark's exact-integer match, as rlsweep reads it ----------


def _original_task():
    return load_task("arithmetic", {"num_samples": 1, "num_eval": 0, "answer_rule": "original"}, seed=3)


@pytest.mark.parametrize(
    ("text", "answer", "score"),
    [
        ("042", 42, 1.0),  # leading zeros: the integer 42
        ("0042 apples", 42, 1.0),
        ("-57", -57, 1.0),  # a minus sign belongs to the integer
        ("-57", 57, 0.0),
        ("+57", 57, 1.0),  # a plus sign is not part of it: 57
        ("\u221257", -57, 0.0),  # a Unicode minus is not read as a sign: the integer is 57
        ("<answer>42</answer>", 42, 1.0),  # tags around the answer: still its first integer
        ("12 + 30 = <answer>42</answer>", 42, 0.0),  # the first integer of the text is 12, tags or not
        ("42 is the answer, not 41", 42, 1.0),
        ("", 42, 0.0),  # empty text: no integer
        ("no digits here", 42, 0.0),
    ],
)
def test_the_original_rule_scores_the_first_integer_of_the_text(text, answer, score):
    task = _original_task()
    assert task.rewards["accuracy"][0](completions=[text], answer=[answer])[0] == score


def test_the_tagged_rule_reads_the_answer_tag_where_the_original_reads_the_first_integer():
    text = "12 + 30 = <answer>42</answer>"
    tagged = load_task("arithmetic", {"num_samples": 1, "num_eval": 0}, seed=3)
    assert tagged.rewards["accuracy"][0](completions=[text], answer=[42])[0] == 1.0
    assert _original_task().rewards["accuracy"][0](completions=[text], answer=[42])[0] == 0.0


def test_the_original_rule_refuses_format_rewards_it_would_not_read():
    with pytest.raises(ValueError, match="task_args.answer_rule: original scores the first integer"):
        load_task("arithmetic", {"answer_rule": "original", "rewards": {"accuracy": 1.0, "format": 0.5}})


def test_the_original_16gb_sweep_scores_with_the_original_rule():
    from pathlib import Path

    from orchestrator.spec.load import load_sweep

    sweep = load_sweep(Path(__file__).resolve().parents[2] / "sweeps" / "original-16gb.yaml")
    assert sweep.task_args["answer_rule"] == "original"


def test_answer_rule_last_reads_the_answer_after_a_restated_question():
    from tasks.arithmetic import last_integer

    task = load_task("arithmetic", {"num_samples": 4, "answer_rule": "last"}, seed=1)
    reward, _ = task.rewards["accuracy"]
    said = ["3 + 4 = 7", "The answer is 7.", "What is 3 + 4? 7", "7 or 8", "no number", "-7"]
    assert reward(completions=said, answer=[7] * 6) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert last_integer("3 + 4 = \u22127") == -7 and last_integer("9" * 20) is None
    assert task.is_correct("So 3 + 4 = 7", {"answer": 7}) and not task.is_correct("7, no, 8", {"answer": 7})


def test_one_digit_sums_as_one_question_under_the_models_own_system_prompt():
    task = load_task(
        "arithmetic", {"num_samples": 64, "operand_digits": 1, "prompt_style": "question"}, seed=2
    )
    pairs = make_problems(200, seed=2, digits=1)
    assert {x for pair in pairs for x in pair} == set(range(10))
    row = task.train[0]
    assert len(row["prompt"]) == 1 and row["prompt"][0]["role"] == "user"
    a, b = re.fullmatch(
        r"What is (\d) \+ (\d)\? Give the answer as a number\.", row["prompt"][0]["content"]
    ).groups()
    assert int(a) + int(b) == row["answer"]


def test_operand_digits_and_a_question_prompt_with_format_rewards_are_refused():
    from tasks import task_problems

    assert (
        "task_args.operand_digits: 0 is not 1 to 6" in task_problems("arithmetic", {"operand_digits": 0})[0]
    )
    assert task_problems("arithmetic", {"prompt_style": "question", "rewards": {"format": 1.0}})[
        0
    ].startswith("task_args.prompt_style: question asks for the number only")
