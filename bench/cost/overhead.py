"""Where a sweep's non-trainer seconds go: the cpu-smoke sweep run in this process with timers around the
driver's parts, and each trial's own timestamps (trials.parquet, the trainer's events.jsonl).

Per trial, in time order:
    Tune             the searcher hands the trial out -> Tune's trial start in the driver (a Ray worker
                     process starting and importing the trainable's module, or a reused one) -> the
                     supervisor spawns the trainer child
    child imports    the child's spawn -> its imports of torch, transformers, trl, peft are done
                     (measured once, alone, by `python -c "import ..."`; not per trial)
    child setup      spawn -> the trainer's `started` event, minus child imports: task, tokenizer, model
                     build, trainer construction
    steps            first step's start -> last step's end
    child end        last step's end -> the child has exited (final event, teardown, exit)
    report back      the child has exited -> the driver has the trial's end (the final Tune report)
    sinks            the driver's time in each sink's on_start / on_step / on_end (Parquet, MLflow ...)
Per sweep: the driver's imports, init_ray, MLflow's sweep run, Tune's set-up until the first trial starts,
the end after the last trial (Ray shutdown, frontier, finish_sweep: the report), and idle slots (a slot
with no trial handed out while the sweep runs: trials held for a smaller sibling, Tune's loop).

Usage: python -m bench overhead [--set sweep=SWEEP.yaml] [--set report=false] [--set overrides=k=v ...]
(it runs in a process of its own: it patches the driver it times; "python + driver imports" counts from
this module's import in that process, without the interpreter's own start)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

T_PROCESS = time.time()

import pyarrow.parquet as pq  # noqa: E402

from bench import Context, benchmark  # noqa: E402
from orchestrator.publishing import tracking  # noqa: E402
from orchestrator.recording import recorder  # noqa: E402
from orchestrator.running import _tune, driver  # noqa: E402
from orchestrator.running.child_env import child_env  # noqa: E402
from orchestrator.spec.load import load_sweep  # noqa: E402
from orchestrator.views import report  # noqa: E402

T_IMPORTED = time.time()
CHILD_IMPORTS = "import torch, transformers, trl, peft, bitsandbytes"

marks: dict[str, float] = {}
spans: dict[str, float] = defaultdict(float)  # part -> seconds spent in it (driver)
trial_marks: dict[str, dict[str, float]] = defaultdict(dict)


def timed(owner, name: str, label: str) -> None:
    """Wrap owner.name so the seconds spent in it add up under `label`."""
    fn = getattr(owner, name)

    def wrapper(*args, **kwargs):
        t0 = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            spans[label] += time.time() - t0

    setattr(owner, name, wrapper)


def instrument() -> None:
    timed(driver, "init_ray", "init_ray")
    timed(driver, "finish_sweep", "finish_sweep (report, MLflow close)")
    timed(driver, "print_frontier", "frontier table")
    timed(tracking.MlflowSink, "start_sweep", "MLflow: sweep run")
    timed(tracking.MlflowSink, "end_sweep", "MLflow: sweep run closed")
    timed(tracking.MlflowSink, "log_report", "MLflow: report and summary metrics")
    timed(report, "write_report", "write_report")
    for cls in (recorder.StepsFiles, recorder.TrialsFile, recorder.PruningGate, tracking.MlflowSink):
        for hook in ("on_start", "on_step", "on_end"):
            timed(cls, hook, f"sink {cls.__name__}.{hook}")
    start, end, fit = recorder.Recorder.start, recorder.Recorder.end, driver.tune.Tuner.fit
    suggest = _tune.PlanSearcher.suggest

    def on_suggest(self, trial_id):
        config = suggest(self, trial_id)
        if isinstance(config, dict):
            trial_marks[config["trial_key"]]["suggested"] = time.time()
        return config

    def on_start(self, key):
        trial_marks[key].setdefault("tune_start", time.time())
        return start(self, key)

    def on_end(self, key, *args, **kwargs):
        trial_marks[key].setdefault("driver_end", time.time())
        return end(self, key, *args, **kwargs)

    def on_fit(self):
        marks["fit_start"] = time.time()
        try:
            return fit(self)
        finally:
            marks["fit_end"] = time.time()

    recorder.Recorder.start, recorder.Recorder.end, driver.tune.Tuner.fit = on_start, on_end, on_fit
    _tune.PlanSearcher.suggest = on_suggest


def child_import_s() -> float:
    t0 = time.monotonic()
    env = child_env(None, 1)  # as the supervisor starts a trainer
    subprocess.run([sys.executable, "-c", CHILD_IMPORTS], check=True, capture_output=True, env=env)
    return time.monotonic() - t0


def events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@benchmark(
    tags=("sweep", "overhead"),
    params={"sweep": "sweeps/cpu-smoke.yaml", "report": True, "overrides": []},
    isolated=True,
)
def overhead(ctx: Context) -> dict:
    """Where a sweep's non-trainer seconds go: the driver's parts timed, each trial's own timestamps."""
    sweep_file = ctx.args.sweep
    with_report = ctx.args.report
    overrides = list(ctx.args.overrides)
    work = ctx.scratch
    overrides.append(f"tracking.mlflow_uri=sqlite:///{work}/mlflow.db")
    sweep = load_sweep(sweep_file, overrides)
    slots = sweep.resources.max_concurrent or 1
    instrument()
    from rich.console import Console

    quiet = Console(file=open("/dev/null", "w"))  # noqa: SIM115
    t0 = time.time()
    driver.run_sweep(
        sweep, output_dir=work / "sweep", console=quiet, report_to=quiet if with_report else None
    )
    t_end = time.time()
    imports_alone = child_import_s()

    rows = {r["trial_key"]: r for r in pq.read_table(work / "sweep" / "trials.parquet").to_pylist()}
    scratch = driver.local_dir(work / "sweep", sweep.name) / "trials"
    parts: dict[str, float] = defaultdict(float)
    trainer_s = 0.0
    ran = 0
    busy = []  # (tune_start, driver_end) of each trial that ran
    for key, row in rows.items():
        mark = trial_marks.get(key, {})
        if row["started_at"] is None or "tune_start" not in mark:
            continue  # pruned: never ran
        ran += 1
        spawn, exit_ = row["started_at"].timestamp(), row["ended_at"].timestamp()
        trainer_s += row["wall_s"] or 0.0
        evs = events(scratch / key / "events.jsonl")
        started = next((e["time"] for e in evs if e.get("event") == "started"), None)
        steps = [e for e in evs if e.get("event") == "step"]
        parts["Tune: trial handed out -> started (a worker started or reused)"] += (
            mark["tune_start"] - mark["suggested"]
        )
        parts["Tune: started -> trainer child spawned (trainable, supervisor)"] += spawn - mark["tune_start"]
        if started is not None:
            parts["child: imports + setup (model build, trainer)"] += started - spawn
        if steps:
            parts["child: steps"] += steps[-1]["t_end"] - steps[0]["t_start"]
            parts["child: first step start - started event"] += steps[0]["t_start"] - (started or spawn)
            parts["child: last step end - exit"] += exit_ - steps[-1]["t_end"]
        parts["report back (exit -> driver has the end)"] += mark.get("driver_end", exit_) - exit_
        busy.append((mark["suggested"], mark.get("driver_end", exit_)))
    first = min(b[0] for b in busy)
    last = max(b[1] for b in busy)
    occupied = sum(b - a for a, b in busy)
    wall = t_end - T_PROCESS

    print(
        f"sweep file: {sweep_file} ({len(rows)} trials, {ran} ran, {slots} at a time, report {with_report})"
    )
    print(f"process wall {wall:.1f} s = {wall * slots:.1f} slot-s; trainers (wall_s) {trainer_s:.1f} s")
    print(f"overhead {(wall * slots - trainer_s) / len(rows):.2f} slot-s per trial")
    print("\nsweep-level (slot-s = s x slots):")
    lead = {
        "python + driver imports": T_IMPORTED - T_PROCESS,
        "load sweep + set-up before run_sweep": t0 - T_IMPORTED,
        "run_sweep start -> Tune.fit (init_ray, MLflow sweep run, lock)": marks["fit_start"] - t0,
        "  of which init_ray": spans["init_ray"],
        "  of which MLflow sweep run": spans["MLflow: sweep run"],
        "Tune.fit start -> first trial handed out": first - marks["fit_start"],
        "idle slots between the first trial handed out and the last end": (last - first) * slots - occupied,
        "last trial end -> Tune.fit returns (Ray)": marks["fit_end"] - last,
        "Tune.fit end -> run_sweep returns (Ray shutdown, frontier, finish)": t_end - marks["fit_end"],
        "  of which finish_sweep (report, MLflow close)": spans["finish_sweep (report, MLflow close)"],
        "  of which frontier table": spans["frontier table"],
        "    finish_sweep: write_report": spans["write_report"],
        "    finish_sweep: MLflow report and summary metrics": spans["MLflow: report and summary metrics"],
        "    finish_sweep: MLflow sweep run closed": spans["MLflow: sweep run closed"],
    }
    for label, s in lead.items():
        factor = 1 if label.startswith("idle") else slots
        print(f"  {label:70s} {s:7.2f} s  {s * factor / len(rows):6.2f} slot-s/trial")
    print("\nper trial that ran (mean s):")
    for label, s in parts.items():
        print(f"  {label:70s} {s / max(ran, 1):7.2f}")
    print(f"  {'child imports alone (' + CHILD_IMPORTS + ')':70s} {imports_alone:7.2f}")
    print("\ndriver time in sinks (s, whole sweep):")
    for label, s in sorted(spans.items()):
        if label.startswith("sink"):
            print(f"  {label:70s} {s:7.2f}")
    print(f"outputs: {work}")
    return {
        "wall_s": wall,
        "trainer_s": trainer_s,
        "overhead_per_trial_slot_s": (wall * slots - trainer_s) / len(rows),
        "trials": len(rows),
        "ran": ran,
        "child_imports_alone_s": imports_alone,
    }
