"""Trials over several GPUs placed by Ray: on a local Ray with 4 fake GPUs, two 2-GPU trials
run side by side, each rank of each trial on a device of its own."""

import json
import shutil

import pyarrow.parquet as pq
import pytest

from orchestrator.running.driver import run_sweep
from orchestrator.spec.load import load_sweep
from tests.helpers.sweeps import tiny_sweep

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_four_fake_gpus():
    import ray

    from orchestrator.running.ray_env import init_ray

    temp = init_ray(num_cpus=2, num_gpus=4)
    yield
    ray.shutdown()
    if temp is not None:
        shutil.rmtree(temp.parent, ignore_errors=True)


@pytest.mark.heavy
def test_two_two_gpu_trials_run_side_by_side_on_distinct_devices(ray_four_fake_gpus, tmp_path):
    path = tiny_sweep(
        tmp_path / "s.yaml",
        "twogpus",
        {"mode": ["grpo", "gspo"]},
        fixed={"distributed": "ddp"},
        resources={"gpus_per_trial": 2, "cpus_per_trial": 1, "max_concurrent": 2},
        oom={"probe_steps": 0},
    )
    outcome = run_sweep(load_sweep(path), output_dir=tmp_path / "out")
    trials = pq.read_table(outcome.output_dir / "trials.parquet").to_pandas()
    assert list(trials.status) == ["completed", "completed"], trials.status_detail.tolist()
    assert list(trials.num_processes) == [2, 2] and list(trials.distributed) == ["ddp", "ddp"]
    devices = [set(d.split(",")) for d in trials.cuda_visible_devices]
    assert [len(d) for d in devices] == [2, 2], "each trial holds two GPUs, one per rank"
    first, second = trials.sort_values("started_at").to_dict("records")
    assert second["started_at"] < first["ended_at"], "the two trials ran at the same time"
    assert not devices[0] & devices[1], "no GPU shared between the trials"
    assert devices[0] | devices[1] == {"0", "1", "2", "3"}
    # Both ranks of each trial measured, the trial's peak their max.
    for row in trials.to_dict("records"):
        ranks = json.loads(row["rank_peak_rss_gib"])
        assert len(ranks) == 2 and row["peak_rss_gib"] == max(ranks)
