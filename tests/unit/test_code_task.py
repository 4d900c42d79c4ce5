"""The code task: its shipped problems are right, a user's MBPP-like or HumanEval-like JSONL reads into
the same rows, code is found in the asked format, tests become checks whose expected value never
reaches the sandbox, and its settings are checked with a fix."""

import json
import os
import time

import pytest

from orchestrator.recording.sinks import STEP_COLUMNS
from tasks import RECORDED_REWARDS, load_task, task_problems
from tasks.code import SHIPPED, Grader, _sandbox, extract_code, format_problem, read_problems
from tasks.code.checks import FALSE, TRUE, Check, parse_check, passed


@pytest.fixture(scope="module")
def shipped():
    return [json.loads(line) for line in SHIPPED.read_text().splitlines()]


def test_the_shipped_set_has_over_100_problems_with_3_or_more_tests_each(shipped):
    assert len(shipped) == 130
    assert min(len(p["test_list"]) for p in shipped) == 3
    assert len({p["text"] for p in shipped}) == 130


def test_every_shipped_reference_passes_its_tests_run_as_plain_python(shipped):
    for problem in shipped:
        namespace = {}
        exec(problem["code"], namespace)
        for test in problem["test_list"]:
            exec(test, namespace)  # raises AssertionError on a wrong expected value


def test_every_shipped_reference_scores_full_marks_in_the_sandbox(shipped):
    grader = Grader(_sandbox.Limits(timeout_s=5.0), workers=2, reasoning_format=False)
    scored = grader.many([(f"```python\n{p['code']}\n```", p["test_list"]) for p in shipped])
    _sandbox.close_all()
    failures = {
        p["text"]: s.why_zero for p, s in zip(shipped, scored, strict=True) if s.rewards["perfect"] != 1.0
    }
    assert failures == {}


def test_mbpp_and_humaneval_shapes_read_into_text_and_tests(tmp_path):
    path = tmp_path / "mine.jsonl"
    humaneval_test = (
        "METADATA = {}\n\ndef check(candidate):\n    assert candidate(2) == 4\n    assert not candidate(0)\n"
        "    assert abs(candidate(1.5) - 3.0) < 1e-9\n"
    )
    rows = [
        {"text": "Double x.", "code": "def double(x): return 2 * x", "test_list": ["assert double(2) == 4"]},
        {"prompt": "def double(x):\n    '''Double x.'''\n", "entry_point": "double", "test": humaneval_test},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    mbpp, humaneval = read_problems(path)
    assert mbpp == {"text": "Double x.", "tests": ["assert double(2) == 4"]}
    assert humaneval["text"] == "Complete this function:\n```python\ndef double(x):\n    '''Double x.'''\n```"
    assert humaneval["tests"] == [
        "assert double(2) == 4",
        "assert not double(0)",
        "assert abs(double(1.5) - 3.0) < 1e-09",
    ]
    grader = Grader(_sandbox.Limits(timeout_s=2.0), workers=1, reasoning_format=False)
    right = grader.one("```python\ndef double(x):\n    return x * 2\n```", humaneval["tests"])
    _sandbox.close_all()
    assert right.rewards == {"format": 1.0, "tests": 1.0, "perfect": 1.0}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "{not json",
            "mine.jsonl:1: not JSON (Expecting property name enclosed in double quotes); give one JSON object per line",
        ),
        (
            '{"question": "q"}',
            "mine.jsonl:1: a problem needs text and test_list (MBPP-like) or prompt, entry_point and test (HumanEval-like); got ['question']",
        ),
        (
            '{"text": "t", "test_list": []}',
            "mine.jsonl:1: no tests; give at least one 'assert f(x) == expected'",
        ),
        (
            '{"text": "t", "test_list": ["print(1)"]}',
            "mine.jsonl:1: test 'print(1)' is not one assert statement; write it as 'assert f(x) == expected'",
        ),
    ],
)
def test_a_bad_problem_line_is_refused_with_its_line_and_fix(tmp_path, line, message):
    path = tmp_path / "mine.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError) as error:
        read_problems(path)
    assert str(error.value) == f"{tmp_path}/{message}"


def test_an_equality_test_keeps_its_expected_value_out_of_the_probe():
    assert parse_check("assert f(3) == [1, 2]") == Check("f(3)", [1, 2])
    assert parse_check("assert 'ab' == g('x')") == Check("g('x')", "ab")
    assert parse_check("assert not is_even(3)") == Check("is_even(3)", None, FALSE)
    assert parse_check("assert f(1) == f(2)") == Check("f(1) == f(2)", None, TRUE)


