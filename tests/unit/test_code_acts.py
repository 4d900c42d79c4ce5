"""Acts the code sandbox sees and reports, beyond what it blocks (tests/unit/test_code_sandbox.py): each
scores 0 under every reward with its act named, and the ways around the watch a hostile completion would
try (a reply forged before the act, a process that hops to a new pid, a signal by pidfd, joining the
harness's process group) are caught too."""

import pytest

from tasks.code import Grader, _sandbox
from tests.helpers.code_sandbox import (
    LIMITS,
    TESTS,
    assert_nothing_left,
    fenced,
    needs_cgroups,
    sandbox_tree,
)
from tools.inputs.hostile_code import DAEMON


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


READ = "try:\n    open({!r}).read()\nexcept OSError:\n    pass\n"
TAMPERING = {  # what it replaces, then the read it hopes the watch no longer sees
    "os.path.realpath replaced": (
        "import os\nos.path.realpath = lambda p, **k: '.'\n",
        "/etc/hostname",
        "realpath",
    ),
    "os.lstat replaced to hide a link": (
        "import os\nos.symlink('/etc/hostname', 'h')\nreal = os.lstat\nos.lstat = lambda p, **k: real('.')\n",
        "h",
        "lstat",
    ),
    "a check of the harness replaced": (
        "import __main__\n__main__._readable = lambda *a: True\n",
        "/etc/hostname",
        "_readable",
    ),
    "a builtin replaced": ("import builtins\nbuiltins.any = lambda *a: False\n", "/etc/hostname", "any"),
}


@pytest.mark.parametrize("tampering", list(TAMPERING))
def test_replacing_what_the_watch_calls_makes_the_next_watched_call_an_act(grader, tampering):
    code, path, name = TAMPERING[tampering]
    code += READ.format(path)
    scored = grader.one(fenced(code + "def double(x):\n    return x * 2"), TESTS)
    assert scored.killed == f"forbidden call (the watch's own {name} replaced)"
    assert scored.rewards == {"format": 0.0, "tests": 0.0, "perfect": 0.0}


def test_a_path_that_is_not_exact_text_is_unchecked_and_honest_rebinding_is_not_an_act(grader):
    subclass = "class P(str):\n    pass\ntry:\n    open(P('mine.txt'), 'w')\nexcept OSError:\n    pass\n"
    scored = grader.one(fenced(subclass + "def double(x):\n    return x * 2"), TESTS)
    assert scored.killed == "forbidden call (unchecked open (TypeError))"
    # rebinding what is not the watch's (sys.stdout, to capture prints) is not an act
    honest = "import io, sys\nsys.stdout = io.StringIO()\nprint(1)\nsys.stdout = sys.__stdout__\nopen('mine.txt', 'w')\n"
    scored = grader.one(fenced(honest + "def double(x):\n    return x * 2"), TESTS)
    assert scored.killed is None and scored.rewards["perfect"] == 1.0
