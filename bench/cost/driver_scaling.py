"""A driver that scales: many trials of a stand-in trainer (tools/inputs/fake_trainer.py, the supervisor
tests' fast trainer: 50 ms per step, no model) through the real driver: Ray Tune (a local Ray), the
supervisor with its memory sampler, the Recorder and its sinks (trials.parquet, the steps files,
MLflow on sqlite, the progress lines). Then `rlsweep validate` and `rlsweep run --dry-run` of a
100,000-trial grid, each in a fresh process as a user runs them.

Prints, against its targets:
    driver RSS at trial 100 and at the last trial (the driver is this process): growth <= 100 MB
    dispatch overhead per trial, in slot-seconds: (wall x slots - trainers' wall_s) / trials, over the
    trials that ended between the 100th and the last (steady state) and over the whole run: <= 0.5
    trials in trials.parquet, steps files, MLflow runs (complete): exactly the number asked for
    validate and --dry-run of the 100k grid: <= 10 s each

Usage: python -m bench driver_scaling [--set trials=1000] [--set concurrent=2] [--set steps=2]
           [--set grid_trials=100000] [--set no_sweep=true] [--set no_grid=true] [--set wait=true]
           [--set tracemalloc=A,B]
(wait: oom.wait_for_smaller on, the default: one trial at a time here; tracemalloc: print what the driver
allocated between the A-th and the B-th trial's end. It runs in a process of its own: the driver is that
process, its RSS measured and its parts patched.)
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import psutil
import pyarrow.parquet as pq

from bench import ROOT, Context, benchmark
from orchestrator.recording import recorder
from orchestrator.running import _tune, driver
from orchestrator.spec.load import load_sweep

FAKE_TRAINER = [sys.executable, str(ROOT / "tools" / "inputs" / "fake_trainer.py")]
MB = 1e6
TRACE: list = []  # --tracemalloc A B: the trial counts to compare, then their snapshots


def sweep_yaml(
    path: Path, name: str, trials: int, steps: int, concurrent: int, mlflow_uri: str, wait: bool = False
) -> Path:
    """`trials` trials (one per seed) of `steps` steps each."""
    path.write_text(
        f"name: {name}\n"
        "task: arithmetic\n"
        f"max_trials: {max(trials, 10_000)}\n"
        f"grid:\n  seed: [{', '.join(map(str, range(trials)))}]\n"
        f"fixed: {{model: tiny, max_steps: {steps}}}\n"
        f"resources: {{cpus_per_trial: 1, max_concurrent: {concurrent}}}\n"
        # Trials of one size wait for each other by default (oom.wait_for_smaller: each dominates the
        # others, docs/oom.md), which leaves a slot idle by policy; here every slot runs (--wait: the default).
        f"oom: {{probe_steps: 0, wait_for_smaller: {str(wait).lower()}}}\n"
        "timeout_s: 120\n"
        f"tracking: {{mlflow_uri: '{mlflow_uri}'}}\n"
    )
    return path


def grid_yaml(path: Path, trials: int) -> Path:
    """A grid of `trials` trials (10 values per axis; 10**5 for the default), of real knobs."""
    axes = {
        "learning_rate": [f"{m}.0e-{e}" for e in (6, 5, 4) for m in (1, 2, 5)] + ["1.0e-3"],
        "seed": list(range(10)),
        "num_generations": [2 * i for i in range(1, 11)],
        "lora_r": [4, 8, 12, 16, 20, 24, 28, 32, 40, 48],
        "batch_size": list(range(1, 11)),
        "max_completion_length": [16 * i for i in range(1, 11)],
    }
    lines, size = [], 1
    for name, values in axes.items():
        if size * len(values) > trials:
            break
        size *= len(values)
        lines.append(f"  {name}: [{', '.join(map(str, values))}]")
    path.write_text(
        "name: big-grid\ntask: arithmetic\n"
        f"max_trials: {size}\n"
        "grid:\n" + "\n".join(lines) + "\n"
        "fixed: {model: tiny, max_steps: 2}\n"
        "resources: {cpus_per_trial: 1, max_concurrent: 2}\n"
    )
    return path


def rss() -> float:
    return psutil.Process().memory_info().rss


def run_trials(work: Path, trials: int, steps: int, concurrent: int, wait: bool = False) -> dict:
    uri = f"sqlite:///{work}/mlflow.db"
    sweep = load_sweep(sweep_yaml(work / "scaling.yaml", "scaling", trials, steps, concurrent, uri, wait))
    ends: list[tuple[float, float]] = []  # (time, driver RSS) at each trial's end
    marks: dict[str, dict[str, float]] = {}  # trial key -> epoch seconds of its hand-offs in the driver
    sinks_s = [0.0]  # the driver's seconds inside the Recorder's end (every sink's on_end)
    end, start, suggest = recorder.Recorder.end, recorder.Recorder.start, _tune.PlanSearcher.suggest

    def on_suggest(self, trial_id):
        config = suggest(self, trial_id)
        if isinstance(config, dict):
            marks.setdefault(config["trial_key"], {})["suggested"] = time.time()
        return config

    def on_start(self, key):
        marks.setdefault(key, {})["tune_start"] = time.time()
        return start(self, key)

    def on_end(self, key, *args, **kwargs):
        running = key in self.steps  # Tune's end of a trial already ended is a no-op
        t = time.time()
        end(self, key, *args, **kwargs)
        if not running:
            return
        sinks_s[0] += time.time() - t
        marks.setdefault(key, {})["driver_end"] = t
        ends.append((time.monotonic(), rss()))
        if TRACE and len(ends) in (TRACE[0], TRACE[1]):
            TRACE.append(tracemalloc.take_snapshot())
        if len(ends) % 100 == 0:
            print(f"  {len(ends):5d} trials ended, driver RSS {ends[-1][1] / MB:7.1f} MB", file=sys.stderr)

    recorder.Recorder.end, recorder.Recorder.start, _tune.PlanSearcher.suggest = on_end, on_start, on_suggest
    from rich.console import Console

    quiet = Console(file=open(os.devnull, "w"))  # noqa: SIM115
    rss_start = rss()
    t0 = time.monotonic()
    driver.run_sweep(
        sweep,
        output_dir=work / "out",
        console=quiet,
        report_to=None,
        trainer_cmd=FAKE_TRAINER,
        ray_init_kwargs={"num_cpus": concurrent},
    )
    wall = time.monotonic() - t0
    recorder.Recorder.end, recorder.Recorder.start, _tune.PlanSearcher.suggest = end, start, suggest

    out = work / "out"
    rows = pq.read_table(out / "trials.parquet").to_pylist()
    by_end = sorted(rows, key=lambda r: r["ended_at"].timestamp() if r["ended_at"] else 0.0)
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    steps_files = list((out / "steps").rglob("*.parquet"))
    steps_rows = pq.read_table(out / "steps").num_rows if steps_files else 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("scaling")
    runs = []
    token = None
    while True:
        page = client.search_runs([exp.experiment_id], max_results=1000, page_token=token)
        runs += page
        token = page.token
        if not token:
            break
    complete = {
        r.data.tags["rlsweep.trial_key"] for r in runs if r.data.tags.get("rlsweep.complete") == "true"
    }

    parts = {k: 0.0 for k in ("handed out -> Tune's start", "Tune's start -> trainer spawned",
                              "trainer (wall_s)", "trainer exit -> driver has its end")}  # fmt: skip
    for r in rows:
        m = marks.get(r["trial_key"], {})
        if r["started_at"] is None or len(m) < 3:
            continue
        spawn, exit_ = r["started_at"].timestamp(), r["ended_at"].timestamp()
        parts["handed out -> Tune's start"] += m["tune_start"] - m["suggested"]
        parts["Tune's start -> trainer spawned"] += spawn - m["tune_start"]
        parts["trainer (wall_s)"] += r["wall_s"] or 0.0
        parts["trainer exit -> driver has its end"] += m["driver_end"] - exit_
    parts = {k: v / len(rows) for k, v in parts.items()}
    parts["driver in the sinks at a trial's end"] = sinks_s[0] / len(rows)
    first = min(100, len(ends)) - 1
    window = ends[-1][0] - ends[first][0]
    steady = by_end[first + 1 :]  # trials that ended after the 100th
    steady_trainer = sum(r["wall_s"] or 0.0 for r in steady)
    return {
        "trials": trials,
        "steps": steps,
        "slots": concurrent,
        "wall": wall,
        "rss_start": rss_start,
        "rss_first": ends[first][1],
        "rss_last": ends[-1][1],
        "first": first + 1,
        "ended": len(ends),
        "overhead_all": (wall * concurrent - sum(r["wall_s"] or 0.0 for r in rows)) / len(rows),
        "overhead_steady": (window * concurrent - steady_trainer) / max(len(steady), 1),
        "trainer_mean": sum(r["wall_s"] or 0.0 for r in rows) / len(rows),
        "statuses": statuses,
        "parts": parts,
        "parquet": len({r["trial_key"] for r in rows}),
        "steps_files": len(steps_files),
        "steps_rows": steps_rows,
        "mlflow": len(complete),
        "mlflow_runs": len([r for r in runs if "rlsweep.trial_key" in r.data.tags]),
    }


def time_cli(*args: str) -> tuple[float, float, int, str]:
    """(wall s, CPU s, exit code, output) of `rlsweep ARGS` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT, capture_output=True, text=True
    )
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, done.returncode, (done.stdout + done.stderr)


