"""Measurements a team already has, from real services on 127.0.0.1 (each stopped by the PID started here):
a real `tiny` trial, run on this CPU under a 4 GiB budget, logged live to a real `mlflow server`, answers
`rlsweep fits --trials mlflow+http://...` with its run id, card and date; exported with `rlsweep export`
(with paths, this host's and user's names, an environment value and tokens planted in its outputs,
none of which reaches the file) and put on a real S3 server (moto), it answers `--trials s3://...` the
same; a hostile file on S3 is refused."""

import getpass
import json
import os
import re
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator.publishing.tracking import MlflowSink
from orchestrator.recording.recorder import Recorder, StepsFiles, TrialsFile
from orchestrator.recording.sinks import TrialsTable
from orchestrator.running.solve import run_recorded
from orchestrator.spec.load import parse_sweep, resolved_yaml
from orchestrator.spec.plan import plan
from orchestrator.words.settings import GuardSettings
from tests.helpers.cli import run_cli
from tests.helpers.services import free_port, http_ok, start, stop, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # a real trial and two servers: over a minute

BIN = Path(sys.executable).parent
SECRET = "S3cretValue-" + "5be1c0de77aa"
TOKEN = "hf_" + "ZyXwVuTsRqPoNmLkJiHgFeDc98"
BUDGET = 4


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """An S3 server (moto) and an MLflow tracking server on 127.0.0.1."""
    tmp_path = tmp_path_factory.mktemp("services")
    s3_port, mlflow_port = free_port(), free_port()
    monkeypatch = pytest.MonkeyPatch()
    for key, value in {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3_port}", "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
        "RLSWEEP_PLANTED_SECRET": SECRET,  # the trainer child inherits it, as it would a real secret
    }.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    procs = []
    try:
        procs.append(start([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(s3_port)], env,
                           tmp_path / "s3.log"))  # fmt: skip
        procs.append(
            start(
                [
                    str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(mlflow_port),
                    "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path}/mlflow.db",
                    "--artifacts-destination", str(tmp_path / "mlartifacts"),
                ],
                env,
                tmp_path / "mlflow.log",
            )
        )  # fmt: skip
        wait_for("moto_server", lambda: http_ok(f"http://127.0.0.1:{s3_port}/moto-api/"), procs[0],
                 tmp_path / "s3.log")  # fmt: skip
        import boto3

        boto3.client("s3").create_bucket(Bucket="shared")
        wait_for("mlflow server", lambda: http_ok(f"http://127.0.0.1:{mlflow_port}/health"), procs[1],
                 tmp_path / "mlflow.log")  # fmt: skip
        yield {"mlflow": f"http://127.0.0.1:{mlflow_port}", "bucket": "shared"}
    finally:
        leftovers = [p for proc in reversed(procs) for p in stop(proc)]
        monkeypatch.undo()
        assert not leftovers, f"processes survived teardown: {leftovers}"


@pytest.fixture(scope="module")
def measured(services, tmp_path_factory):
    """A real `tiny` trial's output folder, its run logged live to the tracking server; then the planted
    secrets written into its outputs (its row's detail, effective settings and config)."""
    tmp_path = tmp_path_factory.mktemp("shared")
    private = tmp_path / "home" / getpass.getuser() / "private-project"
    sweep = parse_sweep({
        "name": "shared-tiny", "grid": {"num_generations": [2]},
        "fixed": {"model": "tiny", "batch_size": 1, "max_steps": 1, "max_prompt_length": 96,
                  "max_completion_length": 8, "quantization": "none", "num_threads": 1,
                  "model_cache_dir": str(private / "cache")},
        "memory": {"budget_gib": BUDGET}, "oom": {"probe_steps": 1},
        "tracking": {"mlflow_uri": services["mlflow"]},
    })  # fmt: skip
    (spec,) = plan(sweep).trials
    out = tmp_path / "out"
    out.mkdir()
    sink = MlflowSink(sweep.tracking_uri(out), sweep.experiment_name(), out, sweep.name)
    sink.start_sweep(resolved_yaml(sweep))
    ledger = TrialsTable(out / "trials.parquet")
    recorder = Recorder([spec], [StepsFiles(out), TrialsFile(ledger), sink])
    guard = GuardSettings(budget_gib=BUDGET, timeout_s=300, probe_steps=1)
    result = run_recorded(spec, recorder, out, guard, "test")
    assert result.status == "completed", result.status_detail
    assert sink.enabled, sink.error
    row = dict(ledger.rows[spec.trial_key])
    host = socket.gethostname()
    row["status_detail"] += (
        f" (ran on {host} as {getpass.getuser()} in {private}; HF_TOKEN={TOKEN}; key {SECRET}; "
        f"dashboard http://{host}:8265)"
    )
    effective = json.loads(row["effective_config"])
    row["effective_config"] = json.dumps({**effective, "output_dir": str(private / "out"), "token": TOKEN})
    ledger.upsert(row)
    planted = (str(private), "private-project", host, getpass.getuser(), TOKEN, SECRET)
    return {"out": out, "spec": spec, "row": row, "planted": planted, "experiment": sweep.experiment_name()}


