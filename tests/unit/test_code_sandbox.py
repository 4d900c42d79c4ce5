"""The code sandbox holds against hostile completions: each scores exactly 0, leaves no process and no
file behind, reaches no secret, no network, nothing outside its directory, and the process that scores
(a trainer, `rlsweep score`) carries on; the verdict cannot be forged from inside."""

import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tasks.bounded import SCORING
from tasks.code import Grader, _sandbox
from tasks.code._sandbox import Limits
from tests.helpers.code_sandbox import (
    LIMITS,
    SECRET,
    TESTS,
    TIMEOUT_S,
    assert_nothing_left,
    fenced,
    needs_cgroups,
    sandbox_processes,
    sandbox_tree,
)
from tools.inputs.hostile_code import BIG_WRITE, DAEMON, FORK_BOMB, GROWING_MEMORY_BOMB, LOOP, MEMORY_BOMB

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def grader(monkeypatch):
    monkeypatch.setenv("RLSWEEP_TEST_TOKEN", SECRET)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://user:{SECRET}@example.invalid")
    yield Grader(LIMITS, workers=1, reasoning_format=False)
    _sandbox.close_all()


@pytest.fixture
def unwatched(monkeypatch):
    """A grader whose harness does not end forbidden calls (watch_calls false): what the sandbox alone
    blocks, one layer under the call watch."""
    monkeypatch.setenv("RLSWEEP_TEST_TOKEN", SECRET)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://user:{SECRET}@example.invalid")
    yield Grader(Limits(timeout_s=TIMEOUT_S, watch_calls=False), workers=1, reasoning_format=False)
    _sandbox.close_all()


def test_a_correct_completion_scores_full_marks_and_a_wrong_one_zero(grader):
    SCORING.reset()
    right = grader.one(fenced("def double(x):\n    return x * 2"), TESTS)
    wrong = grader.one(fenced("def double(x):\n    return x + 2"), TESTS)
    assert (SCORING.calls, SCORING.timeouts) == (2, 0)
    assert right.rewards == {"format": 1.0, "tests": 1.0, "perfect": 1.0}
    assert right.why_zero == {}
    # x + 2 == x * 2 only at x = 2: every test fails
    assert wrong.rewards == {"format": 1.0, "tests": 0.0, "perfect": 0.0}
    assert wrong.why_zero["tests"] == "test failed: 3 of 3 (first: wrong value)"


def test_a_partly_right_completion_scores_the_fraction_of_tests_it_passes(grader):
    # x * x equals x * 2 at 0 and 2 only: of double(3), double(4), double(0) one passes
    scored = grader.one(fenced("def double(x):\n    return x * x"), TESTS)
    assert scored.rewards == {"format": 1.0, "tests": 1 / 3, "perfect": 0.0}


@needs_cgroups
def test_an_endless_loop_scores_zero_at_its_timeout(grader):
    """Its cost against the timeout is a benchmark (bench/cost/code.py), not a timed assertion here."""
    SCORING.reset()
    scored = grader.one(fenced(LOOP), TESTS)
    assert (SCORING.calls, SCORING.timeouts) == (1, 1)  # the step row's reward_timeouts counts it
    assert scored.rewards == {"format": 0.0, "tests": 0.0, "perfect": 0.0}  # a tidy hang pays nothing
    # the harness reports the timed-out tests, or when it cannot within 250 ms the run is killed whole
    assert scored.killed == "time limit"
    assert scored.why_zero["tests"] == "sandbox killed it: time limit"
    assert_nothing_left(scored)


@needs_cgroups
def test_a_fork_bomb_scores_zero_and_leaves_no_process(grader):
    scored = grader.one(fenced(FORK_BOMB), TESTS)
    assert scored.rewards["tests"] == 0.0
    assert scored.killed == "process limit (BlockingIOError)"
    assert_nothing_left(scored)


