"""The record (trainers/record.py) names each step and trial field once, with a type, a unit, who measures
it and a meaning; the Parquet schemas, the sampler's window fields and MLflow's step metrics are its fields."""

from __future__ import annotations

import ast
import math
import re
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from orchestrator.publishing.tracking import STEP_ALIASES, STEP_METRICS, step_metrics
from orchestrator.recording.sinks import STEP_RECORD, STEP_SCHEMA, TRIAL_SCHEMA, normalize_step
from orchestrator.running.telemetry import Sample, summarize_window
from tasks import RECORDED_REWARDS
from trainers import record
from trainers.record import (
    GPU,
    MEASURERS,
    RSS,
    SAMPLER_FIELDS,
    TORCH,
    TRIAL_FIELDS,
    TYPES,
    finite_or_none,
    peak_memory,
)

ARROW = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(),
         "timestamp[ms, UTC]": pa.timestamp("ms", tz="UTC")}  # fmt: skip


@pytest.mark.parametrize("fields", [STEP_RECORD, TRIAL_FIELDS], ids=["steps", "trials"])
def test_the_record_lists_each_field_once_with_a_type_a_unit_a_measurer_and_a_meaning(fields):
    names = [f.name for f in fields]
    assert len(names) == len(set(names))
    for f in fields:
        assert f.type in TYPES and f.measured_by in MEASURERS, f
        assert f.unit.strip() and f.meaning.strip(), f


def test_the_reward_curves_are_one_step_field_per_reward_the_tasks_define():
    curves = [f.name for f in STEP_RECORD if f.name.startswith("rewards/")]
    assert curves == [f"rewards/{name}/mean" for name in RECORDED_REWARDS]


@pytest.mark.parametrize("schema,fields", [(STEP_SCHEMA, STEP_RECORD), (TRIAL_SCHEMA, TRIAL_FIELDS)])
def test_the_parquet_schema_is_the_records_fields_with_their_types_in_order(schema, fields):
    assert [(field.name, field.type) for field in schema] == [(f.name, ARROW[f.type]) for f in fields]


def test_the_sampler_measures_exactly_the_records_sampler_fields():
    one = Sample(t=1.0, rss_gib=1.0, hwm_gib=None, host_available_gib=8.0, device_used_gib=2.0, power_w=50.0)
    window = summarize_window([one], 0.5, 1.5)
    assert set(window) == set(SAMPLER_FIELDS) and window["samples"] == 1
    assert SAMPLER_FIELDS == ("device_used_gib", "device_peak_gib", "rss_gib", "rss_peak_gib",
                              "rank_device_peak_gib", "rank_rss_peak_gib",
                              "gpu_util_pct", "gen_util_pct", "train_util_pct", "gpu_util_source",
                              "power_w", "energy_j", "samples")  # fmt: skip


def test_mlflow_step_metrics_are_the_records_numeric_fields_named_as_trl_logs_them_or_step_slash():
    clocks = ("t_start", "t_end", "gen_t_start", "gen_t_end")
    numbers = [f.name for f in STEP_RECORD if f.type == "float64" and f.name not in clocks]
    assert list(STEP_METRICS) == numbers
    assert STEP_METRICS["reward_mean"] == "reward" and STEP_METRICS["tokens_per_s"] == "step/tokens_per_s"
    assert STEP_METRICS["rewards/accuracy/mean"] == "rewards/accuracy/mean"
    # the TRL-named curves keep their old names for one release
    assert set(STEP_ALIASES) == set(record.TRL_NAMES) | {
        name for name in numbers if name.startswith("rewards/")
    }
    assert STEP_ALIASES["completion_len_mean"] == "step/completion_len_mean"
    row = normalize_step("k", {"step": 2, "loss": 0.25, "tokens_per_s": 90, "completions": 4, "kl": None,
                               "grad_norm": float("nan"), "t_end": 1001.0})  # fmt: skip
    assert step_metrics(row) == {"loss": 0.25, "step/loss": 0.25, "step/tokens_per_s": 90.0}


def test_the_names_trl_logs_are_the_keys_of_trls_own_log():
    """Each TRL name is a key TRL 1.14's GRPOTrainer puts in its metrics or Trainer in its log."""
    import trl.trainer.grpo_trainer as grpo

    source = Path(grpo.__file__).read_text()
    logged_by_grpo = set(re.findall(r'_metrics\[mode\]\["([^"]+)"\]', source))
    logged_by_trainer = {
        "loss",
        "grad_norm",
        "learning_rate",
    }  # transformers.Trainer._maybe_log_save_evaluate
    assert set(record.TRL_NAMES.values()) - logged_by_trainer <= logged_by_grpo
    assert 'f"rewards/{reward_func_name}/mean"' in source  # a reward curve's name, as the record's


