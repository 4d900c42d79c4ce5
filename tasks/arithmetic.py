"""The original benchmark's task: "What is a+b?" with a, b in 10..99 from a seeded RNG.

Reward 1.0 when the first integer in the completion equals a+b, else 0.0. Parsing is a bounded
regex over at most the first few kB: nothing is evaluated, and no input can make it raise.
"""

from __future__ import annotations

import random
import re

from datasets import Dataset

from tasks.base import Task, completion_text, named

SYSTEM_PROMPT = "Answer with the number only."
# ASCII digits only: unicode digits (e.g. Arabic-Indic) are not the answer the task asked for.
_FIRST_INT = re.compile(r"-?[0-9]{1,12}")
_SCAN_CHARS = 4096  # the answer comes first; a 100 kB completion is not scanned to its end


def make_problems(n: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(n)]


def first_integer(text: str) -> int | None:
    match = _FIRST_INT.search(text[:_SCAN_CHARS])
    return int(match.group()) if match else None


def exact_answer_reward(prompts=None, completions=None, answer=None, **_) -> list[float]:
    rewards = []
    for i, completion in enumerate(completions or []):
        try:
            got = first_integer(completion_text(completion))
            rewards.append(1.0 if got is not None and answer is not None and got == int(answer[i]) else 0.0)
        except Exception:  # a reward never raises: a malformed row scores 0
            rewards.append(0.0)
    return rewards


def _rows(problems: list[tuple[int, int]]) -> dict[str, list]:
    return {
        "prompt": [
            [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": f"What is {a}+{b}?"}]
            for a, b in problems
        ],
        "answer": [a + b for a, b in problems],
    }


def build_arithmetic(seed: int = 42, num_samples: int = 512, num_eval: int = 64) -> Task:
    problems = make_problems(num_samples + num_eval, seed)
    return Task(
        name="arithmetic",
        train=Dataset.from_dict(_rows(problems[:num_samples])),
        eval=Dataset.from_dict(_rows(problems[num_samples:])) if num_eval else None,
        rewards={"accuracy": (named(exact_answer_reward, "accuracy"), 1.0)},
        is_correct=lambda text, row: first_integer(text) == int(row["answer"]),
    )
