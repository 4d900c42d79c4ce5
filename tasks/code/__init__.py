"""Python problems with tests: each completion's code runs against its problem's tests in a sandbox
(tasks/code/_sandbox.py), never in the trainer.

Problems: the shipped set (tasks/code/problems.jsonl, written for this project: 130 small functions,
3-4 tests each) or a user's JSONL (`path`) in the common shapes: MBPP-like {"text", "test_list"} (a
"code" reference is ignored) or HumanEval-like {"prompt", "entry_point", "test"} (the top-level asserts of
its `def check(candidate)`). Held-out rows are set aside after a seeded shuffle.

Rewards (task_args.rewards, name -> weight):
- tests: the fraction of the problem's tests passed (at most `max_tests_per_problem` of them);
- perfect: 1.0 when every test passes;
- format: 1.0 for one fenced python block that parses (with `reasoning_format`:
  <reasoning>...</reasoning><answer>...</answer> whose answer parses, fenced or not).
pass@1 and pass@k count a completion correct when every test passes, through the same sandbox.
A completion's tests run once: the rewards of one completion share a cached run.

A completion whose run the sandbox killed (its time limit, memory limit, file size or process limit, a
forbidden call, any signal: killed_by) scores 0 in every reward, format included: a policy must not
learn that a tidy hang pays. An act the sandbox refuses or sees counts as a kill too (is_act): a read,
write or delete outside the working directory, a signal outside the sandbox, a network attempt, a
program or native code, a process or thread left running when the call ends (the harness's forbidden()
and its checks after the call). `pay_format_when_killed: true` pays the format reward back to a run that
ran into a limit, never to an act. Each scoring of training completions counts them, the killed ones and
why (the step row's sandbox_kills and sandbox_kill_reasons).
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tasks.base import RewardFunc, Task, completion_text, to_dataset
from tasks.bounded import SCORING
from tasks.code import _sandbox
from tasks.code.checks import checks_from_humaneval, parse_check, passed

CODE_REWARD_NAMES = ("tests", "perfect", "format")
DEFAULT_REWARDS = {"tests": 1.0, "perfect": 0.5, "format": 0.1}
SHIPPED = Path(__file__).with_name("problems.jsonl")
DEFAULT_TIMEOUT_S = 2.0
SYSTEM_PROMPT = (
    "Write the Python function the user asks for. Reply with the whole function in one ```python code "
    "block, and nothing else."
)
REASONING_PROMPT = (
    "Think about the problem inside <reasoning> </reasoning>, then give the whole Python function inside "
    "<answer> </answer>."
)
_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
_CACHE_SIZE = 4096


# ------------------------------------------------------------------------------------------------
# problems
# ------------------------------------------------------------------------------------------------
def read_problems(path: str | Path) -> list[dict]:
    """{"text", "tests"} per line of an MBPP-like or HumanEval-like JSONL (ValueError naming the line)."""
    problems = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not JSON ({exc.msg}); give one JSON object per line") from None
            problems.append(_problem(row, where))
    if not problems:
        raise ValueError(f"{path}: no problems; give one JSON object per line")
    return problems


def _problem(row, where: str) -> dict:
    if isinstance(row, dict) and isinstance(row.get("text"), str) and isinstance(row.get("test_list"), list):
        text, tests = row["text"], [str(t) for t in row["test_list"]]
    elif isinstance(row, dict) and all(
        isinstance(row.get(k), str) for k in ("prompt", "entry_point", "test")
    ):
        text = f"Complete this function:\n```python\n{row['prompt']}```"
        try:
            tests = checks_from_humaneval(row["test"], row["entry_point"])
        except (SyntaxError, ValueError) as exc:
            raise ValueError(f"{where}: test: {exc}; give a 'def check(candidate):' of asserts") from None
    else:
        keys = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise ValueError(
            f"{where}: a problem needs text and test_list (MBPP-like) or prompt, entry_point and test "
            f"(HumanEval-like); got {keys}"
        )
    if not tests:
        raise ValueError(f"{where}: no tests; give at least one 'assert f(x) == expected'")
    for test in tests:
        try:
            parse_check(test)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    return {"text": text, "tests": tests}


# ------------------------------------------------------------------------------------------------
# scoring
# ------------------------------------------------------------------------------------------------
# The signal a test's process died of -> the limit it means (tasks/code/_harness.py: SIGXFSZ and the
# seccomp filter's SIGSYS kill by default; the memory cgroup kills with SIGKILL).
_SIGNAL_LIMITS = {
    "SIGXCPU": "CPU time limit",
    "SIGXFSZ": "file size limit",
    "SIGSYS": "forbidden call",
    "SIGKILL": "memory limit or a kill",
}
# The exceptions by which Python reports a limit it ran into: the address space, the pids cgroup.
_ERROR_LIMITS = {"MemoryError": "memory limit", "BlockingIOError": "process limit"}


def killed_by(run: _sandbox.Run) -> str | None:
    """Why the sandbox killed a completion's run ('time limit', 'memory limit (MemoryError)',
    'forbidden call (SIGSYS)', an act: 'forbidden call (read outside its directory: /x)', 'left running
    after the call: 2 processes', ...), or None when every test ran to an answer or an ordinary exception.
    A sandbox that failed to start is not the completion's doing: None."""
    if run.failure == "timeout":
        return "time limit"
    if run.failure == "killed":
        return "killed whole (the harness died or its reply overran)"
    for outcome in run.probes:
        status, detail = outcome.get("status"), outcome.get("detail")
        if status == "timeout":
            return "time limit"
        if status == "killed":
            return f"{_SIGNAL_LIMITS.get(detail, 'a signal')} ({detail})"
        if status == "forbidden":  # seen, blocked or not, and ended: the attempt pays nothing either
            return detail if detail.startswith("left running") else f"forbidden call ({detail})"
        if status == "error" and detail in _ERROR_LIMITS:
            return f"{_ERROR_LIMITS[detail]} ({detail})"
        if outcome.get("left_running"):
            count = outcome["left_running"]
            return f"left running after the call: {count} process{'es' * (count > 1)}"
    return None


