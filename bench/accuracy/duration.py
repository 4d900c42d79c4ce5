"""Writes orchestrator/judging/h100_times.json, the H100 step times the sweep estimate uses
(orchestrator/judging/duration.py), from the measured rows of bench/data/h100-2026-11-26/trials.csv, and
prints the estimate of the default GPU sweep (sweeps/frontier-16gb.yaml).

    python bench/bench_duration.py          # rewrite the file, print the figures and the estimate
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.judging.duration import SOURCE, TIMES_FILE, derive_times, estimate_sweep
from orchestrator.spec.load import load_sweep
from orchestrator.spec.plan import plan

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    times = derive_times(ROOT / SOURCE)
    TIMES_FILE.write_text(json.dumps(times, indent=1) + "\n")
    print(f"{TIMES_FILE.relative_to(ROOT)} from {SOURCE}:")
    for key, figures in times["times"].items():
        print(f"  {key}: {figures}")
    sweep = load_sweep(ROOT / "sweeps/frontier-16gb.yaml", [])
    estimate = estimate_sweep(sweep, plan(sweep).trials, times=times)
    print("\n".join(estimate.lines()))


if __name__ == "__main__":
    main()
