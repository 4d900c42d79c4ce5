"""Pruning savings: trainer-seconds of a sweep under a memory budget with pruning on against off.

Runs the sweep twice with `rlsweep run` (fresh output dirs, MLflow in a temp sqlite):
    on:  --set oom.prune_dominated=true   (trials dominating an `oom` one are pruned, no trainer)
    off: --set oom.prune_dominated=false  (every trial runs until it completes or the guard kills it)
and prints, for each, the statuses, the sweep's wall time and the trainer-seconds (the sum of the
trials' wall_s: trainer process start to exit, imports and model load included), then the ratio
on/off (lower is better; 1.0 means pruning saved nothing).
Usage: python bench/bench_pruning.py [SWEEP.yaml] [--set k=v ...]
Default: sweeps/cpu-smoke.yaml --set memory.budget_gib=0.8 (the README's budget demo).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SWEEP = ROOT / "sweeps" / "cpu-smoke.yaml"
DEFAULT_BUDGET = "memory.budget_gib=0.8"


def run(sweep_file: str, overrides: list[str], out: Path) -> tuple[float, float, Counter]:
    cmd = [sys.executable, "-m", "orchestrator.cli", "run", sweep_file, "--output-dir", str(out)]
    t0 = time.monotonic()
    subprocess.run(cmd + [f"--set={o}" for o in overrides], cwd=ROOT, check=False, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    rows = pq.read_table(out / "trials.parquet").to_pylist()
    return wall, sum(r["wall_s"] or 0.0 for r in rows), Counter(r["status"] for r in rows)


def main() -> None:
    args = sys.argv[1:]
    sweep_file = args.pop(0) if args and not args[0].startswith("--") else str(DEFAULT_SWEEP)
    overrides = [a.split("=", 1)[1] if a.startswith("--set=") else a for a in args if a != "--set"]
    if not any(o.startswith("memory.budget_gib=") for o in overrides):
        overrides.append(DEFAULT_BUDGET)
    work = Path(tempfile.mkdtemp(prefix="bench-prune-"))
    overrides.append(f"tracking.mlflow_uri=sqlite:///{work}/mlflow.db")
    results = {}
    for name, value in (("on", "true"), ("off", "false")):
        results[name] = run(sweep_file, [*overrides, f"oom.prune_dominated={value}"], work / name)
    print(f"sweep file: {sweep_file}; overrides: {' '.join(o for o in overrides if 'mlflow_uri' not in o)}")
    for name, (wall, trainer_s, statuses) in results.items():
        print(
            f"pruning {name:3}: wall {wall:6.1f} s, trainer-seconds {trainer_s:6.1f}, "
            f"statuses {dict(sorted(statuses.items()))}"
        )
    on, off = results["on"], results["off"]
    print(f"ratio trainer-seconds on/off: {on[1] / off[1]:.2f}; wall on/off: {on[0] / off[0]:.2f}")
    print(f"outputs: {work}")


if __name__ == "__main__":
    main()
