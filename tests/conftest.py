"""The suite's environment, the same under pytest-xdist's workers as in one process:
- answers from the memory model unless a test asks for a simulated step (each simulation costs seconds;
  the tests of simulated answers pass --simulate or simulate=True);
- no COLUMNS: xdist's workers are given COLUMNS=80, which the verbs' tables honour (orchestrator/cli/
  _common.py); the tests of widths set it themselves;
- one fork server per stack for every test of the process, as for a whole sweep (below)."""

import os

import pytest

os.environ.setdefault("RLSWEEP_SIMULATE", "0")
os.environ.pop("COLUMNS", None)


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
