"""The trusted side of the code sandbox (tasks/code/_sandbox.py starts it; stdlib only, nothing of the project).

Usage: python -I -S -c "$(cat _audit.py _harness.py)" RESULT_FD --owner=PID (the owner tag is for `ps` only). Reads one JSON job per line on stdin: {"code", "probes",
"deadline", "limits", "output_cap"}. Each probe is one expression to evaluate after the code is defined
(the half of a test that calls the completion; the expected value stays with the parent and never
reaches this process). Per job it makes a fresh working directory; per probe it forks a child that
closes the result descriptor and stdin, starts a process group, sets the rlimits, sends its output to
a capped file, runs the completion's code in a fresh namespace, evaluates the probe and writes
repr(value) to its own pipe (or, when the call watch saw an act, "forbidden WHAT", exiting ACT_EXIT).
This process reads at most a capped reply per probe, waits for the child to exit, counts the processes
the probe left running (an act), kills them (in a PID namespace: all but itself; else its descendants,
as a child subreaper), empties the working folders, and writes one JSON
line with every probe's outcome to RESULT_FD, the only channel the parent reads. The completion's
process cannot reach that descriptor: it is closed before the completion runs, this process is
non-dumpable and holds no capabilities (no /proc/1/fd, no ptrace), and as the init of a new PID
namespace it ignores the signals its children send.

What a completion may not do (forbidden(), the audit events WATCHED) is tasks/code/_audit.py's: the sandbox
runs its text, then this file's, as one -c source (tasks/code/_sandbox.py HARNESS), so the call watch's
snapshot of this module's names covers the audit's too.
"""

import _thread
import builtins
import contextlib
import ctypes
import genericpath
import json
import os
import resource
import select
import shutil
import signal
import stat
import struct
import sys
import tempfile
import time

if __name__ != "__main__":  # imported (tests); in the sandbox _audit.py's text came first in this source
    from tasks.code._audit import WATCHED, forbidden

REPLY_CAP = 65_536
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def _limit(limits: dict) -> None:
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))


# seccomp: (AUDIT_ARCH, __NR_socket) per machine; socket() then kills the process with SIGSYS, a forbidden
# call the parent reads as a kill (x32 syscalls fail with EPERM; another ABI kills too). Installed in every
# mode where it can be; required where there is no network namespace. pidfd_send_signal() (424 on both),
# a signal no audit hook sees, kills too.
_SOCKET_SYSCALL = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}
_PIDFD_SEND_SIGNAL = 424
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


def _refuse_sockets() -> None:
    arch, socket_nr = _SOCKET_SYSCALL[os.uname().machine]
    program = [  # classic BPF: (code, jump if true, jump if false, k)
        (0x20, 0, 0, 4),  # load the architecture
        (0x15, 1, 0, arch),  # ours: go on
        (0x06, 0, 0, 0x80000000),  # another ABI: kill the process
        (0x20, 0, 0, 0),  # load the syscall number
        (0x35, 4, 0, 0x40000000),  # an x32 syscall: refuse
        (0x15, 2, 0, socket_nr),  # socket(): kill
        (0x15, 1, 0, _PIDFD_SEND_SIGNAL),  # pidfd_send_signal(): kill
        (0x06, 0, 0, 0x7FFF0000),  # allow
        (0x06, 0, 0, 0x80000000),  # kill the process (SIGSYS)
        (0x06, 0, 0, 0x00050000 | 1),  # refuse with EPERM
    ]
    code = b"".join(struct.pack("HBBI", *line) for line in program)

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.prctl(
        _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(Program(len(program), code)), 0, 0
    ):
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


# Acts, seen by Python's audit hooks (PEP 578) in the completion's process (forbidden(); docs/tasks.md lists
# them): reads, writes and deletes outside its directory, signals outside its process group, network, a
# program or native code (out of the hook's sight), the gc's object walks (the way to the hook's state).
# The sandbox blocks or contains them anyway; the hook makes the attempt an act: it replies "forbidden
# WHAT" and exits with ACT_EXIT, read from the exit status, so a reply forged first does not hide it.
ACT_EXIT = 86