def is_act(killed: str | None) -> bool:
    """Whether killed_by's reason is an act (a forbidden call, network included, or something left
    running), not a limit the run ran into: an act scores 0 under every reward, pay_format_when_killed
    or not."""
    return killed is not None and killed.startswith(("forbidden call", "left running"))


def _answer(text: str) -> str | None:
    """The <answer> content of exactly '<reasoning>...</reasoning> <answer>...</answer>' (each tag once,
    in order, nothing around them), else None. String operations, no regex: linear on any input."""
    body = text.strip()
    if not (body.startswith("<reasoning>") and body.endswith("</answer>")):
        return None
    if any(body.count(tag) != 1 for tag in _TAGS):
        return None
    reasoning_end, answer_start = body.index("</reasoning>"), body.index("<answer>")
    if reasoning_end > answer_start or body[reasoning_end + len("</reasoning>") : answer_start].strip():
        return None
    return body[answer_start + len("<answer>") : -len("</answer>")]


def extract_code(text: str, reasoning_format: bool) -> str | None:
    """The completion's code: its first fenced block, or with `reasoning_format` the <answer> content
    (its fenced block when it has one); None when there is none."""
    if reasoning_format:
        answer = _answer(text)
        if answer is None:
            return None
        fenced = _FENCE.search(answer)
        return fenced.group(1) if fenced else answer.strip()
    fenced = _FENCE.search(text)
    return fenced.group(1) if fenced else None


def format_problem(text: str, reasoning_format: bool) -> str | None:
    """Why the completion is not one parsable code block in the asked format; None when it is."""
    if reasoning_format and _answer(text) is None:
        return "not <reasoning>...</reasoning><answer>...</answer>"
    if not reasoning_format and len(_FENCE.findall(text)) != 1:
        return f"{len(_FENCE.findall(text))} code blocks, not one"
    try:
        ast.parse(extract_code(text, reasoning_format) or "")
    except SyntaxError as exc:
        return f"code does not parse (SyntaxError line {exc.lineno}: {exc.msg})"
    except (ValueError, MemoryError, RecursionError) as exc:
        return f"code does not parse ({type(exc).__name__})"
    return None


@dataclass
class Scored:
    """One completion against its tests: each reward, why each zero one is zero, seconds taken, and why
    the sandbox killed its run (killed_by; None when it did not)."""

    rewards: dict[str, float]
    why_zero: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    killed: str | None = None


