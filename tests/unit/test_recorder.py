"""The recorder and its sinks without Ray: rows in, then the ledger, the steps files, the pruning gate,
the progress lines and MLflow (a real sqlite store) read back."""

from __future__ import annotations

import statistics

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

from orchestrator.judging.pruning import RUN, OomGate, Pruner
from orchestrator.judging.verdict import VerdictSettings, judge
from orchestrator.publishing.tracking import MlflowSink
from orchestrator.recording.recorder import PruningGate, Recorder, StepsFiles, TrialsFile
from orchestrator.recording.sinks import TrialsTable, steps_path
from orchestrator.views.progress import Progress
from orchestrator.words.outcome import COMPLETED, OOM, PRUNED, STOPPED, TrialResult
from trainers.trial import TrialSpec

GUARD_DETAIL = "guard: RSS 1.52 GiB passed budget 1.00 GiB (+0.00 GiB margin)"


def spec(key: str, k: int) -> TrialSpec:
    return TrialSpec(num_generations=k, batch_size=1, max_steps=3, sweep="rec", trial_key=key)


def step(n: int, rss: float, step_s: float) -> dict:
    return {"step": n, "probe": n == 1, "step_s": step_s, "tokens_per_s": 100.0 / step_s,
            "rss_gib": rss, "rss_peak_gib": rss + 0.1, "loss": 0.5 / n, "t_start": 1000.0 + n,
            "t_end": 1000.5 + n, "sampler_note": "kept in extra"}  # fmt: skip


