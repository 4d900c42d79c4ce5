"""The record, named once: every field of a step row and of a trial row, with its type, unit, who
measures it and what it means, and which memory reading is "the peak" where several exist.

The trainer owns the names of what it logs (as TRL's trainers do); the orchestrator derives from this
module the Parquet schemas (orchestrator/recording/sinks.py), the sampler's window fields
(orchestrator/running/telemetry.py), MLflow's metric names (orchestrator/publishing/tracking.py) and the
tables of docs/schema.md (tests/unit/test_schema_doc.py holds the doc to them). Standard library only:
the trainer child and the orchestrator both import it.

The table itself (each Field, its type, unit and measurer) is declared in trainers/_record_fields.py and
re-exported here; this module derives the rest from it: the names as attributes (STEP, TRIAL), TRL's
names, the peak precedence and the figures a trial row takes from its step rows.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from trainers._record_fields import (  # noqa: F401 - re-exported: the record's table, imported from here
    BOOL,
    CHOICE,
    COUNT,
    EPOCH_S,
    FLAG,
    FLOAT64,
    FRACTION,
    GIB_UNIT,
    INT64,
    JSON_TEXT,
    KEY,
    MEASURERS,
    MEMORY_MODEL,
    RECORDER,
    REWARD_CURVE,
    SAMPLER,
    SAMPLER_FIELDS,
    SEARCH,
    SECONDS,
    SPEC,
    STEP_FIELDS,
    STRING,
    SUPERVISOR,
    TEXT,
    TIME,
    TIMESTAMP,
    TOKENS,
    TRAINER,
    TRIAL_FIELDS,
    TYPES,
    VERDICT,
    Field,
)
from trainers._renamed import (  # noqa: F401 - re-exported: a row read back under today's names
    OLD_NAMES,
    OLD_VALUES,
    RENAMED,
    renamed_config,
    renamed_frame,
    renamed_keys,
    renamed_row,
)


class Names:
    """A record's field names as attributes (STEP.tokens_per_s == "tokens_per_s"): code that reads a
    field names it through the record, so a misspelt or retired name fails where it is written instead of
    reading None."""

    def __init__(self, fields: Iterable[Field]):
        for f in fields:
            if f.name.isidentifier():
                setattr(self, f.name, f.name)


STEP = Names(STEP_FIELDS)
TRIAL = Names(TRIAL_FIELDS)

# The step fields TRL logs, each by the name TRL logs it under (TRL 1.14: GRPOTrainer._metrics' keys and
# Trainer's loss, grad_norm and learning_rate): the trainer reads TRL's log by them (trainers/measure.py)
# and MLflow names their curves so (orchestrator/publishing/_runs.py). A reward curve's field,
# rewards/<name>/mean, is TRL's name already.
TRL_NAMES = {
    STEP.reward_mean: "reward",
    STEP.reward_std: "reward_std",
    STEP.frac_reward_zero_std: "frac_reward_zero_std",
    STEP.loss: "loss",
    STEP.grad_norm: "grad_norm",
    STEP.kl: "kl",
    STEP.entropy: "entropy",
    STEP.clip_ratio: "clip_ratio/region_mean",
    STEP.completion_len_mean: "completions/mean_length",
    STEP.completion_len_max: "completions/max_length",
    STEP.clipped_ratio: "completions/clipped_ratio",
    STEP.learning_rate: "learning_rate",
}


def trl_name(field: str) -> str | None:
    """The name TRL logs a step field under; None for a field only rlsweep measures."""
    if field.startswith("rewards/") and field.endswith("/mean"):
        return field
    return TRL_NAMES.get(field)


def step_fields(reward_names: Iterable[str]) -> tuple[Field, ...]:
    """STEP_FIELDS with REWARD_CURVE made one field per reward name, in place."""
    out: list[Field] = []
    for f in STEP_FIELDS:
        if f is REWARD_CURVE:
            out += [
                Field(f.name.format(reward=r), f.type, f.unit, f.measured_by, f.meaning) for r in reward_names
            ]
        else:
            out.append(f)
    return tuple(out)


def finite_or_none(value: Any) -> float | None:
    """value as a float when it is a finite number (not a bool), else None: what was not measured."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# "Peak memory", one precedence: what NVML saw of the GPU (the trainer's process, else the device), then
# torch's reserved pool, then the process's RSS (a CPU run). Each source: (kind, the trial field, the step
# fields it is the maximum of).
GPU, TORCH, RSS = "GPU", "torch reserved", "RSS"
PEAK_SOURCES = (
    (GPU, "peak_device_gib", ("device_peak_gib",)),
    (TORCH, "peak_torch_reserved_gib", ("torch_peak_reserved_gib", "torch_reserved_gib")),
    (RSS, "peak_rss_gib", ("rss_peak_gib", "rss_gib")),
)
# Each kind as a reader sees it beside a figure: which memory it is and where it was measured.
MEMORY_LABELS = {GPU: "GPU (NVML)", TORCH: "torch reserved", RSS: "RSS (CPU run)"}


