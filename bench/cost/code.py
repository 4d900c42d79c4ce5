"""Code-task reward latency: each completion run against its problem's tests in the sandbox
(tasks/code/_sandbox.py), benign and hostile mixes, with 1 and N reward workers.

Benign: the shipped problems' reference solutions (every test passes) and a wrong solution per
problem (every test fails), 3-4 tests each. Hostile: tools/inputs/hostile_code.py (endless loop, fork
bomb, memory bomb, 10 GB write, detached daemon, socket, and one completion per act: a read, write or
delete outside its folder, a signal to its parent, a process or thread left running, a network attempt,
a program started), at reward_timeout_s 1 s; every one must total 0 under the default rewards. Reports
per-completion latency p50/p99/max, completions per second (a batch scored with `workers` at a time, as a
step's B x K is), the cold start of a sandbox, and what watching for acts costs a benign completion (the
benign set with 1 worker, watch_calls on and off in alternate rounds). Targets (2-core machine): benign
p99 <= 200 ms; a hostile completion costs at most its timeout plus 100 ms.

    python -m bench code [--set workers=1,2,4] [--set repeat=3] [--set watch_rounds=4]

(repeat: rounds over the benign and hostile sets; watch_rounds: rounds of the benign set with the act watch
off, and on; 0: as many as repeat)
"""

from __future__ import annotations

import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from bench import Context, benchmark
from tasks.code import SHIPPED, Grader, _sandbox
from tools.inputs.hostile_code import ACTS, HOSTILE

TIMEOUT_S = 1.0
TESTS = ["assert double(3) == 6", "assert double(4) == 8", "assert double(0) == 0"]


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def benign_items(repeat: int) -> list[tuple[str, list[str]]]:
    items = []
    for line in SHIPPED.read_text().splitlines():
        problem = json.loads(line)
        name = problem["code"].split("(")[0].removeprefix("def ")
        wrong = f"def {name}(*args):\n    return None"
        for round_ in range(repeat):  # a comment makes each text new: the grader's cache never answers
            items.append((fenced(f"{problem['code']}\n# {round_}"), problem["test_list"]))
            items.append((fenced(f"{wrong}\n# {round_}"), problem["test_list"]))
    return items


def hostile_items(repeat: int) -> list[tuple[str, str, list[str]]]:
    # each act's text its own (the network attempt's code is the socket's): the grader's cache never answers
    acts = {kind: code.replace("{path!r}", "'/etc/hostname'") + "# act\n" for kind, (code, _) in ACTS.items()}
    return [
        (kind, fenced(f"{code}\n# {r}"), TESTS)
        for r in range(repeat)
        for kind, code in (HOSTILE | acts).items()
    ]


def watch_cost(repeat: int) -> dict:
    """The benign set with 1 worker, the act watch off and on in alternate rounds: p50 and mean per completion."""
    latencies: dict[bool, list[float]] = {False: [], True: []}
    for round_ in range(2 * repeat):
        watched = round_ % 2 == 1
        grader = Grader(_sandbox.Limits(timeout_s=TIMEOUT_S, watch_calls=watched), 1, reasoning_format=False)
        latencies[watched] += timed_batch(grader, benign_items(1))[0]
        _sandbox.close_all()
    p50 = {w: 1000 * statistics.median(ts) for w, ts in latencies.items()}
    mean = {w: 1000 * statistics.mean(ts) for w, ts in latencies.items()}
    return {
        "completions_each": len(latencies[True]),
        "p50_ms_unwatched_watched": [round(p50[False], 1), round(p50[True], 1)],
        "mean_ms_unwatched_watched": [round(mean[False], 1), round(mean[True], 1)],
        "cost_per_completion_ms_p50_mean": [
            round(p50[True] - p50[False], 1),
            round(mean[True] - mean[False], 1),
        ],
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed_batch(grader: Grader, items: list[tuple[str, list[str]]]) -> tuple[list[float], float]:
    """Each completion's own latency (inside the worker) and the batch's wall time."""
    latencies: list[float] = []

    def one(item):
        start = time.perf_counter()
        grader.one(*item)
        latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    _pool(grader.workers, one, items)
    return latencies, time.perf_counter() - start


def _pool(workers: int, fn, items) -> None:
    """fn over items, `workers` at a time: each thread keeps its own sandbox, as the grader's pool does."""
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(fn, items))


