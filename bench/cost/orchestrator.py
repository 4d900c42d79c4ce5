"""The orchestrator's cost and gain: the cpu-smoke sweep under Ray Tune (2 trials at a time) against the
same trials one after another with `rlsweep trial` (as the original benchmark's sequential script did).

Prints the wall times, their ratio (target <= 0.60 on 2 cores) and the orchestration overhead per
trial (target <= 2 s): slot-seconds not spent inside a trainer process,
    sweep:      (wall x max_concurrent - sum of trainer wall_s) / trials
    sequential: (wall - sum of trainer wall_s) / trials
The sweep runs twice, in one run of this script: as `make sweep` does (with the end-of-sweep report) and
with --no-report (the sequential trials make no report either: the same results, plus MLflow).
Usage: python -m bench orchestrator [--set sweep=SWEEP.yaml] [--set overrides=k=v ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pyarrow.parquet as pq

from bench import ROOT, Context, benchmark
from orchestrator.spec.load import load_sweep
from orchestrator.spec.plan import plan
from trainers.trial import BOOKKEEPING

SKIP = (*BOOKKEEPING, "model_cache_dir")  # the harness sets these per trial


def trial_flags(spec) -> list[str]:
    flags = []
    for key, value in spec.to_dict().items():
        if key in SKIP or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + key.replace("_", "-"))
        else:
            flags += [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
    return flags


@benchmark(
    tags=("sweep", "overhead"),
    params={"sweep": "sweeps/cpu-smoke.yaml", "overrides": []},
    goals={"ratio_no_report": "<= 0.60", "overhead_per_trial_no_report_s": "<= 2"},
)
def orchestrator(ctx: Context) -> dict:
    """The cpu-smoke sweep under Ray Tune against the same trials one after another with `rlsweep trial`."""
    sweep_file = ctx.args.sweep
    overrides = list(ctx.args.overrides)
    work = ctx.scratch
    sweep = load_sweep(sweep_file, overrides)
    trials = plan(sweep).trials
    concurrency = sweep.resources.max_concurrent or 1

    sweeps = {}  # name -> (wall, sum of trainer wall_s, statuses)
    for name, extra in (("sweep (Ray Tune)", []), ("sweep --no-report", ["--no-report"])):
        out = work / ("sweep-no-report" if extra else "sweep")
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "orchestrator.cli", "run", sweep_file, "--output-dir", str(out), *extra]
        uri = f"--set=tracking.mlflow_uri=sqlite:///{out}/mlflow.db"  # a new store for each, as make sweep
        with open(work / f"{out.name}.log", "w") as log:  # progress and errors, for a run that went wrong
            subprocess.run(cmd + [f"--set={o}" for o in overrides] + [uri], cwd=ROOT, check=False, stderr=log)
        wall = time.monotonic() - t0
        rows = pq.read_table(out / "trials.parquet").to_pylist()
        statuses: dict[str, int] = {}
        for r in rows:
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        sweeps[name] = (wall, sum(r["wall_s"] or 0.0 for r in rows), statuses)

    seq_trainer = 0.0
    t0 = time.monotonic()
    for spec in trials:
        out = work / "seq" / spec.trial_key
        subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "trial", *trial_flags(spec), "--output-dir", str(out)],
            cwd=ROOT,
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        outcome = (
            json.loads((out / "trial.json").read_text())["outcome"] if (out / "trial.json").exists() else {}
        )
        seq_trainer += outcome.get("wall_s") or 0.0
    seq_wall = time.monotonic() - t0

    n = len(trials)
    print(f"sweep file: {sweep_file} ({n} trials, {concurrency} at a time)")
    print(f"sequential (rlsweep trial): {seq_wall:7.1f} s wall, trainers {seq_trainer:7.1f} s")
    print(f"overhead per trial, sequential: {(seq_wall - seq_trainer) / n:.1f} s")
    metrics = {"overhead_per_trial_sequential_s": (seq_wall - seq_trainer) / n}
    for name, (wall, trainer, statuses) in sweeps.items():
        print(f"{name + ':':26s} {wall:7.1f} s wall, trainers {trainer:7.1f} s; statuses {statuses}")
        print(f"  ratio to sequential: {wall / seq_wall:.2f}  (target <= 0.60)")
        print(f"  overhead per trial: {(wall * concurrency - trainer) / n:.1f} slot-s (target <= 2)")
        which = "no_report" if "no-report" in name else "report"
        metrics[f"ratio_{which}"] = wall / seq_wall
        metrics[f"overhead_per_trial_{which}_s"] = (wall * concurrency - trainer) / n
    print(f"outputs: {work}")
    return metrics