def question(spec) -> list[str]:
    return ["fits", "--model", "tiny", "--budget-gib", str(BUDGET), "--measure", "RSS", "--k",
            str(spec.num_generations), "--b", str(spec.batch_size), "--length", str(spec.max_completion_length),
            "--set", "max_prompt_length=96", "--set", "quantization=none", "--set", "num_threads=1",
            "--stack", "trl", "--no-simulate"]  # fmt: skip


def _trl(text: str) -> str:
    """TRL's answer: its short line and the details under it (not where the row came from), one line."""
    lines = text.splitlines()
    (start,) = [i for i, x in enumerate(lines) if x.startswith("  TRL ")]
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        if not line.startswith(("    from ", "    measured with other versions")):
            block.append(line)
    return " ".join(" ".join(block).split())


def test_a_trial_logged_to_a_tracking_server_answers_from_it_naming_its_run_card_and_date(
    services, measured, capsys
):
    spec = measured["spec"]
    _, local = run_cli([*question(spec), "--trials", str(measured["out"])], capsys)
    assert f"measured ({spec.trial_key})" in _trl(local), local
    source = f"mlflow+{services['mlflow']}/{measured['experiment']}"
    code, served = run_cli([*question(spec), "--trials", source], capsys)
    assert code == 0, served
    assert _trl(served) == _trl(local)  # the same row, rebuilt from the run's params, metrics and tags
    from mlflow.tracking import MlflowClient

    client = MlflowClient(services["mlflow"])
    exp = client.get_experiment_by_name(measured["experiment"])
    (run,) = client.search_runs([exp.experiment_id], "tags.`rlsweep.trial_key` LIKE '%'")
    assert run.data.tags["rlsweep.card"] == "cpu" and run.data.tags["rlsweep.budget_gib"] == str(BUDGET)
    ended = measured["row"]["ended_at"]  # epoch ms in the row as the recorder holds it
    day = (ended if isinstance(ended, datetime) else datetime.fromtimestamp(ended / 1000, UTC)).strftime(
        "%Y-%m-%d"
    )
    assert re.search(rf"from {re.escape(source)}, run {run.info.run_id}: CPU under a 4 GiB budget, {day}, "
                     r"torch [\d.]+", served), served  # fmt: skip
    # an experiment the server does not have: refused, naming the ones it has
    code, missing = run_cli(
        [*question(spec), "--trials", f"mlflow+{services['mlflow']}/no-such-sweep"], capsys
    )
    assert code == 2 and "no experiment 'no-such-sweep'" in missing and measured["experiment"] in missing
    # RLSWEEP_TRIALS, set once, stands in for --trials
    os.environ["RLSWEEP_TRIALS"] = source
    try:
        code, again = run_cli(question(spec), capsys)
    finally:
        del os.environ["RLSWEEP_TRIALS"]
    assert code == 0 and _trl(again) == _trl(local), again


def test_an_exported_file_on_s3_answers_the_same_and_holds_none_of_the_planted_secrets(
    services, measured, capsys, tmp_path
):
    spec, target = measured["spec"], tmp_path / "team.parquet"
    code, text = run_cli(["export", str(measured["out"]), "-o", str(target)], capsys)
    assert code == 0, text
    table = pq.read_table(target)
    everything = json.dumps(table.to_pylist(), default=str) + str(table.schema.metadata)
    for planted in measured["planted"]:
        assert planted not in everything, planted
    (row,) = table.to_pylist()
    assert row["peak_rss_gib"] == measured["row"]["peak_rss_gib"] and row["status"] == "completed"

    import pyarrow.fs as pafs

    s3, _ = pafs.FileSystem.from_uri(f"s3://{services['bucket']}")
    with s3.open_output_stream(f"{services['bucket']}/pool/team-a.parquet") as f:
        f.write(target.read_bytes())
    _, local = run_cli([*question(spec), "--trials", str(measured["out"])], capsys)
    code, from_s3 = run_cli([*question(spec), "--trials", f"s3://{services['bucket']}/pool"], capsys)
    assert code == 0, from_s3
    assert _trl(from_s3) == _trl(local)
    assert f"from s3://{services['bucket']}/pool/team-a.parquet: CPU under a 4 GiB budget" in from_s3

    # a hostile file beside it: refused, naming it, and nothing answered
    hostile = table.append_column("payload", pa.array(["__import__('os').system('id')"]))
    with s3.open_output_stream(f"{services['bucket']}/pool/zz-hostile.parquet") as f:
        pq.write_table(hostile, f)
    code, refused = run_cli([*question(spec), "--trials", f"s3://{services['bucket']}/pool"], capsys)
    assert code == 2 and f"s3://{services['bucket']}/pool/zz-hostile.parquet" in refused, refused
    assert "column 'payload' is not a trial field" in refused and "GiB  measured" not in refused
