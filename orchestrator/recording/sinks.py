"""Parquet sinks: trials.parquet (one row per trial, every status; also the resume ledger) and the steps
dataset steps/stack=<f>/mode=<m>/<trial_key>.parquet. Every write is atomic: a `.tmp-*` file in the
same folder (pyarrow.dataset skips dot-files), then os.replace. Columns and units: docs/schema.md.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.judging.intervals import margin, median_interval
from orchestrator.judging.memory import Prediction
from orchestrator.judging.speed import predict_step_from_record
from orchestrator.judging.verdict import VerdictSettings, judge_trial
from orchestrator.words.outcome import FINAL_STATUSES, TrialResult
from orchestrator.words.settings import VERDICT as VERDICT_DEFAULTS
from orchestrator.words.storage import StoragePath, filesystem_and_path, is_remote
from tasks import RECORDED_REWARDS
from trainers import record
from trainers.trial import BOOKKEEPING, SYNTHETIC, TrialSpec

# Parquet's type of each of the record's types (trainers/record.py).
ARROW_TYPES = {
    record.STRING: pa.string(),
    record.INT64: pa.int64(),
    record.FLOAT64: pa.float64(),
    record.BOOL: pa.bool_(),
    record.TIMESTAMP: pa.timestamp("ms", tz="UTC"),
}


def arrow_schema(fields: tuple[record.Field, ...]) -> pa.Schema:
    return pa.schema([(f.name, ARROW_TYPES[f.type]) for f in fields])


# Per-reward curves (TRL's rewards/<name>/mean): one column per reward the tasks define.
STEP_RECORD = record.step_fields(RECORDED_REWARDS)  # the record's step fields, a reward curve per reward
STEP_SCHEMA = arrow_schema(STEP_RECORD)
STEP_COLUMNS = STEP_SCHEMA.names
# The step columns a normalised row holds by their type (the others: the key, step, flags and `extra`).
STEP_VALUES = tuple(
    (f.name, f.type)
    for f in STEP_RECORD
    if f.name not in ("trial_key", "step", "probe", "generated", "extra")
)
TRIAL_SCHEMA = arrow_schema(record.TRIAL_FIELDS)
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
    return output_dir / "steps" / f"stack={spec.stack}" / f"mode={spec.mode}" / f"{spec.trial_key}.parquet"


def written_steps_path(output_dir: Path, spec: TrialSpec) -> Path:
    """steps_path, or the same file under the partition's old name (record.OLD_NAMES) where only it exists."""
    path = steps_path(output_dir, spec)
    partition = f"{record.OLD_NAMES['stack']}={spec.stack}"  # the partition under the stack's old name
    old = output_dir / "steps" / partition / f"mode={spec.mode}" / f"{spec.trial_key}.parquet"
    return old if not path.exists() and old.exists() else path


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None if value is None else float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _int(value: Any) -> int | None:
    number = _float(value)
    return int(number) if number is not None and math.isfinite(number) else None


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)  # a list or mapping (the rank peaks) as its JSON text


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


# How a step value of each of the record's types becomes its column's (None stays None: not measured).
_CONVERT = {record.FLOAT64: _float, record.INT64: _int, record.STRING: _text, record.BOOL: _flag}


def normalize_step(trial_key: str, row: dict[str, Any]) -> dict[str, Any]:
    """A step event's payload as a row of STEP_SCHEMA: the record's fields (trainers/record.py), numbers
    as floats, a missing one null; any other key kept as JSON in `extra`. The Recorder calls it once per
    step; every sink reads the row it made."""
    out: dict[str, Any] = {
        "trial_key": trial_key,
        "step": int(row.get("step") or 0),
        "probe": bool(row.get("probe")),
        "generated": row.get("generated"),
    }
    for name, kind in STEP_VALUES:
        out[name] = _CONVERT[kind](row.get(name))
    extra = {k: v for k, v in row.items() if k not in STEP_SCHEMA.names}
    out["extra"] = json.dumps(extra, sort_keys=True) if extra else None
    return out


