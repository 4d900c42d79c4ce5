"""The driver refuses, before any trial or Ray start, to resume into results of another configuration;
it places trials only where a node can host them; its relay never holds the supervisor back on Tune."""

import json
import threading
import time

import pytest

from orchestrator.judging.pruning import HOLD, RUN
from orchestrator.recording.sinks import TrialsTable, trial_row
from orchestrator.running._tune import _Relay, payload_row, placement_verdict
from orchestrator.running.driver import _phase_name, run_sweep
from orchestrator.running.ray_env import _job_worker_env
from orchestrator.spec.load import parse_sweep
from orchestrator.spec.plan import expand
from orchestrator.spec.sweep import SweepError
from orchestrator.words.phases import TrialPhases
from trainers.events import STEP


def test_a_resume_whose_ledger_holds_another_configuration_under_a_key_is_refused(tmp_path):
    sweep = parse_sweep({"name": "r", "fixed": {"max_steps": 3}, "tracking": {"enabled": False}})
    (spec,) = expand(sweep)
    row = trial_row(spec, None, [], status="completed", detail="3 steps")
    stored = json.loads(row["config"]) | {"learning_rate": 1e-5}  # what an earlier, different run stored
    TrialsTable(tmp_path / "trials.parquet").upsert(row | {"config": json.dumps(stored, sort_keys=True)})
    with pytest.raises(SweepError) as info:
        run_sweep(sweep, output_dir=tmp_path)
    assert "learning_rate: 1e-05 vs 0.0002" in str(info.value)
    assert not (tmp_path / "sweep.yaml").exists() and not (tmp_path / "ray").exists()  # nothing written


NODES = [{"CPU": 2.0, "GPU": 0.0, "memory": 8e9}, {"CPU": 8.0, "GPU": 1.0}]


def test_a_request_some_node_covers_runs():
    assert placement_verdict({"CPU": 8, "GPU": 1}, NODES, waited_s=999, patience_s=60) == RUN


def test_a_request_no_single_node_covers_waits_then_ends_with_the_numbers():
    request = {"CPU": 4, "GPU": 2}  # the cluster has 10 CPUs and 1 GPU in all, no node 2 GPUs
    assert placement_verdict(request, NODES, waited_s=59, patience_s=60) == HOLD
    detail = placement_verdict(request, NODES, waited_s=61, patience_s=60)
    assert detail.startswith("no node can host the trial: it asks for CPU 4, GPU 2")
    assert "the largest node has CPU 8, GPU 1 (waited 61 s" in detail
    assert "gpus_per_trial" in detail


def test_on_a_local_ray_an_unhostable_trial_ends_at_once():
    assert placement_verdict({"CPU": 64}, [{"CPU": 2.0}], waited_s=0, patience_s=0).startswith("no node")


def test_the_relay_hands_rows_to_tune_in_order_without_holding_the_supervisor_back():
    # tune.report waits for Tune's controller; here each report waits until the test lets it go.
    go, reported = threading.Event(), []

    def slow_report(result):
        go.wait(10)
        reported.append(payload_row(result)["step"])

    relay = _Relay(report=slow_report)
    t0 = time.monotonic()
    for step in range(1, 6):
        relay(STEP, {"step": step})
    relay("started", {"step": 0})  # only step rows go to Tune
    assert time.monotonic() - t0 < 5 and reported == []  # the supervisor went on while Tune waited
    go.set()
    relay.close()
    assert reported == [1, 2, 3, 4, 5]


def test_what_stops_the_reports_stops_the_trial_and_reaches_the_trainable():
    def ended_by_tune(result):
        raise SystemExit(0)  # what tune.report does once Tune ends the trial

    relay = _Relay(report=ended_by_tune)
    relay(STEP, {"step": 1})
    assert relay.failed.wait(10)  # run_trial's stop event: it stops the child
    with pytest.raises(SystemExit):
        relay(STEP, {"step": 2})
    with pytest.raises(SystemExit):
        relay.close()


def test_progress_names_a_phase_only_where_trials_run_one_phase_of_two():
    assert _phase_name(TrialPhases(hold_at_step=2, then_speed=False)) == "memory"  # packed, then again
    assert _phase_name(TrialPhases()) == "speed"
    assert _phase_name(TrialPhases(hold_at_step=2, then_speed=True)) is None  # straight on, one process


def test_on_a_cluster_the_jobs_workers_start_at_nice_0_unless_the_submitted_job_already_says(monkeypatch):
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    assert _job_worker_env() == {"env_vars": {"RAY_worker_niceness": "0"}}
    job = {"runtime_env": {"working_dir": "/w", "env_vars": {"MLFLOW_TRACKING_URI": "http://h:5000"}}}
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps(job))
    assert _job_worker_env() == {"env_vars": {"RAY_worker_niceness": "0"}}  # Ray merges it into the job's
    job["runtime_env"]["env_vars"]["RAY_worker_niceness"] = "5"  # the submitter's own: Ray refuses two
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps(job))
    assert _job_worker_env() is None


