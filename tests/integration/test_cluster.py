"""A real Ray cluster on loopback (`ray start --head`, fake GPUs), a real MLflow server, a real S3 server (moto):
`rlsweep submit` runs a small sweep as a Ray job, outputs go to s3://, runs to the server. The commands are
the ones docs/cluster.md: Running on a Ray cluster gives; every service binds 127.0.0.1 and is stopped by the PID started here."""

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from orchestrator.words.storage import PROJECT_ROOT, output_location
from tests.helpers.services import free_port, http_answers, http_ok, start, stop, wait_for

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
RLSWEEP_SUBMIT = [sys.executable, "-m", "orchestrator.cli", "submit"]  # = `rlsweep submit`, PATH-independent


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """S3 (moto), MLflow server and a Ray head with 2 CPUs and 2 fake GPUs, all on 127.0.0.1."""
    # AF_UNIX socket paths (Ray's temp dir + ~64 chars of session/sockets) must stay under 107 chars.
    tmp_path = tmp_path_factory.mktemp("cluster")
    ray_tmp = Path(tempfile.mkdtemp(prefix="rls-", dir="/tmp"))
    token = tmp_path / "ray_auth_token"
    token.write_text(secrets.token_hex(32))
    s3_port, mlflow_port, gcs_port, dash_port = (free_port() for _ in range(4))
    s3 = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3_port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    ray_auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    monkeypatch = pytest.MonkeyPatch()
    for key, value in {**s3, **ray_auth}.items():
        monkeypatch.setenv(key, value)
    base = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}  # an activated venv
    procs: list[subprocess.Popen] = []
    try:
        procs.append(
            start(
                [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(s3_port)], base, tmp_path / "s3.log"
            )
        )
        mlflow_env = {
            **base,
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "MLFLOW_DISABLE_TELEMETRY": "true",
        }
        procs.append(
            start(
                [
                    str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(mlflow_port),
                    "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path}/mlflow.db",
                    "--artifacts-destination", str(tmp_path / "mlartifacts"),
                ],
                mlflow_env,
                tmp_path / "mlflow.log",
            )
        )  # fmt: skip
        ray_env = {
            **base,
            **ray_auth,
            "RAY_USAGE_STATS_ENABLED": "0",
            # Without it Ray replaces --node-ip-address 127.0.0.1 by the machine's address (Linux).
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            # On SIGTERM `ray start --block` drains its node for up to 30 s first (for Serve replicas):
            # nothing here to drain, and the module's teardown waited the whole 30 s.
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        }
        # --block keeps `ray start` in the foreground: its PID (and process group) is the head's handle.
        procs.append(
            start(
                [
                    str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
                    "--port", str(gcs_port), "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash_port),
                    "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
                    "--metrics-export-port", str(free_port()), "--ray-client-server-port", str(free_port()),
                    "--num-cpus", "2", "--num-gpus", "2", "--temp-dir", str(ray_tmp), "--disable-usage-stats",
                ],
                ray_env,
                tmp_path / "ray.log",
            )
        )  # fmt: skip
        wait_for(
            "moto_server",
            lambda: http_ok(f"http://127.0.0.1:{s3_port}/moto-api/"),
            procs[0],
            tmp_path / "s3.log",
        )
        import boto3

        boto3.client("s3").create_bucket(Bucket="sweeps")
        wait_for(
            "mlflow server",
            lambda: http_ok(f"http://127.0.0.1:{mlflow_port}/health"),
            procs[1],
            tmp_path / "mlflow.log",
        )
        wait_for(
            "ray head",
            lambda: http_answers(f"http://127.0.0.1:{dash_port}/api/version"),
            procs[2],
            tmp_path / "ray.log",
        )
        yield {
            "address": f"http://127.0.0.1:{dash_port}",
            "gcs": f"127.0.0.1:{gcs_port}",
            "mlflow": f"http://127.0.0.1:{mlflow_port}",
            "bucket": "sweeps",
        }
    finally:
        leftovers = [p for proc in reversed(procs) for p in stop(proc)]
        shutil.rmtree(ray_tmp, ignore_errors=True)
        monkeypatch.undo()
        assert not leftovers, f"processes survived teardown: {leftovers}"


