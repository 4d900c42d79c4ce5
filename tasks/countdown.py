"""Countdown: reach a target with an expression that uses each given number exactly once.

Problems come from a seeded RNG and are solvable by construction: numbers are drawn, combined by a
random expression tree, and the tree's value becomes the target (the tree is kept as `solution`).
The answer is read from <answer>...</answer> (both prompts ask for the tags), or with require_tags
false and no tags from the last expression-looking span of the completion, and evaluated by
tasks.safe_eval (a whitelisted syntax tree, no eval).
"""

from __future__ import annotations

import ast
import random
import re
from collections import Counter
from fractions import Fraction

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
from tasks.safe_eval import Limits, UnsafeExpression, evaluate, parse_expression

DEFAULT_REWARDS = {"accuracy": 1.0, "format": 0.2}
PLAIN_SYSTEM_PROMPT = (
    "Give the final expression inside <answer> </answer> tags, e.g. <answer>(1 + 2) * 3</answer>."
)
_EXPRESSION_SPAN = re.compile(r"[0-9()+\-*/ ]+")  # one character class: linear time on any text
_TAIL_CHARS = 4096


def _limits(allow_division: bool) -> Limits:
    ops = {ast.Add, ast.Sub, ast.Mult} | ({ast.Div} if allow_division else set())
    return Limits(max_chars=256, max_nodes=64, max_depth=24, max_literal_digits=9, binary_ops=frozenset(ops))


def make_problem(
    rng: random.Random, num_numbers: int, max_number: int, max_target: int, allow_division: bool
):
    """(numbers, target, solution): a random tree over random numbers whose value is a target in range."""
    ops = ["+", "-", "*"] + (["/"] if allow_division else [])
    limits = _limits(allow_division)
    while True:  # rejection sampling; about 1 try in 3 is accepted with the defaults
        numbers = [rng.randint(1, max_number) for _ in range(num_numbers)]
        terms = [str(n) for n in rng.sample(numbers, len(numbers))]
        while len(terms) > 1:  # join two random neighbours: any binary tree shape is possible
            i = rng.randrange(len(terms) - 1)
            terms[i : i + 2] = [f"({terms[i]} {rng.choice(ops)} {terms[i + 1]})"]
        solution = terms[0][1:-1] if num_numbers > 1 else terms[0]
        value = evaluate(parse_expression(solution, limits), limits)
        if isinstance(value, int) and 1 <= value <= max_target and not _has_fraction(solution, limits):
            return numbers, value, solution


def _has_fraction(expression: str, limits: Limits) -> bool:
    """Whether any sub-expression is a non-integer (kept out: countdown's intermediate values are integers)."""
    nodes = [parse_expression(expression, limits)]
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.BinOp):
            if isinstance(evaluate(node, limits), Fraction):
                return True
            nodes += [node.left, node.right]
    return False


def extract_expression(text: str, require_tags: bool = True) -> str:
    """The <answer> content, else ("" when `require_tags`) the last expression-looking span; a
    trailing '= N' is dropped and Unicode minus signs read as '-'."""
    text = ascii_minus(text)
    candidate = answer_tag(text)
    if candidate is None and require_tags:
        return ""
    if candidate is None:
        spans = [s.strip() for s in _EXPRESSION_SPAN.findall(text[-_TAIL_CHARS:])]
        spans = [s for s in spans if any(c.isdigit() for c in s) and any(op in s for op in "+-*/")]
        candidate = spans[-1] if spans else ""
    return candidate.split("=")[0].strip()


def countdown_score(text: str, numbers, target, allow_division: bool, require_tags: bool = True) -> float:
    """1.0 when the expression uses each given number exactly once and equals the target."""
    limits = _limits(allow_division)
    try:
        tree = parse_expression(extract_expression(text, require_tags), limits)
    except UnsafeExpression:
        return 0.0
    used = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)]
    if Counter(used) != Counter(int(n) for n in numbers):
        return 0.0
    try:
        return 1.0 if evaluate(tree, limits) == int(target) else 0.0
    except UnsafeExpression:
        return 0.0


def _user_prompt(numbers: list[int], target: int, allow_division: bool) -> str:
    ops = "+ - * /" if allow_division else "+ - *"
    return (
        f"Using the numbers {numbers}, write an arithmetic expression that equals {target}. "
        f"Use each number exactly once; allowed: {ops} and parentheses."
    )


def countdown_problems(settings: dict) -> list[str]:
    errors = []
    if not 2 <= settings["num_numbers"] <= 6:
        errors.append(f"task_args.num_numbers: must be 2..6, got {settings['num_numbers']}")
    if settings["max_number"] < 2:
        errors.append(f"task_args.max_number: must be >= 2, got {settings['max_number']}")
    if settings["max_target"] < 10:
        errors.append(f"task_args.max_target: must be >= 10, got {settings['max_target']}")
    if settings["num_samples"] < 1 or settings["num_eval"] < 0:
        errors.append("task_args.num_samples / num_eval: need num_samples >= 1 and num_eval >= 0")
    return errors


def build_countdown(
    seed: int = 42,
    *,
    num_numbers: int = 3,
    max_number: int = 50,
    max_target: int = 1000,
    allow_division: bool = False,
    num_samples: int = 512,
    num_eval: int = 64,
    rewards: dict[str, float] | None = None,
    require_tags: bool = True,
    reward_timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Task:
    rng = random.Random(seed)
    problems = [
        make_problem(rng, num_numbers, max_number, max_target, allow_division)
        for _ in range(num_samples + num_eval)
    ]
    system = FORMAT_SYSTEM_PROMPT if wants_format(rewards, DEFAULT_REWARDS) else PLAIN_SYSTEM_PROMPT

    def rows(chunk):
        return to_dataset(
            {
                "prompt": [
                    [
                        {"role": "system", "content": system},
                        {"role": "user", "content": _user_prompt(nums, target, allow_division)},
                    ]
                    for nums, target, _ in chunk
                ],
                "numbers": [nums for nums, _, _ in chunk],
                "target": [target for _, target, _ in chunk],
                "solution": [solution for _, _, solution in chunk],
            }
        )

    def accuracy(text: str, row: dict) -> float:
        return countdown_score(text, row["numbers"], row["target"], allow_division, require_tags)

    return Task(
        name="countdown",
        train=rows(problems[:num_samples]),
        eval=rows(problems[num_samples:]) if num_eval else None,
        rewards=compose_rewards(accuracy, rewards, DEFAULT_REWARDS, reward_timeout_s),
        is_correct=correctness(accuracy, reward_timeout_s),
    )
