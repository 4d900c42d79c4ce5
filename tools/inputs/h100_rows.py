"""The H100 rows of bench/data/h100-2026-11-26/trials.csv (one row a trial of the two H100 runs of 26
November 2026; bench/accuracy/gpu_memory.py describes them) read as trials.parquet rows, what
MemoryModel.fit and MemoryModel.calibrate read. Read by bench/accuracy/gpu_memory.py and the memory
model's tests."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from trainers.trial import TrialSpec

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "data" / "h100-2026-11-26" / "trials.csv"
PEAK = "peak_device_gib"  # the trials.parquet column of the GPU (NVML) peak


def load(path: Path = DATA) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def trial_rows(raw: list[dict], round_: int | None = None) -> list[dict]:
    """trials.parquet rows of the CSV's trials (of one round where given): the knobs the CSV records
    as the config (the rest at TrialSpec's defaults, as the trials ran), the NVML peak, the status,
    the budget an `oom` trial passed and the longest prompt (effective_config)."""
    rows = []
    for i, r in enumerate(raw):
        if round_ is not None and int(r["round"]) != round_:
            continue
        budget = float(r["budget_gib"]) if r["budget_gib"] else None
        spec = TrialSpec(
            trial_key=f"h100-r{r['round']}-{i}-{r['stack']}-k{r['K']}-b{r['B']}-c{r['max_completion']}",
            stack=r["stack"],
            model=r["model"],
            num_generations=int(r["K"]),
            batch_size=int(r["B"]),
            max_prompt_length=int(r["max_prompt"]),
            max_completion_length=int(r["max_completion"]),
            num_iterations=int(r["num_iterations"]),
            quantization=r["quantization"],
            lora_r=int(r["lora_r"]),
            memory_budget_gib=budget,
        )
        assert spec.completions_per_step == int(r["completions_per_step"]), r
        peak = float(r["peak_nvml_gib"]) if r["peak_nvml_gib"] else None
        rows.append(
            {
                "trial_key": spec.trial_key,
                "status": r["status"],
                "config": json.dumps(spec.to_dict()),
                PEAK: peak,
                "memory_budget_gib": budget,
                "round": int(r["round"]),
                "run": r["run"],
                "prior_predicted_gib": float(r["prior_predicted_gib"]),
                "effective_config": json.dumps({"longest_prompt_tokens": int(r["longest_prompt_tokens"])}),
            }
        )
    return rows
