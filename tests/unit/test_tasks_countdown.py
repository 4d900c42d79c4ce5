import ast

import pytest

from tasks import load_task, task_problems
from tasks.countdown import countdown_score, extract_expression
from tasks.safe_eval import Limits, UnsafeExpression, evaluate, guarded_eval, parse_expression


@pytest.mark.parametrize("allow_division", [False, True])
def test_problems_are_solvable_by_construction(allow_division):
    task = load_task(
        "countdown", {"num_samples": 40, "num_eval": 10, "allow_division": allow_division}, seed=5
    )
    for data in (task.train, task.eval):
        for row in data:
            assert len(row["numbers"]) == 3
            assert 1 <= row["target"] <= 1000
            assert (
                countdown_score(
                    f"<answer>{row['solution']}</answer>", row["numbers"], row["target"], allow_division
                )
                == 1.0
            )
            assert task.is_correct(f"<think>ok</think><answer>{row['solution']}</answer>", row)
            assert str(row["target"]) in row["prompt"][-1]["content"]


def test_division_appears_only_when_allowed():
    plain = load_task("countdown", {"num_samples": 60, "num_eval": 0}, seed=1).train["solution"]
    divided = load_task(
        "countdown", {"num_samples": 60, "num_eval": 0, "allow_division": True}, seed=1
    ).train["solution"]
    assert not any("/" in s for s in plain)
    assert any("/" in s for s in divided)


def test_same_seed_same_data_other_seed_other_data():
    a = load_task("countdown", {"num_samples": 16, "num_eval": 4, "num_numbers": 4}, seed=7)
    b = load_task("countdown", {"num_samples": 16, "num_eval": 4, "num_numbers": 4}, seed=7)
    c = load_task("countdown", {"num_samples": 16, "num_eval": 4, "num_numbers": 4}, seed=8)
    assert a.train.to_dict() == b.train.to_dict() and a.eval.to_dict() == b.eval.to_dict()
    assert a.train["numbers"] != c.train["numbers"]
    assert all(len(n) == 4 for n in a.train["numbers"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>(4 + 6) * 5</answer>", 1.0),
        ("<answer>5 * (6 + 4) = 50</answer>", 1.0),  # a trailing '= target' is fine
        ("Let me try 4 + 6 = 10, then 10 * 5. So (4 + 6) * 5", 0.0),  # no tags: the prompt asks for them
        ("<answer>(4 + 6) * 5</answer> and later 4 * 6 + 5", 1.0),  # the tag wins
        ("<answer>4 * 6 + 5</answer>", 0.0),  # wrong value
        ("<answer>(4 + 6) * 5 * 1</answer>", 0.0),  # a number that was not given
        ("<answer>(4 + 4 + 2) * 5</answer>", 0.0),  # 4 used twice, 6 never
        ("<answer>(4 + 6) * 5 + 0</answer>", 0.0),
        ("<answer>50</answer>", 0.0),  # the target alone uses no numbers
        ("<answer>(4 + 6) ** 1 * 5</answer>", 0.0),  # powers refused
        ("<answer>(4+6)*5.0</answer>", 0.0),  # floats refused
        ("<answer>-(-(4 + 6)) * 5</answer>", 0.0),  # unary minus refused
        ("<answer>(4 + 6) * 5 if 1 else 0</answer>", 0.0),
        ("<answer>abs(4 + 6) * 5</answer>", 0.0),
        ("(\u0664 + 6) * 5", 0.0),
        ("", 0.0),
    ],
)
def test_countdown_score(text, expected):
    assert countdown_score(text, [4, 5, 6], 50, allow_division=False) == expected


def test_division_is_exact_and_only_when_allowed():
    assert countdown_score("<answer>(6 / 4) * 4</answer>", [6, 4, 4], 6, allow_division=True) == 1.0
    assert countdown_score("<answer>(6 / 4) * 4</answer>", [6, 4, 4], 6, allow_division=False) == 0.0
    assert countdown_score("<answer>6 / (4 - 4)</answer>", [6, 4, 4], 6, allow_division=True) == 0.0


def test_extract_expression():
    assert extract_expression("so the answer is 3 * (2 + 1).") == ""
    assert extract_expression("so the answer is 3 * (2 + 1).", require_tags=False) == "3 * (2 + 1)"
    assert extract_expression("no maths here - none", require_tags=False) == ""
    assert extract_expression("<answer> 1 + 2 = 3 </answer>") == "1 + 2"


@pytest.mark.parametrize(
    "text",
    [
        "9**9**9**9",
        "x + 1",
        "f(1)",
        "().__class__",
        "1" * 13,
        "(" * 300 + "1" + ")" * 300,
        "1+" * 200 + "1",
        "True + 1",
    ],
)
def test_safe_eval_refuses(text):
    with pytest.raises(UnsafeExpression):
        evaluate(parse_expression(text, Limits()), Limits())


def test_safe_eval_bounds_values_and_guarded_eval_keeps_literals():
    huge = Limits(max_abs=10**6)
    with pytest.raises(UnsafeExpression):
        evaluate(parse_expression("999999 * 999999", huge), huge)
    assert guarded_eval("['a', 'b']") == ["a", "b"]
    assert guarded_eval("(0x10 + 0x2) << 2") == 72
    for bomb in ("9**9**9**9", "1 << 10**9", "__import__('os')", "['a'] * 10**9", "x" * 20_000):
        with pytest.raises(ValueError):
            guarded_eval(bomb)
    assert isinstance(parse_expression("1 + 2", Limits()), ast.BinOp)


def test_settings_are_validated():
    problems = task_problems("countdown", {"num_numbers": 1, "allow_division": "yes", "max_numbr": 9})
    assert any(
        "max_numbr: not a setting of task 'countdown'; did you mean 'max_number'" in p for p in problems
    )
    assert any("task_args.allow_division: must be bool, got 'yes'" in p for p in problems)
    assert task_problems("countdown", {"num_numbers": 9}) == ["task_args.num_numbers: must be 2..6, got 9"]
