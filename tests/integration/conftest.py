"""Fixtures of the integration tests: a local Ray with fake GPUs (one per module)."""

import shutil

import pytest


@pytest.fixture(scope="module")
def ray_fake_gpus():
    """The driver's own local Ray (loopback only, a private temp dir) with 2 CPUs and 2 fake GPUs;
    shut down and its temp dir removed after the module."""
    import ray

    from orchestrator.running.ray_env import init_ray

    temp = init_ray(num_cpus=2, num_gpus=2)
    yield
    ray.shutdown()
    if temp is not None:
        shutil.rmtree(temp.parent, ignore_errors=True)
