"""A trial's MLflow run is the same whether it was logged live or later by `rlsweep sync-mlflow` from the
Parquet files (real sqlite stores)."""

from mlflow.tracking import MlflowClient

from orchestrator.cli import main
from orchestrator.publishing.tracking import MlflowSink
from orchestrator.recording.recorder import Recorder, StepsFiles, TrialsFile
from orchestrator.recording.sinks import TrialsTable
from orchestrator.spec.load import parse_sweep, resolved_yaml
from orchestrator.spec.plan import expand
from orchestrator.words.outcome import COMPLETED, TrialResult


def trainer_step(n: int) -> dict:
    """A step row as the supervisor hands it on: the trainer's keys, a few outside the steps schema."""
    return {"step": n, "probe": n == 1, "generated": True, "step_s": 1.5 + n, "tokens_per_s": 90.0 + n,
            "rss_gib": 1.0, "rss_peak_gib": 1.2, "loss": 0.1 * n, "reward_mean": 0.5, "gen_s": 0.7,
            "rewards/accuracy/mean": 0.25, "completions": 4, "min_new_tokens": 8, "samples": 10 + n,
            "alloc_ooms": None, "t_start": 1000.0 + 2 * n, "t_end": 1001.0 + 2 * n}  # fmt: skip


def trial_metrics(uri: str, key: str) -> dict[str, list[tuple[int, float]]]:
    client = MlflowClient(uri)
    (experiment,) = [e for e in client.search_experiments() if e.name == "parity"]
    (run,) = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`rlsweep.trial_key` = '{key}'"
    )
    return {
        name: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, name))
        for name in run.data.metrics
    }


def test_a_synced_run_carries_the_same_metrics_as_one_logged_live(tmp_path):
    sweep = parse_sweep({"name": "parity", "fixed": {"max_steps": 3}})
    (spec,) = expand(sweep)
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.yaml").write_text(resolved_yaml(sweep))
    live_uri = f"sqlite:///{tmp_path / 'live.db'}"
    live = MlflowSink(live_uri, "parity", out, "parity")
    live.start_sweep(resolved_yaml(sweep))
    recorder = Recorder([spec], [StepsFiles(out), TrialsFile(TrialsTable(out / "trials.parquet")), live])
    steps = [trainer_step(n) for n in (1, 2, 3)]
    recorder.start(spec.trial_key)
    for row in steps:
        recorder.step(spec.trial_key, row)
    recorder.end(
        spec.trial_key, TrialResult(status=COMPLETED, status_detail="3 steps", steps=steps, wall_s=9.0)
    )

    synced_uri = f"sqlite:///{tmp_path / 'synced.db'}"
    assert main(["sync-mlflow", str(out), "--tracking-uri", synced_uri]) == 0

    logged_live, synced = trial_metrics(live_uri, spec.trial_key), trial_metrics(synced_uri, spec.trial_key)
    # A curve for each field of the record the trainer measured; its other keys (completions, samples)
    # are no metric, and the wall-clock bounds stamp the points instead.
    curves = {f"step/{name}" for name in ("step_s", "tokens_per_s", "rss_gib", "rss_peak_gib", "loss",
                                          "reward_mean", "gen_s", "rewards/accuracy/mean")}  # fmt: skip
    assert {name for name in logged_live if name.startswith("step/")} == curves
    assert synced == logged_live
    assert synced["step/tokens_per_s"] == [(1, 91.0), (2, 92.0), (3, 93.0)]
    # The trial's figures, one value each: the median step time after the probe step (3.5 and 4.5 s), its wall time.
    assert synced["median_step_s"] == [(0, 4.0)] and synced["wall_s"] == [(0, 9.0)]
