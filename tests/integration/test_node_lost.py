"""A worker node lost mid-sweep: a two-node Ray cluster on loopback (ray.cluster_utils), the
worker's raylet killed while a trial runs there; its trials run again on the head, and trials.parquet,
the steps and MLflow hold each trial once."""

import threading
import time

import psutil
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from orchestrator.running.driver import run_sweep
from orchestrator.running.ray_env import _single_node_ray
from orchestrator.spec.load import load_sweep
from tests.helpers.sweeps import tiny_sweep

pytestmark = pytest.mark.slow
LOOPBACK = {"node_ip_address": "127.0.0.1", "include_dashboard": False}


@pytest.fixture
def two_nodes():
    """A head with 1 CPU and a worker with 2, every service on 127.0.0.1; shut down after the test."""
    import ray
    from ray.cluster_utils import Cluster

    with _single_node_ray():
        cluster = Cluster()
        cluster.add_node(num_cpus=1, **LOOPBACK)
        worker = cluster.add_node(num_cpus=2, **LOOPBACK)
        ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster, worker
    finally:
        ray.shutdown()
        cluster.shutdown()


def on_node(pid: int, raylet_pid: int) -> bool:
    """Whether process `pid` descends from the raylet `raylet_pid` (runs on that node)."""
    try:
        return raylet_pid in {p.pid for p in psutil.Process(pid).parents()}
    except psutil.Error:
        return False


def kill_worker_when_a_trial_runs_there(cluster, worker, trials_dir, killed: dict) -> None:
    raylet = worker.all_processes["raylet"][0].process.pid
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for pid_file in trials_dir.glob("**/trainer.pid"):
            events = pid_file.parent / "events.jsonl"
            started = events.exists() and '"event": "started"' in events.read_text()
            if started and on_node(int(pid_file.read_text()), raylet):
                killed["trial"] = pid_file.parent.name
                cluster.remove_node(worker, allow_graceful=False)
                return
        time.sleep(0.2)


@pytest.mark.heavy
def test_a_worker_node_lost_mid_sweep_runs_its_trials_again_elsewhere_and_records_each_once(
    two_nodes, tmp_path
):
    cluster, worker = two_nodes
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    path = tiny_sweep(
        tmp_path / "s.yaml",
        "nodelost",
        {"seed": [1, 2, 3]},
        resources={"gpus_per_trial": 0, "cpus_per_trial": 1, "max_concurrent": 3},
        tracking={"mlflow_uri": uri},
    )
    out = tmp_path / "out"
    killed: dict = {}
    trials_dir = out
    killer = threading.Thread(
        target=kill_worker_when_a_trial_runs_there, args=(cluster, worker, trials_dir, killed)
    )
    killer.start()
    outcome = run_sweep(load_sweep(path), output_dir=out)
    killer.join()
    assert killed, "no trial ran on the worker node before the sweep ended"
    trials = pq.read_table(outcome.output_dir / "trials.parquet").to_pandas()
    assert sorted(trials.trial_key) == sorted(set(trials.trial_key)) and len(trials) == 3
    assert list(trials.status) == ["completed"] * 3, trials.status_detail.tolist()
    steps = pq.read_table(outcome.output_dir / "steps").to_pandas()
    assert sorted(steps.groupby("trial_key").step.apply(list).map(sorted).tolist()) == [[1, 2]] * 3
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("nodelost").experiment_id])
    children = [r.data.tags["rlsweep.trial_key"] for r in runs if "rlsweep.trial_key" in r.data.tags]
    assert sorted(children) == sorted(trials.trial_key), "one MLflow run per trial, the lost attempt's gone"