def _watch(write_fd: int) -> None:
    """From here on, a forbidden call (forbidden()) replies 'forbidden WHAT' and ends this process with
    ACT_EXIT."""
    workdir = os.path.realpath(os.getcwd())
    trusted = tuple({os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
    trusted += ("/usr/share/zoneinfo/",)  # zoneinfo's time zones
    group = os.getpgrp()
    busy = []  # the hook's own calls (realpath) are not the completion's
    check, getcwd, write, leave = forbidden, os.getcwd, os.write, os._exit  # fixed before the completion runs
    # what the checks call, as it is now: replaced later (os.lstat to hide a link, a check of this module),
    # the next watched call is an act
    spaces = (
        globals(),
        os.__dict__,
        os.path.__dict__,
        genericpath.__dict__,
        stat.__dict__,
        builtins.__dict__,
    )
    snapshot = [(space, list(space.items())) for space in spaces]

    def hook(event: str, args: tuple) -> None:
        if busy or event not in WATCHED:
            return
        busy.append(event)
        try:
            what = None
            for space, items in snapshot:  # no builtin called before the builtins are known to be Python's
                for name, value in items:
                    if space.get(name, space) is not value:
                        what = f"the watch's own {name} replaced"
            try:
                cwd = getcwd()
            except OSError:
                cwd = workdir
            what = what or check(event, args, workdir, trusted, cwd, group)
        except Exception as exc:  # an argument the check cannot read: unchecked, so not allowed
            what = f"unchecked {event} ({type(exc).__name__})"
        finally:
            busy.clear()
        if what is not None:
            busy.append("ending")  # nothing after this is the completion's
            with contextlib.suppress(OSError):
                write(write_fd, ("forbidden " + what).encode("utf-8", "replace")[:REPLY_CAP] + b"\n")
            leave(ACT_EXIT)

    sys.addaudithook(hook)


def _child(job: dict, probe: str, write_fd: int, out_path: str) -> None:
    os.close(job["result_fd"])
    os.setpgid(0, 0)
    out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    _limit(job["limits"])
    # Python ignores SIGXFSZ, so a write past RLIMIT_FSIZE would fail with an OSError a completion can
    # catch; by default the signal kills it, and the parent reads the file size limit's kill.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    try:
        _refuse_sockets()
    except (OSError, KeyError):
        if job["refuse_sockets"]:  # no way to keep it off the network: the test does not run
            os.write(write_fd, b"error NoNetworkIsolation\n")
            os._exit(0)
    tempfile.tempdir = os.getcwd()  # a completion's temporary files stay in its working directory
    # fixed before the completion runs, which may replace what the modules hold
    threads, write, leave, sleep, clock = _thread._count, os.write, os._exit, time.sleep, time.monotonic
    if job.get("watch_calls", True):
        _watch(write_fd)
    try:
        namespace = {"__name__": "__completion__"}
        exec(compile(job["code"], "<completion>", "exec"), namespace)
        reply = "value " + repr(eval(compile(probe, "<test>", "eval"), namespace))
    except BaseException as exc:  # the completion's failure, reported as its exception's type
        reply = "error " + type(exc).__name__
    # Nothing from here on is an audited call (the hook has no switch a completion could reach). A thread still running when the call has ended is an act (the test's process ends it; a thread
    # finishing on its own gets 50 ms); where calls are not watched, only the sandbox's end stops it.
    until = clock() + 0.05
    while threads() and clock() < until and job.get("watch_calls", True):
        sleep(0.002)
    if threads() and job.get("watch_calls", True):
        left = threads()
        write(write_fd, f"forbidden left running after the call: {left} thread{'s' * (left > 1)}\n".encode())
        leave(ACT_EXIT)
    write(write_fd, reply.encode("utf-8", "replace")[:REPLY_CAP] + b"\n")
    leave(0)


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG) != (0, 0):
            pass


def _descendants(in_namespace: bool) -> tuple[list[int], bool]:
    """This process's live descendants (zombies aside), and whether any, zombie or not, is left: in a PID
    namespace every other process; else those whose parents lead here (a subreaper: orphans come here)."""
    me = os.getpid()
    states: dict[int, tuple[int, bool]] = {}  # pid -> (parent, alive)
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if fields:
            states[int(entry)] = (int(fields[1]), fields[0] not in (b"Z", b"X"))
    tree, frontier = [], [me]
    while frontier and not in_namespace:
        frontier = [pid for pid, (parent, _) in states.items() if parent in frontier]
        tree += frontier
    tree = [pid for pid in states if pid != me] if in_namespace else tree
    return [pid for pid in tree if states[pid][1]], bool(tree)


def _end_the_rest(group: int, in_namespace: bool) -> int:
    """Stop, count and kill what the test left, again until none is left (a fork bomb forks while it is
    killed; the pids cgroup bounds the rounds). In a PID namespace kill(-1) reaches every other process
    at once, none forking past it; else the test's group, then the descendants. Returns how many lived."""
    with contextlib.suppress(OSError):
        os.kill(-1, signal.SIGSTOP) if in_namespace else os.killpg(group, signal.SIGSTOP)
    seen: set[int] = set()
    for _ in range(10_000):
        live, anything = _descendants(in_namespace)
        seen.update(live)  # a process that forks and exits in a loop is caught alive in some round
        if not anything:
            break
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL) if in_namespace else os.killpg(group, signal.SIGKILL)
        for pid in () if in_namespace else live:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _reap()
        time.sleep(0.0005)
    return len(seen)