@needs_cgroups
@pytest.mark.parametrize("bomb", [MEMORY_BOMB, GROWING_MEMORY_BOMB], ids=["256-mib-blocks", "16-mib-steps"])
def test_a_memory_bomb_scores_zero(grader, bomb):
    # stopped by memory, not time: 128 MiB per test's process and time to spare on a loaded machine
    grader.limits = Limits(timeout_s=3.0, memory_mb=128)
    scored = grader.one(fenced(bomb), TESTS)
    assert scored.rewards == {"format": 0.0, "tests": 0.0, "perfect": 0.0}
    # the address space limit's MemoryError, or the memory cgroup's SIGKILL
    assert scored.killed in ("memory limit (MemoryError)", "memory limit or a kill (SIGKILL)")
    assert scored.why_zero["tests"] == f"sandbox killed it: {scored.killed}"
    assert_nothing_left(scored)


@needs_cgroups
def test_a_10_gb_write_scores_zero_and_leaves_no_file(grader):
    marker = f"big-{uuid.uuid4().hex}"
    code = BIG_WRITE.format(marker=marker)
    scored = grader.one(fenced(code), TESTS)
    assert scored.rewards["tests"] == 0.0
    # it catches the OSError of a write past 8 MiB, but SIGXFSZ kills it first
    assert scored.killed == "file size limit (SIGXFSZ)"
    assert_nothing_left(scored, marker)


@needs_cgroups
@pytest.mark.parametrize("watched", [True, False], ids=["watched", "sandbox alone"])
def test_writing_or_deleting_outside_its_directory_changes_nothing(grader, unwatched, tmp_path, watched):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    tmp_path.chmod(0o777)
    victim.chmod(0o666)  # only the sandbox, not file permissions, stands in the way
    marker = f"planted-{uuid.uuid4().hex}"
    code = f"""
    import os, shutil
    for action in (
        lambda: os.remove({str(victim)!r}),
        lambda: open({str(victim)!r}, "w").write("overwritten"),
        lambda: open({str(tmp_path / marker)!r}, "w").write("planted"),
        lambda: open("/tmp/{marker}", "w").write("planted"),
        lambda: shutil.rmtree({str(Path.cwd())!r}),
    ):
        try:
            action()
        except OSError:
            pass
    """
    scored = (grader if watched else unwatched).one(fenced(code), TESTS)
    assert scored.rewards["tests"] == 0.0
    if watched:  # the first attempt ends the run: a forbidden call, scored as a kill
        assert scored.killed == f"forbidden call (delete outside its directory: {victim})"
    assert victim.read_text() == "keep me"
    assert not (tmp_path / marker).exists()
    assert Path.cwd().is_dir()
    assert_nothing_left(scored, marker)


@needs_cgroups
def test_environment_secrets_and_ssh_keys_reach_no_output(grader, unwatched, tmp_path):
    key = tmp_path / ".ssh" / "id_ed25519"
    key.parent.mkdir()
    key.write_text(SECRET)
    key.chmod(0o600)
    code = f"""
    import os, glob
    found = [repr(dict(os.environ))]
    for path in [{str(key)!r}, os.path.expanduser("~/.ssh/id_ed25519"), *glob.glob("/root/.ssh/*"), *glob.glob("/home/*/.ssh/*")]:
        try:
            found.append(open(path).read())
        except OSError as exc:
            found.append(type(exc).__name__)
    print(found)
    def double(x):
        return found
    """
    scored = grader.one(fenced(code), TESTS)
    assert scored.rewards["tests"] == 0.0
    # its first read outside its directory ends the run: the listing glob makes, before any open
    assert scored.killed == "forbidden call (read outside its directory: /root/.ssh/*)"
    assert unwatched.one(fenced(code), TESTS).rewards["tests"] == 0.0
    # what the sandbox alone lets it see, with no call watch to end the run at its first read
    run = _sandbox.run(textwrap.dedent(code), ["double(1)"], Limits(timeout_s=TIMEOUT_S, watch_calls=False))
    # the environment the completion saw: PATH, LANG, HOME (and what Python adds), no token
    assert SECRET not in run.output and SECRET not in repr(run.probes)
    seen = eval(run.probes[0]["value"])  # our own test's reply, a list of strings
    assert set(eval(seen[0])) <= {"PATH", "LANG", "HOME", "LC_CTYPE"}
    assert seen[1] in ("FileNotFoundError", "PermissionError")
    assert_nothing_left(scored)


