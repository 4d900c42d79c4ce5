"""Running model-written code: every test of every completion in its own process, never in the trainer.

A sandbox is the harness (tasks/code/_harness.py and its audit, _audit.py; trusted, stdlib only) under, from
the outside in:
- a pids and memory cgroup, where one can be created (cgroup v1 or v2): a fork bomb stops at
  `processes`, a memory bomb at `memory_mb`, counted over the whole tree;
- `setpriv` to uid/gid 65534 (nobody) when rlsweep runs as root: file permissions then protect the
  host (as root they do not), and /root (with ~/.ssh) is unreadable;
- `unshare` (util-linux) of the user, PID, network and mount namespaces: no network but a down
  loopback; the harness is the PID namespace's init, so it can kill every other process of the
  namespace after each test (daemons that setsid or double-fork included), and when it dies, or its
  parent is killed (--kill-child), the kernel kills them all; a tmpfs over /tmp (where each run gets
  a fresh working directory, `work_mb` in all), /dev/shm, /root and /home; / remounted read-only;
- setpriv again inside: no capabilities, no_new_privs;
- per test, in the forked child: rlimits on CPU seconds, address space, file size (SIGXFSZ restored, so
  a write past it kills), open files (and processes where no pids cgroup could be made); a seccomp
  filter under which socket() kills (SIGSYS), the only network isolation without namespaces.
The environment holds PATH, LANG and HOME only. Each worker thread keeps one sandbox up between runs
(a run costs forks, not a new interpreter); a run that overruns its timeout by the harness's report
grace (250 ms) has its sandbox killed whole, and the next run gets a fresh one. The verdict comes only
from a pipe only the harness holds (see the harness's docstring). Where the kernel refuses user
namespaces, sandboxes run with rlimits, the cgroup and uid nobody only, in a temporary directory, one
sandbox per run: setup() says which mode holds; docs/tasks.md, "Code task sandbox", lists what each covers.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

# The harness's source, handed to the interpreter with -c: inside the namespaces /tmp, /root and /home are
# fresh tmpfs mounts and without them the harness runs as uid nobody, so a checkout under any of those
# (a clone in /tmp, a home directory) would not be readable there.
# The audit's text first (what a completion may not do), then the harness's: one source, one namespace.
HARNESS = "\n".join(Path(__file__).with_name(name).read_text() for name in ("_audit.py", "_harness.py"))
NOBODY = 65534
# The harness reports at the deadline; the parent kills what is left this much later (with 50 ms, a harness
# that reported late on a loaded 2-core host was killed with the run: test_code_sandbox caught it).
GRACE_S = 0.25
RESULT_CAP = 1 << 20
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}
# Inside the namespaces, as their root: private tmpfs mounts, / read-only, then drop every capability.
_MOUNTS = (
    'mount -t tmpfs -o "size=$1,mode=1777" tmpfs /tmp || exit 96; shift; '
    "for d in /dev/shm /root /home; do [ -d $d ] && mount -t tmpfs -o size=64k,mode=755 tmpfs $d; done; "
    "mount -o remount,bind,ro / 2>/dev/null; cd /tmp && unset PWD OLDPWD && "
    'exec setpriv --bounding-set=-all --inh-caps=-all --no-new-privs "$@"'
)
_NAMESPACES = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--net", "--mount"]
_ENTER_CGROUPS = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 97; shift; n=$((n-1)); done; exec "$@"'
)


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 2.0  # wall clock for the whole run, every test
    memory_mb: int = 512  # address space per process, and the sandbox's memory cgroup
    file_mb: int = 8  # largest file a completion may write
    work_mb: int = 16  # the tmpfs working directory (namespaces mode)
    open_files: int = 64
    processes: int = 32  # the sandbox's pids cgroup; RLIMIT_NPROC where no cgroup can be made
    output_bytes: int = 4096  # the completion's stdout and stderr kept, together
    # An act (the harness's forbidden(): a read, write or delete outside its directory, a signal outside
    # the sandbox, a network attempt, a program; and a process or thread left running after the call) ends
    # the test and is reported; false leaves only the sandbox's own blocking (its tests)
    watch_calls: bool = True

    def rlimits(self, cgroup: bool) -> dict[str, int]:
        cpu = int(self.timeout_s) + 1
        limits = {
            "RLIMIT_CPU": cpu,
            "RLIMIT_AS": self.memory_mb << 20,
            "RLIMIT_FSIZE": self.file_mb << 20,
            "RLIMIT_NOFILE": self.open_files,
            "RLIMIT_CORE": 0,
        }
        if not cgroup:  # per uid, so only a backstop: every run shares uid nobody
            limits["RLIMIT_NPROC"] = self.processes * 8
        return limits


@dataclass
class Run:
    """What one run gives back: each probe's outcome (from the harness only), output, time, and why
    no outcome came when none did ("timeout": killed at the deadline; "killed": the harness died;
    "sandbox failed to start: ...")."""

    probes: list[dict] = field(default_factory=list)
    output: str = ""
    seconds: float = 0.0
    failure: str | None = None


def _can_run(command: list[str]) -> bool:
    try:
        done = subprocess.run(command, env=ENV, capture_output=True, timeout=10, cwd="/")
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == b"ok"


def _drop_user() -> list[str]:
    return (
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if os.geteuid() == 0 else []
    )


_CANDIDATES = (os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3")


@cache
def setup() -> tuple[str, str]:
    """(isolation, interpreter): isolation is "namespaces" where the sandbox user may create user, PID,
    network and mount namespaces (util-linux's unshare and setpriv installed), else "rlimits"; the
    interpreter is the first Python that runs there (this one may live under /root, which the
    namespaces hide)."""
    namespaces = [*_NAMESPACES, "--mount-proc", "/bin/sh", "-c", _MOUNTS, "sh", "1m"]
    tools = shutil.which("unshare") and shutil.which("setpriv")
    for isolation, prefix in (("namespaces", namespaces if tools else None), ("rlimits", [])):
        for candidate in _CANDIDATES if prefix is not None else ():
            command = [*_drop_user(), *prefix, candidate, "-I", "-S", "-c", "print('ok')"]
            if os.path.exists(candidate) and _can_run(command):
                return isolation, candidate
    raise RuntimeError(
        "code sandbox: no Python interpreter runs as uid nobody; install the distribution's python3 "
        "(apt-get install python3) or run rlsweep from a Python outside /root and /home; as root the "
        "sandbox also needs util-linux's setpriv (apt-get install util-linux)"
    )


# ------------------------------------------------------------------------------------------------
# cgroups
# ------------------------------------------------------------------------------------------------
def _own_cgroup_dirs() -> dict[str, Path]:
    """controller ('pids', 'memory') -> this process's cgroup folder for it (v1 first, else v2)."""
    mounts: dict[str, Path] = {}
    unified = None
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, target, kind, options = line.split()[:4]
        if kind == "cgroup":
            for controller in ("pids", "memory"):
                if controller in options.split(","):
                    mounts[controller] = Path(target)
        elif kind == "cgroup2":
            unified = Path(target)
    dirs: dict[str, Path] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            if controller in mounts:
                dirs[controller] = mounts[controller] / path.lstrip("/")
        if controllers == "" and unified is not None:
            for controller in ("pids", "memory"):
                dirs.setdefault(controller, unified / path.lstrip("/"))
    return dirs


_LIMIT_FILES = {"pids": ("pids.max",), "memory": ("memory.limit_in_bytes", "memory.max")}


class Cgroup:
    """One sandbox's pids and memory cgroups (each folder made under this process's own); OSError
    unless both controllers can be had."""

    def __init__(self, limits: Limits):
        self.dirs: list[Path] = []
        name = f"rlsweep-code-{uuid.uuid4().hex[:12]}"
        own = _own_cgroup_dirs()
        if set(own) != {"pids", "memory"}:
            raise OSError(
                f"no {' and '.join(sorted({'pids', 'memory'} - set(own)))} cgroup controller mounted"
            )
        try:
            for controller, parent in own.items():
                folder = parent / name
                if folder not in self.dirs:
                    folder.mkdir()
                    self.dirs.append(folder)
                value = limits.processes if controller == "pids" else limits.memory_mb << 20
                written = False
                for file in _LIMIT_FILES[controller]:
                    if (folder / file).exists():
                        (folder / file).write_text(str(value))
                        written = True
                if not written:
                    raise OSError(f"no {controller} limit file in {folder}")
        except OSError:
            self.remove()
            raise

    def procs(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def remove(self, wait_s: float = 2.0) -> None:
        end = time.monotonic() + wait_s
        for folder in self.dirs:
            while folder.exists():
                try:
                    pids = (folder / "cgroup.procs").read_text().split()
                    for pid in pids:
                        os.kill(int(pid), signal.SIGKILL)
                    if not pids:
                        folder.rmdir()
                        break
                except (OSError, ValueError):
                    pass
                if time.monotonic() > end:
                    break
                time.sleep(0.005)
        self.dirs = []


@cache
def cgroups_available() -> bool:
    try:
        Cgroup(Limits()).remove()
    except OSError:
        return False
    return True


# ------------------------------------------------------------------------------------------------
# sandboxes
# ------------------------------------------------------------------------------------------------
class Sandbox:
    """One harness, its namespaces and cgroup, serving runs one at a time. With namespaces it stays
    up between runs (every process of a run is killed and its files removed when the run ends);
    without them, or after a run it had to kill, it is closed and a fresh one serves the next run."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.proc: subprocess.Popen | None = None
        self.read_fd: int | None = None
        self.mode, python = setup()
        self.cgroup = Cgroup(limits) if cgroups_available() else None
        self.workdir = None
        command = [*_drop_user()]
        if self.mode == "namespaces":
            command += [*_NAMESPACES, "--mount-proc", "/bin/sh", "-c", _MOUNTS, "sh", f"{limits.work_mb}m"]
            cwd = "/"
        else:
            self.workdir = cwd = tempfile.mkdtemp(prefix="rlsweep-code-")
            if os.geteuid() == 0:
                os.chown(self.workdir, NOBODY, NOBODY)
        if self.cgroup is not None:
            procs = self.cgroup.procs()
            command = ["/bin/sh", "-c", _ENTER_CGROUPS, "sh", str(len(procs)), *procs, *command]
        self.read_fd, write_fd = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [*command, python, "-I", "-S", "-c", HARNESS, str(write_fd), owner_tag()],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(write_fd,),
                env=ENV,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError:
            self.close()
            raise
        finally:
            os.close(write_fd)
        self.pending = b""

    def run(self, code: str, probes: list[str]) -> Run:
        start = time.monotonic()
        deadline = start + self.limits.timeout_s
        job = {
            "code": code,
            "probes": probes,
            "deadline": deadline,
            "limits": self.limits.rlimits(self.cgroup is not None),
            "output_cap": self.limits.output_bytes,
            "refuse_sockets": self.mode != "namespaces",
            "watch_calls": self.limits.watch_calls,
        }
        result = Run()
        try:
            self.proc.stdin.write(json.dumps(job).encode() + b"\n")
            self.proc.stdin.flush()
            reply = self._line(deadline + GRACE_S)
        except OSError:  # the harness died
            reply = None
        if reply is None:
            result.failure = "timeout" if time.monotonic() >= deadline else "killed"
            self.close()
        else:
            message = json.loads(reply)  # written by the harness, never by the completion
            result.probes, result.output = message["probes"], message["output"][: self.limits.output_bytes]
        result.seconds = time.monotonic() - start
        return result

    def _line(self, until: float) -> bytes | None:
        """The harness's next reply line, or None when it closed its end or `until` passed."""
        while b"\n" not in self.pending:
            left = until - time.monotonic()
            if left <= 0 or len(self.pending) > RESULT_CAP:
                return None
            ready, _, _ = select.select([self.read_fd], [], [], left)
            if ready:
                chunk = os.read(self.read_fd, 65_536)
                if not chunk:
                    return None
                self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line

    @property
    def alive(self) -> bool:
        return self.read_fd is not None and self.proc.poll() is None

    def close(self) -> None:
        """Kill the harness's session (in a PID namespace that ends every process of it), remove the
        cgroup after killing what is left in it, and the working folder."""
        if self.proc is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc.stdin.close()
        if self.read_fd is not None:
            os.close(self.read_fd)
            self.read_fd = None
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def owner_tag(pid: int | None = None) -> str:
    """The last word of a sandbox's command lines: `ps` shows which process (a trainer) it serves."""
    return f"--owner={os.getpid() if pid is None else pid}"


_local = threading.local()
_open: set[Sandbox] = set()
_open_lock = threading.Lock()


def run(code: str, probes: list[str], limits: Limits) -> Run:
    """Run `code`, then evaluate each probe expression in its own process, in this thread's sandbox;
    each outcome comes from the harness only. A sandbox that cannot start (no cgroup, no process left
    to fork) fails the run with its reason, never the caller: a reward does not raise."""
    sandbox = getattr(_local, "sandbox", None)
    if sandbox is None or not sandbox.alive or sandbox.limits != limits:
        if sandbox is not None:
            _forget(sandbox)
            _local.sandbox = None
        try:
            sandbox = Sandbox(limits)
        except OSError as exc:
            return Run(failure=f"sandbox failed to start: {exc}")
        _local.sandbox = sandbox
        with _open_lock:
            _open.add(sandbox)
    result = sandbox.run(code, probes)
    if sandbox.mode != "namespaces":
        _forget(sandbox)
        _local.sandbox = None
    if len(result.probes) != len(probes) and result.failure is None:
        result.probes, result.failure = [], "killed"
    return result


def _forget(sandbox: Sandbox) -> None:
    sandbox.close()
    with _open_lock:
        _open.discard(sandbox)


@atexit.register
def close_all() -> None:
    """Close every sandbox still up (at exit; tests call it to see that nothing is left)."""
    with _open_lock:
        sandboxes = list(_open)
        _open.clear()
    for sandbox in sandboxes:
        sandbox.close()
