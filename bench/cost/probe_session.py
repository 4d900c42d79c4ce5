"""Probe sessions (orchestrator/running/session.py) against one process per trial, measured in one run.

  peaks      each shape's peak in one session, in ascending and in descending order of size, against the
             same shape in a process of its own (NVML's device peak on a GPU, goal within 3%; RSS on a
             CPU, within the run-to-run spread CPU_RSS_SPREAD). Its goal is missed where a shape is outside it.
  sweep      a frontier sweep (sweeps/frontier-tiny.yaml on both stacks, every configuration probed) with
             oom.session true and false: the walls and their ratio (goal <= 0.30).
  calibrate  `rlsweep calibrate` with and without --session: the walls and their ratio (goal <= 0.40).

Each prints a markdown table and the command that made it; where the seconds went: the sessions'
start-up (session_startup_s), the trials' own seconds (wall_s) and the rest (Ray, the driver, the report).

    nice python -m bench probe_session_peaks --set model=tiny --set stacks=trl --set lengths=24,128,256
    nice python -m bench probe_session_peaks --set lengths=256 --set repeat=4   (the spread itself)
    nice python -m bench probe_session_sweep
    nice python -m bench probe_session_calibrate
    nice python -m bench probe-session             (all three: their tag)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import ROOT, Context, benchmark

GPU_TOLERANCE = 0.03  # session peaks equal fresh-process NVML peaks within 3%
CPU_RSS_SPREAD = {"tiny": 0.12, "smollm2": 0.15}  # as tests/helpers/trainer_child.py measured it
# sweeps/frontier-tiny.yaml on both stacks, 12 configurations under a budget they all fit, each probed
SWEEP_CHANGES = {
    "grid": {"stack": ["trl", "unsloth"], "num_generations": [2, 4, 8], "batch_size": [1],
             "max_completion_length": [16, 64]},
    "memory": {"budget_gib": 8},
    "oom": {"frontier": False, "prune_dominated": False, "probe_steps": 1},
    "resources": {"max_concurrent": 1},
    "tracking": {"enabled": False},
}  # fmt: skip
CALIBRATE = ["calibrate", "--model", "tiny", "--stack", "trl", "--budget-gib", "4", "--max-length", "512",
             "--set", "max_prompt_length=96", "--set", "num_threads=1", "--no-plot"]  # fmt: skip


def peak_of(spec, result) -> tuple[float | None, str | None]:
    from orchestrator.recording.sinks import trial_row
    from trainers.record import peak_memory

    return peak_memory(trial_row(spec, result, result.steps))


@benchmark(
    name="probe_session_peaks",
    tags=("probe-session", "memory"),
    params={"model": "tiny", "stacks": "trl", "lengths": "24,128,256", "k": 8, "b": 2, "max_prompt_length": 96,
            "quantization": "nf4", "budget_gib": None, "threads": 1, "timeout_s": 900.0,
            "repeat": 1, "out": ""},
    smoke={"lengths": "24"},
    goals={"shapes_outside": "<= 0"},
)  # fmt: skip
def peaks(ctx: Context) -> dict:
    """Each shape's peak in one probe session, both orders, against the shape in a process of its own."""
    args = ctx.args
    args.out = args.out or str(ctx.scratch / "peaks")
    from orchestrator.running.session import ProbeSession
    from orchestrator.running.supervisor import run_trial
    from orchestrator.words.settings import GuardSettings
    from trainers.trial import TrialSpec

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    guard = GuardSettings(budget_gib=args.budget_gib, timeout_s=args.timeout_s)
    lengths = [int(n) for n in args.lengths.split(",")]
    failed = 0
    print("| stack | completion | fresh peak | session, ascending | session, descending | kind | "
          "largest difference | fresh s | session shape s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for stack in args.stacks.split(","):

        def shape(n: int, stack: str = stack) -> TrialSpec:
            return TrialSpec(stack=stack, model=args.model, num_generations=args.k, batch_size=args.b,
                             max_prompt_length=args.max_prompt_length, max_completion_length=n, max_steps=1,
                             probe_steps=1, num_threads=args.threads, memory_budget_gib=args.budget_gib,
                             quantization=args.quantization, seed=0)  # fmt: skip

        readings: dict[int, dict[str, list[float]]] = {n: {"fresh": [], "session": []} for n in lengths}
        for r in range(args.repeat):
            folder = out / stack / f"r{r}" if args.repeat > 1 else out / stack
            fresh = {}
            for n in lengths:
                result = run_trial(shape(n), trial_dir=folder / f"fresh-{n}", guard=guard, cpus=args.threads)
                fresh[n] = (*peak_of(shape(n), result), result.wall_s, result.status)
            sessions = {}
            for order, sequence in (("ascending", lengths), ("descending", lengths[::-1])):
                with ProbeSession(folder / f"sessions-{order}", guard, cpus=args.threads) as session:
                    for n in sequence:
                        result = session.run(shape(n), trial_dir=folder / f"{order}-{n}")
                        sessions[order, n] = (*peak_of(shape(n), result), result.wall_s, result.status)
            for n in lengths:
                base, kind = fresh[n][0], fresh[n][1]
                got = [sessions[o, n][0] for o in ("ascending", "descending")]
                readings[n]["fresh"] += [base] if base is not None else []
                readings[n]["session"] += [g for g in got if g is not None]
                tolerance = GPU_TOLERANCE if kind == "GPU" else CPU_RSS_SPREAD.get(args.model, GPU_TOLERANCE)
                worst = max((abs(g - base) / base for g in got if g is not None and base), default=None)
                failed += worst is None or worst > tolerance
                text = lambda v: "-" if v is None else f"{v:.3f} GiB"  # noqa: E731
                print(f"| {stack} | {n} | {text(base)} ({fresh[n][3]}) | {text(got[0])} | {text(got[1])} | {kind} | "
                      f"{'-' if worst is None else f'{worst:.1%}'} (goal <= {tolerance:.0%}) | {fresh[n][2]:.1f} | "
                      f"{sessions['ascending', n][2]:.1f} |")  # fmt: skip
        if args.repeat > 1:
            for n, seen in readings.items():
                print(f"{stack} {n}: " + "; ".join(
                    f"{name} {min(v):.3f}-{max(v):.3f} GiB over {len(v)} (mean {sum(v) / len(v):.3f}, "
                    f"spread {(max(v) - min(v)) / min(v):.1%})" for name, v in seen.items() if v))  # fmt: skip
    return {"shapes_outside": failed}


def timed(command: list[str], log: Path) -> float:
    start = time.monotonic()
    with open(log, "w") as f:
        done = subprocess.run(command, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - start
    if done.returncode not in (0, 1):  # 1: a probe did not complete (calibrate); its map is still drawn
        print(f"{' '.join(command)}: exit {done.returncode}; see {log}", file=sys.stderr)
    return seconds


def where(out: Path) -> str:
    """Where a run's seconds went, from its trials.parquet: trials, their own seconds, start-ups."""
    import pandas as pd

    rows = pd.read_parquet(out / "trials.parquet")
    ran = rows[rows["wall_s"].notna()]
    startup = rows["session_startup_s"].dropna()
    sessions = rows["session"].dropna().nunique()
    return (f"{len(ran)} trials ({ran['status'].value_counts().to_dict()}), their wall_s {ran['wall_s'].sum():.0f} s, "
            f"{sessions} sessions, start-up {startup.sum():.0f} s")  # fmt: skip


def compare(name: str, command, out: Path, goal: float) -> dict:
    walls, notes = {}, {}
    for session in (True, False):
        folder = out / ("session" if session else "alone")
        shutil.rmtree(folder, ignore_errors=True)
        walls[session] = timed(command(session, folder), out / f"{folder.name}.log")
        notes[session] = where(folder)
    ratio = walls[True] / walls[False]
    print(f"| {name} | wall | where the seconds went |\n|---|---|---|")
    for session in (True, False):
        print(
            f"| {'sessions' if session else 'one process per trial'} | {walls[session]:.0f} s | {notes[session]} |"
        )
    print(f"\nratio, sessions / one process per trial: {ratio:.2f} (goal <= {goal:.2f})")
    return {"ratio": ratio, "wall_s_sessions": walls[True], "wall_s_one_process_per_trial": walls[False]}


@benchmark(name="probe_session_sweep", tags=("probe-session", "sweep"), params={"out": ""},
           goals={"ratio": "<= 0.30"})  # fmt: skip
def sweep(ctx: Context) -> dict:
    """A frontier sweep with oom.session true and false: the walls and their ratio."""
    out = Path(ctx.args.out or ctx.scratch / "sweep")
    out.mkdir(parents=True, exist_ok=True)

    import yaml

    sweep_file = out / "frontier-tiny-stacks.yaml"
    data = yaml.safe_load((ROOT / "sweeps" / "frontier-tiny.yaml").read_text())
    data["fixed"].pop("stack")
    for section, values in SWEEP_CHANGES.items():
        data.setdefault(section, {}).update(values)
    sweep_file.write_text(yaml.safe_dump(data))

    def command(session: bool, folder: Path) -> list[str]:
        return [sys.executable, "-m", "orchestrator.cli", "run", str(sweep_file), "--set",
                f"oom.session={str(session).lower()}", "--output-dir", str(folder)]  # fmt: skip

    return compare(
        "frontier sweep (tiny, trl and unsloth, 12 configurations, each probed)", command, out, 0.30
    )


@benchmark(name="probe_session_calibrate", tags=("probe-session", "calibrate"), params={"out": ""},
           goals={"ratio": "<= 0.40"})  # fmt: skip
def calibrate(ctx: Context) -> dict:
    """`rlsweep calibrate` with and without --session: the walls and their ratio."""
    out = Path(ctx.args.out or ctx.scratch / "calibrate")
    out.mkdir(parents=True, exist_ok=True)

    def command(session: bool, folder: Path) -> list[str]:
        return [sys.executable, "-m", "orchestrator.cli", *CALIBRATE, "--out", str(folder),
                "--session" if session else "--no-session"]  # fmt: skip

    return compare("rlsweep calibrate (tiny, trl, 4 probes)", command, out, 0.40)
