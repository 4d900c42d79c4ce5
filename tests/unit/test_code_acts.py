"""Acts the code sandbox sees and reports, beyond what it blocks (tests/unit/test_code_sandbox.py): each
scores 0 under every reward with its act named, and the ways around the watch a hostile completion would
try (a reply forged before the act, a process that hops to a new pid, a signal by pidfd, joining the
harness's process group) are caught too."""

import pytest

from tasks.code import Grader, _sandbox
from tests.helpers.hostile_code import DAEMON
from tests.unit.test_code_sandbox import (
    LIMITS,
    TESTS,
    assert_nothing_left,
    fenced,
    needs_cgroups,
    sandbox_tree,
)


@pytest.fixture
def grader():
    yield Grader(LIMITS, workers=1, reasoning_format=False)
    _sandbox.close_all()


@pytest.fixture
def without_namespaces(monkeypatch):
    """The sandbox as on a kernel that refuses user namespaces: uid nobody, rlimits, seccomp."""
    python = _sandbox.setup()[1]
    monkeypatch.setattr(_sandbox, "setup", lambda: ("rlimits", python))
    yield
    _sandbox.close_all()


def test_a_reply_forged_before_an_act_does_not_hide_it(grader):
    """The watch ends the process with its own exit status: a right answer written first to every
    descriptor, then a read outside its directory, is still the act."""
    code = """
    import os
    for fd in range(3, 64):
        try:
            os.write(fd, b"value 6\\n")
        except OSError:
            pass
    seen = open("/etc/hostname").read()
    def double(x):
        return x * 2
    """
    scored = grader.one(fenced(code), TESTS)
    assert scored.rewards == {"format": 0.0, "tests": 0.0, "perfect": 0.0}
    assert scored.killed == "forbidden call (read outside its directory: /etc/hostname)"
    assert_nothing_left(scored)


HOPPER = """
import os
if os.fork() == 0:
    os.setsid()
    while True:
        if os.fork() != 0:
            os._exit(0)
def double(x):
    return x * 2
"""
PIDFD_SIGNAL = """
import os, signal
try:
    signal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal.SIGTERM)
except OSError:
    pass
def double(x):
    return x * 2
"""


@needs_cgroups
def test_a_process_that_forks_and_exits_in_a_loop_is_caught_left_running_and_a_pidfd_signal_killed(grader):
    """Evasions of the act watch: a process that hops to a new pid faster than a scan of /proc reads it
    (everything of the namespace is stopped before it is counted), and a signal by pidfd, which no audit
    hook sees (the seccomp filter kills pidfd_send_signal)."""
    for round_ in range(5):
        scored = grader.one(fenced(f"{HOPPER}# {round_}"), TESTS)
        assert scored.killed.startswith("left running after the call: "), scored.killed
        assert scored.rewards == {"format": 0.0, "tests": 0.0, "perfect": 0.0}
        assert_nothing_left(scored)
    scored = grader.one(fenced(PIDFD_SIGNAL), TESTS)
    assert scored.killed == "forbidden call (SIGSYS)"
    assert scored.rewards == {"format": 0.0, "tests": 0.0, "perfect": 0.0}


def test_without_namespaces_acts_are_seen_and_nothing_outlives_its_test(without_namespaces, monkeypatch):
    """Uid nobody, rlimits, no cgroup: the harness (a child subreaper) still finds what a test left, a hopping
    process included, and kills it; joining the harness's process group to signal it is an act."""
    monkeypatch.setattr(_sandbox, "cgroups_available", lambda: False)
    rlimits = Grader(LIMITS, workers=1, reasoning_format=False)
    join = (
        "import os, signal\ntry:\n    os.setpgid(0, os.getpgid(os.getppid()))\nexcept OSError:\n    pass\n"
        "os.kill(0, signal.SIGCONT)\ndef double(x):\n    return x * 2"
    )
    assert rlimits.one(fenced(join), TESTS).killed.startswith(
        "forbidden call (signal outside the sandbox: SIGCONT"
    )
    for code in (HOPPER, DAEMON):
        assert rlimits.one(fenced(code), TESTS).killed.startswith("left running after the call: ")
    assert rlimits.one(fenced("def double(x):\n    return x * 2"), TESTS).rewards["perfect"] == 1.0
    _sandbox.close_all()
    assert sandbox_tree() == []


def test_reading_a_file_outside_its_directory_is_an_act(grader):
    scored = grader.one(fenced("words = open('/etc/passwd').read()\ndef double(x):\n    return x * 2"), TESTS)
    assert scored.killed == "forbidden call (read outside its directory: /etc/passwd)"
    assert scored.rewards == {"format": 0.0, "tests": 0.0, "perfect": 0.0}
