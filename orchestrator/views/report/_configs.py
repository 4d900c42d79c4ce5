"""Configurations: which columns make one, which of them vary, and repeats across seeds aggregated."""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
import pandas as pd

from orchestrator.judging.intervals import margin, median_interval
from orchestrator.views.report._outputs import (
    SweepOutputs,
    column,
    final_reward,
    measured_steps,
    parse_json,
    plain,
    stat,
    trial_peak,
    trial_steps,
)
from orchestrator.words import outcome
from trainers.record import STEP, first_kind
from trainers.trial import BOOKKEEPING, EXECUTION

# Columns that define a configuration; trials equal on all of them (and on effective_config, less
# per-trial bookkeeping) differ only in seed and are aggregated as repeats.
CONFIG_COLUMNS = [
    "stack",
    "mode",
    "model",
    "task",
    "num_generations",
    "batch_size",
    "micro_batch_size",
    "max_prompt_length",
    "max_completion_length",
    "quantization",
    "dtype",
    "lora_r",
    "max_steps",
]
CONFIG_WORDS = {
    "model": "Model",
    "task": "Task",
    "micro_batch_size": "Micro-batch",
    "max_prompt_length": "Prompt tokens (max)",
    "max_completion_length": "Completion tokens (max)",
    "quantization": "Quantization",
    "dtype": "Dtype",
    "lora_r": "LoRA r",
    "max_steps": "Steps",
}
PER_TRIAL_KEYS = {"seed", *BOOKKEEPING, *EXECUTION}
# Effective-config entries that follow from the stack or mode columns, or only describe a stack's
# internals: listing them as "other settings" would repeat those columns in noisier words.
STACK_KEYS = {
    "importance_sampling_level",
    "fast_inference",
    "vllm_gpu_memory_utilization_asked",
    "vllm_cpu_kvcache_space_gib",
    "trainer_class",
    "unsloth_backend",
    "unsloth_changed_config",
}


def _config_identity(trial: pd.Series) -> str:
    config = {col: plain(trial.get(col)) for col in CONFIG_COLUMNS}
    extra = {k: v for k, v in parse_json(trial.get("effective_config")).items() if k not in PER_TRIAL_KEYS}
    return json.dumps({**extra, **config}, sort_keys=True, default=str)