def test_the_peak_is_the_gpu_reading_else_torch_reserved_else_rss():
    row = {"peak_rss_gib": 3.0, "torch_reserved_gib": 2.0, "torch_peak_reserved_gib": 2.5}
    assert peak_memory(row) == (2.5, TORCH)
    assert peak_memory({**row, "device_peak_gib": 4.0, "peak_device_gib": 3.5}) == (4.0, GPU)
    assert peak_memory({"rss_gib": 1.0, "rss_peak_gib": float("nan"), "device_peak_gib": None}) == (1.0, RSS)
    assert peak_memory({}) == (None, None)


def test_finite_or_none_keeps_finite_numbers_and_nulls_the_rest():
    assert [finite_or_none(v) for v in (2, 2.5, "3", None, True, "x", math.inf, float("nan"))] == [
        2.0, 2.5, 3.0, None, None, None, None, None
    ]  # fmt: skip


def test_the_record_and_its_table_import_nothing_but_the_standard_library_and_each_other():
    table = Path(record.__file__).with_name("_record_fields.py")
    renamed = Path(record.__file__).with_name("_renamed.py")  # the names renamed since rows were written
    imported = set()
    for source in (Path(record.__file__), table, renamed):
        tree = ast.parse(source.read_text())
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for alias in node.names}  # fmt: skip
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "trainers._record_fields" in imported, "the record re-exports its table"
    outside = {
        name
        for name in imported - {"trainers._record_fields", "trainers._renamed"}
        if name.split(".")[0] not in sys.stdlib_module_names
    }
    assert outside == set()


def test_every_name_of_the_records_table_is_the_records_own():
    from trainers import _record_fields

    declared = {
        name
        for name in vars(_record_fields)
        if not name.startswith("_") and name.isupper() or name == "Field"
    }
    declared -= {"TYPE_CHECKING"}
    assert {
        name for name in declared if getattr(record, name, None) is not getattr(_record_fields, name)
    } == set()


# -- a trial's start-up: its time to its first step and the warm-up that step paid ----------------

# Shaped like the Unsloth trials on the H100 (bench/data/h100-2026-11-26): 43 s of imports and model load, a first step
# of 54 s that compiled each decoder block, then steps of about 2 s.
STARTED_AT = 1_000_000.0
UNSLOTH_H100_STEPS = [
    {"step": 1, "probe": False, "generated": True, "step_s": 54.0, "t_end": STARTED_AT + 97.0},
    {"step": 2, "probe": False, "generated": True, "step_s": 2.1, "t_end": STARTED_AT + 99.1},
    {"step": 3, "probe": False, "generated": True, "step_s": 1.9, "t_end": STARTED_AT + 101.0},
    {"step": 4, "probe": False, "generated": True, "step_s": 2.0, "t_end": STARTED_AT + 103.0},
]


def test_the_first_step_is_timed_from_the_trainers_start_and_its_warmup_is_what_it_took_over_the_later_steps():
    figures = record.startup_figures(list(reversed(UNSLOTH_H100_STEPS)), STARTED_AT)  # any order
    assert figures == {"time_to_first_step_s": pytest.approx(97.0), "warmup_s": pytest.approx(52.0)}


def test_one_step_has_a_time_to_it_but_no_warmup_and_no_step_or_start_has_neither():
    assert record.startup_figures(UNSLOTH_H100_STEPS[:1], STARTED_AT) == {
        "time_to_first_step_s": pytest.approx(97.0), "warmup_s": None}  # fmt: skip
    assert record.startup_figures([], STARTED_AT) == {"time_to_first_step_s": None, "warmup_s": None}
    assert record.startup_figures(UNSLOTH_H100_STEPS, None)["time_to_first_step_s"] is None  # never 0


def test_a_probe_first_step_is_weighed_against_the_later_probe_steps_only():
    probe = [{**UNSLOTH_H100_STEPS[0], "probe": True, "step_s": 60.0},
             {**UNSLOTH_H100_STEPS[1], "probe": True, "step_s": 8.0}, *UNSLOTH_H100_STEPS[2:]]  # fmt: skip
    assert record.startup_figures(probe, STARTED_AT)["warmup_s"] == pytest.approx(52.0)
    # the only probe step: no later step forced to full length to weigh it against
    assert record.startup_figures([probe[0], *UNSLOTH_H100_STEPS[2:]], STARTED_AT)["warmup_s"] is None


