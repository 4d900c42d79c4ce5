"""Fixtures of the integration tests: a local Ray with fake GPUs (one per module); fork servers kept from
one test to the next."""

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


TEST_NAME = "PYTEST_CURRENT_TEST"


@pytest.fixture(scope="session", autouse=True)
def fork_servers_outlive_a_test():
    """One fork server per stack serves every test of this process, as one serves a whole sweep
    (orchestrator/running/launcher.py). pytest names the running test and its phase in
    PYTEST_CURRENT_TEST, a trial's environment copies it, and the launcher keys its servers by that
    environment: every test, and each phase of one, would start its own server and pay its imports
    again (10-25 s on 2 cores). The server is keyed and started without that name; each forked trainer
    still gets the trial's whole environment, the name included."""
    from orchestrator.running import launcher

    real = launcher.server_for

    def server_for(profile, env):
        return real(profile, {k: v for k, v in env.items() if k != TEST_NAME})

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(launcher, "server_for", server_for)
        yield