def aggregate_repeats(
    outputs: SweepOutputs, budget_gib: float | None = None, headroom_gib: float = 0.0
) -> pd.DataFrame:
    """Completed trials grouped by configuration (all but the seed): those that fit the budget (less the
    headroom a user asked to keep, memory.headroom_gib) first,
    fastest first within each part; then those whose peak passed it (`fits` False), then those whose
    peak was not measured (`fits` None). Without a budget, fastest first.

    tokens/s median, p10 and p90 are taken over the measured steps of every seed together, so one seed
    still shows its step-to-step spread; trials without step rows fall back to their own median.
    tokens_low/tokens_high: the median's 95% interval (intervals.median_interval over each seed's cycles,
    NaN below intervals.MIN_CYCLES cycles), `cycles` how many it was taken over, `speeds` each seed's
    cycles (for ratios between configurations), `peaks` each seed's peak. budget_margin_gib/budget_margin_pct/tight:
    the peak against the budget less the headroom (intervals.margin; NaN/None without a budget).
    """
    trials = outputs.trials
    done = trials[trials["status"] == outcome.COMPLETED].copy() if "status" in trials else trials.iloc[0:0]
    columns = [*CONFIG_COLUMNS, "other", "seeds", "trial_keys", "tokens_median", "tokens_p10", "tokens_p90",
               "tokens_low", "tokens_high", "cycles", "speeds", "step_s_median", "step_s_extrapolated", "peak_gib", "peaks", "memory_kind",
               "fits", "budget_margin_gib", "budget_margin_pct", "tight", "final_reward"]  # fmt: skip
    if done.empty:
        return pd.DataFrame(columns=columns)
    done["_identity"] = done.apply(_config_identity, axis=1)
    varying_extra = _varying_effective_keys(done)
    rows = []
    for _, group in done.groupby("_identity", sort=False):
        first = group.iloc[0]
        keys = list(group["trial_key"])
        speed = measured_steps(
            outputs.steps[outputs.steps["trial_key"].isin(keys)]
            if "trial_key" in outputs.steps
            else outputs.steps
        )
        tokens = column(speed, STEP.tokens_per_s)
        if tokens.empty:
            tokens = column(group, "median_tokens_per_s")
        speeds = [
            column(measured_steps(trial_steps(outputs.steps, k)), STEP.tokens_per_s).tolist() for k in keys
        ]
        estimate = median_interval(speeds)
        step_s = column(speed, STEP.step_s)
        if step_s.empty:
            step_s = column(group, "median_step_s")
        peaks = [trial_peak(t, trial_steps(outputs.steps, t["trial_key"])) for _, t in group.iterrows()]
        kinds = {kind for _, kind in peaks if kind}
        values = [value for value, _ in peaks if value is not None]
        rewards = [final_reward(trial_steps(outputs.steps, k)) for k in keys]
        rewards = [r for r in rewards if r is not None]
        extra = parse_json(first.get("effective_config"))
        # Against what the user may fill (the budget less memory.headroom_gib), as `fits` is: a fit with
        # less than the spread of its peak to spare there is tight.
        usable = None if budget_gib is None else budget_gib - headroom_gib
        fit = margin(max(values), usable) if values else None
        rows.append(
            {
                **{col: first.get(col) for col in CONFIG_COLUMNS},
                "other": ", ".join(f"{k.replace('_', ' ')} {extra.get(k)}" for k in varying_extra),
                "seeds": ", ".join(str(plain(s)) for s in sorted(group["seed"].dropna().unique())),
                "trial_keys": keys,
                "tokens_median": stat(tokens, "median"),
                "tokens_p10": stat(tokens, "p10"),
                "tokens_p90": stat(tokens, "p90"),
                "tokens_low": np.nan if estimate.low is None else estimate.low,
                "tokens_high": np.nan if estimate.high is None else estimate.high,
                "cycles": estimate.cycles,
                "speeds": speeds,
                "step_s_median": stat(step_s, "median"),
                # a synthetic probe's full-length step, extrapolated (record.py extrapolated_step_s)
                "step_s_extrapolated": stat(column(group, "extrapolated_step_s"), "median"),
                "peak_gib": max(values) if values else np.nan,
                "peaks": values,  # each seed's peak (for ratios with their spread)
                "memory_kind": first_kind(kinds),  # the seeds' kind by the record's precedence
                "fits": None
                if budget_gib is None or not values
                else max(values) <= budget_gib - headroom_gib,
                "budget_margin_gib": np.nan if fit is None else fit.gib,
                "budget_margin_pct": np.nan if fit is None else fit.pct,
                "tight": None if fit is None else fit.tight,
                "final_reward": float(np.median(rewards)) if rewards else np.nan,
            }
        )
    ranked = pd.DataFrame(rows, columns=columns)
    part = ranked["fits"].map({True: 0, False: 1}).fillna(0 if budget_gib is None else 2)
    return (
        ranked.assign(_part=part)
        .sort_values(["_part", "tokens_median"], ascending=[True, False], na_position="last", kind="stable")
        .drop(columns="_part")
        .reset_index(drop=True)
    )


def _varying_effective_keys(trials: pd.DataFrame) -> list[str]:
    """Effective-config entries that set apart trials equal on every configuration column: the ones
    that follow from those columns (completions per step, TRL's names of K and B) say nothing new."""
    configs = [parse_json(v) for v in trials.get("effective_config", pd.Series(dtype=object))]
    keys = sorted({k for c in configs for k in c} - PER_TRIAL_KEYS - STACK_KEYS - set(CONFIG_COLUMNS))
    groups = [
        json.dumps({c: plain(t.get(c)) for c in CONFIG_COLUMNS}, default=str) for _, t in trials.iterrows()
    ]

    def separates(key: str) -> bool:
        seen: dict[str, set[str]] = {}
        for group, config in zip(groups, configs, strict=True):
            seen.setdefault(group, set()).add(json.dumps(config.get(key), sort_keys=True, default=str))
        return any(len(values) > 1 for values in seen.values())

    return [k for k in keys if separates(k)]


def varying_config_columns(frame: pd.DataFrame, exclude: Iterable[str] = ()) -> list[str]:
    """Configuration columns whose value differs between rows (worth a column in a table)."""
    skip = set(exclude)
    if "micro_batch_size" in frame and "num_generations" in frame and "batch_size" in frame:
        # The default micro-batch is B×K: it varies with them but says nothing new.
        default = frame["micro_batch_size"].isna() | (
            frame["micro_batch_size"] == frame["num_generations"] * frame["batch_size"]
        )
        if default.all():
            skip.add("micro_batch_size")
    return [
        col
        for col in CONFIG_COLUMNS
        if col in frame and col not in skip and frame[col].astype(str).nunique(dropna=False) > 1
    ]