def test_the_trial_row_in_trials_parquet_carries_the_start_up_figures(tmp_path):
    from orchestrator.recording.sinks import TrialsTable, trial_row
    from orchestrator.words.outcome import TrialResult
    from trainers.trial import TrialSpec

    result = TrialResult(status="completed", status_detail="4 steps", started_at=STARTED_AT)
    table = TrialsTable(tmp_path / "trials.parquet")
    table.upsert(
        trial_row(TrialSpec(trial_key="k"), result, [normalize_step("k", r) for r in UNSLOTH_H100_STEPS])
    )
    table.upsert(trial_row(TrialSpec(trial_key="pruned"), None, [], status="pruned"))
    rows = {r["trial_key"]: r for r in TrialsTable(tmp_path / "trials.parquet").rows.values()}
    assert rows["k"]["time_to_first_step_s"] == pytest.approx(97.0)
    assert rows["k"]["warmup_s"] == pytest.approx(52.0)
    assert (rows["pruned"]["time_to_first_step_s"], rows["pruned"]["warmup_s"]) == (None, None)


def accuracy_steps(
    evals: dict[int, float], n: int = 30, step_s: float = 2.0, prompts: float = 64
) -> list[dict]:
    rows = [{"step": i + 1, "step_s": step_s} for i in range(n)]
    for step, share in evals.items():
        rows[step - 1] |= {"eval_pass_at_1": share, "eval_prompts": prompts}
    return rows


def test_wilson_interval_matches_its_textbook_values():
    low, high = record.wilson_interval(0.5, 100)
    assert (round(low, 4), round(high, 4)) == (0.4038, 0.5962)
    assert record.wilson_interval(0.0, 10)[0] == pytest.approx(0.0, abs=1e-12)
    assert record.wilson_interval(1.0, 10)[1] == pytest.approx(1.0)


def test_time_to_target_counts_training_seconds_to_the_first_evaluation_that_reaches_it():
    rows = accuracy_steps({10: 0.3, 20: 0.5, 30: 0.45})
    figures = record.accuracy_figures([*rows, rows[3]], target=0.5)  # a repeated step counts once
    assert figures == {
        "accuracy_target": 0.5,
        "steps_to_accuracy_target": 20,
        "seconds_to_accuracy_target": 40.0,
        "gpu_seconds_to_accuracy_target": None,  # on CPU
        "best_eval_pass_at_1": 0.5,
        "best_eval_pass_at_1_lo": pytest.approx(record.wilson_interval(0.5, 64)[0]),
        "best_eval_pass_at_1_hi": pytest.approx(record.wilson_interval(0.5, 64)[1]),
        "best_eval_step": 20,
    }
    assert record.accuracy_figures(rows, 0.5, gpus=2)["gpu_seconds_to_accuracy_target"] == 80.0


def test_a_target_never_reached_or_never_measured_is_null_never_zero():
    never = record.accuracy_figures(accuracy_steps({10: 0.3, 20: 0.3}), target=0.5)
    assert never["steps_to_accuracy_target"] is None and never["seconds_to_accuracy_target"] is None
    assert never["best_eval_pass_at_1"] == 0.3 and never["best_eval_step"] == 10  # the first of a tie
    unmeasured = record.accuracy_figures(accuracy_steps({}), target=0.5)
    assert {k: v for k, v in unmeasured.items() if k != "accuracy_target"} == dict.fromkeys(
        [k for k in unmeasured if k != "accuracy_target"]
    )
    no_prompts = record.accuracy_figures(accuracy_steps({10: 0.9}, prompts=0), target=0.5)
    assert no_prompts["best_eval_pass_at_1"] is None


def test_trial_row_writes_the_accuracy_figures_under_the_sweeps_target():
    from orchestrator.judging.verdict import VerdictSettings
    from orchestrator.recording.sinks import trial_row
    from orchestrator.words.outcome import COMPLETED, TrialResult
    from trainers.trial import TrialSpec

    spec = TrialSpec(trial_key="t", max_steps=30)
    rows = [normalize_step("t", r) for r in accuracy_steps({10: 0.3, 20: 0.5})]
    row = trial_row(
        spec, TrialResult(COMPLETED, "30 steps"), rows, verdict=VerdictSettings(accuracy_target=0.3)
    )
    assert row["accuracy_target"] == 0.3 and row["steps_to_accuracy_target"] == 10
    assert row["seconds_to_accuracy_target"] == 20.0 and row["gpu_seconds_to_accuracy_target"] is None
    assert set(TRIAL_SCHEMA.names) >= set(row)
