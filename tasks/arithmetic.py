"""Two-digit addition: the smallest task that gives a tiny model a non-zero reward now and then."""

from __future__ import annotations

import random
import re
from typing import Literal

from tasks.base import Task, to_dataset
from tasks.bounded import DEFAULT_TIMEOUT_S
from tasks.rewards import (
    FORMAT_SYSTEM_PROMPT,
    answer_tag,
    ascii_minus,
    compose_rewards,
    correctness,
    reward_function,
    wants_format,
)

SYSTEM_PROMPT = "Answer with the number only."
# prompt_style "plain": the original benchmark's prompt, plain text that no chat template wraps.
PLAIN_PROMPT = (
    "Solve arithmetic problems. Return only the final integer answer with no extra text.\n\n"
    "Question: What is {a} + {b}?\nAnswer:"
)
DEFAULT_REWARDS = {"accuracy": 1.0}
# ASCII digits only: unicode digits (e.g. Arabic-Indic) are not the answer the task asked for.
_FIRST_INT = re.compile(r"-?[0-9]{1,12}")
_SCAN_CHARS = 4096  # the answer comes first; a 100 kB completion is not scanned to its end


def make_problems(n: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(n)]


def first_integer(text: str, require_tags: bool = False) -> int | None:
    """The first integer of the <answer> content if there is one, else of the text (else None when
    `require_tags`)."""
    tagged = answer_tag(text)
    if tagged is None and require_tags:
        return None
    match = _FIRST_INT.search(ascii_minus((tagged if tagged is not None else text)[:_SCAN_CHARS]))
    return int(match.group()) if match else None


def original_integer(text: str) -> int | None:
    """answer_rule "original": the first integer of the completion text as written, tags or not (an
    `<answer>` tag is not looked into, a Unicode minus is not a sign). The original benchmark's README
    says only "exact integer match"; this is rlsweep's reading of it (README, "Reward rules")."""
    match = _FIRST_INT.search(text[:_SCAN_CHARS])
    return int(match.group()) if match else None


def accuracy_score(text: str, row: dict, require_tags: bool = False) -> float:
    got = first_integer(text, require_tags)
    return 1.0 if got is not None and got == int(row["answer"]) else 0.0


def original_accuracy_score(text: str, row: dict) -> float:
    got = original_integer(text)
    return 1.0 if got is not None and got == int(row["answer"]) else 0.0


# The default accuracy reward as a plain TRL reward function (what Task.rewards["accuracy"] holds).
exact_answer_reward = reward_function(accuracy_score, "accuracy")


def arithmetic_problems(settings: dict) -> list[str]:
    if settings["num_samples"] < 1 or settings["num_eval"] < 0:
        return ["task_args.num_samples / num_eval: need num_samples >= 1 and num_eval >= 0"]
    if settings["answer_rule"] == "original" and wants_format(settings["rewards"], DEFAULT_REWARDS):
        return [
            "task_args.answer_rule: original scores the first integer of the text, ignoring the <answer> "
            "tags the format rewards ask for; use answer_rule tagged or drop the format rewards"
        ]
    if settings["prompt_style"] == "plain" and wants_format(settings["rewards"], DEFAULT_REWARDS):
        return [
            "task_args.prompt_style: plain is the original benchmark's answer-only prompt and cannot ask "
            "for the <answer> format the rewards score; use prompt_style chat or drop the format rewards"
        ]
    return []


def _rows(problems: list[tuple[int, int]], system: str | None) -> dict[str, list]:
    """Chat prompts under `system`, or with system None the original benchmark's plain prompts."""
    return {
        "prompt": [
            PLAIN_PROMPT.format(a=a, b=b)
            if system is None
            else [{"role": "system", "content": system}, {"role": "user", "content": f"What is {a}+{b}?"}]
            for a, b in problems
        ],
        "answer": [a + b for a, b in problems],
    }


def build_arithmetic(
    seed: int = 42,
    *,
    num_samples: int = 512,
    num_eval: int = 64,
    prompt_style: Literal["chat", "plain"] = "chat",
    rewards: dict[str, float] | None = None,
    require_tags: bool = True,
    answer_rule: Literal["tagged", "original"] = "tagged",
    reward_timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Task:
    """answer_rule: "tagged" (rlsweep's: the first integer of an <answer> tag, else of the text; a tag
    required when the prompt asks for one) or "original" (the original benchmark's, original_integer)."""
    problems = make_problems(num_samples + num_eval, seed)
    tagged = wants_format(rewards, DEFAULT_REWARDS)  # only the format prompt asks for <answer> tags
    system = FORMAT_SYSTEM_PROMPT if tagged else SYSTEM_PROMPT
    if prompt_style == "plain":
        system = None

    def accuracy(text: str, row: dict) -> float:
        if answer_rule == "original":
            return original_accuracy_score(text, row)
        return accuracy_score(text, row, require_tags=tagged and require_tags)

    return Task(
        name="arithmetic",
        train=to_dataset(_rows(problems[:num_samples], system)),
        eval=to_dataset(_rows(problems[num_samples:], system)) if num_eval else None,
        rewards=compose_rewards(accuracy, rewards, DEFAULT_REWARDS, reward_timeout_s),
        is_correct=correctness(accuracy, reward_timeout_s),
    )
