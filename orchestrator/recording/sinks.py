"""Parquet sinks: trials.parquet (one row per trial, every status; also the resume ledger) and the steps
dataset steps/framework=<f>/mode=<m>/<trial_key>.parquet. Every write is atomic: a `.tmp-*` file in the
same folder (pyarrow.dataset skips dot-files), then os.replace. Columns and units: docs/schema.md.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.judging.memory import Prediction
from orchestrator.judging.verdict import DEFAULTS as VERDICT_DEFAULTS
from orchestrator.judging.verdict import VerdictSettings, judge
from orchestrator.recording.outcome import COMPLETED, FINAL_STATUSES, TrialResult
from orchestrator.recording.storage import StoragePath, filesystem_and_path, is_remote
from tasks import RECORDED_REWARDS
from trainers.spec import BOOKKEEPING, TrialSpec

F64, I64, STR, BOOL = pa.float64(), pa.int64(), pa.string(), pa.bool_()
TS = pa.timestamp("ms", tz="UTC")

STEP_SCHEMA = pa.schema(
    [("trial_key", STR), ("step", I64), ("probe", BOOL), ("generated", BOOL)]
    + [
        (name, F64)
        for name in [
            "step_s",
            "cycle_steps",
            "gen_s",
            "prompt_tokens",
            "completion_tokens",
            "tokens_per_s",
            "estimated_tokens_per_step",
            "estimated_tokens_per_sec",
            "torch_allocated_gib",
            "torch_reserved_gib",
            "torch_peak_allocated_gib",
            "torch_peak_reserved_gib",
            "torch_peak_allocated_since_start_gib",
            "device_used_gib",
            "device_peak_gib",
            "rss_gib",
            "rss_peak_gib",
            "gpu_util_pct",
            "power_w",
            "energy_j",
            "alloc_retries",
            "alloc_ooms",
            "reward_timeouts",
            "reward_mean",
            "reward_std",
            "frac_reward_zero_std",
            "loss",
            "grad_norm",
            "kl",
            "entropy",
            "clip_ratio",
            "completion_len_mean",
            "completion_len_max",
            "clipped_ratio",
            "learning_rate",
            "t_start",
            "t_end",
        ]
    ]
    # Per-reward curves (TRL's rewards/<name>/mean) and held-out evaluation: null where not in use.
    + [(f"rewards/{name}/mean", F64) for name in RECORDED_REWARDS]
    + [(name, F64) for name in ("eval_pass_at_1", "eval_pass_at_k", "eval_k", "eval_prompts", "eval_s")]
    + [("extra", STR)]
)
STEP_COLUMNS = STEP_SCHEMA.names

TRIAL_SCHEMA = pa.schema(
    [
        ("trial_key", STR),
        ("sweep", STR),
        ("framework", STR),
        ("mode", STR),
        ("model", STR),
        ("task", STR),
        ("num_generations", I64),
        ("batch_size", I64),
        ("micro_batch_size", I64),
        ("max_prompt_length", I64),
        ("max_completion_length", I64),
        ("quantization", STR),
        ("dtype", STR),
        ("lora_r", I64),
        ("seed", I64),
        ("max_steps", I64),
        ("status", STR),
        ("status_detail", STR),
        ("steps_completed", I64),
        ("peak_device_gib", F64),
        ("peak_torch_reserved_gib", F64),
        ("peak_rss_gib", F64),
        ("median_step_s", F64),
        ("median_tokens_per_s", F64),
        ("wall_s", F64),
        ("gpu_name", STR),
        ("gpu_total_gib", F64),
        ("versions", STR),
        ("effective_config", STR),
        # further knobs, then how the trainer process ran
        ("lora_alpha", I64),
        ("lora_dropout", F64),
        ("learning_rate", F64),
        ("beta", F64),
        ("num_iterations", I64),
        ("temperature", F64),
        ("loss_type", STR),
        ("gradient_checkpointing", BOOL),
        ("probe_steps", I64),
        ("memory_budget_gib", F64),
        ("trainer_s", F64),
        ("exit_code", I64),
        ("cuda_visible_devices", STR),
        ("started_at", TS),
        ("ended_at", TS),
        ("config", STR),
        ("context_gib", F64),
        ("context_source", STR),
        ("alloc_conf", STR),
        ("gpu_memory_source", STR),
        ("training_verdict", STR),
        ("training_verdict_detail", STR),
        # the memory model's prediction made before the trial ran (orchestrator/judging/memory), from the
        # trials finished before it; null when none was made
        ("predicted_peak_gib", F64),
        ("predicted_low_gib", F64),
        ("predicted_high_gib", F64),
        ("predicted_from_trials", I64),
        ("predicted_basis", STR),
        ("phase", STR),
        ("settled_step", I64),
    ]
)
TRIAL_COLUMNS = TRIAL_SCHEMA.names
# A trial's `config` holds every knob but the bookkeeping files of one attempt (its key and sweep name stay).
ATTEMPT_FILES = tuple(k for k in BOOKKEEPING if k not in ("trial_key", "sweep"))


def write_table_atomic(table: pa.Table, path: StoragePath) -> StoragePath:
    if is_remote(path):  # an object store publishes an upload whole when it completes: no rename needed
        fs, where = filesystem_and_path(path)
        pq.write_table(table, where, filesystem=fs)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".parquet", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def steps_path(output_dir: Path, spec: TrialSpec) -> Path:
    return (
        output_dir
        / "steps"
        / f"framework={spec.framework}"
        / f"mode={spec.mode}"
        / f"{spec.trial_key}.parquet"
    )


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None if value is None else float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def normalize_step(trial_key: str, row: dict[str, Any]) -> dict[str, Any]:
    """One step event's payload in STEP_SCHEMA's columns; unknown keys kept as JSON in `extra`."""
    out: dict[str, Any] = {
        "trial_key": trial_key,
        "step": int(row.get("step") or 0),
        "probe": bool(row.get("probe")),
        "generated": row.get("generated"),
    }
    for name in STEP_COLUMNS[4:-1]:
        out[name] = _float(row.get(name))
    extra = {k: v for k, v in row.items() if k not in STEP_SCHEMA.names}
    out["extra"] = json.dumps(extra, sort_keys=True) if extra else None
    return out


def steps_table(trial_key: str, steps: list[dict[str, Any]]) -> pa.Table:
    by_step = {int(r.get("step") or 0): r for r in steps}  # a repeated report of a step counts once
    rows = [normalize_step(trial_key, by_step[s]) for s in sorted(by_step)]
    return pa.Table.from_pylist(rows, schema=STEP_SCHEMA)


def write_steps(output_dir: Path, spec: TrialSpec, steps: list[dict[str, Any]]) -> Path:
    return write_table_atomic(steps_table(spec.trial_key, steps), steps_path(output_dir, spec))


def _max(rows: list[dict[str, Any]], *names: str) -> float | None:
    values = [_float(r.get(n)) for r in rows for n in names]
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _median(rows: list[dict[str, Any]], name: str) -> float | None:
    measured = [r for r in rows if not r.get("probe")] or rows  # probe steps are the worst case, not typical
    values = [v for v in (_float(r.get(name)) for r in measured) if v is not None]
    return statistics.median(values) if values else None


def device_info(started: dict[str, Any]) -> tuple[str | None, float | None]:
    device = started.get("device")
    name = started.get("gpu_name")
    total = started.get("gpu_total_gib")
    if isinstance(device, dict):
        name = name or device.get("name")
        total = total if total is not None else device.get("total_gib")
    elif isinstance(device, str) and device != "cpu" and name is None:
        name = device  # a CPU run has no GPU name: null, never "cpu"
    return name, _float(total)


def trial_row(
    spec: TrialSpec,
    result: TrialResult | None,
    status: str | None = None,
    detail: str = "",
    verdict: VerdictSettings = VERDICT_DEFAULTS,
    prediction: Prediction | None = None,
) -> dict:
    """The trials.parquet row of a trial: its config, and its outcome when it ran; a completed trial's
    training verdict (orchestrator/judging/verdict.py) under `verdict`'s thresholds; the memory model's
    prediction made before it ran (null columns when none was made or it was unknown)."""
    steps = result.steps if result else []
    started = result.started if result else {}
    gpu_name, gpu_total = device_info(started)
    peak = result.peak if result else {}
    config = {k: v for k, v in spec.to_dict().items() if k not in ATTEMPT_FILES}
    row = {name: getattr(spec, name, None) for name in TRIAL_COLUMNS if hasattr(spec, name)}
    row.update(
        micro_batch_size=spec.effective_micro_batch_size,
        status=status or (result.status if result else None),
        status_detail=detail or (result.status_detail if result else ""),
        steps_completed=len({r.get("step") for r in steps}),
        peak_device_gib=_max([*steps, peak], "device_peak_gib"),
        peak_torch_reserved_gib=_max(steps, "torch_peak_reserved_gib", "torch_reserved_gib"),
        peak_rss_gib=_max([*steps, peak], "rss_peak_gib", "rss_gib"),
        median_step_s=_median(steps, "step_s"),
        median_tokens_per_s=_median(steps, "tokens_per_s"),
        wall_s=result.wall_s if result else None,
        trainer_s=sum(_float(r.get("step_s")) or 0.0 for r in steps) if steps else None,
        exit_code=result.exit_code if result else None,
        cuda_visible_devices=result.cuda_visible_devices if result else None,
        started_at=_ms(result.started_at) if result else None,
        ended_at=_ms(result.ended_at) if result else None,
        gpu_name=gpu_name,
        gpu_total_gib=gpu_total,
        versions=json.dumps(started.get("versions")) if started.get("versions") is not None else None,
        effective_config=json.dumps(started.get("effective_config"), sort_keys=True, default=str)
        if started.get("effective_config") is not None
        else None,
        config=json.dumps(config, sort_keys=True),
        context_gib=_float(started.get("context_gib")),
        context_source=started.get("context_source"),
        alloc_conf=started.get("alloc_conf"),
        gpu_memory_source=peak.get("gpu_memory_source"),
        **prediction_columns(prediction),
        phase=result.phase if result else None,
        settled_step=result.settled_step if result else None,
    )
    if row["status"] == COMPLETED:
        judged = judge(steps, verdict, max_steps=spec.max_steps, budget_gib=spec.memory_budget_gib,
                       device_total_gib=gpu_total)  # fmt: skip
        row.update(training_verdict=judged.verdict, training_verdict_detail=judged.detail)
    return row


def prediction_columns(prediction: Prediction | None) -> dict[str, Any]:
    """The predicted_* columns of a trial's row: null when no number was predicted."""
    if prediction is None or prediction.unknown is not None:
        return {name: None for name in TRIAL_COLUMNS if name.startswith("predicted_")}
    return {
        "predicted_peak_gib": prediction.peak_gib,
        "predicted_low_gib": prediction.low_gib,
        "predicted_high_gib": prediction.high_gib,
        "predicted_from_trials": prediction.n_fitted,
        "predicted_basis": prediction.basis,
    }


