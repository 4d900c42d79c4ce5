"""A trial's seconds outside its training steps, by part, started cold and forked from the fork server.

    python -m bench startup [--set rounds=3] [--set steps=3] [--set model=tiny] [--set stack=trl]

(stack trl or unsloth: Unsloth's first step compiles; it runs in a process of its own: fork servers)

Runs the same tiny trial through the supervisor (run_trial, with its memory sampler) `rounds` times
cold (RLSWEEP_COLD_START=1: `python -m trainers`) and `rounds` times forked (the first forked trial
also waits for the server's preload, reported on its own row and left out of the forked medians), in
one process, cold and forked rounds alternating. Each trial's wall time from launch to the exit the
supervisor sees is split by the trainer's start-up marks (trainers/startup.py, in its `started` event)
and its step events:

  launch      launch -> the trainer's main() (interpreter start and light imports; forked: the fork)
  imports     main() -> torch, transformers, TRL and PEFT imported (and the process set up)
  model       -> the model built or loaded (quantized where asked), the task and tokenizer loaded
  trainer     -> the measured GRPOTrainer assembled
  train_setup -> the first step's t_start (the `started` event, train()'s own set-up)
  between     the gaps between steps (our per-step hooks and event writes outside step_s)
  exit        the last step's t_end -> the exit the supervisor sees (the `finished` event, exit)
  outside     wall - the steps' step_s: the sum of the above

It prints the median of each part for cold and forked and their ratio, and each mode's peak RSS (the
sampler's) and median tokens/s, which the fork must not change. Target: outside <= 3 s forked.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

from bench import Context, benchmark
from orchestrator.running.launcher import COLD_START_ENV, stop_servers
from orchestrator.running.supervisor import run_trial
from orchestrator.words.settings import GuardSettings
from trainers.record import TRIAL, startup_figures
from trainers.trial import TrialSpec

PARTS = ("launch", "imports", "model", "trainer", "train_setup", "between", "exit", "outside")


def parts(result) -> dict[str, float]:
    """The trial's wall time outside its steps, by part (seconds)."""
    launch, end = result.started_at, result.started_at + result.wall_s
    marks = result.started.get("startup") or {}
    steps = result.steps
    first, last = steps[0]["t_start"], steps[-1]["t_end"]
    in_steps = sum(s["step_s"] for s in steps)
    out = {
        "launch": marks["main"] - launch,
        "imports": marks["imports"] - marks["main"],
        "model": marks["model"] - marks["imports"],
        "trainer": marks["trainer"] - marks["model"],
        "train_setup": first - marks["trainer"],
        "between": (last - first) - in_steps,
        "exit": end - last,
    }
    out["outside"] = result.wall_s - in_steps
    return out


def one_trial(workdir: Path, name: str, args, cold: bool) -> dict[str, float]:
    spec = TrialSpec(
        stack=args.stack,
        model=args.model,
        max_steps=args.steps,
        num_generations=2,
        batch_size=2,
        max_completion_length=12,
        num_threads=1,
        output_dir=str(workdir / name),
    )
    if cold:
        os.environ[COLD_START_ENV] = "1"
    else:
        os.environ.pop(COLD_START_ENV, None)
    result = run_trial(spec, guard=GuardSettings(timeout_s=600), cpus=1)
    if result.status != "completed":
        raise RuntimeError(f"{name}: {result.status}: {result.status_detail}")
    row = parts(result)
    row["peak_rss_gib"] = result.peak.get("rss_peak_gib") or result.peak.get("rss_gib")
    row["hwm_gib"] = result.peak.get("hwm_gib")
    row["tokens_per_s"] = statistics.median(s["tokens_per_s"] for s in result.steps)
    figures = startup_figures(result.steps, result.started_at)
    first_step = result.steps[0]["step_s"]
    print(  # as it goes: a run cut at its limit keeps the trials it finished
        f"  {name}: wall {result.wall_s:.1f} s, outside the steps {row['outside']:.1f} s (imports "
        f"{row['imports']:.1f}, model {row['model']:.1f}), first step {first_step:.1f} s, warm-up "
        f"{_seconds(figures[TRIAL.warmup_s])}, time to first step {_seconds(figures[TRIAL.time_to_first_step_s])}",
        flush=True,
    )
    return row


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"


def show(label: str, rows: list[dict[str, float]]) -> dict[str, float]:
    med = {k: statistics.median([r[k] for r in rows if r[k] is not None] or [float("nan")]) for k in rows[0]}
    cells = "  ".join(f"{k} {med[k]:.2f}" for k in PARTS)
    print(
        f"{label:<28} {cells}  | peak RSS {med['peak_rss_gib']:.3f} GiB  tokens/s {med['tokens_per_s']:.0f}"
    )
    return med


@benchmark(
    tags=("trial", "fork-server"),
    needs="cpu",
    params={"rounds": 3, "steps": 3, "model": "tiny", "stack": "trl"},
    choices={"stack": ("trl", "unsloth", "liger")},
    smoke={"rounds": 1, "steps": 2},
    goals={"outside_forked_s": "<= 3"},
    isolated=True,
)
def startup(ctx: Context) -> dict:
    args = ctx.args
    cold: list[dict[str, float]] = []
    forked: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        one_trial(workdir, "warm-cache", args, cold=True)  # the model folder built, page cache warm
        first = one_trial(workdir, "forked-first", args, cold=False)  # waits for the server's preload
        for i in range(args.rounds):
            for mode in ("cold", "forked") if i % 2 == 0 else ("forked", "cold"):
                row = one_trial(workdir, f"{mode}-{i}", args, cold=mode == "cold")
                (cold if mode == "cold" else forked).append(row)
        stop_servers()
    print(f"{args.stack}, {args.model}, {args.steps} steps, {args.rounds} rounds each; medians, seconds")
    c = show("cold", cold)
    show("forked, first (server start)", [first])
    f = show("forked", forked)
    print("ratio cold/forked: " + "  ".join(f"{k} {c[k] / f[k]:.1f}x" for k in PARTS if f[k] > 0.005))
    for label, rows in (("cold", cold), ("forked", forked)):
        rss = [r["peak_rss_gib"] for r in rows]
        tps = [r["tokens_per_s"] for r in rows]
        print(
            f"{label}: peak RSS {min(rss):.3f}-{max(rss):.3f} GiB, tokens/s {min(tps):.0f}-{max(tps):.0f}, "
            f"outside {min(r['outside'] for r in rows):.2f}-{max(r['outside'] for r in rows):.2f} s"
        )
    return {
        "outside_cold_s": c["outside"],
        "outside_forked_s": f["outside"],
        "peak_rss_cold_gib": c["peak_rss_gib"],
        "peak_rss_forked_gib": f["peak_rss_gib"],
        "tokens_per_s_cold": c["tokens_per_s"],
        "tokens_per_s_forked": f["tokens_per_s"],
    }
