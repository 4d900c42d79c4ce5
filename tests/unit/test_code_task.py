"""The code task: its shipped problems are right, a user's MBPP-like or HumanEval-like JSONL reads into
the same rows, code is found in the asked format, tests become checks whose expected value never
reaches the sandbox, its settings are checked with a fix, and a completion whose run the sandbox killed
scores 0 in total and is counted in the step row."""

import json
import os
import time

import pytest

from orchestrator.recording.sinks import STEP_COLUMNS
from tasks import RECORDED_REWARDS, load_task, task_problems
from tasks.code import SHIPPED, Grader, _sandbox, extract_code, format_problem, is_act, read_problems
from tasks.code.checks import FALSE, TRUE, Check, parse_check, passed
from tools.inputs.hostile_code import (
    BIG_WRITE,
    DELETE_OUTSIDE,
    LOOP,
    MEMORY_BOMB,
    READ_SECRET,
    SOCKET,
    WRITE_OUTSIDE,
)


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


# ------------------------------------------------------------------------------------------------
# a run the sandbox killed pays nothing
# ------------------------------------------------------------------------------------------------
KILLED = {
    "endless loop": (LOOP, "time limit"),
    "memory bomb": (MEMORY_BOMB, "memory limit (MemoryError)"),
    "disk fill": (BIG_WRITE.format(marker="fill"), "file size limit (SIGXFSZ)"),
    "network attempt": (SOCKET, "forbidden call (network attempt: a name lookup)"),
    "blocked write outside": (
        WRITE_OUTSIDE,
        "forbidden call (write outside its directory: /rlsweep-no-such-folder/planted)",
    ),
    "blocked delete outside": (
        DELETE_OUTSIDE,
        "forbidden call (delete outside its directory: /rlsweep-no-such-folder/victim)",
    ),
    "blocked read of a secret": (
        READ_SECRET,
        "forbidden call (read outside its directory: /tmp/.ssh/id_ed25519)",
    ),
}
RIGHT = "def double(x):\n    return x * 2"


def double_task(tmp_path, **settings):
    """The code task on one problem, double(x), with short sandbox limits: 0.5 s, 128 MiB."""
    path = tmp_path / "double.jsonl"
    tests = ["assert double(3) == 6", "assert double(4) == 8"]
    path.write_text(json.dumps({"text": "Write double(x).", "test_list": tests}) + "\n")
    args = {"path": str(path), "num_eval": 0, "reward_timeout_s": 0.5, "memory_mb": 128, "reward_workers": 1}
    return load_task("code", args | settings)


def totals(task, codes: list[str]) -> list[float]:
    """Each completion's total reward, summed over the task's rewards as TRL weighs them."""
    completions = [f"```python\n{code}\n```" for code in codes]
    tests = [task.train[0]["tests"]] * len(codes)
    columns = {"prompts": [task.train[0]["prompt"]] * len(codes), "completions": completions, "tests": tests}
    scores = [(reward(**columns), weight) for reward, weight in task.rewards.values()]
    return [sum(weight * values[i] for values, weight in scores) for i in range(len(codes))]


@pytest.mark.parametrize("hostile", list(KILLED))
def test_a_well_formatted_completion_the_sandbox_killed_scores_zero_in_total(tmp_path, hostile):
    code, reason = KILLED[hostile]
    task = double_task(tmp_path)
    assert totals(task, [code, RIGHT]) == [0.0, pytest.approx(1.6)]
    completion = f"```python\n{code}\n```"
    assert task.killed(completion, task.train[0]) == reason
    assert task.explain(completion, task.train[0]) == {
        "tests": f"sandbox killed it: {reason}",
        "perfect": f"sandbox killed it: {reason}",
        "format": f"sandbox killed it: {reason} "
        + (
            "(an act: no reward pays it)"
            if is_act(reason)
            else "(task_args.pay_format_when_killed: true pays it)"
        ),
    }
    _sandbox.close_all()


def test_with_pay_format_when_killed_a_killed_completion_gets_its_format_reward_back(tmp_path):
    task = double_task(tmp_path, pay_format_when_killed=True)
    codes = [code for code, _ in KILLED.values()]
    # format's weight for a limit it ran into, tests and perfect 0; an act (a forbidden call) 0 in total
    assert totals(task, codes) == [0.0 if is_act(why) else pytest.approx(0.1) for _, why in KILLED.values()]
    assert [is_act(why) for _, why in KILLED.values()] == [False, False, False, True, True, True, True]
    _sandbox.close_all()


def test_an_ordinary_wrong_answer_is_not_a_kill_and_keeps_its_format_reward(tmp_path):
    task = double_task(tmp_path)
    wrong = "def double(x):\n    raise ValueError(x)"
    assert totals(task, [wrong]) == [pytest.approx(0.1)]
    assert task.killed(f"```python\n{wrong}\n```", task.train[0]) is None
    _sandbox.close_all()


def test_the_step_row_counts_the_completions_the_sandbox_killed_and_null_without_a_sandbox(tmp_path):
    from types import SimpleNamespace

    from tasks.rewards import reward_function
    from trainers.events import EventWriter
    from trainers.measure import StepMeter

    task = double_task(tmp_path)
    meter = StepMeter(EventWriter(""), max_prompt_length=16)
    state = SimpleNamespace(global_step=0, max_steps=3)
    trl_args = SimpleNamespace(max_completion_length=8, num_generations=2, per_device_train_batch_size=2)

    def step(score) -> None:
        meter.on_step_begin(None, state, None)
        score()
        state.global_step += 1
        meter.on_step_end(trl_args, state, None)

    step(lambda: totals(task, [LOOP, RIGHT, MEMORY_BOMB, "no code", WRITE_OUTSIDE]))
    # each completion once, whatever the rewards that read it; a blocked forbidden call is a kill
    assert meter.pending["sandbox_kills"] == 3
    assert json.loads(meter.pending["sandbox_kill_reasons"]) == {
        "time limit": 1,
        "memory limit (MemoryError)": 1,
        "forbidden call (write outside its directory: /rlsweep-no-such-folder/planted)": 1,
    }
    step(lambda: totals(task, [RIGHT, RIGHT]))
    assert meter.pending["sandbox_kills"] == 0
    assert meter.pending["sandbox_kill_reasons"] == "{}"
    step(lambda: None)  # a step that reuses its cycle's completions scores nothing: not measured
    assert meter.pending["sandbox_kills"] is None and meter.pending["sandbox_kill_reasons"] is None
    accuracy = reward_function(lambda text, row: 1.0, "accuracy")
    step(lambda: accuracy(completions=["7"]))  # a task without a sandbox: not measured, never 0
    assert meter.pending["sandbox_kills"] is None
    _sandbox.close_all()


def test_pay_format_when_killed_is_refused_with_the_fix_when_it_is_not_a_flag_or_there_is_no_format():
    (problem,) = task_problems("code", {"pay_format_when_killed": "yes"})
    assert problem.startswith("task_args.pay_format_when_killed: must be bool, got 'yes'")
    assert problem.endswith(
        "give a bool (true or false, unquoted in YAML) or leave it out for the default False"
    )
    assert task_problems("code", {"pay_format_when_killed": True, "rewards": {"tests": 1.0}}) == [
        "task_args.pay_format_when_killed: true pays the format reward to completions the sandbox killed, "
        "but task_args.rewards has no format (['tests']); add format to rewards or leave "
        "pay_format_when_killed out"
    ]
    assert task_problems("code", {"pay_format_when_killed": True}) == []
