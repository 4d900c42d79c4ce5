"""Reward-call time on adversarial completions: every reward of every shipped task, and of every
reasoning-gym dataset the project ships, on the adversarial texts of the reward tests, the explosive
answers (power product, nested log, 2,000 negations) and a few seeded random ones. Reports p50, p99
and max per task (and the slowest reasoning-gym datasets) and overall. Target: p99 <= 100 ms, max <= 1 s
(a call over task_args.reward_timeout_s is killed and scores 0: tasks/bounded.py).

It also measures the two designs for that bound on this machine: a persistent forked worker (what
tasks/bounded.py does) against a fork per call, the latter at the benchmark's own memory and with a
touched ballast that stands for a trainer process's memory.

    python -m bench rewards [--set ballast_gib=4]    # ballast_gib: resident memory for the fork-per-call figure
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench import Context, benchmark
from tasks import load_task
from tasks.bounded import SCORING
from tasks.reasoning_gym import available_datasets, generate, installed
from tasks.rewards import reward_function
from tools.inputs.adversarial import ADVERSARIAL, NESTED_LOG, POWER_PRODUCT, negations

GENERATED = 6  # seeded random answers per kind


def generated_texts(seed: int = 0) -> list[str]:
    """Random math-like and random-unicode answers, tagged, of 50 to 400 characters."""
    rng = random.Random(seed)
    tokens = [
        "x",
        "y",
        "(",
        ")",
        "+",
        "-",
        "*",
        "/",
        "**",
        "^",
        "9",
        "64",
        "log(",
        "sin(",
        "exp(",
        "¬",
        "∧",
        "∨",
    ]
    texts = []
    for _ in range(GENERATED):
        texts.append(
            "<answer>" + "".join(rng.choice(tokens) for _ in range(rng.randint(50, 200))) + "</answer>"
        )
        texts.append(
            "<answer>"
            + "".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(50, 400)))
            + "</answer>"
        )
    return texts


def explosive_texts(variable: str) -> list[str]:
    return [
        f"<answer>{POWER_PRODUCT.replace('x', variable)}</answer>",
        f"<answer>{NESTED_LOG.replace('x', variable)}</answer>",
        f"<answer>{negations('P')}</answer>",
    ]


def shipped_tasks(gsm8k_path: Path) -> dict[str, object]:
    """Every task with small settings; reasoning-gym as one task per dataset (a failing one is skipped)."""
    gsm8k_path.write_text('{"question": "2 + 40?", "answer": "2 + 40 = 42\\n#### 42"}\n' * 4)
    tasks = {
        "arithmetic": load_task("arithmetic", {"num_samples": 2, "num_eval": 0}),
        "countdown": load_task("countdown", {"num_samples": 2, "num_eval": 0, "allow_division": True}),
        "gsm8k": load_task(
            "gsm8k", {"path": str(gsm8k_path), "num_eval": 1, "rewards": {"accuracy": 1.0, "format": 0.2}}
        ),
    }
    if installed():
        for name in available_datasets():
            try:
                tasks[f"reasoning_gym/{name}"] = load_task(
                    "reasoning_gym", {"datasets": [name], "num_samples": 1, "num_eval": 0}
                )
            except Exception as exc:  # noqa: BLE001 - reported, the rest is measured
                print(f"skipped reasoning_gym/{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return tasks


def variable_of(name: str) -> str:
    if not name.startswith("reasoning_gym/"):
        return "x"
    dataset = name.split("/", 1)[1]
    metadata = generate({dataset: 1.0}, 1, 42, "train", {})[0].get("metadata", {})
    return str(metadata.get("variable", "x"))


def time_task(task, texts: list[str]) -> list[float]:
    row = task.train[0]
    columns = {key: [value] for key, value in row.items()}
    seconds = []
    for func, _ in task.rewards.values():
        for text in texts:
            start = time.perf_counter()
            func(prompts=columns["prompt"], completions=[text], **columns)
            seconds.append(time.perf_counter() - start)
    return seconds


def summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "calls": len(ordered),
        "p50_ms": 1e3 * statistics.median(ordered),
        "p99_ms": 1e3 * p99,
        "max_ms": 1e3 * ordered[-1],
    }


def _one(text, row) -> float:
    return float(len(text) % 2)


def _fork_per_call(text: str, row: dict) -> float:
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=lambda: send.send(_one(text, row)), daemon=True)
    process.start()
    value = receive.recv() if receive.poll(1.0) else 0.0
    process.kill()
    process.join()
    receive.close()
    send.close()
    return value


def designs(ballast_gib: float, calls: int = 200) -> dict[str, float]:
    """Per-call overhead in ms of: scoring in-process, the persistent worker, a fork per call."""
    row = {"answer": "42", "prompt": [{"role": "user", "content": "What is 40 + 2?"}]}
    worker = reward_function(_one, "design")
    results = {"process_rss_gib": psutil.Process().memory_info().rss / 1024**3}

    def per_call(fn, calls: int = calls) -> float:
        fn()  # warm: the worker's first fork is not a per-call cost
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return 1e3 * (time.perf_counter() - start) / calls

    results["in_process_ms"] = per_call(lambda: _one("<answer>42</answer>", row))
    results["worker_1_completion_ms"] = per_call(
        lambda: worker(completions=["<answer>42</answer>"], answer=["42"], prompt=[row["prompt"]])
    )
    results["worker_16_completions_ms_each"] = (
        per_call(lambda: worker(completions=["<answer>42</answer>"] * 16, answer=["42"] * 16)) / 16
    )
    results["fork_per_call_ms"] = per_call(lambda: _fork_per_call("<answer>42</answer>", row))
    if ballast_gib:
        ballast = bytearray(int(ballast_gib * 1024**3))
        ballast[::4096] = b"\1" * len(ballast[::4096])  # touch every page: resident, as a trainer's is
        results[f"fork_per_call_with_{ballast_gib:g}_gib_ms"] = per_call(
            lambda: _fork_per_call("<answer>42</answer>", row), calls=20
        )
        del ballast
    return results


@benchmark(
    tags=("rewards",),
    needs="cpu",
    params={"ballast_gib": 4.0},
    smoke={"ballast_gib": 0.5},
    goals={"overall_p99_ms": "<= 100", "overall_max_ms": "<= 1000"},
    isolated=True,
)
def rewards(ctx: Context) -> dict:
    args = ctx.args
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        tasks = shipped_tasks(Path(tmp) / "gsm8k.jsonl")
    common = [t for t in ADVERSARIAL if t is not None] + generated_texts()
    by_task: dict[str, list[float]] = {}
    SCORING.reset()
    for name, task in tasks.items():
        by_task[name] = time_task(task, common + explosive_texts(variable_of(name)))
    timeouts, calls = SCORING.timeouts, SCORING.calls
    groups = {
        task: [s for name, seconds in by_task.items() if name.split("/")[0] == task for s in seconds]
        for task in ("arithmetic", "countdown", "gsm8k", "reasoning_gym")
    }
    report = {
        "load_average_before": load_before,
        "tasks": {task: summary(seconds) for task, seconds in groups.items() if seconds},
        "slowest_reasoning_gym_datasets": dict(
            sorted(
                ((name, summary(s)) for name, s in by_task.items() if name.startswith("reasoning_gym/")),
                key=lambda item: -item[1]["max_ms"],
            )[:8]
        ),
        "overall": summary([s for seconds in by_task.values() for s in seconds]),
        "reasoning_gym_datasets": sum(name.startswith("reasoning_gym/") for name in by_task),
        "scoring_calls": calls,
        "timeouts": timeouts,
        "designs": designs(args.ballast_gib),
        "load_average_after": os.getloadavg(),
    }
    text = json.dumps(report, indent=2)
    print(text)
    return report | {
        "overall_p99_ms": report["overall"]["p99_ms"],
        "overall_max_ms": report["overall"]["max_ms"],
    }