def result(status: str, steps: list[dict], detail: str) -> TrialResult:
    return TrialResult(status=status, status_detail=detail, steps=steps, wall_s=9.0,
                       started={"versions": {"torch": "2"}}, started_at=1000.0, ended_at=1009.0)  # fmt: skip


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Three trials: `small` completes, `large` ends oom, `larger` is pruned by it, `cut` is stopped."""
    tmp_path = tmp_path_factory.mktemp("recorded")
    small, large, larger, cut = spec("small", 2), spec("large", 4), spec("larger", 8), spec("cut", 2)
    ledger = TrialsTable(tmp_path / "trials.parquet")
    gate = OomGate(Pruner(), tmp_path / "pruning.json", ledger)
    console = Console(record=True, width=200, force_terminal=False)
    progress = Progress(4, console)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow = MlflowSink(uri, "rec", tmp_path, "rec")
    mlflow.start_sweep("name: rec\n")
    sinks = [StepsFiles(tmp_path), PruningGate(gate), TrialsFile(ledger), progress, mlflow]
    recorder = Recorder([small, large, cut], sinks, VerdictSettings(min_steps=2))

    small_steps = [step(1, 1.0, 2.0), step(2, 1.2, 1.0), step(3, 1.1, 3.0)]
    recorder.start("small")
    for row in small_steps:
        recorder.step("small", row)
    recorder.step("small", small_steps[-1])  # Tune may repeat the last report
    recorder.end("small", result(COMPLETED, small_steps, "3 steps"))
    recorder.end("small", None, status="failed", detail="a late duplicate end is ignored")

    recorder.start("large")
    recorder.step("large", step(1, 1.5, 2.0))
    recorder.end("large", result(OOM, [step(1, 1.5, 2.0)], GUARD_DETAIL))
    verdict = gate(larger)
    recorder.skip(larger, verdict)

    recorder.start("cut")
    recorder.step("cut", step(1, 1.0, 2.0))
    recorder.stop_running("interrupted (Ctrl-C); a resumed sweep runs it again")
    return {"dir": tmp_path, "ledger": ledger, "gate": gate, "console": console, "uri": uri,
            "specs": (small, large, larger, cut), "small_steps": small_steps, "verdict": verdict}  # fmt: skip


def test_the_ledger_holds_one_row_per_trial_with_its_status_and_figures(recorded):
    rows = pd.read_parquet(recorded["dir"] / "trials.parquet").set_index("trial_key")
    assert rows.status.to_dict() == {"small": COMPLETED, "large": OOM, "larger": PRUNED, "cut": STOPPED}
    small = rows.loc["small"]
    steps = recorded["small_steps"]
    assert small.steps_completed == 3 and small.status_detail == "3 steps"
    assert small.peak_rss_gib == pytest.approx(max(r["rss_peak_gib"] for r in steps))
    # probe steps (step 1) are the worst case, not typical: the median leaves them out
    assert small.median_step_s == pytest.approx(statistics.median(r["step_s"] for r in steps[1:]))
    assert rows.loc["larger"].status_detail == "dominated by large (oom at RSS 1.52 GiB, budget 1.00 GiB)"
    assert rows.loc["cut"].steps_completed == 0


def test_steps_files_read_back_with_pandas_one_row_per_step(recorded):
    small, large, larger, _ = recorded["specs"]
    steps = pd.read_parquet(steps_path(recorded["dir"], small))
    assert steps.step.tolist() == [1, 2, 3] and steps.probe.tolist() == [True, False, False]
    assert steps.rss_gib.tolist() == [r["rss_gib"] for r in recorded["small_steps"]]
    assert steps.extra.str.contains("kept in extra").all()
    assert not steps.extra.str.contains('"event"|"time"').any(), "rows arrive clean"
    assert len(pd.read_parquet(steps_path(recorded["dir"], large))) == 1
    assert len(pd.read_parquet(steps_path(recorded["dir"], larger))) == 0


def test_the_gate_learns_the_oom_and_prunes_what_dominates_it(recorded):
    small, large, larger, _ = recorded["specs"]
    gate = recorded["gate"]
    assert [v.trial_key for v in Pruner.load(recorded["dir"] / "pruning.json").verdicts] == ["large"]
    assert recorded["verdict"].startswith("dominated by large")
    assert gate(spec("smaller", 3)) == RUN  # 3 < 4: not dominated
    again = OomGate.load(recorded["dir"] / "pruning.json", TrialsTable(recorded["dir"] / "trials.parquet"))
    assert again(larger).startswith("dominated by large")


def test_progress_prints_a_line_when_each_trial_starts_and_ends_without_repeating_counts(recorded):
    lines = recorded["console"].export_text().splitlines()
    assert [line for line in lines if line.startswith("start")] == [
        "start [1/4] small", "start [2/4] large", "start [3/4] larger", "start [4/4] cut"
    ]  # fmt: skip
    ends = [line for line in lines if line.startswith("[")]
    assert ends[0] == "[1/4] small: completed 3 steps"
    assert ends[1].startswith("[2/4] large: oom guard: RSS 1.52 GiB")
    assert ends[3].startswith("[4/4] cut: stopped interrupted")
    assert not any("completed=" in line for line in lines)


def test_mlflow_has_one_finished_or_failed_run_per_trial_with_its_steps(recorded):
    client = MlflowClient(recorded["uri"])
    experiment = client.get_experiment_by_name("rec").experiment_id
    runs = {r.data.tags.get("rlsweep.trial_key"): r for r in client.search_runs([experiment])}
    assert set(runs) == {None, "small", "large", "larger", "cut"}  # None: the sweep's parent run
    assert {k: r.data.tags["status"] for k, r in runs.items() if k} == {
        "small": COMPLETED, "large": OOM, "larger": PRUNED, "cut": STOPPED
    }  # fmt: skip
    assert runs["small"].info.status == "FINISHED" and runs["large"].info.status == "FAILED"
    # Trials that did not run to their end read as skipped, not failed.
    assert {runs[k].info.status for k in ("larger", "cut")} == {"KILLED"}
    assert runs["larger"].data.tags["rlsweep.skipped"] == "true"
    assert runs["larger"].data.tags["mlflow.note.content"].startswith("pruned: dominated by large")
    assert (
        runs["small"].info.run_name == "trl-grpo-k2-b1" and runs["larger"].info.run_name == "trl-grpo-k8-b1"
    )
    assert runs["small"].data.tags["version.torch"] == "2"
    assert runs["small"].data.params["BxK"] == "2" and runs["larger"].data.params["BxK"] == "8"
    assert "None" not in runs["small"].data.params.values()
    history = client.get_metric_history(runs["small"].info.run_id, "step/rss_gib")
    assert [(m.step, m.value) for m in history] == [
        (r["step"], r["rss_gib"]) for r in recorded["small_steps"]
    ]
    artifacts = [a.path for a in client.list_artifacts(runs["small"].info.run_id)]
    assert "small.parquet" in artifacts


def test_a_completed_trial_has_its_verdict_under_the_recorders_thresholds_in_the_ledger_and_mlflow(recorded):
    rows = pd.read_parquet(recorded["dir"] / "trials.parquet").set_index("trial_key")
    # Two steps after the probe: ok under min_steps 2 (the default, 5, would say too_short).
    expected = judge(recorded["small_steps"], VerdictSettings(min_steps=2), max_steps=3)
    assert (rows.loc["small", "training_verdict"], expected.verdict) == ("ok", "ok")
    assert rows.loc["small", "training_verdict_detail"] == expected.detail
    assert judge(recorded["small_steps"]).verdict == "too_short"
    assert rows.drop("small")["training_verdict"].isna().all()  # only completed trials are judged
    client = MlflowClient(recorded["uri"])
    experiment = client.get_experiment_by_name("rec").experiment_id
    runs = {r.data.tags.get("rlsweep.trial_key"): r for r in client.search_runs([experiment])}
    assert runs["small"].data.tags["training_verdict"] == "ok"
    assert runs["small"].data.tags["training_verdict_detail"] == expected.detail
    assert "training_verdict" not in runs["large"].data.tags


def test_a_step_row_is_normalised_once_and_every_sink_reads_that_same_row(tmp_path, monkeypatch):
    from orchestrator.recording import recorder as recorder_module
    from orchestrator.recording import sinks as sinks_module

    calls = []
    real = sinks_module.normalize_step

    def spy(trial_key, row):
        calls.append(row["step"])
        return real(trial_key, row)

    monkeypatch.setattr(recorder_module, "normalize_step", spy)
    monkeypatch.setattr(sinks_module, "normalize_step", spy)

    seen: dict[str, list] = {"step": [], "end": []}

    class Capture:
        def on_start(self, spec):
            pass

        def on_step(self, spec, row):
            seen["step"].append(row)

        def on_end(self, spec, row, steps):
            seen["end"] = steps

    trial = spec("once", 2)
    mlflow = MlflowSink(f"sqlite:///{tmp_path / 'mlflow.db'}", "once", tmp_path, "once")
    mlflow.start_sweep("name: once\n")
    sinks = [StepsFiles(tmp_path), TrialsFile(TrialsTable(tmp_path / "trials.parquet")),
             Progress(1, Console(record=True, force_terminal=False)), mlflow, Capture()]  # fmt: skip
    recorder = Recorder([trial], sinks)
    rows = [step(1, 1.0, 2.0), step(2, 1.2, 1.0), step(3, 1.1, 3.0)]
    recorder.start("once")
    for row in [*rows, rows[-1]]:  # Tune may repeat its last report
        recorder.step("once", row)
    recorder.end("once", result(COMPLETED, [], "3 steps"))

    assert calls == [1, 2, 3]
    assert all(a is b for a, b in zip(seen["step"], seen["end"], strict=True))
    written = pd.read_parquet(steps_path(tmp_path, trial)).to_dict("records")
    assert [r["rss_peak_gib"] for r in written] == [r["rss_peak_gib"] for r in seen["end"]]
    assert [r["rss_peak_gib"] for r in written] == [r["rss_peak_gib"] for r in rows]


def test_rlsweep_trials_folder_holds_what_a_sweeps_writer_writes(tmp_path):
    import json

    from orchestrator.recording.recorder import TrialFolder

    folder = tmp_path / "trial"
    folder.mkdir()
    table = TrialsTable(tmp_path / "trials.parquet")
    trial = spec("alone", 2)
    recorder = Recorder([trial], [StepsFiles(tmp_path), TrialsFile(table), TrialFolder(folder)])
    rows = [step(1, 1.0, 2.0), step(2, 1.2, 1.0)]
    recorder.start("alone")
    for row in rows:
        recorder.step("alone", row)
    recorder.end("alone", result(COMPLETED, [], "2 steps"))

    assert pd.read_parquet(folder / "steps.parquet").equals(pd.read_parquet(steps_path(tmp_path, trial)))
    outcome = json.loads((folder / "trial.json").read_text())["outcome"]
    swept = table.rows["alone"]
    assert (outcome["status"], outcome["steps_completed"], outcome["peak_rss_gib"]) == (
        swept["status"], swept["steps_completed"], swept["peak_rss_gib"]) == (COMPLETED, 2, max(r["rss_peak_gib"] for r in rows))  # fmt: skip
    metrics = pd.read_csv(folder / "metrics.csv")
    assert metrics.step_time_sec.tolist() == [2.0, 1.0]


def test_a_trial_row_has_every_column_null_where_nothing_was_measured():
    """A trial that did not complete has no training verdict: its row still has the column, null, so every
    sink (the trial folder's trial.json among them) reads one shape."""
    from orchestrator.recording.sinks import TRIAL_COLUMNS, trial_row
    from trainers.trial import TrialSpec

    row = trial_row(TrialSpec(trial_key="k", sweep="s"), None, [], status="unavailable", detail="no unsloth")
    assert set(row) == set(TRIAL_COLUMNS)
    assert (row["training_verdict"], row["training_verdict_detail"], row["median_tokens_per_s"]) == (
        None,
        None,
        None,
    )


def test_a_steps_utilisation_source_counts_and_rank_peaks_survive_into_steps_parquet(tmp_path):
    """The sampler's text and count figures (which NVML the utilisation came from, the samples, each
    rank's peak) are kept by their type like the numbers; on the H100 the source was lost, so every
    trial's gpu_util_source read null beside a measured utilisation."""
    import json

    import pyarrow.parquet as pq

    from orchestrator.recording.sinks import TRIAL_COLUMNS, normalize_step, steps_table, trial_row
    from orchestrator.running.telemetry import Sample, summarize_window

    samples = [Sample(t=1000.0 + i, rss_gib=11.9, hwm_gib=None, host_available_gib=100.0, device_used_gib=11.5,
                      gpu_util_pct=31.5, power_w=206.8) for i in range(6)]  # fmt: skip
    event = {"step": 1, "probe": True, "t_start": 1000.0, "t_end": 1005.0, "gen_t_start": 1000.0,
             "gen_t_end": 1003.5, "completions": 16, "min_new_tokens": None}  # fmt: skip
    row = event | summarize_window(samples, 1000.0, 1005.0, (1000.0, 1003.5))
    row["rank_device_peak_gib"] = json.dumps([10.5, 12.25])
    normalized = normalize_step("k", row)
    path = tmp_path / "steps.parquet"
    pq.write_table(steps_table([normalized]), path)
    back = pq.read_table(path).to_pylist()[0]
    assert back["gpu_util_source"] == "device"
    assert back["samples"] == 6 and back["completions"] == 16 and back["min_new_tokens"] is None
    assert json.loads(back["rank_device_peak_gib"]) == [10.5, 12.25]
    trial = trial_row(TrialSpec(trial_key="k", sweep="s"), result(COMPLETED, [row], "1 steps"), [normalized])
    assert set(trial) == set(TRIAL_COLUMNS) and trial["gpu_util_source"] == "device"
