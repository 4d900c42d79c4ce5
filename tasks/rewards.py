"""Reward components shared by every task, and the one place rewards are composed.

Every task takes the setting `rewards`: reward name -> weight, e.g. {"accuracy": 1.0, "format": 0.2}.
Each name becomes its own TRL reward function (TRL logs rewards/<name>/mean and /std), weighted by
TRL's reward_weights. A weight of 0 keeps the curve in the logs without training on it.

- accuracy: the task's own check of the answer (exact sum, countdown expression, GSM8K number,
  reasoning-gym scorer).
- format: 1.0 when the completion is exactly <think>...</think> followed by <answer>...</answer>.
- format_partial: a share per well-formed tag pair (one <think>...</think>: 0.5, one
  <answer>...</answer>: 0.5), so a model halfway to the format already sees a gradient.
- digits: the share of ASCII digits in the first 256 characters: a dense shaped signal that varies
  even for an untrained or random-weight model, so smoke runs and tests see non-zero advantages.

When "format" or "format_partial" is requested the system prompt asks for that format. When a
prompt asks for <answer> tags, accuracy reads the answer only from them unless the task's setting
`require_tags` is false. Numeric answers read Unicode minus signs (U+2212 and the dashes a model may
write for one) as '-'.
"""

from __future__ import annotations

from collections.abc import Callable

from tasks.base import RewardFunc, completion_text
from tasks.bounded import DEFAULT_TIMEOUT_S, BoundedScore
from tasks.names import did_you_mean

REWARD_NAMES = ("accuracy", "format", "format_partial", "digits")
_FORMAT_REWARDS = ("format", "format_partial")
_TAG_PAIRS = (("<think>", "</think>"), ("<answer>", "</answer>"))
# U+2212 minus sign; U+2012-U+2015 figure dash, en dash, em dash, horizontal bar; U+FE63 small
# hyphen-minus; U+FF0D full-width hyphen-minus.
_MINUS_SIGNS = str.maketrans(dict.fromkeys("\u2212\u2012\u2013\u2014\u2015\ufe63\uff0d", "-"))
_DIGITS_WINDOW = 256
FORMAT_SYSTEM_PROMPT = (
    "Reason inside <think> </think>, then give only the final answer inside <answer> </answer>."
)
_NOT_COLUMNS = {"prompts", "completions", "completion_ids", "trainer_state"}
# Tags are searched in the tail only: a 100 kB completion costs the same as a 16 kB one.
_TAIL_CHARS = 16_384

Score = Callable[[str, dict], float]


def answer_tag(text: str) -> str | None:
    """Content of the last <answer>...</answer> in the tail of `text`, or None."""
    tail = text[-_TAIL_CHARS:]
    end = tail.rfind("</answer>")
    start = tail.rfind("<answer>", 0, end) if end >= 0 else -1
    return tail[start + len("<answer>") : end].strip() if start >= 0 else None


def ascii_minus(text: str) -> str:
    """`text` with every Unicode minus sign written as '-'."""
    return text.translate(_MINUS_SIGNS)


def last_line(text: str) -> str:
    lines = [line.strip() for line in text[-_TAIL_CHARS:].splitlines() if line.strip()]
    return lines[-1] if lines else ""


def format_score(text: str, row: dict | None = None) -> float:
    """1.0 for '<think>...</think> <answer>...</answer>' and nothing else (one of each tag, in order)."""
    body = text.strip()
    tags = ("<think>", "</think>", "<answer>", "</answer>")
    if not (body.startswith("<think>") and body.endswith("</answer>")):
        return 0.0
    if any(body.count(tag) != 1 for tag in tags):
        return 0.0
    think_end, answer_start = body.index("</think>"), body.index("<answer>")
    between = body[think_end + len("</think>") : answer_start]
    return 1.0 if think_end < answer_start and not between.strip() else 0.0


def format_partial_score(text: str, row: dict | None = None) -> float:
    """A share per well-formed tag pair: the pair appears once, opened before it is closed."""
    body = text.strip()

    def well_formed(opening: str, closing: str) -> bool:
        once = body.count(opening) == 1 and body.count(closing) == 1
        return once and body.index(opening) < body.index(closing)

    return sum(well_formed(*pair) for pair in _TAG_PAIRS) / len(_TAG_PAIRS)


def digits_score(text: str, row: dict | None = None) -> float:
    head = text[:_DIGITS_WINDOW]
    return sum(c in "0123456789" for c in head) / len(head) if head else 0.0


def reward_function(score: Score, name: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> RewardFunc:
    """A TRL reward function named `name` that scores each completion with score(text, row).

    `row` holds this completion's dataset columns (TRL passes each column as a list). A score that
    raises, or runs over `timeout_s` seconds (tasks/bounded.py), counts 0: a reward never raises.
    """
    bounded = BoundedScore(score, timeout_s)

    def reward(prompts=None, completions=None, **columns) -> list[float]:
        completions = list(completions or [])
        n = len(completions)
        lists = {
            k: v for k, v in columns.items() if k not in _NOT_COLUMNS and isinstance(v, list) and len(v) == n
        }
        return bounded.many(
            [(completion_text(c), {k: v[i] for k, v in lists.items()}) for i, c in enumerate(completions)]
        )

    reward.__name__ = reward.__qualname__ = name  # TRL names the logged metrics after __name__
    return reward


def correctness(score: Score, timeout_s: float = DEFAULT_TIMEOUT_S) -> Callable[[str, dict], bool]:
    """is_correct(text, row) for held-out accuracy: the accuracy score is full marks (within `timeout_s`)."""
    bounded = BoundedScore(score, timeout_s)

    def is_correct(text: str, row: dict) -> bool:
        return bounded(completion_text(text), dict(row)) >= 1.0 - 1e-9

    return is_correct


def reward_problems(rewards, known: tuple[str, ...] = REWARD_NAMES) -> list[str]:
    """Why a `rewards` setting is invalid (names outside `known`), as 'task_args.rewards...' lines."""
    if rewards is None:
        return []
    if not isinstance(rewards, dict) or not rewards:
        return [
            f"task_args.rewards: must be a mapping name -> weight, e.g. {{'accuracy': 1.0}}; got {rewards!r}"
        ]
    errors = [
        f"task_args.rewards.{name}: unknown reward; {did_you_mean(str(name), known)}"
        for name in rewards
        if name not in known
    ]
    for name, weight in rewards.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            errors.append(f"task_args.rewards.{name}: weight must be a number >= 0, got {weight!r}")
    if not errors and not any(rewards.values()):
        errors.append("task_args.rewards: every weight is 0; give at least one reward a weight > 0")
    return errors


def compose_rewards(
    accuracy: Score,
    weights: dict[str, float] | None,
    default: dict[str, float],
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, tuple[RewardFunc, float]]:
    """The Task.rewards mapping for the requested weights (raises ValueError on a bad setting)."""
    weights = default if weights is None else weights
    problems = reward_problems(weights)
    if problems:
        raise ValueError("; ".join(problems))
    scores = {
        "accuracy": accuracy,
        "format": format_score,
        "format_partial": format_partial_score,
        "digits": digits_score,
    }
    return {
        name: (reward_function(scores[name], name, timeout_s), float(weight))
        for name, weight in weights.items()
    }


def wants_format(weights: dict[str, float] | None, default: dict[str, float]) -> bool:
    return any(name in (default if weights is None else weights) for name in _FORMAT_REWARDS)
