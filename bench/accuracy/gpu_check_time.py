"""gpu-check's wall time on an H100, from the parts one measured: each stack's seconds before its first
step, its first step (warm-up: Unsloth compiles there) and its later steps, read from the H100 trials
in bench/data/h100-2026-11-26 that ran gpu-check's configuration alone on the card (1.5B, nf4, K=4, B=2,
completion 128): round 1's TRL gpu-check trial (gspo; with num_iterations=1 it does GRPO's work) and its
Unsloth trial alone.

    python -m bench gpu_check_time

A trial of N steps takes: before its first step + its first step + (N - 1) x the median later step.
Before the first step: TRL's from its events (the trainer's main() to step 1's start: imports, model
load, trainer; the interpreter's own start, about a second, is not in them); Unsloth's is its wall time
less its steps (launch, `import unsloth`, model load, exit). Two more costs a fresh host pays once: the
random 1.5B model is built by the first trial (round 2: 18 s more in TRL's model load than round 1's),
and Unsloth's first step compiles with empty caches (its first step here: 58 s).
"""

from __future__ import annotations

import json
import statistics

import pyarrow.parquet as pq

from bench import DATA as BENCH_DATA
from bench import Context, benchmark

DATA = BENCH_DATA / "h100-2026-11-26"
MODEL_BUILD_S = 18.4 - 1.7  # round 2's TRL model mark (built on a fresh host) less round 1's (loaded)


def trl_parts() -> dict[str, float]:
    events = [json.loads(line) for line in (DATA / "round1/gpucheck-trl-gspo/events.jsonl").open()]
    started = next(e for e in events if e.get("event") == "started")
    steps = [e for e in events if e.get("event") == "step"]
    return {
        "before_first_step_s": steps[0]["t_start"] - started["startup"]["main"],
        "first_step_s": steps[0]["step_s"],
        "later_step_s": statistics.median(s["step_s"] for s in steps[1:]),
    }


def unsloth_parts() -> dict[str, float]:
    trial = json.loads((DATA / "round1/uns-15b/trial.json").read_text())["outcome"]
    steps = pq.read_table(DATA / "round1/uns-15b/steps.parquet").to_pylist()
    return {
        "before_first_step_s": trial["wall_s"] - sum(s["step_s"] for s in steps),
        "first_step_s": steps[0]["step_s"],
        "later_step_s": statistics.median(s["step_s"] for s in steps[1:]),
    }


def trial_s(parts: dict[str, float], steps: int) -> float:
    return parts["before_first_step_s"] + parts["first_step_s"] + (steps - 1) * parts["later_step_s"]


@benchmark(tags=("gpu-check",), needs="data", smoke={}, goals={"fresh_host_s": "<= 240"})
def gpu_check_time(ctx: Context) -> dict:
    """gpu-check's wall time on an H100, from the parts its trials measured."""
    stacks = {"trl": trl_parts(), "unsloth": unsloth_parts()}
    for name, parts in stacks.items():
        print(f"{name:8} " + "  ".join(f"{k} {v:.1f}" for k, v in parts.items()))
    now = sum(trial_s(p, 5) for p in stacks.values())
    before = 2 * sum(trial_s(p, 10) for p in stacks.values())
    print(
        f"gpu-check now (GRPO, 5 steps, 2 trials): {now:.0f} s; on a fresh host (+ the model build) "
        f"{now + MODEL_BUILD_S:.0f} s; target 240 s"
    )
    print(f"gpu-check before (GRPO and GSPO, 10 steps, 4 trials): {before:.0f} s")
    return {"now_s": now, "fresh_host_s": now + MODEL_BUILD_S, "before_s": before}