class Grader:
    """Runs completions against tests in the sandbox, `workers` at a time, each completion once. A run
    the sandbox killed scores 0 in every reward; with `pay_format_when_killed`, all but format."""

    def __init__(
        self,
        limits: _sandbox.Limits,
        workers: int,
        reasoning_format: bool,
        pay_format_when_killed: bool = False,
    ):
        self.limits = limits
        self.workers = workers
        self.reasoning_format = reasoning_format
        self.pay_format_when_killed = pay_format_when_killed
        self._pool: ThreadPoolExecutor | None = None
        self._cache: OrderedDict[tuple, Scored] = OrderedDict()
        self._lock = threading.Lock()

    def many(self, items: list[tuple[str, list[str]]]) -> list[Scored]:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="code-reward")
        return list(self._pool.map(lambda item: self.one(*item), items))

    def one(self, text: str, tests: list[str]) -> Scored:
        key = (text, tuple(tests))
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        scored = self._run(text, tests)
        with self._lock:
            self._cache[key] = scored
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return scored

    def _run(self, text: str, tests: list[str]) -> Scored:
        bad_format = format_problem(text, self.reasoning_format)
        code = extract_code(text, self.reasoning_format)
        scored = Scored({"format": 0.0 if bad_format else 1.0, "tests": 0.0, "perfect": 0.0})
        if bad_format:
            scored.why_zero["format"] = bad_format
        if code is None:
            scored.why_zero["tests"] = scored.why_zero["perfect"] = "no code block"
            return scored
        checks = [parse_check(t) for t in tests]
        run = _sandbox.run(code, [c.probe for c in checks], self.limits)
        scored.seconds = run.seconds
        timed_out = run.failure == "timeout" or any(o.get("status") == "timeout" for o in run.probes)
        with self._lock:  # the step row's reward_timeouts counts runs stopped at reward_timeout_s
            SCORING.calls += 1
            SCORING.timeouts += timed_out
        scored.killed = killed_by(run)
        if scored.killed is not None:
            why = f"sandbox killed it: {scored.killed}"
            scored.rewards["tests"] = scored.rewards["perfect"] = 0.0
            scored.why_zero["tests"] = scored.why_zero["perfect"] = why
            if (
                is_act(scored.killed) and not bad_format
            ):  # never paid: a policy must not learn that trying pays
                scored.rewards["format"] = 0.0
                scored.why_zero["format"] = f"{why} (an act: no reward pays it)"
            elif not self.pay_format_when_killed and not bad_format:
                scored.rewards["format"] = 0.0
                scored.why_zero["format"] = f"{why} (task_args.pay_format_when_killed: true pays it)"
            return scored
        if run.failure is not None:
            scored.why_zero["tests"] = scored.why_zero["perfect"] = run.failure
            return scored
        results = [passed(c, o) for c, o in zip(checks, run.probes, strict=True)]
        scored.rewards["tests"] = sum(results) / len(results)
        scored.rewards["perfect"] = 1.0 if all(results) else 0.0
        if not all(results):
            first = next(o for ok, o in zip(results, run.probes, strict=True) if not ok)
            reason = {"value": "wrong value", "timeout": "timeout"}.get(first["status"])
            if reason is None:  # an exception's type, or the signal that killed it
                reason = (
                    f"{first['status']} {first.get('detail')}"
                    if first["status"] == "killed"
                    else first.get("detail")
                )
            why = f"test failed: {len(results) - sum(results)} of {len(results)} (first: {reason})"
            scored.why_zero["perfect"] = why
            if not any(results):
                scored.why_zero["tests"] = why
        return scored


def _reward(grader: Grader, name: str, counts: bool) -> RewardFunc:
    """The reward `name`; the one that `counts` (one per task) adds the completions it scored, and
    those whose run the sandbox killed, to the step's SCORING counters."""

    def reward(prompts=None, completions=None, tests=None, **_columns) -> list[float]:
        completions = [completion_text(c) for c in completions or []]
        scored = grader.many(list(zip(completions, tests, strict=True)))
        if counts:
            SCORING.sandboxed += len(scored)
            SCORING.sandbox_kills += sum(s.killed is not None for s in scored)
            SCORING.count_kills(s.killed for s in scored)
        return [s.rewards[name] for s in scored]

    reward.__name__ = reward.__qualname__ = name  # TRL names the logged metrics after __name__
    return reward