@needs_cgroups
def test_a_socket_reaches_nothing(grader):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    code = f"""
    import socket
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=0.5).sendall(b"leak")
        reached = True
    except OSError:
        reached = False
    def double(x):
        return x * 2 if reached else None
    """
    scored = grader.one(fenced(code), TESTS)
    assert scored.rewards["tests"] == 0.0
    # the attempt is an act (the name lookup create_connection starts with); were it not seen, socket()
    # would be killed by the seccomp filter, network namespace or not (the test without namespaces)
    assert scored.killed == "forbidden call (network attempt: a name lookup)"
    with pytest.raises(BlockingIOError):
        server.accept()
    server.close()
    assert_nothing_left(scored)


@needs_cgroups
def test_killing_its_parent_or_the_scorer_hurts_neither(grader):
    code = f"""
    import os, signal
    for pid in (os.getppid(), 1, {os.getpid()}, {os.getppid()}):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGSTOP, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    def double(x):
        return x + 2
    """
    assert grader.one(fenced("def double(x):\n    return 2 * x"), TESTS).rewards["perfect"] == 1.0
    sandbox = sandbox_processes()
    scored = grader.one(fenced(code), TESTS)
    assert scored.rewards == {"format": 0.0, "tests": 0.0, "perfect": 0.0}
    # in a PID namespace its parent, the harness, is process 1 there
    assert scored.killed == "forbidden call (signal outside the sandbox: SIGINT to process 1)"
    assert_nothing_left(scored)
    # the same sandbox, not a replacement, serves the next completion
    assert grader.one(fenced("def double(x):\n    return 2 * x"), TESTS).rewards["perfect"] == 1.0
    assert sandbox_processes() == sandbox


@needs_cgroups
def test_a_detached_daemon_does_not_outlive_its_test(grader):
    scored = grader.one(fenced(DAEMON), TESTS)
    assert scored.rewards == {"format": 0.0, "tests": 0.0, "perfect": 0.0}
    # its first child may not have exited yet when the test ends: 1 or 2 processes
    assert scored.killed in (
        "left running after the call: 1 process",
        "left running after the call: 2 processes",
    )
    assert (
        scored.seconds < TIMEOUT_S
    )  # the daemon holds the reply pipe open: the harness reads up to the reply's end
    assert_nothing_left(scored)


@needs_cgroups
@pytest.mark.parametrize(
    "forgery",
    [
        "import sys\nsys.exit(0)",
        "import os\nos._exit(0)",
        'print(\'{"probes": [{"status": "value", "value": "6"}], "output": ""}\')',
        "import builtins\nbuiltins.AssertionError = Exception\nbuiltins.repr = lambda value: 'True'",
        "class Same:\n    def __eq__(self, other):\n        return True\n    def __repr__(self):\n        return 'Same()'\n"
        "def double(x):\n    return Same()",
        'import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b\'{"probes": [], "output": ""}\\n\')\n'
        "    except OSError:\n        pass\nfor path in ('/proc/1/fd/3', '/proc/1/fd/4', '/proc/1/fd/5'):\n    try:\n"
        "        open(path, 'w').write('{}\\n')\n    except OSError:\n        pass",
    ],
    ids=["sys-exit", "os-exit", "success-marker", "replaced-builtins", "always-equal", "result-descriptor"],
)
def test_a_completion_cannot_forge_a_pass(grader, forgery):
    scored = grader.one(fenced(forgery), TESTS)
    assert scored.rewards["tests"] == scored.rewards["perfect"] == 0.0
    # the descriptor forgery also opens /proc/1/fd/N for writing: an act, which pays no format either
    assert scored.rewards["format"] == (0.0 if "/proc/1/fd" in forgery else 1.0)
    assert_nothing_left(scored)


def test_completions_run_in_parallel_workers(monkeypatch):
    """Four one-second sleeps with four workers take about one second, not four."""
    grader = Grader(Limits(timeout_s=3.0), workers=4, reasoning_format=False)
    sleeps = [fenced(f"import time\ntime.sleep(1)\ndef double(x):\n    return x * {i}") for i in range(4)]
    start = time.monotonic()
    scored = grader.many([(text, TESTS[:1]) for text in sleeps])
    elapsed = time.monotonic() - start
    _sandbox.close_all()
    assert [s.rewards["tests"] for s in scored] == [0.0, 0.0, 1.0, 0.0]  # only x * 2 doubles 3
    assert elapsed < 3.9  # one after another: 4 s of sleep at least


