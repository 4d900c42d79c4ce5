"""First answers from cold caches: `rlsweep fits`, `fitmap` and `models` with an empty HOME and rlsweep cache,
this checkout against another (the code before a change), in the same run.

    python -m bench first_answers [--set before=DIR] [--set verbs=fits,fitmap,models] [--set rounds=1]
    python -m bench first_answers --set parts=true     # fits' steps through the worker, part by part

DIR is a checkout of the code to compare with, e.g. `git archive BASE | tar -x -C DIR` (it runs with
this interpreter, its own source first on the path). Each round runs each verb once from each checkout,
the order alternating between rounds, each in a fresh HOME and RLSWEEP_CACHE (nothing simulated, counted
or built before), and prints its wall seconds, the CPU seconds of its processes (workers included) and
before/after ratios: on a shared host the ratios, taken side by side, say more than the seconds. The load
average is printed at the start and the end. Each verb's output is checked to be the same from both,
but for the seconds each simulated step took. Without `before` only this checkout runs.

Goals (idle on a 2-core host): `fits` for one new model on every stack in 20 s, `fitmap --card` in 60 s,
`models` in 3 s, each the median wall of this checkout's rounds. A loaded host misses them: its
before/after ratios are the figures to read there.
"""

from __future__ import annotations

import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import ROOT, Context, benchmark

VERBS = {
    "fits": ["fits", "--model", "Qwen/Qwen3-4B", "--card", "24gb"],
    # README's: TRL does not fit, so the nearest configurations that do are checked too (each simulated)
    "fits-16gb": [
        "fits",
        "--model",
        "Qwen/Qwen3-4B",
        "--card",
        "16gb",
        "--k",
        "8",
        "--b",
        "1",
        "--length",
        "1024",
    ],
    "fitmap": ["fitmap", "--model", "Qwen/Qwen3-4B", "--card", "24gb", "--no-plot"],
    "models": ["models"],
}
# What differs from run to run: a simulated step's own seconds, a map's elapsed seconds.
NOISE = re.compile(r"\d+(\.\d+)? s\b")


def one(checkout: Path, argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the command and its children, its stdout) from cold caches."""
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HOME": home, "RLSWEEP_CACHE": str(Path(home) / "cache"), "PYTHONPATH": str(checkout),
               "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}  # fmt: skip
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *argv], cwd=checkout, env=env,
                              capture_output=True, text=True, timeout=900)  # fmt: skip
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(
            f"{checkout}: rlsweep {' '.join(argv)}: exit {done.returncode}\n{done.stderr[-2000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def parts() -> None:
    """fits' three steps through the simulation worker (trainers/simulate/_pool.py) from a cold cache: the
    worker's CPU seconds before its first fork, each step's child's, and the seconds an idle host with as
    many CPUs as workers would take, implied by scheduling those CPU seconds (plus a warm fits' own, the
    asking process's) as the worker does: implied, not measured."""
    from trainers import stacks
    from trainers.simulate import _pool
    from trainers.trial import TrialSpec

    with tempfile.TemporaryDirectory() as home:
        os.environ.update(HOME=home, RLSWEEP_CACHE=str(Path(home) / "cache"))
        specs = [
            TrialSpec(model="Qwen/Qwen3-4B", stack=name, num_generations=8, batch_size=1,
                      max_completion_length=1024, memory_budget_gib=24.0)
            for name in stacks.names()
        ]  # fmt: skip
        count = _pool.workers(len(specs))
        answers = _pool.run([{"spec": s.to_dict(), "prompt_tokens": None} for s in specs], count)
        # fits again on the steps the worker kept: the asking process's own CPU seconds
        env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *VERBS["fits"]], cwd=ROOT, env=env,
                              capture_output=True, text=True)  # fmt: skip
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0 or "read from disk" not in done.stdout:
            raise SystemExit(
                f"fits on the kept steps: exit {done.returncode}\n{done.stdout}{done.stderr[-2000:]}"
            )
    asking = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    preload = answers.pop(-1)["preload_cpu_s"]
    steps = [answers[i]["cpu_s"] for i in range(len(specs))]
    slots = [0.0] * count
    for cpu in steps:  # each next step on the first slot free, as the worker forks them
        slots[slots.index(min(slots))] += cpu
    print(f"worker before its forks: {preload:.1f} s CPU; steps: " + ", ".join(
        f"{s.stack} {cpu:.1f} s CPU" for s, cpu in zip(specs, steps, strict=True)))  # fmt: skip
    print(f"fits answered from the kept steps (the asking process's own work): {asking:.1f} s CPU")
    print(f"implied on an idle host with {count} CPUs: {asking + preload + max(slots):.1f} s (the asking process "
          f"{asking:.1f} + the worker's start {preload:.1f} + its steps {max(slots):.1f}, {count} at a time)")  # fmt: skip


@benchmark(
    tags=("latency", "simulate"),
    needs="cpu",
    params={"before": "", "verbs": "fits,fitmap,models", "rounds": 1, "parts": False},
    smoke={"verbs": "models"},
    goals={"fits_wall_s": "<= 20", "fitmap_wall_s": "<= 60", "models_wall_s": "<= 3"},
    smoke_goals={"models_wall_s": "<= 3"},
    rules={"verbs": (lambda v: set(v.split(",")) <= set(VERBS), f"a comma list of {', '.join(VERBS)}")},
)
def first_answers(ctx: Context) -> dict:
    """First answers from cold caches: fits, fitmap and models, this checkout against another."""
    args = ctx.args
    if args.parts:
        parts()
        return {}
    sides = {"after": ROOT} | ({"before": Path(args.before).resolve()} if args.before else {})
    print(
        f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs"
    )
    walls: dict[str, list[float]] = {}
    metrics: dict = {}
    for verb in args.verbs.split(","):
        for i in range(args.rounds):
            order = list(sides) if i % 2 else list(reversed(sides))
            seen = {}
            for side in order:
                wall, cpu, text = one(sides[side], VERBS[verb])
                seen[side] = (wall, cpu, NOISE.sub("N s", text))
                if side == "after":
                    walls.setdefault(verb, []).append(wall)
                print(f"  {verb} round {i + 1} {side:<6} {wall:6.1f} s wall {cpu:6.1f} s CPU", flush=True)
            if "before" in seen:
                (bw, bc, bt), (aw, ac, at) = seen["before"], seen["after"]
                same = "same output" if bt == at else "the output differs, in the lines below"
                print(f"{verb} round {i + 1}: before/after wall {bw / aw:.2f}x, CPU {bc / ac:.2f}x; {same}")
                metrics.setdefault(f"{verb}_same_output", True)
                metrics[f"{verb}_same_output"] &= bt == at
                gone, new = (
                    set(bt.splitlines()) - set(at.splitlines()),
                    set(at.splitlines()) - set(bt.splitlines()),
                )
                for line in [*(f"    before: {x}" for x in gone), *(f"    after:  {x}" for x in new)]:
                    print(line[:400])
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for verb in VERBS:
        metrics[f"{verb.replace('-', '_')}_wall_s"] = (
            statistics.median(walls[verb]) if verb in walls else None
        )
    return metrics