def _ms(epoch_s: float) -> int | None:
    return int(epoch_s * 1000) if epoch_s else None


class TrialsTable:
    """trials.parquet, held in memory and rewritten atomically on every change; the resume ledger."""

    def __init__(self, path: StoragePath):
        self.path = path
        self.rows: dict[str, dict[str, Any]] = {}
        if path.exists():
            fs, where = filesystem_and_path(path)
            for row in pq.read_table(where, filesystem=fs).to_pylist():
                self.rows[row["trial_key"]] = row

    def status(self, key: str) -> str | None:
        row = self.rows.get(key)
        return row["status"] if row else None

    def done(self, key: str) -> bool:
        return self.status(key) in FINAL_STATUSES

    def upsert(self, row: dict[str, Any]) -> None:
        self.rows[row["trial_key"]] = row
        self.write()

    def table(self) -> pa.Table:
        return pa.Table.from_pylist(list(self.rows.values()), schema=TRIAL_SCHEMA)

    def write(self) -> None:
        write_table_atomic(self.table(), self.path)


# The original benchmark's metrics.csv columns, its order and meanings -> our step columns.
METRICS_CSV_FIRST = {
    "step": "step",
    "step_time_sec": "step_s",
    "estimated_tokens_per_step": "estimated_tokens_per_step",
    "estimated_tokens_per_sec": "estimated_tokens_per_sec",
    "cuda_memory_allocated_gb": "torch_allocated_gib",
    "cuda_memory_reserved_gb": "torch_reserved_gib",
    "cuda_peak_memory_allocated_gb": "torch_peak_allocated_since_start_gib",
}


def metrics_csv_rows(trial_key: str, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The original benchmark's metrics.csv columns first (its names, GiB values), then ours."""
    rows = []
    for row in steps_table(trial_key, steps).to_pylist():
        first = {name: row[column] for name, column in METRICS_CSV_FIRST.items()}
        rows.append({**first, **{k: v for k, v in row.items() if k != "step"}})
    return rows
