"""Prompt datasets and reward functions. A task is a function (seed, **settings) -> Task.

TASKS maps each name to its entry (builder, value checks, reward names); a dict, no plugin system.
Builders take keyword-only settings with defaults; every builder takes `rewards` (tasks/rewards.py) and
`reward_timeout_s`, the time limit of each scoring call (tasks/bounded.py). Rewards follow
TRL's reward-function signature: f(prompts, completions, **dataset_columns) -> list[float], and never
raise.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import TypeAdapter, ValidationError

from tasks.arithmetic import DEFAULT_REWARDS as ARITHMETIC_REWARDS
from tasks.arithmetic import arithmetic_problems, build_arithmetic
from tasks.base import Task, completion_text
from tasks.bounded import timeout_problems
from tasks.code import CODE_REWARD_NAMES, build_code, code_problems
from tasks.code import DEFAULT_REWARDS as CODE_REWARDS
from tasks.countdown import DEFAULT_REWARDS as COUNTDOWN_REWARDS
from tasks.countdown import build_countdown, countdown_problems
from tasks.gsm8k import DEFAULT_REWARDS as GSM8K_REWARDS
from tasks.gsm8k import build_gsm8k, gsm8k_problems
from tasks.names import did_you_mean
from tasks.reasoning_gym import DEFAULT_REWARDS as REASONING_GYM_REWARDS
from tasks.reasoning_gym import build_reasoning_gym, reasoning_gym_problems
from tasks.rewards import REWARD_NAMES, reward_problems


@dataclass(frozen=True)
class TaskEntry:
    """One task: its builder, its cheap value checks (run by task_problems() before anything is built),
    the rewards and weights it scores with when `rewards` is not set, and the reward names that setting
    may weigh."""

    build: Callable[..., Task]
    check: Callable[[dict], list[str]]
    default_rewards: Mapping[str, float]
    rewards: tuple[str, ...] = REWARD_NAMES


TASKS: dict[str, TaskEntry] = {
    "arithmetic": TaskEntry(build_arithmetic, arithmetic_problems, ARITHMETIC_REWARDS),
    "code": TaskEntry(build_code, code_problems, CODE_REWARDS, CODE_REWARD_NAMES),
    "countdown": TaskEntry(build_countdown, countdown_problems, COUNTDOWN_REWARDS),
    "gsm8k": TaskEntry(build_gsm8k, gsm8k_problems, GSM8K_REWARDS),
    "reasoning_gym": TaskEntry(build_reasoning_gym, reasoning_gym_problems, REASONING_GYM_REWARDS),
}
# Every reward name a step row records (a column each).
RECORDED_REWARDS = tuple(dict.fromkeys(name for entry in TASKS.values() for name in entry.rewards))


def available_tasks() -> list[str]:
    return sorted(TASKS)


@functools.cache
def _parameters(name: str) -> Mapping[str, inspect.Parameter]:
    """A task builder's settings (its signature, read once: a 100,000-trial plan checks each trial)."""
    return inspect.signature(TASKS[name].build, eval_str=True).parameters


def task_problems(name: str, args: dict) -> list[str]:
    """Why (name, args) cannot build a task, as 'field: message' lines; empty when it can."""
    if name not in TASKS:
        return [f"task: unknown task {name!r}; {did_you_mean(name, TASKS)}"]
    if not isinstance(args, dict):
        return [f"task_args: must be a mapping of settings, got {args!r}"]
    params = _parameters(name)
    accepted = [p for p in params if p != "seed"]
    errors = [
        f"task_args.{key}: not a setting of task {name!r}; {did_you_mean(key, accepted)}"
        for key in args
        if key not in accepted
    ]
    for key in accepted:
        if key in args:
            errors += _type_problems(key, args[key], params[key].annotation, params[key].default)
    if errors:
        return errors  # value checks need well-typed settings
    settings = {key: args.get(key, params[key].default) for key in accepted}
    return (
        reward_problems(settings["rewards"], TASKS[name].rewards)
        + timeout_problems(settings["reward_timeout_s"])
        + TASKS[name].check(settings)
    )


def _type_problems(key: str, value, annotation, default) -> list[str]:
    try:
        TypeAdapter(annotation).validate_python(value, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        kind = _describe(annotation)
        example = " (true or false, unquoted in YAML)" if annotation is bool else ""
        return [
            f"task_args.{key}: must be {kind}, got {value!r} ({first['msg']}); give a {kind}{example} "
            f"or leave it out for the default {default!r}"
        ]
    return []


def _describe(annotation) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("NoneType", "None")


def load_task(name: str, args: dict | None = None, seed: int = 42) -> Task:
    problems = task_problems(name, args or {})
    if problems:
        raise ValueError("; ".join(problems))
    return TASKS[name].build(seed=seed, **(args or {}))


__all__ = [
    "RECORDED_REWARDS",
    "TASKS",
    "TaskEntry",
    "Task",
    "available_tasks",
    "completion_text",
    "load_task",
    "task_problems",
]