def peak_memory(row: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """(peak GiB, kind) of a trial row or a step row, by PEAK_SOURCES' precedence; (None, None) if
    nothing was measured. kind is GPU, TORCH or RSS."""
    for kind, trial_field, step_fields_ in PEAK_SOURCES:
        values = [finite_or_none(row.get(name)) for name in (trial_field, *step_fields_)]
        values = [v for v in values if v is not None]
        if values:
            return max(values), kind
    return None, None


def startup_figures(steps: Iterable[Mapping[str, Any]], started_at: Any) -> dict[str, float | None]:
    """A trial's time_to_first_step_s and warmup_s (TRIAL_FIELDS) from its step rows and the trainer's
    start (seconds since the epoch); a figure that cannot be measured is None, never 0."""
    rows = sorted((r for r in steps if r.get(STEP.step) is not None), key=lambda r: r[STEP.step])
    if not rows:
        return {TRIAL.time_to_first_step_s: None, TRIAL.warmup_s: None}
    first, later = rows[0], [r for r in rows if r[STEP.step] > rows[0][STEP.step]]
    end, start = finite_or_none(first.get(STEP.t_end)), finite_or_none(started_at)
    alike = [
        v for v in (finite_or_none(r.get(STEP.step_s)) for r in later if _alike(r, first)) if v is not None
    ]
    first_s = finite_or_none(first.get(STEP.step_s))
    return {
        TRIAL.time_to_first_step_s: end - start if end is not None and start else None,
        TRIAL.warmup_s: first_s - statistics.median(alike) if alike and first_s is not None else None,
    }


def wilson_interval(share: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval of a proportion `share` observed over n trials, at `confidence`."""
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def held_out_evals(steps: Iterable[Mapping[str, Any]]) -> list[tuple[int, float, float]]:
    """(step, eval_pass_at_1, eval_prompts) of each step that measured held-out accuracy over at least one
    prompt, in step order (a repeated report of a step counts once)."""
    found: dict[int, tuple[int, float, float]] = {}
    for row in steps:
        step = row.get(STEP.step)
        share, prompts = (
            finite_or_none(row.get(STEP.eval_pass_at_1)),
            finite_or_none(row.get(STEP.eval_prompts)),
        )
        if step is not None and share is not None and prompts:
            found[int(step)] = (int(step), share, prompts)
    return [found[s] for s in sorted(found)]


def accuracy_figures(steps: Iterable[Mapping[str, Any]], target: float, gpus: int = 0) -> dict[str, Any]:
    """A trial's to-target and best held-out accuracy figures (TRIAL_FIELDS, accuracy_target to
    best_eval_step) from its step rows; gpus: the GPUs it ran on (0 on CPU). What was not reached or not
    measured is None, never 0."""
    by_step = {int(r[STEP.step]): r for r in steps if r.get(STEP.step) is not None}  # a repeat counts once
    rows = [by_step[s] for s in sorted(by_step)]
    evals = held_out_evals(rows)
    reached = next((step for step, share, _ in evals if share >= target), None)
    seconds = None
    if reached is not None:
        seconds = sum(finite_or_none(r.get(STEP.step_s)) or 0.0 for r in rows if int(r[STEP.step]) <= reached)
    best = max(evals, key=lambda e: e[1], default=None)  # max keeps the first of equal readings
    low, high = wilson_interval(best[1], best[2]) if best else (None, None)
    return {
        TRIAL.accuracy_target: target,
        TRIAL.steps_to_accuracy_target: reached,
        TRIAL.seconds_to_accuracy_target: seconds,
        TRIAL.gpu_seconds_to_accuracy_target: seconds * gpus if seconds is not None and gpus else None,
        TRIAL.best_eval_pass_at_1: best[1] if best else None,
        TRIAL.best_eval_pass_at_1_lo: low,
        TRIAL.best_eval_pass_at_1_hi: high,
        TRIAL.best_eval_step: best[0] if best else None,
    }


def step_ms_per_token(row: Mapping[str, Any]) -> float | None:
    """A step's ms_per_token; for a step recorded before decode_steps was counted, gen_s over its longest
    completion (completion_len_max: the same for one generation call per step). None when it generated
    nothing."""
    recorded = finite_or_none(row.get(STEP.ms_per_token))
    if recorded is not None:
        return recorded
    gen_s, longest = finite_or_none(row.get(STEP.gen_s)), finite_or_none(row.get(STEP.completion_len_max))
    return 1000 * gen_s / longest if gen_s is not None and longest else None


def step_gen_share(row: Mapping[str, Any]) -> float | None:
    """A step's gen_share, from gen_s / step_s where it was not recorded."""
    recorded = finite_or_none(row.get(STEP.gen_share))
    if recorded is not None:
        return recorded
    gen_s, step_s = finite_or_none(row.get(STEP.gen_s)), finite_or_none(row.get(STEP.step_s))
    return gen_s / step_s if gen_s is not None and step_s else None


def time_split_figures(steps: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A trial's median_gen_share, median_ms_per_token, median_gen_util_pct and gpu_util_source
    (TRIAL_FIELDS) from its step rows: the non-probe steps that generated, else every generating step.
    A figure not measured is None, never 0."""
    rows = list(steps)
    generating = [r for r in rows if step_ms_per_token(r) is not None]
    steady = [r for r in generating if not r.get(STEP.probe)] or generating

    def median(values: Iterable[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return statistics.median(present) if present else None

    sources = {r.get(STEP.gpu_util_source) for r in rows} - {None}
    return {
        TRIAL.median_gen_share: median(step_gen_share(r) for r in steady),
        TRIAL.median_ms_per_token: median(step_ms_per_token(r) for r in steady),
        TRIAL.median_gen_util_pct: median(finite_or_none(r.get(STEP.gen_util_pct)) for r in steady),
        TRIAL.gpu_util_source: "process" if "process" in sources else ("device" if sources else None),
    }


def _alike(row: Mapping[str, Any], first: Mapping[str, Any]) -> bool:
    """A later step does the first step's kind of work: forced to full length or not, generating or not."""
    return all(bool(row.get(name)) == bool(first.get(name)) for name in (STEP.probe, STEP.generated))


def first_kind(kinds: Iterable[str | None]) -> str | None:
    """Of the kinds of peak some rows measured, the one PEAK_SOURCES puts first (None when none)."""
    seen = set(kinds)
    return next((kind for kind, _, _ in PEAK_SOURCES if kind in seen), None)