def summary(latencies: list[float], wall: float) -> dict:
    return {
        "completions": len(latencies),
        "p50_ms": round(1000 * statistics.median(latencies), 1),
        "p99_ms": round(1000 * percentile(latencies, 0.99), 1),
        "max_ms": round(1000 * max(latencies), 1),
        "per_s": round(len(latencies) / wall, 1),
    }


@benchmark(
    tags=("rewards", "sandbox"),
    needs="cpu",
    params={"workers": [1, max(1, (os.cpu_count() or 2) - 1), 4], "repeat": 2, "watch_rounds": 0},
    smoke={"workers": [1, 2], "repeat": 1},
    goals={"benign_p99_ms_worst": "<= 200", "hostile_max_over_timeout_ms_worst": "<= 100"},
)
def code(ctx: Context) -> dict:
    args = ctx.args
    isolation, python = _sandbox.setup()
    load_before = os.getloadavg()[0]
    results: dict = {
        "isolation": isolation,
        "interpreter": python,
        "cgroups": _sandbox.cgroups_available(),
        "cores": os.cpu_count(),
    }
    cold = []
    for _ in range(5):  # a fresh sandbox's first completion: what a worker's first run, or a kill, costs
        start = time.perf_counter()
        sandbox = _sandbox.Sandbox(_sandbox.Limits(timeout_s=TIMEOUT_S))
        sandbox.run("def double(x):\n    return 2 * x", ["double(3)"])
        sandbox.close()
        cold.append(time.perf_counter() - start)
    results["first_run_of_a_sandbox_ms"] = round(1000 * statistics.median(cold), 1)
    limits = _sandbox.Limits(timeout_s=TIMEOUT_S)
    for workers in sorted(set(args.workers)):
        grader = Grader(limits, workers, reasoning_format=False)
        latencies, wall = timed_batch(grader, benign_items(args.repeat))
        results[f"benign_{workers}_workers"] = summary(latencies, wall)
        hostile = hostile_items(args.repeat)
        by_kind: dict[str, list[float]] = {}
        overshoot: list[float] = []

        def one(item, by_kind=by_kind, overshoot=overshoot, grader=grader):
            kind, text, tests = item
            start = time.perf_counter()
            scored = grader.one(text, tests)
            elapsed = time.perf_counter() - start
            assert scored.rewards["tests"] == 0.0, (kind, scored)
            if kind in ACTS:  # an act pays nothing, format included
                assert set(scored.rewards.values()) == {0.0} and scored.killed, (kind, scored)
            by_kind.setdefault(kind, []).append(elapsed)
            overshoot.append(elapsed - TIMEOUT_S)

        start = time.perf_counter()
        _pool(workers, one, hostile)
        wall = time.perf_counter() - start
        results[f"hostile_{workers}_workers"] = summary([t for ts in by_kind.values() for t in ts], wall) | {
            "max_over_timeout_ms": round(1000 * max(overshoot), 1),
            "max_ms_by_kind": {kind: round(1000 * max(ts), 1) for kind, ts in by_kind.items()},
        }
        _sandbox.close_all()
        print(json.dumps({k: v for k, v in results.items() if str(workers) in k}, indent=1), flush=True)
    results["watch_cost"] = watch_cost(args.watch_rounds or args.repeat)
    print(json.dumps(results["watch_cost"], indent=1), flush=True)
    results["load_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(results, indent=1))
    benign = [v for k, v in results.items() if k.startswith("benign_")]
    hostile = [v for k, v in results.items() if k.startswith("hostile_")]
    return results | {
        "benign_p99_ms_worst": max(v["p99_ms"] for v in benign),
        "hostile_max_over_timeout_ms_worst": max(v["max_over_timeout_ms"] for v in hostile),
    }