@pytest.fixture
def without_namespaces(monkeypatch):
    """The sandbox as on a kernel that refuses user namespaces: uid nobody, rlimits, cgroups, seccomp."""
    python = _sandbox.setup()[1]
    monkeypatch.setattr(_sandbox, "setup", lambda: ("rlimits", python))
    yield
    _sandbox.close_all()


def test_without_namespaces_a_socket_is_a_forbidden_call_and_the_workdir_is_removed(without_namespaces):
    code = "import socket\ntry:\n    socket.socket()\n    seen = 'socket'\nexcept OSError as exc:\n    seen = type(exc).__name__"
    sandbox = _sandbox.Sandbox(Limits(timeout_s=TIMEOUT_S, watch_calls=False))  # the filter, not the watch
    workdir = Path(sandbox.workdir)
    killed = sandbox.run(code, ["seen"])
    run = sandbox.run("import os", ["os.getuid()"])
    sandbox.close()
    assert killed.probes == [{"status": "killed", "detail": "SIGSYS"}]  # the seccomp filter, uncatchable
    assert run.probes == [{"status": "value", "value": "65534"}]
    assert not workdir.exists()


def test_without_namespaces_a_right_completion_passes_and_a_loop_times_out(without_namespaces):
    grader = Grader(LIMITS, workers=1, reasoning_format=False)
    assert grader.one(fenced("def double(x):\n    return x * 2"), TESTS).rewards["perfect"] == 1.0
    start = time.monotonic()
    assert grader.one(fenced(LOOP), TESTS).rewards["tests"] == 0.0
    assert time.monotonic() - start <= TIMEOUT_S + 3  # ended by its timeout, not left to run


def test_a_sandbox_that_cannot_start_scores_zero_with_its_reason_and_never_raises(monkeypatch):
    def refuse(limits):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(_sandbox, "Sandbox", refuse)
    scored = Grader(LIMITS, workers=1, reasoning_format=False).one(
        fenced("def double(x):\n    return x * 2"), TESTS
    )
    reason = "sandbox failed to start: [Errno 11] Resource temporarily unavailable"
    assert scored.rewards == {"format": 1.0, "tests": 0.0, "perfect": 0.0}
    assert scored.why_zero == {"tests": reason, "perfect": reason}


