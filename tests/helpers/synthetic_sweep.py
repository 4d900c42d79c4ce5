"""Synthetic sweep outputs in the layout of docs/schema.md (the record's columns, trainers/record.py; a
field the generator does not fill is null), holding every trial status; for the report tests.

Figures come from a seeded generator whose memory grows with B×K, so tests check relations
(ordering, ratios, agreement between files) rather than hard-coded numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.recording.sinks import STEP_SCHEMA, TRIAL_SCHEMA

GPU_ONLY_STEP_COLUMNS = {
    "torch_allocated_gib", "torch_reserved_gib", "torch_peak_allocated_gib", "torch_peak_reserved_gib",
    "device_used_gib", "device_peak_gib", "gpu_util_pct", "power_w", "energy_j",
}  # fmt: skip

# (stack, mode, K, B, seed, status, steps run)
GRID = [
    ("trl", "grpo", 2, 1, 1, "completed", 5),
    ("trl", "grpo", 2, 1, 2, "completed", 5),
    ("trl", "grpo", 2, 2, 1, "completed", 5),
    ("trl", "grpo", 4, 1, 1, "completed", 5),
    ("trl", "grpo", 4, 2, 1, "oom", 1),
    ("trl", "grpo", 8, 2, 1, "pruned", 0),
    ("unsloth", "grpo", 2, 1, 1, "completed", 5),
    ("unsloth", "grpo", 4, 2, 1, "completed", 5),
    ("unsloth", "grpo", 8, 2, 1, "failed", 2),
    ("unsloth", "gspo", 2, 1, 1, "unavailable", 0),
    ("trl", "gspo", 2, 1, 1, "stopped", 2),
]
DETAILS = {
    "completed": "",
    "oom": "CUDA out of memory at step 1: device peak 15.8 GiB of a 16 GiB budget",
    "pruned": "dominated by trl-grpo-k4-b2-s1",
    "failed": "RuntimeError: shape mismatch | stderr tail: line one\nline two",
    "unavailable": "unsloth needs a CUDA GPU; install it on a GPU host",
    "stopped": "stopped by the user (Ctrl-C)",
}


# Each stack's memory and speed relative to TRL's; a stack not listed (a test-only one) runs as TRL does
# unless a test adds it here.
STACK_FACTORS = {"unsloth": (0.8, 1.6)}


def trial_key(stack: str, mode: str, k: int, b: int, seed: int) -> str:
    return f"{stack}-{mode}-k{k}-b{b}-s{seed}"


def write_synthetic_sweep(out: Path, gpu: bool = True, grid=GRID, speedup: float = 1.0, memory_scale: float = 1.0,
                          rng_seed: int = 0) -> pd.DataFrame:  # fmt: skip
    """Write trials.parquet and steps/stack=<f>/mode=<m>/<trial_key>.parquet; return the trials frame."""
    rng = np.random.default_rng(rng_seed)
    trials = []
    for stack, mode, k, b, seed, status, n_steps in grid:
        key = trial_key(stack, mode, k, b, seed)
        memory_factor, speed_factor = STACK_FACTORS.get(stack, (1.0, 1.0))
        base_mem = (1.5 + 0.9 * k * b) * memory_factor * memory_scale
        speed = 40.0 * k * b * speed_factor * speedup
        steps = _steps(key, n_steps, gpu, base_mem, speed, rng)
        if n_steps:
            folder = out / "steps" / f"stack={stack}" / f"mode={mode}"
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(steps, folder / f"{key}.parquet")
        frame = steps.to_pandas()
        trials.append(
            {
                "trial_key": key, "sweep": "synthetic", "stack": stack, "mode": mode,
                "model": "Qwen/Qwen2.5-0.5B-Instruct", "task": "arithmetic", "num_generations": k,
                "batch_size": b, "micro_batch_size": k * b, "max_prompt_length": 128,
                "max_completion_length": 64, "quantization": "nf4", "dtype": "bf16" if gpu else "fp32",
                "lora_r": 16, "seed": seed, "max_steps": 5, "status": status, "status_detail": DETAILS[status],
                "steps_completed": n_steps,
                "peak_device_gib": frame["device_peak_gib"].max() if gpu and n_steps else None,
                "peak_torch_reserved_gib": frame["torch_peak_reserved_gib"].max() if gpu and n_steps else None,
                "peak_rss_gib": frame["rss_peak_gib"].max() if n_steps else None,
                "median_step_s": frame["step_s"].median() if n_steps else None,
                "median_tokens_per_s": frame["tokens_per_s"].median() if n_steps else None,
                "wall_s": 3.0 + n_steps * 1.5,
                **startup(stack, n_steps),
                "gpu_name": "NVIDIA GeForce RTX 4080" if gpu else None,
                "gpu_total_gib": 16.0 if gpu else None,
                "versions": json.dumps({"torch": "2.13.0", "transformers": "5.17.0", "trl": "1.15.0",
                                        **({"unsloth": "2026.10.9"} if stack == "unsloth" else {})}),
                "effective_config": json.dumps({"seed": seed, "trial_key": key, "learning_rate": 2e-4,
                                                "beta": 0.0, "output_dir": f"/tmp/{key}"}),
            }
        )  # fmt: skip
    table = pa.Table.from_pylist(trials, schema=TRIAL_SCHEMA)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out / "trials.parquet")
    return pd.DataFrame(trials)  # the columns the generator fills


# Each stack's seconds to the end of its first step and the first step's warm-up (Unsloth compiles its
# decoder blocks there); a stack not listed starts as TRL does.
STARTUP_S = {"trl": (20.0, 2.0), "unsloth": (60.0, 50.0)}


def startup(stack: str, n_steps: int) -> dict[str, float | None]:
    """A trial's time_to_first_step_s and warmup_s: none without a step, no warm-up from one step alone."""
    first, warmup = STARTUP_S.get(stack, STARTUP_S["trl"])
    return {"time_to_first_step_s": first if n_steps else None, "warmup_s": warmup if n_steps > 1 else None}


