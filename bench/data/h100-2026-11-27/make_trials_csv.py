"""trials.csv of GPU round 4 (this folder), one row per probe and per frontier trial that ran, in the
columns of ../h100-2026-11-26/trials.csv (bench/bench_synthetic_probe.py's --reference reads either),
plus probe_kind, optimizer_state_primed and seconds_alone.

    .venv/bin/python bench/data/h100-2026-11-27/make_trials_csv.py

Every figure is read from the trials' own records (trial.json, steps.parquet, events.jsonl); none is typed.
Each trial measured one step, the first, before its optimizer's state existed (optimizer_state_primed
false: the code of this round allocated Adam's moments in the first optimizer.step(), after the peak).
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
COLUMNS = [
    "round",
    "run",
    "concurrent_trials",
    "stack",
    "model",
    "K",
    "B",
    "completions_per_step",
    "max_prompt",
    "max_completion",
    "num_iterations",
    "quantization",
    "lora_r",
    "budget_gib",
    "status",
    "steps",
    "peak_nvml_gib",
    "peak_torch_reserved_gib",
    "peak_torch_allocated_gib",
    "peak_rss_gib",
    "prior_predicted_gib",
    "prior_error_pct",
    "first_step_s",
    "median_gen_s",
    "median_train_s",
    "median_tokens_per_s",
    "wall_s",
    "longest_prompt_tokens",
    "probe_kind",
    "optimizer_state_primed",
]


def _num(value, digits: int = 3):
    if value is None or value != value:
        return ""
    return round(float(value), digits)


def row(
    run: str, concurrent: int, spec: dict, outcome: dict, steps: pd.DataFrame, wall_s: float | None
) -> dict:
    first = steps.iloc[0] if len(steps) else None
    k, b = spec["num_generations"], spec["batch_size"]
    predicted = outcome.get("predicted_peak_gib")
    peak = outcome.get("peak_device_gib")
    gens = [float(x) for x in steps["gen_s"].dropna()] if len(steps) else []
    trains = [float(x) for x in steps["train_s"].dropna()] if len(steps) else []
    return {
        "round": 4,
        "run": run,
        "concurrent_trials": concurrent,
        "stack": spec["framework"],
        "model": spec["model"],
        "K": k,
        "B": b,
        "completions_per_step": k * b,
        "max_prompt": spec["max_prompt_length"],
        "max_completion": spec["max_completion_length"],
        "num_iterations": spec["num_iterations"],
        "quantization": spec["quantization"],
        "lora_r": spec["lora_r"],
        "budget_gib": spec.get("memory_budget_gib") or "",
        "status": outcome["status"],
        "steps": len(steps),
        "peak_nvml_gib": _num(peak),
        "peak_torch_reserved_gib": _num(outcome.get("peak_torch_reserved_gib")),
        "peak_torch_allocated_gib": _num(None if first is None else first["torch_peak_allocated_gib"]),
        "peak_rss_gib": _num(outcome.get("peak_rss_gib")),
        "prior_predicted_gib": _num(predicted),
        "prior_error_pct": _num(100 * (predicted - peak) / peak, 1) if predicted and peak else "",
        "first_step_s": _num(None if first is None else first["step_s"], 2),
        "median_gen_s": _num(statistics.median(gens), 2) if gens else "",
        "median_train_s": _num(statistics.median(trains), 2) if trains else "",
        "median_tokens_per_s": _num(outcome.get("median_tokens_per_s"), 1),
        "wall_s": _num(wall_s if wall_s is not None else outcome.get("wall_s"), 1),
        "longest_prompt_tokens": _num(None if first is None else first["prompt_tokens"] / (k * b), 0),
        "probe_kind": spec["probe_kind"] if spec.get("probe_steps") else "",
        "optimizer_state_primed": "false",
    }


def probes() -> list[dict]:
    rows = []
    for group, concurrent in (("p3b", 4), ("p15", 2)):
        for folder in sorted((HERE / "probes" / group).iterdir()):
            if not (folder / "trial.json").is_file():
                continue
            record = json.loads((folder / "trial.json").read_text())
            steps = pd.read_parquet(folder / "steps.parquet")
            wall = json.loads((folder / "bench-wall.json").read_text())["wall_s"]
            kind = "synthetic" if "synthetic" in folder.name else "decode"
            run = f"probes ({kind}; {concurrent} at once)"
            rows.append(row(run, concurrent, record["config"], record["outcome"], steps, wall))
    return rows


def frontier() -> list[dict]:
    trials = pd.read_parquet(HERE / "frontier" / "trials.parquet")
    rows = []
    for _, t in trials[trials.status.isin(["completed", "oom"])].iterrows():
        folder = HERE / "frontier" / "trials" / t["trial_key"]
        spec = json.loads((folder / "spec.json").read_text())
        steps = pd.DataFrame(
            [e for e in map(json.loads, (folder / "events.jsonl").open()) if e["event"] == "step"]
        )
        if not len(steps):
            steps = pd.DataFrame(columns=["gen_s", "train_s"])
        outcome = {
            k: (None if v != v else v) for k, v in t.to_dict().items() if not isinstance(v, (list, dict))
        }
        rows.append(row("frontier-16gb (rlsweep run; Ray; 1 at a time)", 1, spec, outcome, steps, None))
    return rows


def main() -> None:
    with (HERE / "trials.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(probes() + frontier())


if __name__ == "__main__":
    main()