# ------------------------------------------------------------------------------------------------
# the task
# ------------------------------------------------------------------------------------------------
def default_workers() -> int:
    return max(1, (os.cpu_count() or 2) - 1)


def code_problems(settings: dict) -> list[str]:
    """Why the code task's settings cannot build it, as 'task_args.<field>: ...' lines."""
    errors = []
    rewards = settings["rewards"]
    if settings["pay_format_when_killed"] and isinstance(rewards, dict) and "format" not in rewards:
        errors.append(
            "task_args.pay_format_when_killed: true pays the format reward to completions the sandbox "
            f"killed, but task_args.rewards has no format ({sorted(rewards)}); add format to rewards "
            "or leave pay_format_when_killed out"
        )
    for key, low in (("num_eval", 0), ("max_tests_per_problem", 1), ("memory_mb", 64)):
        if settings[key] < low:
            errors.append(f"task_args.{key}: must be >= {low}, got {settings[key]}; give {low} or more")
    if settings["num_samples"] is not None and settings["num_samples"] < 1:
        errors.append(
            f"task_args.num_samples: must be >= 1, got {settings['num_samples']}; or leave it out for every row"
        )
    if settings["reward_workers"] is not None and settings["reward_workers"] < 1:
        errors.append(
            f"task_args.reward_workers: must be >= 1, got {settings['reward_workers']}; "
            f"or leave it out for cores - 1 ({default_workers()} here)"
        )
    if settings["path"] is not None and not Path(settings["path"]).is_file():
        errors.append(
            f"task_args.path: no such file {settings['path']!r}; give a JSONL of problems or leave it out for the shipped set"
        )
    return errors


def build_code(
    seed: int = 42,
    *,
    path: str | None = None,
    num_samples: int | None = None,
    num_eval: int = 20,
    rewards: dict[str, float] | None = None,
    reasoning_format: bool = False,
    max_tests_per_problem: int = 5,
    reward_workers: int | None = None,
    reward_timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = 512,
    pay_format_when_killed: bool = False,
) -> Task:
    _sandbox.setup()  # no Python the sandbox can run: refused now, with the fix, not at the first reward
    rows = read_problems(path or SHIPPED)
    random.Random(seed).shuffle(rows)
    if len(rows) <= num_eval:
        raise ValueError(
            f"task_args.num_eval: {num_eval} leaves no training rows out of {len(rows)} problems; lower num_eval"
        )
    held_out, train = rows[:num_eval], rows[num_eval:]
    train = train[:num_samples] if num_samples else train
    system = REASONING_PROMPT if reasoning_format else SYSTEM_PROMPT

    def dataset(part: list[dict]):
        return to_dataset(
            {
                "prompt": [
                    [{"role": "system", "content": system}, {"role": "user", "content": r["text"]}]
                    for r in part
                ],
                "tests": [r["tests"][:max_tests_per_problem] for r in part],
            }
        )

    limits = _sandbox.Limits(timeout_s=reward_timeout_s, memory_mb=memory_mb)
    grader = Grader(limits, reward_workers or default_workers(), reasoning_format, pay_format_when_killed)
    weights = DEFAULT_REWARDS if rewards is None else rewards
    counting = next(iter(weights))  # one reward per scoring counts the completions and the kills

    def is_correct(text: str, row: dict) -> bool:
        return grader.one(completion_text(text), list(row["tests"])).rewards["perfect"] == 1.0

    def explain(text: str, row: dict) -> dict[str, str]:
        return grader.one(completion_text(text), list(row["tests"])).why_zero

    def killed(text: str, row: dict) -> str | None:
        return grader.one(completion_text(text), list(row["tests"])).killed

    return Task(
        name="code",
        train=dataset(train),
        eval=dataset(held_out) if held_out else None,
        rewards={
            name: (_reward(grader, name, counts=name == counting), float(weight))
            for name, weight in weights.items()
        },
        is_correct=is_correct,
        explain=explain,
        killed=killed,
    )