def steps_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Normalised step rows (normalize_step), one per step, as a table in step order."""
    return pa.Table.from_pylist(sorted(rows, key=lambda r: r["step"]), schema=STEP_SCHEMA)


def write_steps(output_dir: Path, spec: TrialSpec, rows: list[dict[str, Any]]) -> Path:
    return write_table_atomic(steps_table(rows), steps_path(output_dir, spec))


def _max(rows: list[dict[str, Any]], *names: str) -> float | None:
    values = [_float(r.get(n)) for r in rows for n in names]
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _extrapolated_step_s(steps: list[dict[str, Any]], spec: TrialSpec) -> float | None:
    """The full-length step a trial's first synthetic probe step extrapolates to (None without one)."""
    for row in steps:
        if row.get(record.STEP.probe_kind) == SYNTHETIC:
            forecast = predict_step_from_record(row, spec.max_completion_length)
            if forecast is not None:
                return forecast.step_s
    return None


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
    steps: list[dict[str, Any]],
    status: str | None = None,
    detail: str = "",
    verdict: VerdictSettings = VERDICT_DEFAULTS,
    prediction: Prediction | None = None,
    implied_by: str | None = None,
) -> dict:
    """The trials.parquet row of a trial: its config, and its outcome (its result and normalised step
    rows, normalize_step's) when it ran; the training verdict of a completed trial, or of a timeout on
    the steps it kept (orchestrator/judging/verdict.py judge_trial), under `verdict`'s thresholds; the
    memory model's prediction made before it ran (null columns when none was made or it was unknown); implied_by: the
    measured trial whose fit implies this one's (status implied; nothing measured, so those columns are
    null, steps_completed included)."""
    started = result.started if result else {}
    timed = [r for r in steps if r.get(record.STEP.probe_kind) != SYNTHETIC]
    gpu_name, gpu_total = device_info(started)
    peak = result.peak if result else {}
    config = {k: v for k, v in spec.to_dict().items() if k not in ATTEMPT_FILES}
    # Every column, null where nothing below fills it (only a judged status has a verdict).
    row = dict.fromkeys(TRIAL_COLUMNS) | {
        name: getattr(spec, name) for name in TRIAL_COLUMNS if hasattr(spec, name)
    }
    row.update(
        micro_batch_size=spec.effective_micro_batch_size,
        status=status or (result.status if result else None),
        status_detail=detail or (result.status_detail if result else ""),
        steps_completed=len({r.get("step") for r in steps}),
        # A synthetic probe's step is no full-length step: its time is not a step time, its speed extrapolated.
        median_step_s=_median(timed, record.STEP.step_s),
        extrapolated_step_s=_extrapolated_step_s(steps, spec),
        wall_s=result.wall_s if result else None,
        session=result.session if result else None,
        session_startup_s=result.session_startup_s if result else None,
        trainer_s=sum(_float(r.get(record.STEP.step_s)) or 0.0 for r in steps) if steps else None,
        **record.startup_figures(steps, result.started_at if result else None),
        **record.time_split_figures(timed),
        **record.accuracy_figures(steps, verdict.accuracy_target, spec.num_processes if gpu_name else 0),
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
        eval_before_pass_at_1=_float((started.get("eval_before") or {}).get("eval_pass_at_1")),
        eval_before_prompts=_float((started.get("eval_before") or {}).get("eval_prompts")),
        context_gib=_float(started.get("context_gib")),
        context_source=started.get("context_source"),
        alloc_conf=started.get("alloc_conf"),
        gpu_memory_source=peak.get("gpu_memory_source"),
        rank_peak_device_gib=peak.get("rank_device_peak_gib"),
        rank_peak_rss_gib=peak.get("rank_rss_peak_gib"),
        vllm_server_peak_gib=_float(peak.get("vllm_server_peak_gib")),
        **prediction_columns(prediction),
        # each peak: the maximum of its step fields over the steps and the sampler's whole-trial peak
        **{column: _max([*steps, peak], *fields) for _, column, fields in record.PEAK_SOURCES},
        phase=result.phase if result else None,
        settled_step=result.settled_step if result else None,
        implied_by=implied_by,
    )
    if implied_by is not None:
        row["steps_completed"] = None  # not probed: nothing was counted, not zero steps
    row.update(speed_columns(steps), **margin_columns(row))
    judged = judge_trial(row["status"], steps, verdict, max_steps=spec.max_steps,
                         budget_gib=spec.memory_budget_gib, device_total_gib=gpu_total,
                         eval_before=(row["eval_before_pass_at_1"], row["eval_before_prompts"]))  # fmt: skip
    if judged is not None:
        row.update(training_verdict=judged.verdict, training_verdict_detail=judged.detail)
    return row


