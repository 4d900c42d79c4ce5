"""Writes orchestrator/judging/h100_times.json, the H100 step times the sweep estimate uses
(orchestrator/judging/duration.py), from the measured rows of bench/data/h100-2026-11-26/trials.csv, and
prints the estimate of the default GPU sweep (sweeps/frontier-16gb.yaml).

    python -m bench duration           # fit, compare with the shipped file, print the figures and the estimate
    python -m bench --refit duration   # the same, the shipped file rewritten (make refit)
"""

from __future__ import annotations

import json

from bench import ROOT, Context, benchmark
from orchestrator.judging.duration import SOURCE, TIMES_FILE, derive_times, estimate_sweep
from orchestrator.spec.load import load_sweep
from orchestrator.spec.plan import plan


@benchmark(
    tags=("refit", "sweep-estimate"),
    needs="data",
    smoke={},
    goals={"shipped_is_current": "== true"},
    writes=(str(TIMES_FILE.relative_to(ROOT)),),
)
def duration(ctx: Context) -> dict:
    """The H100 step times the sweep estimate uses, fitted from the rows; the default GPU sweep's estimate."""
    times = derive_times(ROOT / SOURCE)
    current = ctx.shipped(TIMES_FILE, json.dumps(times, indent=1) + "\n")
    print(f"{TIMES_FILE.relative_to(ROOT)} from {SOURCE}:")
    for key, figures in times["times"].items():
        print(f"  {key}: {figures}")
    sweep = load_sweep(ROOT / "sweeps/frontier-16gb.yaml", [])
    estimate = estimate_sweep(sweep, plan(sweep).trials, times=times)
    print("\n".join(estimate.lines()))
    return {
        "shipped_is_current": current,
        "worst_case_s": estimate.worst_s,
        "expected_s": estimate.expected_s,
    }
