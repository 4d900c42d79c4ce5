"""Prompt datasets and reward functions. A task is a function (seed, **settings) -> Task.

TASKS maps each name to its builder; a dict and a function, no plugin system. Rewards follow TRL's
reward-function signature: f(prompts, completions, **dataset_columns) -> list[float], and never raise.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from tasks.arithmetic import build_arithmetic
from tasks.base import Task, completion_text

TASKS: dict[str, Callable[..., Task]] = {
    "arithmetic": build_arithmetic,
}


def available_tasks() -> list[str]:
    return sorted(TASKS)


def task_problems(name: str, args: dict) -> list[str]:
    """Why (name, args) cannot build a task, as 'field: message' lines; empty when it can."""
    from trainers.spec import did_you_mean

    if name not in TASKS:
        return [f"task: unknown task {name!r}; {did_you_mean(name, TASKS)}"]
    params = inspect.signature(TASKS[name]).parameters
    accepted = [p for p in params if p != "seed"]
    return [
        f"task_args.{key}: not a setting of task {name!r}; {did_you_mean(key, accepted)}"
        for key in args
        if key not in accepted
    ]


def load_task(name: str, args: dict | None = None, seed: int = 42) -> Task:
    problems = task_problems(name, args or {})
    if problems:
        raise ValueError("; ".join(problems))
    return TASKS[name](seed=seed, **(args or {}))


__all__ = ["TASKS", "Task", "available_tasks", "completion_text", "load_task", "task_problems"]