def test_each_step_row_crosses_the_ray_boundary_once_and_the_recorder_keeps_the_streamed_rows(
    monkeypatch, tmp_path
):
    from orchestrator.judging.verdict import VerdictSettings
    from orchestrator.recording.recorder import Recorder
    from orchestrator.running import _tune as driver
    from orchestrator.words.outcome import COMPLETED, TrialResult
    from trainers.trial import TrialSpec

    rows = [{"step": n, "step_s": 1.0 + n, "t_start": 10.0 * n, "t_end": 10.0 * n + 1} for n in (1, 2, 3)]

    def fake_run_trial(spec, *, on_event, **kwargs):
        for row in rows:
            on_event(STEP, dict(row))
        return TrialResult(status=COMPLETED, status_detail="3 steps", steps=[dict(r) for r in rows])

    reports = []  # every payload the trainable hands Tune, i.e. every crossing of the Ray boundary
    monkeypatch.setattr(driver, "run_trial", fake_run_trial)
    monkeypatch.setattr(driver.ray, "get_gpu_ids", lambda: [])
    monkeypatch.setattr(
        driver.tune, "report", lambda payload: reports.append(json.loads(json.dumps(payload)))
    )
    spec = TrialSpec(max_steps=3, trial_key="once", sweep="s")
    config = {"spec_json": spec.to_json(), "trials_dir": str(tmp_path), "guard": None, "cpus": 1,
              "verdict": VerdictSettings(), "phases": TrialPhases()}  # fmt: skip
    driver.trainable(config)

    crossed = [payload_row(r)["step"] for r in reports if r["kind"] == STEP]
    crossed += [s["step"] for r in reports if r["kind"] == driver.FINAL for s in payload_row(r)["steps"]]
    assert crossed == [1, 2, 3]

    ended = []

    class Keep:
        def on_start(self, spec): ...
        def on_step(self, spec, row): ...
        def on_end(self, spec, row, steps):
            ended.append((row["steps_completed"], [s["step_s"] for s in steps]))

    callback = driver.RecorderCallback(Recorder([spec], [Keep()]))

    class Trial:
        config = {"trial_key": "once"}

    callback.on_trial_start(0, [], Trial())
    for payload in reports:
        callback.on_trial_result(0, [], Trial(), payload)
    assert ended == [(3, [2.0, 3.0, 4.0])]


def test_the_searcher_and_callback_hold_their_live_objects_and_pickle_without_them():
    """Tuner pickles its searcher and callbacks (tuner.pkl); a recorder holds locks and consoles, which
    do not pickle. The pickled copies are inert: they keep the plan, not the live objects."""
    import cloudpickle

    from orchestrator.running._tune import PlanSearcher, RecorderCallback
    from trainers.trial import TrialSpec

    live = threading.Lock()  # stands for the recorder's locks: not picklable
    spec = TrialSpec(max_steps=1, trial_key="k", sweep="s")
    searcher = PlanSearcher([spec], {"cpus": 1}, recorder=live, decide=lambda s: RUN, placement=lambda: RUN)
    assert searcher.suggest("t1") == {"trial_key": "k", "spec_json": spec.to_json(), "cpus": 1}
    copy = cloudpickle.loads(cloudpickle.dumps(searcher))
    assert (copy.config, hasattr(copy, "recorder"), hasattr(copy, "decide")) == ({"cpus": 1}, False, False)
    callback = cloudpickle.loads(cloudpickle.dumps(RecorderCallback(live)))
    assert not hasattr(callback, "recorder")


def test_a_trial_the_wall_clock_limit_ends_reaches_the_ledger_and_its_steps_file_as_a_timeout_with_its_steps(
    monkeypatch, tmp_path
):
    import sys
    from pathlib import Path

    import pandas as pd

    from orchestrator.judging.verdict import VerdictSettings
    from orchestrator.recording.recorder import Recorder, StepsFiles, TrialsFile
    from orchestrator.recording.sinks import steps_path
    from orchestrator.running import _tune as driver
    from orchestrator.words.settings import GuardSettings
    from trainers.trial import TrialSpec

    fake = [sys.executable, str(Path(__file__).parents[2] / "tools" / "inputs" / "fake_trainer.py")]
    reports = []
    monkeypatch.setattr(driver.ray, "get_gpu_ids", lambda: [])
    monkeypatch.setattr(
        driver.tune, "report", lambda payload: reports.append(json.loads(json.dumps(payload)))
    )
    spec = TrialSpec(max_steps=5, trial_key="slow", sweep="s", task_args={"fake": "stall", "at_step": 2})
    config = {"spec_json": spec.to_json(), "trials_dir": str(tmp_path / "trials"), "cpus": 1,
              "guard": GuardSettings(timeout_s=3), "verdict": VerdictSettings(), "phases": TrialPhases(),
              "trainer_cmd": fake}  # fmt: skip
    driver.trainable(config)  # the real supervisor and a trainer that hangs after its second step

    ledger = TrialsTable(tmp_path / "trials.parquet")
    callback = driver.RecorderCallback(Recorder([spec], [StepsFiles(tmp_path), TrialsFile(ledger)]))

    class Trial:
        config = {"trial_key": "slow"}

    callback.on_trial_start(0, [], Trial())
    for payload in reports:
        callback.on_trial_result(0, [], Trial(), payload)
    row = ledger.rows["slow"]
    assert row["status"] == "timeout" and row["steps_completed"] == 2
    assert "with 2 of 5 steps measured (kept)" in row["status_detail"]
    assert row["median_tokens_per_s"] > 0
    assert pd.read_parquet(steps_path(tmp_path, spec))["step"].tolist() == [1, 2]
