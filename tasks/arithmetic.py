"""Addition: two-digit sums by default, the smallest task that gives a tiny model a non-zero reward now
and then; one-digit sums (`operand_digits: 1`) with the last-integer rule (`answer_rule: last`) are what
the real model `smollm2` gets right about a quarter of the time, a signal GRPO can raise (docs/results.md, "Watch a model learn on CPU")."""

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
# prompt_style "question": one user turn, the model's own default system prompt (SmolLM2's names it).
QUESTION_PROMPT = "What is {a} + {b}? Give the answer as a number."
# prompt_style "plain": the original benchmark's prompt, plain text that no chat template wraps.
PLAIN_PROMPT = (
    "Solve arithmetic problems. Return only the final integer answer with no extra text.\n\n"
    "Question: What is {a} + {b}?\nAnswer:"
)
DEFAULT_REWARDS = {"accuracy": 1.0}
# ASCII digits only: unicode digits (e.g. Arabic-Indic) are not the answer the task asked for.
_FIRST_INT = re.compile(r"-?[0-9]{1,12}")
_INT = re.compile(r"-?[0-9]+")
_SCAN_CHARS = 4096  # the answer comes first; a 100 kB completion is not scanned to its end


def make_problems(n: int, seed: int, digits: int = 2) -> list[tuple[int, int]]:
    """n pairs of `digits`-digit operands (one digit: 0-9; two: 10-99, ...)."""
    rng = random.Random(seed)
    low, high = (0 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1
    return [(rng.randint(low, high), rng.randint(low, high)) for _ in range(n)]


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
    says only "exact integer match"; this is rlsweep's reading of it (docs/original-benchmark.md, "Reward rules")."""
    match = _FIRST_INT.search(text[:_SCAN_CHARS])
    return int(match.group()) if match else None


def last_integer(text: str, require_tags: bool = False) -> int | None:
    """answer_rule "last": the last integer of the <answer> content if there is one, else of the text's
    tail ("3 + 4 = 7", "The answer is 7." are 7); None when there is none (or, with `require_tags`, no
    tag). A model that restates the question before answering is read at its answer."""
    tagged = answer_tag(text)
    if tagged is None and require_tags:
        return None
    found = _INT.findall(ascii_minus((tagged if tagged is not None else text)[-_SCAN_CHARS:]))
    if not found:
        return None
    last = found[-1]
    return int(last) if len(last.lstrip("-")) <= 12 else None


def last_accuracy_score(text: str, row: dict, require_tags: bool = False) -> float:
    got = last_integer(text, require_tags)
    return 1.0 if got is not None and got == int(row["answer"]) else 0.0


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
    if not 1 <= settings["operand_digits"] <= 6:
        return [
            f"task_args.operand_digits: {settings['operand_digits']} is not 1 to 6; give 1 (0-9) or 2 (10-99)"
        ]
    if settings["answer_rule"] == "original" and wants_format(settings["rewards"], DEFAULT_REWARDS):
        return [
            "task_args.answer_rule: original scores the first integer of the text, ignoring the <answer> "
            "tags the format rewards ask for; use answer_rule tagged or drop the format rewards"
        ]
    if settings["prompt_style"] != "chat" and wants_format(settings["rewards"], DEFAULT_REWARDS):
        return [
            f"task_args.prompt_style: {settings['prompt_style']} asks for the number only and cannot ask "
            "for the <answer> format the rewards score; use prompt_style chat or drop the format rewards"
        ]
    return []


def _prompt(a: int, b: int, style: str, system: str) -> str | list[dict]:
    if style == "plain":
        return PLAIN_PROMPT.format(a=a, b=b)
    if style == "question":
        return [{"role": "user", "content": QUESTION_PROMPT.format(a=a, b=b)}]
    return [{"role": "system", "content": system}, {"role": "user", "content": f"What is {a}+{b}?"}]


def _rows(problems: list[tuple[int, int]], style: str, system: str) -> dict[str, list]:
    """Chat prompts under `system` ("chat"), one user question ("question"), or the original benchmark's
    plain prompts ("plain")."""
    return {
        "prompt": [_prompt(a, b, style, system) for a, b in problems],
        "answer": [a + b for a, b in problems],
    }


def build_arithmetic(
    seed: int = 42,
    *,
    num_samples: int = 512,
    num_eval: int = 64,
    prompt_style: Literal["chat", "plain", "question"] = "chat",
    rewards: dict[str, float] | None = None,
    require_tags: bool = True,
    answer_rule: Literal["tagged", "original", "last"] = "tagged",
    operand_digits: int = 2,
    reward_timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Task:
    """answer_rule: "tagged" (rlsweep's: the first integer of an <answer> tag, else of the text; a tag
    required when the prompt asks for one), "original" (the original benchmark's, original_integer) or
    "last" (the last integer of the tag, else of the text: last_integer). prompt_style: "chat" (a system
    prompt asking for the number only), "plain" (the original benchmark's text prompt) or "question"
    (one user turn, QUESTION_PROMPT, under the model's default system prompt)."""
    problems = make_problems(num_samples + num_eval, seed, operand_digits)
    tagged = wants_format(rewards, DEFAULT_REWARDS)  # only the format prompt asks for <answer> tags
    system = FORMAT_SYSTEM_PROMPT if tagged else SYSTEM_PROMPT

    def accuracy(text: str, row: dict) -> float:
        if answer_rule == "original":
            return original_accuracy_score(text, row)
        if answer_rule == "last":
            return last_accuracy_score(text, row, require_tags=tagged and require_tags)
        return accuracy_score(text, row, require_tags=tagged and require_tags)

    return Task(
        name="arithmetic",
        train=to_dataset(_rows(problems[:num_samples], prompt_style, system)),
        eval=to_dataset(_rows(problems[num_samples:], prompt_style, system)) if num_eval else None,
        rewards=compose_rewards(accuracy, rewards, DEFAULT_REWARDS, reward_timeout_s),
        is_correct=correctness(accuracy, reward_timeout_s),
    )
