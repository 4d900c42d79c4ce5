"""What every task hands the trainer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importing datasets costs seconds: Ray workers that only read reward names skip it
    from datasets import Dataset

RewardFunc = Callable[..., list[float]]


@dataclass
class Task:
    name: str
    train: Dataset  # a conversational "prompt" column plus whatever the rewards read (e.g. "answer")
    eval: Dataset | None = None  # held-out prompts for evaluation during training
    # reward name -> (function, weight); TRL logs each as rewards/<name>/mean
    rewards: dict[str, tuple[RewardFunc, float]] = field(default_factory=dict)
    # held-out accuracy (pass@1, pass@k): completion text, eval row -> bool; every task sets it
    is_correct: Callable[[str, dict], bool] | None = None
    # why each reward of a completion is zero, reward name -> reason (`rlsweep score`); a task without
    # it reports a zero as "scored 0"
    explain: Callable[[str, dict], dict[str, str]] | None = None
    # why the task's sandbox killed a completion's run (completion text, row -> reason, None when it did
    # not; `rlsweep score`); None on a task that runs no sandbox
    killed: Callable[[str, dict], str | None] | None = None


def to_dataset(columns: dict[str, list]) -> Dataset:
    from datasets import Dataset

    return Dataset.from_dict(columns)


def completion_text(completion) -> str:
    """The text of a completion, whether TRL passes a string or a list of chat messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(str(m.get("content") or "") if isinstance(m, dict) else str(m) for m in completion)
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    return str(completion)
