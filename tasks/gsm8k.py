"""GSM8K grade-school word problems: from the Hugging Face hub ("openai/gsm8k", config "main") or a
local JSONL file of {"question": ..., "answer": "... #### 42"} rows.

Accuracy: the last number of the <answer> content (of the whole completion when the prompt asks for
no tags, or with require_tags false and no tags) equals the number after '####'. Commas join only
real thousands groups: "1,000" is 1000, "1,2,3" is three numbers.
With the hub, train rows come from the train split and held-out rows from the test split; with a
local file, held-out rows come from `eval_path`, else from rows set aside after a seeded shuffle.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datasets import Dataset

from tasks.base import Task, to_dataset
from tasks.bounded import DEFAULT_TIMEOUT_S
from tasks.rewards import (
    FORMAT_SYSTEM_PROMPT,
    answer_tag,
    ascii_minus,
    compose_rewards,
    correctness,
    wants_format,
)

HUB_ID, HUB_CONFIG = "openai/gsm8k", "main"
DEFAULT_REWARDS = {"accuracy": 1.0, "format": 0.2}
PLAIN_SYSTEM_PROMPT = "Solve the problem step by step. End with the final numeric answer."
# ASCII digits in whole thousands groups ("1,250", "1,000,000") or ungrouped, optional decimals
# ("18.00"); scanned in the tail only.
_NUMBER = re.compile(r"-?(?:[0-9]{1,3}(?:,[0-9]{3}){1,10}(?![0-9])|[0-9]{1,30})(?:\.[0-9]{1,10})?")
_TAIL_CHARS = 4096


def last_integer(text: str) -> int | None:
    """The last number in the text if it is an integer ('18.00' counts as 18), else None."""
    matches = _NUMBER.findall(ascii_minus(text[-_TAIL_CHARS:]))
    if not matches:
        return None
    whole, _, fraction = matches[-1].replace(",", "").partition(".")
    if fraction.strip("0") or whole in ("", "-"):
        return None
    return int(whole)


def parse_answer(answer: str) -> int:
    """The integer after '####' in a GSM8K answer (ValueError if there is none)."""
    if "####" not in answer:
        raise ValueError("has no '#### N' final answer")
    final = answer.rsplit("####", 1)[1].strip().replace(",", "")
    return int(final)


def read_jsonl(path: str) -> list[dict]:
    """Rows {question, answer:int}; errors name the file, line and what is wrong."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(
            f"task_args.path: {path!r} is not a file; give a JSONL file with question/answer rows"
        )
    rows = []
    for number, line in enumerate(file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            rows.append({"question": str(raw["question"]), "answer": parse_answer(str(raw["answer"]))})
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"{path}:{number}: each line must be JSON {{'question': str, 'answer': '... #### N'}} ({exc!r})"
            ) from None
    if not rows:
        raise ValueError(f"task_args.path: {path!r} holds no rows")
    return rows


def _hub_rows(split: str) -> list[dict]:
    from datasets import load_dataset

    try:
        data = load_dataset(HUB_ID, HUB_CONFIG, split=split)
    except Exception as exc:  # offline, hub down, gated: say what to do instead
        raise ValueError(
            f"task_args.path: not set, and {HUB_ID} ({HUB_CONFIG}, {split}) could not be loaded from the "
            f"Hugging Face hub ({type(exc).__name__}: {exc}); set task_args.path to a local JSONL file of "
            "{'question': ..., 'answer': '... #### N'} rows"
        ) from None
    return [{"question": r["question"], "answer": parse_answer(r["answer"])} for r in data]


def gsm8k_problems(settings: dict) -> list[str]:
    errors = []
    for key in ("path", "eval_path"):
        value = settings[key]
        if value is not None and not Path(value).is_file():
            errors.append(
                f"task_args.{key}: {value!r} is not a file; give a JSONL file of question/answer rows"
            )
    if settings["eval_path"] is not None and settings["path"] is None:
        errors.append("task_args.eval_path: needs task_args.path too (the hub provides its own test split)")
    if (settings["num_samples"] is not None and settings["num_samples"] < 1) or settings["num_eval"] < 0:
        errors.append(
            "task_args.num_samples / num_eval: need num_samples >= 1 (or null: all) and num_eval >= 0"
        )
    return errors


def build_gsm8k(
    seed: int = 42,
    *,
    path: str | None = None,
    eval_path: str | None = None,
    num_samples: int | None = None,
    num_eval: int = 64,
    rewards: dict[str, float] | None = None,
    require_tags: bool = True,
    reward_timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Task:
    rng = random.Random(seed)
    if path is None:
        train, held_out = _hub_rows("train"), _hub_rows("test")
    elif eval_path is not None:
        train, held_out = read_jsonl(path), read_jsonl(eval_path)
    else:
        rows = read_jsonl(path)
        rng.shuffle(rows)
        if len(rows) <= num_eval:
            raise ValueError(
                f"task_args.num_eval: {num_eval} leaves no training rows out of {len(rows)} in {path}; "
                "lower num_eval or give eval_path"
            )
        held_out, train = rows[:num_eval], rows[num_eval:]
    rng.shuffle(train)
    train = train[:num_samples] if num_samples else train
    held_out = held_out[:num_eval]
    tagged = wants_format(rewards, DEFAULT_REWARDS)  # only the format prompt asks for <answer> tags
    system = FORMAT_SYSTEM_PROMPT if tagged else PLAIN_SYSTEM_PROMPT

    def dataset(rows: list[dict]) -> Dataset:
        return to_dataset(
            {
                "prompt": [
                    [{"role": "system", "content": system}, {"role": "user", "content": r["question"]}]
                    for r in rows
                ],
                "answer": [r["answer"] for r in rows],
            }
        )

    def accuracy(text: str, row: dict) -> float:
        answer = answer_tag(text)
        if answer is None and not (tagged and require_tags):
            answer = text
        got = last_integer(answer) if answer is not None else None
        return 1.0 if got is not None and got == int(row["answer"]) else 0.0

    return Task(
        name="gsm8k",
        train=dataset(train),
        eval=dataset(held_out) if held_out else None,
        rewards=compose_rewards(accuracy, rewards, DEFAULT_REWARDS, reward_timeout_s),
        is_correct=correctness(accuracy, reward_timeout_s),
    )