def _cycle_speeds(steps: list[dict[str, Any]]) -> list[float]:
    """tokens/s of the trial's measured generation cycles (non-probe; all when only probes reported)."""
    measured = [r for r in steps if not r.get("probe")] or steps
    return [v for v in (_float(r.get(record.STEP.tokens_per_s)) for r in measured) if v is not None]


def speed_columns(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """median_tokens_per_s with its interval and the cycles it was taken over (intervals.median_interval)."""
    estimate = median_interval([_cycle_speeds(steps)])
    return {
        "median_tokens_per_s": estimate.median,
        "median_tokens_per_s_lo": estimate.low,
        "median_tokens_per_s_hi": estimate.high,
        "cycles_measured": estimate.cycles if steps else None,  # null for a trial that recorded no step
    }


def margin_columns(row: dict[str, Any]) -> dict[str, Any]:
    """budget_margin_gib, budget_margin_pct and tight of a trial row: its peak against memory_budget_gib, else the GPU's
    total; null where either is unknown."""
    peak, _ = record.peak_memory(row)
    budget = _float(row.get("memory_budget_gib")) or _float(row.get("gpu_total_gib"))
    fit = margin(peak, budget)
    if fit is None:
        return {"budget_margin_gib": None, "budget_margin_pct": None, "tight": None}
    return {"budget_margin_gib": fit.gib, "budget_margin_pct": fit.pct, "tight": fit.tight}


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
    """trials.parquet, held in memory and rewritten atomically on every change; the resume ledger.
    `version` counts the changes (orchestrator.judging.memory.Forecast refits on a new one).

    The Arrow table is kept beside the rows: a new trial's row is converted alone and appended, so a
    sweep of n trials converts n rows, not n^2/2 (a row replaced, as a resumed or second-phase trial's
    is, rebuilds the table once)."""

    def __init__(self, path: StoragePath):
        self.path = path
        self.rows: dict[str, dict[str, Any]] = {}
        self.version = 0
        self._table: pa.Table | None = None  # the rows, in order, as Arrow; None: to be rebuilt
        if path.exists():
            fs, where = filesystem_and_path(path)
            for row in pq.read_table(where, filesystem=fs).to_pylist():
                self.rows[row["trial_key"]] = record.renamed_row(row)

    def status(self, key: str) -> str | None:
        row = self.rows.get(key)
        return row["status"] if row else None

    def done(self, key: str) -> bool:
        return self.status(key) in FINAL_STATUSES

    def upsert(self, row: dict[str, Any]) -> None:
        key = row["trial_key"]
        if key in self.rows:
            self._table = None  # a row replaced in place: rebuilt from the rows
        elif self._table is not None:
            self._table = pa.concat_tables([self._table, pa.Table.from_pylist([row], schema=TRIAL_SCHEMA)])
        self.rows[key] = row
        self.version += 1
        self.write()

    def table(self) -> pa.Table:
        if self._table is None or self._table.num_rows != len(self.rows):
            self._table = pa.Table.from_pylist(list(self.rows.values()), schema=TRIAL_SCHEMA)
        if self._table.column(0).num_chunks > 64:  # appends leave a chunk per row
            self._table = self._table.combine_chunks()
        return self._table

    def write(self) -> None:
        write_table_atomic(self.table(), self.path)


# The original benchmark's metrics.csv columns, its order and meanings -> our step columns.
METRICS_CSV_FIRST = {
    "step": "step",
    "step_time_sec": record.STEP.step_s,
    "estimated_tokens_per_step": record.STEP.estimated_tokens_per_step,
    "estimated_tokens_per_sec": record.STEP.estimated_tokens_per_sec,
    "cuda_memory_allocated_gb": record.STEP.torch_allocated_gib,
    "cuda_memory_reserved_gb": record.STEP.torch_reserved_gib,
    "cuda_peak_memory_allocated_gb": record.STEP.torch_peak_allocated_since_start_gib,
}


def metrics_csv_rows(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The original benchmark's metrics.csv columns first (its names, GiB values), then ours, from
    normalised step rows."""
    rows = []
    for row in sorted(steps, key=lambda r: r["step"]):
        first = {name: row[column] for name, column in METRICS_CSV_FIRST.items()}
        rows.append({**first, **{k: v for k, v in row.items() if k != "step"}})
    return rows