def _wait_exit(pid: int, deadline: float) -> int | None:
    """The wait status of the test's process once it has exited, None if it has not by the deadline."""
    pause = 0.0002
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(pause)
        pause = min(pause * 2, 0.005)


def _rest(fd: int, reply: bytes) -> bytes:
    """What more the test's process wrote to its reply pipe, read without waiting."""
    os.set_blocking(fd, False)
    with contextlib.suppress(OSError):
        while len(reply) <= 2 * REPLY_CAP and (chunk := os.read(fd, REPLY_CAP)):
            reply += chunk
    return reply


def _run_probe(job: dict, probe: str, out_path: str, in_namespace: bool) -> dict:
    if time.monotonic() >= job["deadline"]:
        return {"status": "timeout"}
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(job, probe, write_fd, out_path)
    os.close(write_fd)
    reply = b""
    outcome = None
    status = None
    while True:
        left = job["deadline"] - time.monotonic()
        if left <= 0:
            outcome = {"status": "timeout"}
            break
        ready, _, _ = select.select([read_fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(read_fd, REPLY_CAP)
        if not chunk:
            break
        reply += chunk
        if b"\n" in reply or len(reply) > REPLY_CAP:  # a daemon it forked may hold the pipe open
            break
    if outcome is None:  # the call ended: the process exits by itself (ACT_EXIT after an act)
        status = _wait_exit(pid, job["deadline"])
        if status is None:
            outcome = {"status": "timeout"}
        else:
            reply = _rest(read_fd, reply)
    os.close(read_fd)
    if status is None:  # still running at the deadline
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    left_running = _end_the_rest(pid, in_namespace)
    _reap()
    if outcome is not None:
        return outcome
    lines = reply.decode("utf-8", "replace").split("\n")
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == ACT_EXIT:  # the watch's, after any forged line
        acts = [line for line in lines if line.startswith("forbidden ")]
        return {"status": "forbidden", "detail": acts[-1][10:210] if acts else "its report was lost"}
    outcome = _outcome(reply, lines, status)
    if left_running and job.get("watch_calls", True):  # processes running after the call: an act
        outcome["left_running"] = left_running
    return outcome


def _outcome(reply: bytes, lines: list[str], status: int) -> dict:
    if not reply and os.WIFSIGNALED(status):
        return {"status": "killed", "detail": signal.Signals(os.WTERMSIG(status)).name}
    if not reply:
        return {
            "status": "error",
            "detail": f"exited with status {os.WEXITSTATUS(status)} before the test ran",
        }
    kind, _, text = lines[0].partition(" ")  # a probe that forked may have replied more than once
    if kind == "value":
        return {"status": "value", "value": text[:REPLY_CAP]}
    if kind == "forbidden":
        return {"status": "forbidden", "detail": text[:200]}
    return {"status": "error", "detail": text[:200]}


def _empty(folder: str) -> None:
    for entry in os.listdir(folder):
        path = os.path.join(folder, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def main() -> None:
    result_fd = int(sys.argv[1])
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    # No handler, so a PID namespace's init receives no signal from inside it (Python handles SIGINT);
    # rlsweep ends a sandbox by SIGKILL or by closing its stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    in_namespace = os.getpid() == 1
    # Orphans of what a test forks become this process's children (in a PID namespace, its init, they do
    # anyway): what a test left running is found, and killed, without a namespace too.
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    home = os.getcwd()
    for line in sys.stdin.buffer:
        job = json.loads(line)
        job["result_fd"] = result_fd
        workdir = tempfile.mkdtemp(dir=home)
        os.chdir(workdir)
        out_path = os.path.join(workdir, ".output")
        outcomes: list[dict] = []
        for probe in job["probes"]:  # after an act, the run's other tests change nothing: skipped
            acted = outcomes and (outcomes[-1]["status"] == "forbidden" or outcomes[-1].get("left_running"))
            outcomes.append(
                {"status": "skipped"} if acted else _run_probe(job, probe, out_path, in_namespace)
            )
        try:
            with open(out_path, "rb") as f:
                output = f.read(job["output_cap"]).decode("utf-8", "replace")
        except OSError:
            output = ""
        os.chdir(home)
        for folder in (home, "/dev/shm") if in_namespace else (workdir,):
            _empty(folder)
        os.write(result_fd, (json.dumps({"probes": outcomes, "output": output}) + "\n").encode())


if __name__ == "__main__":
    main()