def test_a_reply_passes_only_with_the_expected_literal_value():
    check = Check("f(3)", (1, 2))
    assert passed(check, {"status": "value", "value": "(1, 2)"})
    assert not passed(check, {"status": "value", "value": "[1, 2]"})  # a list is not the tuple, as in Python
    assert not passed(check, {"status": "value", "value": "<Same object at 0x7f>"})
    assert not passed(check, {"status": "error", "detail": "NameError"})
    assert passed(Check("f(1)", 1.0), {"status": "value", "value": "1"})  # 1 == 1.0, as in Python
    assert passed(Check("p(4)", None, FALSE), {"status": "value", "value": "False"})
    assert not passed(Check("p(4)", None, TRUE), {"status": "value", "value": "0"})


def test_code_is_read_from_one_fenced_block_or_the_reasoning_answer():
    assert (
        extract_code("Here:\n```python\ndef f():\n    return 1\n```\n", False) == "def f():\n    return 1\n"
    )
    assert extract_code("no code at all", False) is None
    reasoning = "<reasoning>easy</reasoning>\n<answer>\ndef f():\n    return 1\n</answer>"
    assert extract_code(reasoning, True) == "def f():\n    return 1"
    assert extract_code("```python\nx = 1\n```", True) is None  # the reasoning format was asked for


def test_finding_code_is_linear_on_adversarial_text():
    texts = [
        "```\n" + "a" * 200_000,
        "```python\n" * 50_000,
        "<reasoning>" + "</reasoning><answer>" * 20_000,
        "```" * 60_000,
    ]
    start = time.perf_counter()
    for text in texts:
        for reasoning_format in (False, True):
            format_problem(text, reasoning_format)
            extract_code(text, reasoning_format)
    assert time.perf_counter() - start < 1.0  # 0.04 s measured; a backtracking pattern takes minutes


def test_the_format_reward_says_why_a_completion_is_off_format():
    assert format_problem("```python\nx = 1\n```", False) is None
    assert format_problem("```python\nx = 1\n```\n```python\ny = 2\n```", False) == "2 code blocks, not one"
    assert (
        format_problem("```python\ndef f(:\n```", False)
        == "code does not parse (SyntaxError line 1: invalid syntax)"
    )
    assert (
        format_problem("<answer>x = 1</answer>", True) == "not <reasoning>...</reasoning><answer>...</answer>"
    )


def test_max_tests_per_problem_caps_each_rows_tests_and_the_prompt_asks_the_format(shipped):
    task = load_task("code", {"max_tests_per_problem": 2, "num_eval": 10})
    by_text = {f"{p['text']}": p["test_list"] for p in shipped}
    assert len(task.train) == 120 and len(task.eval) == 10
    for row in list(task.train) + list(task.eval):
        assert row["tests"] == by_text[row["prompt"][1]["content"]][:2]
    assert "```python" in row["prompt"][0]["content"]
    reasoning = load_task("code", {"reasoning_format": True}).train[0]["prompt"][0]["content"]
    assert "<reasoning>" in reasoning and "<answer>" in reasoning


def test_pass_at_k_counts_a_completion_correct_only_when_every_test_passes():
    task = load_task("code", {"num_eval": 5, "reward_timeout_s": 2.0})
    row = task.eval[0]
    name = row["tests"][0].split("(")[0].removeprefix("assert ")
    reference = next(
        json.loads(line)["code"] for line in SHIPPED.read_text().splitlines() if f"`{name}(" in line
    )
    assert task.is_correct(f"```python\n{reference}\n```", row) is True
    assert task.is_correct(f"```python\ndef {name}(*args):\n    return None\n```", row) is False
    _sandbox.close_all()


def test_bad_settings_name_the_field_the_value_and_the_fix(tmp_path):
    assert task_problems("code", {"rewards": {"test": 1.0}}) == [
        "task_args.rewards.test: unknown reward; did you mean 'tests'? available: format, perfect, tests"
    ]
    assert task_problems("code", {"reward_workers": 0, "max_tests_per_problem": 0}) == [
        "task_args.max_tests_per_problem: must be >= 1, got 0; give 1 or more",
        f"task_args.reward_workers: must be >= 1, got 0; or leave it out for cores - 1 ({max(1, os.cpu_count() - 1)} here)",
    ]
    assert task_problems("code", {"path": str(tmp_path / "none.jsonl")}) == [
        f"task_args.path: no such file {str(tmp_path / 'none.jsonl')!r}; give a JSONL of problems or leave it out "
        "for the shipped set"
    ]


def test_the_step_rows_record_the_code_rewards():
    assert RECORDED_REWARDS == ("accuracy", "format", "format_partial", "digits", "tests", "perfect")
    assert {"rewards/tests/mean", "rewards/perfect/mean", "rewards/format/mean"} <= set(STEP_COLUMNS)
