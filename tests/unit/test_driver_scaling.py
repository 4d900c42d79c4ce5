"""What keeps a driver's per-trial work flat over a long sweep, without Ray: counts and correctness only
(the timings are in bench/cost/driver_scaling.py and docs/benchmarks.md)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from mlflow.tracking import MlflowClient

from orchestrator.cli._plan import LIST_HEAD, LIST_TAIL, listed
from orchestrator.judging.memory import Forecast
from orchestrator.judging.memory import _model as memory_model
from orchestrator.judging.memory._model import LOO_MAX, loo_indices
from orchestrator.judging.pruning import HOLD, RUN, OomGate, Pruner
from orchestrator.publishing.tracking import COMPLETE_TAG, TRIAL_KEY_TAG, MlflowSink
from orchestrator.recording.recorder import PruningGate, Recorder, StepsFiles, TrialsFile
from orchestrator.recording.sinks import TRIAL_SCHEMA, TrialsTable
from orchestrator.running._tune import FINAL, final_payload, payload_row, step_payload
from orchestrator.running.driver import TUNE_BATCH, tune_batches
from orchestrator.spec.load import parse_sweep
from orchestrator.spec.plan import canonical_json, expand, plan, trial_key
from orchestrator.words.outcome import COMPLETED, STOPPED, TrialResult
from trainers.events import STEP
from trainers.trial import TrialSpec, check_value

N = 30


def spec(i: int) -> TrialSpec:
    return TrialSpec(seed=i, max_steps=2, sweep="scale", trial_key=f"t{i:03d}")


def steps(i: int) -> list[dict]:
    return [{"step": n, "step_s": 0.05, "tokens_per_s": 100.0 + i, "rss_gib": 0.5, "t_start": 1000.0 + n,
             "t_end": 1000.05 + n} for n in (1, 2)]  # fmt: skip


def ended(i: int) -> TrialResult:
    return TrialResult(status=COMPLETED, status_detail="2 steps", wall_s=0.3, started_at=1000.0,
                       ended_at=1000.3, started={"versions": {"fake": "1"}})  # fmt: skip


def run_trials(recorder: Recorder, numbers) -> None:
    for i in numbers:
        key = f"t{i:03d}"
        recorder.start(key)
        for row in steps(i):
            recorder.step(key, row)
        recorder.end(key, ended(i))


def test_a_sweep_of_n_trials_leaves_exactly_n_in_the_ledger_the_steps_files_and_mlflow(tmp_path):
    specs = [spec(i) for i in range(N)]
    ledger = TrialsTable(tmp_path / "trials.parquet")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow = MlflowSink(uri, "scale", tmp_path, "scale")
    mlflow.start_sweep("name: scale\n")
    gate = OomGate(Pruner(), tmp_path / "pruning.json", ledger)
    recorder = Recorder(specs, [StepsFiles(tmp_path), PruningGate(gate), TrialsFile(ledger), mlflow])
    run_trials(recorder, range(N))
    # Two trials run again in the same sweep (a lost node, a second phase): still one row, file, run each.
    run_trials(recorder, (3, 7))

    table = pq.read_table(tmp_path / "trials.parquet")
    assert table.num_rows == N and sorted(table.column("trial_key").to_pylist()) == [
        s.trial_key for s in specs
    ]
    assert len(list((tmp_path / "steps").rglob("*.parquet"))) == N
    assert pq.read_table(tmp_path / "steps").num_rows == 2 * N
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("scale").experiment_id
    runs = [r for r in client.search_runs([experiment], max_results=1000) if TRIAL_KEY_TAG in r.data.tags]
    assert sorted(r.data.tags[TRIAL_KEY_TAG] for r in runs) == [s.trial_key for s in specs]
    assert all(r.data.tags.get(COMPLETE_TAG) == "true" for r in runs)


def test_a_resumed_sweeps_mlflow_sink_replaces_the_runs_an_earlier_run_left(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    specs = [spec(i) for i in range(4)]
    first = MlflowSink(uri, "scale", tmp_path, "scale")
    first.start_sweep("name: scale\n")
    run_trials(Recorder(specs, [first]), range(4))
    first.on_start(specs[0])  # an attempt cut short: a run without the complete tag

    again = MlflowSink(uri, "scale", tmp_path, "scale")
    again.start_sweep("name: scale\n")
    assert sorted(again.trial_runs) == [s.trial_key for s in specs]  # read once, at the sweep's start
    run_trials(Recorder(specs, [again]), (0, 1))
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("scale").experiment_id
    keys = [r.data.tags.get(TRIAL_KEY_TAG) for r in client.search_runs([experiment])]
    assert sorted(k for k in keys if k) == [s.trial_key for s in specs]


def test_the_ledger_file_holds_every_row_after_appends_and_a_replaced_row(tmp_path):
    ledger = TrialsTable(tmp_path / "trials.parquet")
    specs = [spec(i) for i in range(N)]
    recorder = Recorder(specs, [TrialsFile(ledger)])
    run_trials(recorder, range(N))
    assert ledger.version == N
    recorder.start("t005")
    recorder.end("t005", None, status=STOPPED, detail="cut short")  # replaces the completed row
    rows = {r["trial_key"]: r for r in pq.read_table(tmp_path / "trials.parquet").to_pylist()}
    assert len(rows) == N and rows["t005"]["status"] == STOPPED and rows["t006"]["status"] == COMPLETED
    whole = pa.Table.from_pylist(list(ledger.rows.values()), schema=TRIAL_SCHEMA)  # as it was built before
    assert ledger.table().equals(whole)
    assert TrialsTable(tmp_path / "trials.parquet").rows.keys() == ledger.rows.keys()


def test_a_held_trial_makes_no_prediction_and_an_ended_trial_is_no_longer_in_flight(tmp_path):
    ledger = TrialsTable(tmp_path / "trials.parquet")
    forecast = Forecast(ledger.rows, version=lambda: ledger.version)
    gate = OomGate(Pruner(), tmp_path / "pruning.json", ledger, forecast=forecast)
    running, sibling = spec(1), spec(2)  # seeds only: each dominates the other
    assert gate(running) == RUN and set(forecast.made) == {running.trial_key}
    assert gate(sibling) == HOLD and set(forecast.made) == {running.trial_key}
    Recorder([running], [PruningGate(gate), TrialsFile(ledger)]).skip(running, "done")  # ends, pruned
    assert gate.in_flight() == [] and gate.launched == {}
    assert gate(sibling) == RUN and set(forecast.made) == {running.trial_key, sibling.trial_key}


def test_the_forecast_refits_once_per_ledger_change_not_once_per_question(tmp_path, monkeypatch):
    ledger = TrialsTable(tmp_path / "trials.parquet")
    fits = []
    fit = memory_model.MemoryModel.fit.__func__
    monkeypatch.setattr(
        memory_model.MemoryModel, "fit", classmethod(lambda cls, *a, **k: fits.append(1) or fit(cls, *a, **k))
    )
    forecast = Forecast(ledger.rows, version=lambda: ledger.version)
    for i in range(5):
        forecast.before(spec(i))
    assert len(fits) == 1
    run_trials(Recorder([spec(0)], [TrialsFile(ledger)]), [0])
    for i in range(5):
        forecast.before(spec(i))
    assert len(fits) == 2


def test_a_large_family_leaves_out_at_most_loo_max_trials_evenly_spread():
    assert loo_indices(LOO_MAX) == list(range(LOO_MAX))
    many = loo_indices(1000)
    assert len(many) == LOO_MAX and many[0] == 0 and many[-1] == 999
    gaps = {b - a for a, b in zip(many, many[1:], strict=False)}
    assert max(gaps) - min(gaps) <= 1


def test_what_crosses_the_ray_boundary_is_one_string_per_report_and_reads_back_the_same():
    row = {"step": 3, "step_s": 0.5, "rss_gib": 1.25, "probe": False, "extra": {"a": [1, 2]}}
    step = step_payload(row)
    assert step["kind"] == STEP and isinstance(step["row"], str) and payload_row(step) == row
    result = TrialResult(status=COMPLETED, status_detail="ok", wall_s=1.5, peak={"rss_peak_gib": 0.7})
    final = final_payload(result)
    assert final["kind"] == FINAL and isinstance(final["result"], str)
    assert TrialResult(**payload_row(final)) == TrialResult(**{**result.to_dict(), "steps": []})


def test_a_knob_check_remembered_for_one_value_never_answers_for_an_equal_value_of_another_type():
    assert check_value("batch_size", 1) is None
    assert check_value("batch_size", True) is not None  # True == 1, and hashes alike
    assert check_value("learning_rate", 1) is None  # an int where a float goes is fine
    assert check_value("batch_size", 1.0) is not None
    assert check_value("batch_size", 1) is None


def test_a_plan_of_thousands_still_checks_every_trial_and_names_how_many_break_a_rule():
    # A cross-field rule only some grid points break: full fine-tuning cannot train 4-bit weights.
    sweep = parse_sweep({
        "name": "big", "max_trials": 5000,
        "grid": {"seed": list(range(500)), "adapter": ["lora", "none"], "quantization": ["nf4", "none"]},
        "fixed": {"model": "tiny"},
    })  # fmt: skip
    result = plan(sweep)
    assert len(result.trials) == 2000
    [problem] = [p for p in result.problems if p.startswith("adapter: none")]
    assert "(in 500 of 2000 trials, e.g. " in problem  # adapter none with nf4, at every seed
    assert all(t.trial_key == trial_key(t) for t in expand(sweep)[:50])


def test_a_long_plan_lists_its_first_and_last_trials():
    assert listed(LIST_HEAD + LIST_TAIL) == list(range(LIST_HEAD + LIST_TAIL))
    shown = listed(100_000)
    assert shown[:LIST_HEAD] == list(range(LIST_HEAD)) and shown[LIST_HEAD:] == list(range(99_990, 100_000))


def test_a_long_sweep_runs_its_trials_through_tuners_of_at_most_tune_batch_each_in_plan_order():
    trials = list(range(2 * TUNE_BATCH + 3))
    batches = tune_batches(trials)
    assert [len(b) for b in batches] == [TUNE_BATCH, TUNE_BATCH, 3]
    assert [t for b in batches for t in b] == trials
    assert tune_batches([]) == [] and tune_batches([1]) == [[1]]


def test_a_trial_keys_hashed_text_is_json_dumps_sorted_whatever_was_encoded_before():
    assert (
        canonical_json({"b": 0.0, "a": {"y": [1, 2], "x": None}})
        == '{"a": {"x": null, "y": [1, 2]}, "b": 0.0}'
    )
    assert canonical_json({"b": -0.0, "c": True}) == json.dumps({"b": -0.0, "c": True}, sort_keys=True)
    assert canonical_json({"b": 1, "c": 1.0}) == json.dumps({"b": 1, "c": 1.0}, sort_keys=True)
    assert canonical_json({"b": 1.0, "c": 1}) == json.dumps({"b": 1.0, "c": 1}, sort_keys=True)
    assert check_value("learning_rate", 0.0) != check_value("learning_rate", -0.0)  # each names its value
