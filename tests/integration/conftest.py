"""Fixtures of the integration tests: a local Ray with fake GPUs (one per module)."""

import tempfile

import pytest


@pytest.fixture(scope="module")
def ray_fake_gpus():
    import ray

    from orchestrator.driver import quiet_ray_env

    quiet_ray_env()
    temp = tempfile.mkdtemp(prefix="rls-ray-", dir="/tmp")
    ray.init(
        num_cpus=2,
        num_gpus=2,
        _node_ip_address="127.0.0.1",
        _temp_dir=temp,
        include_dashboard=False,
        log_to_driver=False,
    )
    yield
    ray.shutdown()