def _steps(key: str, n: int, gpu: bool, base_mem: float, speed: float, rng) -> pa.Table:
    rows = []
    for step in range(n):
        probe = step == 0
        mem = base_mem * (1.25 if probe else 1.0) + rng.uniform(0, 0.2)
        tokens = speed * rng.uniform(0.8, 1.2) * (0.6 if probe else 1.0)
        completion_tokens = 64.0 * 4
        row = {
            "trial_key": key, "step": step + 1, "probe": probe, "step_s": completion_tokens / tokens,
            "gen_s": 0.6 * completion_tokens / tokens, "prompt_tokens": 120.0, "completion_tokens": completion_tokens,
            "tokens_per_s": tokens, "torch_allocated_gib": mem * 0.7, "torch_reserved_gib": mem * 0.9,
            "torch_peak_allocated_gib": mem * 0.85, "torch_peak_reserved_gib": mem * 0.95,
            "device_used_gib": mem * 0.95, "device_peak_gib": mem, "rss_gib": 0.5 + 0.01 * step,
            "rss_peak_gib": 0.55 + 0.01 * step, "gpu_util_pct": 80.0, "power_w": 250.0, "energy_j": 250.0 * step,
            "reward_mean": 0.1 * step + rng.uniform(0, 0.05), "reward_std": 0.2, "frac_reward_zero_std": 0.1,
            "loss": 0.05 - 0.005 * step, "grad_norm": 0.3, "kl": None, "entropy": 1.2, "clip_ratio": 0.0,
            "completion_len_mean": 64.0 if probe else 40.0 + step, "completion_len_max": 64.0,
            "clipped_ratio": 1.0 if probe else 0.2, "learning_rate": 2e-4,
        }  # fmt: skip
        if not gpu:
            row |= dict.fromkeys(GPU_ONLY_STEP_COLUMNS)
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=STEP_SCHEMA)


PREDICTED = tuple(name for name in TRIAL_SCHEMA.names if name.startswith("predicted_"))


def add_predictions(
    out: Path, trials: pd.DataFrame, factors: dict[str, float], spread: float = 0.05
) -> pd.DataFrame:
    """Rewrite trials.parquet with the memory model's columns: each trial in `factors` predicted at its
    measured peak (device, else RSS) x its factor, with an interval of ± spread of the prediction, fitted
    on 2 trials; a trial in `factors` that measured nothing is predicted at 20 GiB. Others: no prediction."""
    trials = trials.copy()
    measured = trials["peak_device_gib"].fillna(trials["peak_rss_gib"]).fillna(20.0)
    factor = trials["trial_key"].map(factors)
    trials["predicted_peak_gib"] = measured * factor
    trials["predicted_low_gib"] = trials["predicted_peak_gib"] * (1 - spread)
    trials["predicted_high_gib"] = trials["predicted_peak_gib"] * (1 + spread)
    trials["predicted_from_trials"] = factor.notna().map({True: 2, False: None})
    trials["predicted_basis"] = factor.notna().map({True: "fitted", False: None})
    stored = pq.read_table(out / "trials.parquet")
    for name in PREDICTED:
        index = stored.schema.get_field_index(name)
        values = pa.array(trials[name], type=stored.schema.field(name).type, from_pandas=True)
        stored = stored.set_column(index, name, values)
    pq.write_table(stored, out / "trials.parquet")
    return trials


def with_held_out_accuracy(out) -> None:
    """The synthetic sweep's completed trials measured held-out accuracy (a learning sweep's fields)."""
    import pyarrow.parquet as pq

    table = pq.read_table(out / "trials.parquet").to_pandas()
    completed = table["status"] == "completed"
    table.loc[completed, "best_eval_pass_at_1"] = 0.6
    table.loc[completed, "best_eval_step"] = 20
    table.loc[completed, "accuracy_target"] = 0.5
    table.to_parquet(out / "trials.parquet")
