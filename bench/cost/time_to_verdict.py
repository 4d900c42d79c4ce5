"""Time to a complete verdict: trainer-seconds until every trial of a budgeted sweep fits (with its speed)
or is oom / pruned, with the two phases, pruning and the settled stop, against running every trial to
max_steps (phases: [speed], no pruning, no settled stop), on the same sweep.

Trainer-seconds: the sum of the trainer processes' wall_s (trials.parquet), start-up included. On a host
without a GPU no trials are packed, so each trial is one trainer process and its row holds all of it.
Each run's sum is also split into the seconds inside optimizer steps (trainer_s: what the phases and the
settled stop can save) and the rest (each started trainer's imports, model build, the step an oom cut short, and exit: the same
per trial in both runs, so only pruning saves it).
Prints both sums, their ratio (target <= 0.40), the ratio's floor, and both runs' verdicts per trial (fits / oom, where
`pruned` counts as oom: a pruned trial dominates one that ran out of memory); they must be identical,
and every trial that fits must have a median tokens/s.

The floor: the least ratio any phased run of this sweep could read, were it to spend nothing at all on
the trials that do not fit (no probe, no fork server start for them) and run each trial that fits only
to the earliest step the settled stop can end it at: its probe steps, then intervals.MIN_CYCLES
generation cycles of num_iterations steps each (no median tokens/s is stated from fewer). Each fitting
trial is costed at its every-step row: its seconds outside the steps (start-up, its fork server's start
where it was the first on its worker) and its seconds in steps scaled to that earliest step. At
max_steps 10 with num_iterations 2 the earliest step (11) is past max_steps, so the floor is the fitting
trials' whole share of the every-step run: the target cannot be met there by any phasing.

Usage: python -m bench time_to_verdict [--set sweep=SWEEP.yaml] [--set overrides=k=v ...]
(default: sweeps/cpu-smoke.yaml with memory.budget_gib=0.80 and max_steps=200: on 29 November K=2 peaked at
0.72-0.74 GiB RSS over 10 steps and K=24 at 0.87-0.95 (0.79-0.80 in its synthetic probe step, more in the
decoded steps after it), so the budget parts them; the 0.72 used before 29 November no longer did: every
K=2 trial passed it and the two runs agreed only because every trial ended oom. max_steps 200, from 60, since
29 November: at 60 the floor was 0.47, so the target could not be met by any phasing at the default; at 200
the floor read 0.26, and the run takes about 5 minutes on 2 CPUs)
"""

from __future__ import annotations

from bench import Context, benchmark
from orchestrator.judging.intervals import MIN_CYCLES
from orchestrator.words.outcome import COMPLETED, OOM, PRUNED

DEFAULTS = ["memory.budget_gib=0.80", "max_steps=200", "tracking.enabled=false"]
PHASED = ["stop.when_settled=true"]
EVERY_STEP = ["phases=[speed]", "oom.prune_dominated=false", "oom.predict=false", "stop.when_settled=false"]
VERDICT = {COMPLETED: "fits", OOM: "oom", PRUNED: "oom"}
# A smoke run: one stack and mode, K=2 and K=24 (one fits, one does not), fewer steps.
SMOKE = ["grid.stack=[trl]", "grid.mode=[grpo]", "grid.num_generations=[2,24]", "max_steps=8"]


def earliest_settle(row: dict) -> int:
    """The earliest step the settled stop can end a trial at (module docstring)."""
    return int(row["probe_steps"] or 0) + MIN_CYCLES * int(row["num_iterations"] or 1)


def floor(every_step_rows: list[dict]) -> float:
    """The least phased / every-step ratio any phasing could reach on this sweep (module docstring)."""
    total = sum(r["wall_s"] or 0.0 for r in every_step_rows)
    needed = 0.0
    for r in every_step_rows:
        if VERDICT.get(r["status"]) != "fits":
            continue
        in_steps = r["trainer_s"] or 0.0
        share = min(1.0, earliest_settle(r) / max(1, int(r["steps_completed"] or 1)))
        needed += (r["wall_s"] or 0.0) - in_steps + in_steps * share
    return needed / total if total else float("nan")


@benchmark(
    tags=("sweep", "phases"),
    params={"sweep": "sweeps/cpu-smoke.yaml", "overrides": []},
    smoke={"overrides": SMOKE},
    goals={"verdicts_identical": "== true", "speeds_measured": "== true", "ratio": "<= 0.40"},
    smoke_goals={"verdicts_identical": "== true", "speeds_measured": "== true"},
)
def time_to_verdict(ctx: Context) -> dict:
    """Trainer-seconds to a complete verdict with phases, pruning and the settled stop, against every step."""
    sweep_file = ctx.args.sweep
    overrides = DEFAULTS + ctx.args.overrides
    work = ctx.scratch
    runs = {
        "phases + settled stop": ctx.sweep(sweep_file, overrides + PHASED, work / "phased"),
        "every trial to max_steps": ctx.sweep(sweep_file, overrides + EVERY_STEP, work / "every-step"),
    }
    seconds = {}
    verdicts = {}
    for name, (wall, rows) in runs.items():
        seconds[name] = sum(r["wall_s"] or 0.0 for r in rows)
        in_steps = sum(r["trainer_s"] or 0.0 for r in rows)
        verdicts[name] = {r["trial_key"]: VERDICT.get(r["status"], r["status"]) for r in rows}
        statuses = " ".join(
            f"{s}={sum(r['status'] == s for r in rows)}" for s in sorted({r["status"] for r in rows})
        )
        print(f"{name:26s} trainer-seconds {seconds[name]:7.1f}  sweep wall {wall:6.1f} s  ({statuses})")
        print(
            f"{'':26s} of which in steps {in_steps:7.1f} (trainer_s), outside them {seconds[name] - in_steps:7.1f}"
            f" (start-up, model build, an oom's cut step, exit) over {sum(r['wall_s'] is not None for r in rows)} started trainers"
        )
        for r in sorted(rows, key=lambda r: r["trial_key"]):
            print(
                f"  {r['trial_key']:40s} {r['status']:9s} phase={r['phase']} steps={r['steps_completed']} "
                f"settled={r['settled_step']} wall_s={r['wall_s'] or 0:.1f} tokens/s={r['median_tokens_per_s']}"
            )
    phased, every = runs
    same = verdicts[phased] == verdicts[every]
    speeds = all(
        r["median_tokens_per_s"] is not None for r in runs[phased][1] if VERDICT.get(r["status"]) == "fits"
    )
    print(f"verdicts identical (fits / oom, pruned as oom): {same}")
    print(f"every fitting trial has a median tokens/s: {speeds}")
    least = floor(runs[every][1])
    print(
        f"ratio trainer-seconds phased / every step: {seconds[phased] / seconds[every]:.2f} (target <= 0.40; "
        f"floor {least:.2f}: no phasing of this sweep at this max_steps reads less)"
    )
    return {
        "verdicts_identical": same,
        "speeds_measured": speeds,
        "ratio": seconds[phased] / seconds[every],
        "trainer_s_phased": seconds[phased],
        "trainer_s_every_step": seconds[every],
        "floor": least,
    }
