"""`rlsweep score`: score a file of completions with a task's rewards, outside any training.

Each input line is {"row": N, "completion": "..."}: N indexes the task's training set as a sweep with
the same task_args and seed builds it. Each output line (JSONL, stdout or --output) gives every
reward, the weighted total (as TRL sums them), the seconds scoring took, and why each zero reward is
zero: the task's own reason where it has one (task code: timeout, no code block, test failed,
killed), else "timeout" (over task_args.reward_timeout_s) or "scored 0". A task that runs completions
in a sandbox (code) adds "killed": why its sandbox killed the completion's run, a limit ("time limit",
"memory limit (MemoryError)", ...) or an act ("forbidden call (read outside its directory: /etc/x)",
"forbidden call (signal outside the sandbox: SIGTERM to process 1)", "left running after the call:
1 process", ...), which scores 0 in every reward, or null when it did not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from orchestrator.spec.load import yaml_data
from orchestrator.spec.sweep import SweepError


class ScoreError(ValueError):
    """Bad input: the message names the field, the value, the rule and a fix."""


def task_args(items: list[str]) -> dict:
    """--set KEY=VALUE items (KEY a task setting, optionally written task_args.KEY; VALUE YAML)."""
    args = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().removeprefix("task_args.")
        if not sep or not key:
            raise ScoreError(
                f"--set {item!r}: expected KEY=VALUE with a task setting, e.g. --set reward_timeout_s=2"
            )
        try:
            args[key] = yaml_data(text, "--set") if text.strip() else None
        except SweepError as exc:
            raise ScoreError(f"--set {item!r}: {'; '.join(exc.errors)}") from None
    return args


def read_completions(path: str, rows: int) -> list[tuple[int, str]]:
    """(row, completion) per line of `path` ('-': stdin), every line checked before any is scored."""
    lines = (
        sys.stdin.read().splitlines() if path == "-" else Path(path).read_text(encoding="utf-8").splitlines()
    )
    items, errors = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(
                f'{where}: not JSON ({exc.msg}); give one {{"row": N, "completion": "..."}} per line'
            )
            continue
        row = item.get("row") if isinstance(item, dict) else None
        completion = item.get("completion") if isinstance(item, dict) else None
        if isinstance(row, bool) or not isinstance(row, int) or not 0 <= row < rows:
            errors.append(
                f"{where}: row must be an integer in [0, {rows - 1}] (a training row of the task), got {row!r}"
            )
        elif not isinstance(completion, str):
            errors.append(f"{where}: completion must be a string, got {type(completion).__name__}")
        else:
            items.append((row, completion))
    if errors:
        raise ScoreError("\n".join(errors))
    return items


def score_one(task, row: dict, completion: str) -> dict:
    from tasks.bounded import SCORING

    columns = {key: [value] for key, value in row.items()}
    rewards, why_zero = {}, {}
    start = time.perf_counter()
    for name, (reward, _) in task.rewards.items():
        before = SCORING.timeouts
        rewards[name] = float(reward(prompts=columns["prompt"], completions=[completion], **columns)[0])
        if rewards[name] == 0.0:
            why_zero[name] = "timeout" if SCORING.timeouts > before else "scored 0"
    if task.explain is not None:
        reasons = task.explain(completion, row)
        why_zero = {name: reasons.get(name, why) for name, why in why_zero.items()}
    line = {
        "rewards": rewards,
        "total": sum(weight * rewards[name] for name, (_, weight) in task.rewards.items()),
        "seconds": round(time.perf_counter() - start, 4),
        "why_zero": why_zero,
    }
    if task.killed is not None:
        line["killed"] = task.killed(completion, row)
    return line


def cmd_score(args: argparse.Namespace) -> int:
    from tasks import load_task

    if args.completions != "-" and not Path(args.completions).is_file():
        print(
            f'{args.completions}: no such file; give a JSONL of {{"row": N, "completion": "..."}} lines',
            file=sys.stderr,
        )
        return 2
    try:
        task = load_task(args.task, task_args(args.set), seed=args.seed)
        items = read_completions(args.completions, len(task.train))
    except (ScoreError, ValueError) as exc:
        print(str(exc), file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(args.output, "w", encoding="utf-8")) if args.output else sys.stdout
        for index, completion in items:
            line = {"row": index} | score_one(task, task.train[index], completion)
            out.write(json.dumps(line) + "\n")
            out.flush()
    return 0


def add_score(sub) -> None:
    p = sub.add_parser(
        "score",
        help="score a JSONL of completions with a task's rewards (debug rewards outside training)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("completions", help='JSONL file of {"row": N, "completion": "..."} lines, or - for stdin')
    p.add_argument("--task", required=True, help="task name, e.g. code, arithmetic, gsm8k")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a task setting (YAML value), as in the sweep's task_args, e.g. --set reward_timeout_s=2",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=42,
        help="the trial's data seed (data_seed, else seed), which orders the training rows; default 42",
    )
    p.add_argument("--output", help="write the scores here instead of stdout")
    p.set_defaults(func=cmd_score)
