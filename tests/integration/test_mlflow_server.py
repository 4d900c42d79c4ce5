"""A sweep's runs on a real `mlflow server` (127.0.0.1, stopped by the PID started here), read back through
its REST API as the UI reads them: the experiment opens on its runs, run names show stack, mode, K and B,
skipped trials are not failures. The trials' events come from a Recorder, without Ray."""

import json
import os
import sys
import urllib.request
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.publishing.finish import finish_sweep
from orchestrator.publishing.tracking import MlflowSink
from orchestrator.recording.recorder import Recorder, StepsFiles, TrialsFile
from orchestrator.recording.sinks import TrialsTable
from orchestrator.spec.load import parse_sweep, resolved_yaml
from orchestrator.spec.plan import plan
from orchestrator.words.outcome import COMPLETED, TrialResult
from tests.helpers.services import free_port, http_ok, start, stop, wait_for

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = start(
        [
            str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{tmp_path}/mlflow.db",
            "--artifacts-destination", str(tmp_path / "mlartifacts"),
        ],
        env,
        tmp_path / "mlflow.log",
    )  # fmt: skip
    try:
        wait_for(
            "mlflow server", lambda: http_ok(f"http://127.0.0.1:{port}/health"), proc, tmp_path / "mlflow.log"
        )
        yield f"http://127.0.0.1:{port}"
    finally:
        assert not stop(proc), "mlflow server survived its stop"


def rest(base: str, path: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"{base}/api/2.0/mlflow/{path}", data=data, method="POST" if data else "GET"
    )
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def step(n: int) -> dict:
    return {"step": n, "probe": False, "step_s": 1.0 + n, "tokens_per_s": 50.0, "rss_peak_gib": 0.5 + n / 10}


def test_the_experiment_opens_on_runs_named_by_stack_mode_k_and_b(mlflow_server, tmp_path):
    sweep = parse_sweep({"name": "served", "grid": {"num_generations": [2, 4], "mode": ["grpo", "gspo"]},
                         "fixed": {"max_steps": 2}, "tracking": {"mlflow_uri": mlflow_server}})  # fmt: skip
    trials = plan(sweep).trials
    out = tmp_path / "out"
    out.mkdir()
    sink = MlflowSink(sweep.tracking_uri(out), sweep.experiment_name(), out, sweep.name)
    sink.start_sweep(resolved_yaml(sweep))
    recorder = Recorder(trials, [StepsFiles(out), TrialsFile(TrialsTable(out / "trials.parquet")), sink])
    ran, pruned = trials[0], trials[-1]
    recorder.start(ran.trial_key)
    steps = [step(1), step(2)]
    for row in steps:
        recorder.step(ran.trial_key, row)
    versions = {"torch": "2.13.0", "trl": "1.14.0"}
    recorder.end(ran.trial_key, TrialResult(status=COMPLETED, status_detail="2 steps", steps=steps, wall_s=5.0,
                                            started={"versions": versions}))  # fmt: skip
    recorder.skip(pruned, "dominated by a trial that ran out of memory")
    console = Console(record=True, width=200, force_terminal=False)
    finish_sweep(out, console=console, mlflow=sink, counts={"completed": 1, "pruned": 1}, report=False)

    experiment = rest(mlflow_server, "experiments/get-by-name?experiment_name=served")["experiment"]
    tags = {t["key"]: t["value"] for t in experiment.get("tags", [])}
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    url = f"{mlflow_server}/#/experiments/{experiment['experiment_id']}/runs"
    assert f"MLflow runs: {url}" in console.export_text()

    runs = rest(mlflow_server, "runs/search", {"experiment_ids": [experiment["experiment_id"]]})["runs"]
    by_name = {r["info"]["run_name"]: r for r in runs}
    ran_name = f"trl-{ran.mode}-k{ran.num_generations}-b{ran.batch_size}-{ran.trial_key[-12:]}"
    pruned_name = f"trl-{pruned.mode}-k{pruned.num_generations}-b{pruned.batch_size}-{pruned.trial_key[-12:]}"
    assert set(by_name) == {"served", ran_name, pruned_name}
    done, skipped = by_name[ran_name], by_name[pruned_name]
    assert (done["info"]["status"], skipped["info"]["status"]) == ("FINISHED", "KILLED")
    params = {p["key"]: p["value"] for p in done["data"]["params"]}
    assert params["BxK"] == str(ran.batch_size * ran.num_generations) and "None" not in params.values()
    run_tags = {t["key"]: t["value"] for t in done["data"]["tags"]}
    assert {run_tags["version.torch"], run_tags["version.trl"]} == {"2.13.0", "1.14.0"}
    assert run_tags["rlsweep.trial_key"] == ran.trial_key
    assert {t["key"]: t["value"] for t in skipped["data"]["tags"]}["rlsweep.skipped"] == "true"
    metrics = {m["key"]: m["value"] for m in done["data"]["metrics"]}
    assert metrics["median_step_s"] == pytest.approx(2.5) and metrics["wall_s"] == 5.0
    assert metrics["step/rss_peak_gib"] == pytest.approx(0.7)  # the last step's value
    parent = {m["key"]: m["value"] for m in by_name["served"]["data"]["metrics"]}
    assert parent == {"trials/completed": 1.0, "trials/pruned": 1.0}
    parent_params = {p["key"]: p["value"] for p in by_name["served"]["data"]["params"]}
    assert json.loads(parent_params["grid.num_generations"]) == [2, 4]
    assert parent_params["fixed.max_steps"] == "2"
    with urllib.request.urlopen(mlflow_server, timeout=30) as page:  # the UI the URL points into
        assert page.status == 200
