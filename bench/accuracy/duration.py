"""Fits orchestrator/judging/h100_times.json, the H100 step times the sweep estimate uses
(orchestrator/judging/duration.py), from the measured rows of bench/data/h100-2026-11-26/trials.csv
(`derive_times`), writes it, and prints the estimate of the default GPU sweep (sweeps/frontier-16gb.yaml).

    python -m bench duration           # fit, compare with the shipped file, print the figures and the estimate
    python -m bench --refit duration   # the same, the shipped file rewritten (make refit)
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path
from typing import Any

from bench import ROOT, Context, benchmark
from orchestrator.judging.duration import TIMES_FILE, estimate_sweep
from orchestrator.spec.load import load_sweep
from orchestrator.spec.plan import plan

SOURCE = "bench/data/h100-2026-11-26/trials.csv"
# A row's steady figures need a step after the first (round 2's 1-step probes have only the first).
STEADY_FROM_STEPS = 3


def _hub(model: str) -> str:
    return model.removeprefix("random:")


def _num(value: str) -> float | None:
    return float(value) if value not in ("", None) else None


def derive_times(trials_csv: str | Path) -> dict[str, Any]:
    """The per-(stack, model) figures of h100_times.json from the H100 rows: completed rows with a step
    after the first (STEADY_FROM_STEPS), medians over them (orchestrator/judging/duration.py's docstring)."""
    with open(trials_csv, newline="") as f:
        rows = [
            r
            for r in csv.DictReader(f)
            if r["status"] == "completed" and int(r["steps"]) >= STEADY_FROM_STEPS
        ]
    groups: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        groups.setdefault(f"{row['stack']}|{_hub(row['model'])}", []).append(row)
    times: dict[str, Any] = {}
    for key, group in sorted(groups.items()):
        gen = [float(r["median_gen_s"]) for r in group]
        train = [float(r["median_train_s"]) for r in group]
        first = [float(r["first_step_s"]) for r in group]
        startup = [
            float(r["wall_s"]) - float(r["first_step_s"]) - (int(r["steps"]) - 1) * float(r["median_train_s"])
            - (math.ceil(int(r["steps"]) / int(r["num_iterations"])) - 1) * float(r["median_gen_s"])
            for r in group if _num(r["wall_s"]) is not None
        ]  # fmt: skip
        times[key] = {
            "ms_per_token": round(statistics.median(g / int(r["max_completion"]) * 1000 for g, r in zip(gen, group, strict=True)), 1),
            "train_s": round(statistics.median(train), 2),
            "train_completion_tokens": max(int(r["completions_per_step"]) * int(r["max_completion"]) for r in group),
            "first_step_extra_s": round(statistics.median(f - g - t for f, g, t in zip(first, gen, train, strict=True)), 1),
            "startup_s": round(statistics.median(startup), 1) if startup else None,
            "rows": len(group),
        }  # fmt: skip
    # A stack's start-up where its rows of a model lack wall times: the stack's other models'.
    for key, figures in times.items():
        if figures["startup_s"] is None:
            stack = key.split("|")[0]
            known = [f["startup_s"] for k, f in times.items() if k.startswith(stack + "|") and f["startup_s"]]
            figures["startup_s"] = round(statistics.median(known), 1) if known else 0.0
    return {"source": SOURCE, "card": "H100 80GB HBM3", "times": times}


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