def test_without_cgroups_rlimit_nproc_stands_in_and_a_fork_bomb_still_leaves_nothing(monkeypatch):
    assert Limits(processes=32).rlimits(cgroup=False)["RLIMIT_NPROC"] == 256
    assert "RLIMIT_NPROC" not in Limits().rlimits(cgroup=True)
    monkeypatch.setattr(_sandbox, "cgroups_available", lambda: False)
    grader = Grader(LIMITS, workers=1, reasoning_format=False)
    scored = grader.one(fenced(FORK_BOMB), TESTS)
    # the bomb's processes are forks of the harness: the same command line, with this process as owner;
    # killed processes may take a moment to exit on a loaded machine
    deadline = time.monotonic() + 5
    while len(left := sandbox_tree()) not in (0, 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    _sandbox.close_all()
    assert scored.rewards["tests"] == 0.0
    # the sandbox's unshare and harness; none when the bomb made the run overrun and the sandbox was killed whole
    assert len(left) in (0, 2), [p.info["cmdline"] for p in left]


def test_when_the_scoring_process_is_killed_its_sandboxes_end(tmp_path):
    script = (
        "from tasks.code import _sandbox\n"
        "_sandbox.run('def f():\\n    return 1', ['f()'], _sandbox.Limits(timeout_s=1.0))\n"
        "sandbox = next(iter(_sandbox._open))\n"
        "print(' '.join(str(d) for d in (sandbox.cgroup.dirs if sandbox.cgroup else [])), flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    cgroups = owner.stdout.readline().split()
    tag = _sandbox.owner_tag(owner.pid)
    running = lambda: [p for p in psutil.process_iter(["cmdline"]) if tag in (p.info["cmdline"] or [])]  # noqa: E731
    assert len(running()) == 2
    owner.kill()  # no atexit: the harness sees its stdin close and ends, and with it its namespace
    owner.wait()
    deadline = time.monotonic() + 5
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running() == []
    for folder in cgroups:  # what a SIGKILLed owner leaves (docs/tasks.md): an empty cgroup folder
        assert Path(folder, "cgroup.procs").read_text() == ""
        Path(folder).rmdir()


def test_its_own_files_temporary_files_and_dev_null_are_not_forbidden(grader):
    code = """
    import os, tempfile
    with open("notes.txt", "w") as f:
        f.write("x")
    os.rename("notes.txt", "kept.txt")
    os.remove("kept.txt")
    with tempfile.NamedTemporaryFile("w") as f:
        f.write("y")
    with open(os.devnull, "w") as f:
        f.write("z")
    # what honest code does: Python's own modules, a thread and a process each waited for
    import collections, dataclasses, enum, threading, zoneinfo
    Point = collections.namedtuple("Point", "x y")
    worker = threading.Thread(target=sum, args=([1, 2],))
    worker.start()
    worker.join()
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    def double(x):
        return x * 2
    """
    scored = grader.one(fenced(code), TESTS)
    assert scored.killed is None
    assert scored.rewards["perfect"] == 1.0


def test_a_forbidden_call_is_told_from_an_allowed_one_by_its_path_and_mode():
    from tasks.code._harness import forbidden

    work, python = "/tmp/work", ("/usr/lib/python3/",)
    assert forbidden("open", ("out.txt", "w", 0), work, python) is None
    assert (
        forbidden("open", ("/etc/passwd", "r", 0), work, python) == "read outside its directory: /etc/passwd"
    )
    assert forbidden("open", ("/usr/lib/python3/os.py", "r", 0), work, python) is None  # Python's own
    assert forbidden("open", ("/dev/urandom", "rb", 0), work, python) is None
    assert forbidden("open", ("/etc/passwd", None, os.O_WRONLY), work, python) == (
        "write outside its directory: /etc/passwd"
    )
    assert forbidden("open", ("../escape", "a", 0), work, python) == "write outside its directory: ../escape"
    assert (
        forbidden("open", ("/root/.netrc", "r", 0), work, python)
        == "read outside its directory: /root/.netrc"
    )
    assert forbidden("open", ("/proc/1/environ", "rb", 0), work, python) == (
        "read outside its directory: /proc/1/environ"
    )
    assert forbidden("open", ("/home/u/.ssh/id_rsa", "r", 0), work, ("/home/u/",)) is None  # Python's own
    assert forbidden("open", (3, "w", 0), work, python) is None  # a descriptor: its open was checked
    assert forbidden("os.remove", ("victim", 5), work, python) == "delete outside its directory: victim"
    assert forbidden("os.remove", ("victim", -1), work, python) is None  # CPython: -1 for no dir_fd
    assert forbidden("os.rename", ("a", "/etc/b", None, None), work, python) == (
        "rename outside its directory: /etc/b"
    )
    assert forbidden("shutil.rmtree", ("/tmp",), work, python) == "delete outside its directory: /tmp"
    assert forbidden("os.listdir", ("/",), work, python) == "read outside its directory: /"
    assert forbidden("os.listdir", (None,), work, python) is None  # its own directory
    assert forbidden("glob.glob", ("*.txt", False), work, python) is None
    assert forbidden("os.kill", (os.getppid(), 15), work, python, group=os.getpgrp()) is None  # its group
    assert forbidden("os.kill", (1, 9), work, python, group=os.getpgrp() + 1) == (
        "signal outside the sandbox: SIGKILL to process 1"
    )
    assert forbidden("os.kill", (-1, 9), work, python, group=5) == (
        "signal outside the sandbox: SIGKILL to every process it may signal"
    )
    assert forbidden("socket.__new__", (None, 2, 1, 0), work, python) == "network attempt: a socket"
    assert (
        forbidden("subprocess.Popen", (None, ["ls", "/"], None, None), work, python) == "program started: ls"
    )
    assert forbidden("ctypes.dlopen", ("libc.so.6",), work, python) == "native code loaded (ctypes)"