@pytest.mark.heavy
def test_submit_runs_sweep_on_cluster_to_s3_and_mlflow_server(services):
    output = f"s3://{services['bucket']}/cluster-test"
    args = [
        str(PROJECT_ROOT / "sweeps" / "cpu-smoke.yaml"), "--address", services["address"],
        "--output-dir", output, "--tracking-uri", services["mlflow"],
        "--set", "grid.stack=[trl]", "--set", "grid.num_generations=[2]",
        "--set", "max_steps=2", "--set", "max_completion_length=8", "--set", "quantization=none",
        "--set", "timeout_s=300",
    ]  # fmt: skip
    # A fresh process, as a user runs it: Ray reads RAY_AUTH_MODE / RAY_AUTH_TOKEN_PATH when imported.
    done = subprocess.run(
        [*RLSWEEP_SUBMIT, *args], capture_output=True, text=True, timeout=400, cwd=PROJECT_ROOT
    )
    job_id = done.stdout.strip().splitlines()[0]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert job_id.startswith("rlsweep-cpu-smoke-")
    status = subprocess.run(
        [*RLSWEEP_SUBMIT, "--status", job_id, "--address", services["address"]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0 and "SUCCEEDED" in status.stderr, status.stderr

    # trials.parquet and the steps dataset on S3, complete; the two trials on the two (fake) GPUs.
    out = output_location(output)
    trials = pq.read_table((out / "trials.parquet").path, filesystem=out.fs).to_pandas()
    assert sorted(trials["mode"]) == ["grpo", "gspo"]
    assert (trials.status == "completed").all(), trials.status_detail.tolist()
    assert (trials.steps_completed == 2).all()
    assert set(trials.cuda_visible_devices) == {"0", "1"}
    steps = pq.read_table(f"{out.path}/steps", filesystem=out.fs).to_pandas()
    assert sorted(steps.trial_key.unique()) == sorted(trials.trial_key)
    assert len(steps) == 4
    assert (out / "ray").exists()  # Tune's storage_path went to S3 too

    # The MLflow server holds one finished parent run and one finished run per trial.
    from mlflow.tracking import MlflowClient

    client = MlflowClient(services["mlflow"])
    experiment = client.get_experiment_by_name("cpu-smoke")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("rlsweep.role") == "sweep"]
    children = [r for r in runs if "rlsweep.trial_key" in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(r.data.tags["rlsweep.trial_key"] for r in children) == sorted(trials.trial_key)
    assert all(r.info.status == "FINISHED" and "step/step_s" in r.data.metrics for r in children)


NICENESS_ON_THE_CLUSTER = """
import os, subprocess, sys, ray
from orchestrator.running.ray_env import init_ray
init_ray(sys.argv[1])
@ray.remote(num_cpus=1)
def niceness():
    child = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], capture_output=True)
    return os.nice(0), int(child.stdout)
print(*ray.get(niceness.remote(), timeout=120))
"""


def test_a_driver_on_the_cluster_runs_its_workers_and_their_children_at_nice_0_not_rays_15(services):
    # The head's raylet runs at this process's priority; Ray would start the job's workers 15 below it.
    # A driver on the head's machine, as the job's own is: it connects on loopback only with the flag.
    done = subprocess.run(
        [sys.executable, "-c", NICENESS_ON_THE_CLUSTER, services["gcs"]],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=PROJECT_ROOT,
        env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [str(os.nice(0))] * 2


def test_ctrl_c_detaches_and_the_job_goes_on_until_stopped(services):
    """Ctrl-C while following leaves the job running; --status says so; --stop ends it; exit codes follow."""
    address = ["--address", services["address"]]
    sweep = str(PROJECT_ROOT / "sweeps" / "cpu-smoke.yaml")
    follow = subprocess.Popen(
        [*RLSWEEP_SUBMIT, sweep, *address, "--output-dir", f"s3://{services['bucket']}/detach"]
        + ["--set", "tracking.enabled=false", "--set", "grid.stack=[trl]"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=PROJECT_ROOT,
    )
    job_id = follow.stdout.readline().strip()  # printed once the job is accepted
    assert job_id.startswith("rlsweep-cpu-smoke-"), follow.stderr.read()
    follow.send_signal(signal.SIGINT)
    _, err = follow.communicate(timeout=60)
    assert follow.returncode == 130 and "detached" in err and f"--stop {job_id}" in err, err

    status = subprocess.run([*RLSWEEP_SUBMIT, "--status", job_id, *address], capture_output=True, text=True)
    assert status.returncode == 0 and ("RUNNING" in status.stderr or "PENDING" in status.stderr), (
        status.stderr
    )
    stop = subprocess.run([*RLSWEEP_SUBMIT, "--stop", job_id, *address], capture_output=True, text=True)
    assert stop.returncode == 0, stop.stderr
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = subprocess.run(
            [*RLSWEEP_SUBMIT, "--status", job_id, *address], capture_output=True, text=True
        )
        if "STOPPED" in status.stderr:
            break
        time.sleep(1)
    assert status.returncode == 3 and "STOPPED" in status.stderr, status.stderr