@benchmark(
    tags=("sweep", "overhead", "scaling"),
    params={"trials": 1000, "concurrent": 2, "steps": 2, "grid_trials": 100_000, "no_sweep": False,
            "no_grid": False, "wait": False, "tracemalloc": ""},
    smoke={"trials": 20, "grid_trials": 10_000},
    goals={"validate_s": "<= 10", "dry_run_s": "<= 10", "rss_growth_mb": "<= 100",
           "overhead_steady_slot_s": "<= 0.5", "records_complete": "== true"},
    smoke_goals={"validate_s": "<= 10", "dry_run_s": "<= 10", "records_complete": "== true"},
    isolated=True,
)  # fmt: skip
def driver_scaling(ctx: Context) -> dict:
    """Many trials of a stand-in trainer through the real driver; validate and --dry-run of a huge grid."""
    args = ctx.args
    metrics: dict = {}
    args.tracemalloc = [int(x) for x in args.tracemalloc.split(",")] if args.tracemalloc else None
    if args.tracemalloc:
        TRACE.extend(args.tracemalloc)
        tracemalloc.start(8)
    work = ctx.scratch
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; outputs: {work}")
    if not args.no_grid:
        grid = grid_yaml(work / "grid.yaml", args.grid_trials)
        for label, cli in (
            ("validate", ("validate", str(grid), "--output-dir", str(work / "grid-out"))),
            ("run --dry-run", ("run", str(grid), "--dry-run", "--output-dir", str(work / "grid-out"))),
        ):
            seconds, cpu, rc, text = time_cli(*cli)
            metrics["validate_s" if label == "validate" else "dry_run_s"] = seconds if rc == 0 else None
            lines = text.strip().splitlines()
            print(f"{label} of a {args.grid_trials:,}-trial grid: {seconds:.1f} s wall (target <= 10), "
                  f"{cpu:.1f} s CPU, exit {rc}, {len(lines)} lines of output; first: {lines[0] if lines else ''}")  # fmt: skip
    if not args.no_sweep:
        r = run_trials(work, args.trials, args.steps, args.concurrent, args.wait)
        growth = (r["rss_last"] - r["rss_first"]) / MB
        print(f"{r['trials']} trials of {r['steps']} steps, {r['slots']} at a time: {r['wall']:.1f} s wall, "
              f"trainer wall_s {r['trainer_mean']:.2f} s each; statuses {r['statuses']}")  # fmt: skip
        print(f"driver RSS: {r['rss_start'] / MB:.1f} MB before, {r['rss_first'] / MB:.1f} MB at trial "
              f"{r['first']}, {r['rss_last'] / MB:.1f} MB at trial {r['ended']}: growth {growth:+.1f} MB "
              "(target <= 100)")  # fmt: skip
        print(f"dispatch overhead: {r['overhead_steady']:.3f} slot-s per trial after trial {r['first']} "
              f"(target <= 0.5); {r['overhead_all']:.3f} over the whole run (Ray's start and end included)")  # fmt: skip
        for label, seconds in r["parts"].items():
            print(f"  per trial, mean: {label:40s} {seconds:6.3f} s")
        if len(TRACE) == 4:
            print(f"allocated between trial {TRACE[0]} and {TRACE[1]} (tracemalloc, top 12):")
            for stat in TRACE[3].compare_to(TRACE[2], "traceback")[:12]:
                print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks")
                print("\n".join("      " + line for line in stat.traceback.format()[-6:]))
        print(f"trials.parquet {r['parquet']}, steps files {r['steps_files']} ({r['steps_rows']} rows), "
              f"MLflow complete runs {r['mlflow']} ({r['mlflow_runs']} trial runs); asked {r['trials']}")  # fmt: skip
        metrics |= {
            # the steady state is after the 100th trial: not measured in a shorter run
            "rss_growth_mb": growth if r["ended"] > 100 else None,
            "overhead_steady_slot_s": r["overhead_steady"] if r["ended"] > 100 else None,
            "overhead_all_slot_s": r["overhead_all"],
            "records_complete": r["parquet"] == r["steps_files"] == r["mlflow"] == r["trials"],
            "wall_s": r["wall"],
        }
    return metrics
