"""The end of a sweep without Ray: the parent MLflow run closed with the counts, the report written and
put on MLflow (a real sqlite store) with the best figures, through one sink."""

import statistics

import pandas as pd
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

from orchestrator.publishing.finish import finish_sweep
from orchestrator.publishing.tracking import MlflowSink
from tests.helpers.synthetic_sweep import write_synthetic_sweep
from trainers.trial import TrialSpec


def test_a_sweeps_end_closes_its_run_and_puts_the_report_and_best_figures_on_mlflow(tmp_path):
    trials = write_synthetic_sweep(tmp_path, gpu=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sink = MlflowSink(uri, "fin", tmp_path, "fin")
    sink.start_sweep("name: fin\n")
    ran = trials[trials.steps_completed > 0].iloc[0].to_dict()
    spec = TrialSpec(trial_key=ran["trial_key"])
    sink.on_start(spec)
    sink.on_end(spec, ran, [])
    counts = trials.status.value_counts().to_dict()

    console = Console(record=True, width=200, force_terminal=False)
    paths = finish_sweep(tmp_path, console=console, mlflow=sink, counts=counts, interrupted=False)

    assert paths["report_html"] == tmp_path / "report.html"
    client = MlflowClient(uri)
    parent = client.get_run(sink.parent_id)
    assert parent.info.status == "FINISHED"
    counted = {k: v for k, v in parent.data.metrics.items() if k.startswith("trials/")}
    assert counted == {f"trials/{s}": n for s, n in counts.items()}
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert sorted(zip(summary.run_name, summary.status, strict=True)) == sorted(
        zip(trials.trial_key, trials.status, strict=True)
    )
    # best/median_tokens_per_s: the highest over completed trials of the median of their regular steps
    done = {
        r["trial_key"]
        for r in pq.read_table(tmp_path / "trials.parquet").to_pylist()
        if r["status"] == "completed"
    }
    steps = pq.read_table(tmp_path / "steps").to_pylist()
    medians = [
        statistics.median(s["tokens_per_s"] for s in steps if s["trial_key"] == key and not s["probe"])
        for key in done
    ]
    assert parent.data.metrics["best/median_tokens_per_s"] == pytest.approx(max(medians), rel=1e-12)
    artifacts = {a.path for a in client.list_artifacts(sink.parent_id)}
    assert {"summary.csv", "report.html", "report.md", "plots"} <= artifacts
    trial_run = client.search_runs(
        [sink.experiment_id], filter_string=f"tags.`rlsweep.trial_key` = '{ran['trial_key']}'"
    )[0]
    assert trial_run.data.metrics["peak_rss_gib"] == ran["peak_rss_gib"]
    assert trial_run.data.metrics["steps_completed"] == ran["steps_completed"]
    assert not any(name.startswith("summary/") for name in trial_run.data.metrics)


def test_report_without_counts_leaves_the_sweeps_run_open(tmp_path):
    write_synthetic_sweep(tmp_path, gpu=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sink = MlflowSink(uri, "fin", tmp_path, "fin")
    sink.start_sweep("name: fin\n")
    finish_sweep(tmp_path, console=Console(record=True, force_terminal=False), mlflow=sink)
    assert MlflowClient(uri).get_run(sink.parent_id).info.status == "RUNNING"


def test_a_sweeps_end_reads_its_parquet_once_for_the_report_and_mlflow(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    write_synthetic_sweep(tmp_path, gpu=False)
    sink = MlflowSink(f"sqlite:///{tmp_path / 'mlflow.db'}", "once", tmp_path, "once")
    sink.start_sweep("name: once\n")
    reads = []
    real = pq.read_table
    monkeypatch.setattr(
        pq, "read_table", lambda path, *a, **k: reads.append(str(path)) or real(path, *a, **k)
    )
    finish_sweep(tmp_path, console=Console(record=True, force_terminal=False), mlflow=sink, counts={})
    assert sum(path.endswith("trials.parquet") for path in reads) == 1
