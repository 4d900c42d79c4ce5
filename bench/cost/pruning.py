"""Pruning savings: trainer-seconds of a sweep under a memory budget with pruning on against off.

Runs the sweep twice with `rlsweep run` (fresh output dirs, MLflow in a temp sqlite):
    on:  --set oom.prune_dominated=true   (trials dominating an `oom` one are pruned, no trainer)
    off: --set oom.prune_dominated=false  (every trial runs until it completes or the guard kills it)
and prints, for each, the statuses, the trainers started, the sweep's wall time and the
trainer-seconds (the sum of the trials' wall_s: trainer process start to exit, imports and model load
included), then the ratio on/off (lower is better; 1.0 means pruning saved nothing).
On a shared machine the load moves trainer-seconds by tens of percent between runs: --repeat N runs
the pair N times, alternating which goes first, and sums them.
Usage: python -m bench pruning [--set sweep=SWEEP.yaml] [--set repeat=N] [--set overrides=k=v ...]
Default: sweeps/cpu-smoke.yaml --set memory.budget_gib=0.72 (the budget demo of docs/memory.md).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench import Context, benchmark

DEFAULT_BUDGET = "memory.budget_gib=0.72"


def run(ctx: Context, sweep_file: str, overrides: list[str], out: Path) -> dict[str, float]:
    wall, rows = ctx.sweep(sweep_file, overrides, out, silent=True)
    return Counter(
        wall=wall,
        trainer_s=sum(r["wall_s"] or 0.0 for r in rows),
        trainers=sum(r["status"] != "pruned" for r in rows),
        **Counter(r["status"] for r in rows),
    )


@benchmark(
    tags=("sweep", "memory"),
    params={"sweep": "sweeps/cpu-smoke.yaml", "repeat": 1, "overrides": []},
    rules={"repeat": (lambda n: n >= 1, "1 or more")},
)
def pruning(ctx: Context) -> dict:
    """Pruning savings: trainer-seconds of a budgeted sweep with pruning on against off."""
    sweep_file, repeat = ctx.args.sweep, ctx.args.repeat
    overrides = list(ctx.args.overrides)
    if not any(o.startswith("memory.budget_gib=") for o in overrides):
        overrides.append(DEFAULT_BUDGET)
    work = ctx.scratch
    overrides.append(f"tracking.mlflow_uri=sqlite:///{work}/mlflow.db")
    totals = {"on": Counter(), "off": Counter()}
    for i in range(repeat):
        for name in ("on", "off") if i % 2 == 0 else ("off", "on"):
            setting = f"oom.prune_dominated={'true' if name == 'on' else 'false'}"
            result = run(ctx, sweep_file, [*overrides, setting], work / f"{name}-{i}")
            print(f"run {i} pruning {name:3}: {dict(result)}", flush=True)
            totals[name].update(result)
    print(f"sweep file: {sweep_file}; overrides: {' '.join(o for o in overrides if 'mlflow_uri' not in o)}")
    for name, total in totals.items():
        statuses = {k: v for k, v in sorted(total.items()) if k not in ("wall", "trainer_s", "trainers")}
        print(
            f"pruning {name:3} ({repeat} run(s)): wall {total['wall']:6.1f} s, trainers started "
            f"{total['trainers']}, trainer-seconds {total['trainer_s']:6.1f}, statuses {statuses}"
        )
    on, off = totals["on"], totals["off"]
    print(
        f"ratio on/off: trainer-seconds {on['trainer_s'] / off['trainer_s']:.2f}, "
        f"trainers {on['trainers'] / off['trainers']:.2f}, wall {on['wall'] / off['wall']:.2f}"
    )
    print(f"outputs: {work}")
    return {
        "ratio_trainer_s": on["trainer_s"] / off["trainer_s"],
        "ratio_trainers": on["trainers"] / off["trainers"],
        "ratio_wall": on["wall"] / off["wall"],
    }
