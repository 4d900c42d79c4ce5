"""How the supervisor starts a trainer child: forked from a fork server that has its libraries
imported already (trainers/forkserver.py), or cold (`python -m trainers spec.json`).

A supervisor process (a Ray actor Tune reuses for the next trial, `rlsweep solve`'s loop) keeps one
server per profile and environment: the first trial of a profile waits for the server's imports
(about what a cold child spends on them), the next ones fork in milliseconds. A trial starts cold
where its profile has no server (vLLM generation, several ranks, a stand-in trainer_cmd), where
RLSWEEP_COLD_START is set (any value but "" and "0"), or where the server cannot serve (it refused,
failed to start in SERVER_START_S, or died): a warning says why, and the trial runs the same way.

A forked child is a child of the server, not of the supervisor: `ForkedChild` answers what the
supervisor asks of a Popen (pid, poll, wait, returncode, stdin). Its process group is its own (the
supervisor kills it by pgid as before); it dies with the server, and the server with the supervisor
(its end of the socket closes). Servers are stopped by their PID (SIGTERM, then SIGKILL) at the
supervisor's exit, when their environment changes, or on their own after SERVER_IDLE_S idle.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Any

from trainers.forkserver import MAX_MESSAGE, profile_for, send

COLD_START_ENV = "RLSWEEP_COLD_START"
SERVER_IDLE_S = 600.0
SERVER_START_S = 300.0  # the preload: about a cold trainer's imports, longer on a busy host
REPLY_S = 30.0


class ForkServerError(RuntimeError):
    """The server cannot fork this trial: it starts cold instead."""


def cold_start_asked(environ: dict[str, str] | None = None) -> bool:
    return (environ if environ is not None else os.environ).get(COLD_START_ENV, "") not in ("", "0")


class ForkServer:
    """One fork server process and the supervisor's end of its socket."""

    def __init__(self, profile: str, env: dict[str, str], idle_s: float = SERVER_IDLE_S):
        self.profile, self.env = profile, dict(env)
        self.exits: dict[int, int] = {}  # pid -> wait status, as the server reported them
        self.lock = threading.Lock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "trainers.forkserver", str(theirs.fileno()), profile, str(idle_s)],
                pass_fds=(theirs.fileno(),),
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # out of any trial's process group
            )
        finally:
            theirs.close()
        try:
            reply = self._reply(SERVER_START_S, "ready")
        except ForkServerError:
            self.stop()
            raise
        if "refused" in reply:
            self.stop()
            raise ForkServerError(f"the fork server refused: {reply['refused']}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _reply(self, timeout_s: float, *keys: str) -> dict[str, Any]:
        """The next message with one of `keys` (exit reports met on the way are kept)."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ForkServerError(f"no answer from the fork server in {timeout_s:g} s")
            ready, _, _ = select.select([self.sock], [], [], min(left, 0.5))
            if not ready:
                if not self.alive():
                    raise ForkServerError(f"the fork server exited with code {self.proc.returncode}")
                continue
            message = self._read()
            if message is None:
                raise ForkServerError("the fork server closed its socket")
            if any(key in message for key in (*keys, "refused", "error")):
                if "error" in message:
                    raise ForkServerError(f"the fork server could not fork: {message['error']}")
                return message

    def _read(self) -> dict[str, Any] | None:
        try:
            data = self.sock.recv(MAX_MESSAGE)
        except OSError:
            return None
        if not data:
            return None
        message = json.loads(data)
        if "exit" in message:
            self.exits[int(message["exit"])] = int(message["status"])
        return message

    def pump(self) -> None:
        """Read what the server has said (children's exits) without waiting."""
        with self.lock:
            while select.select([self.sock], [], [], 0)[0]:
                if self._read() is None:
                    break

    def fork(self, argv: list[str], env: dict[str, str], cwd: str, log: IO[bytes]) -> ForkedChild:
        read_end, write_end = os.pipe()
        try:
            with self.lock:
                try:
                    send(self.sock, {"argv": argv, "env": env, "cwd": cwd}, [read_end, log.fileno()])
                except OSError as exc:
                    raise ForkServerError(f"the fork server is gone: {exc}") from exc
                pid = int(self._reply(REPLY_S, "pid")["pid"])
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        return ForkedChild(self, pid, os.fdopen(write_end, "wb"), argv)

    def stop(self, grace_s: float = 5.0) -> None:
        """Close our end and stop the server by its PID (its children die with it)."""
        with contextlib.suppress(OSError):
            self.sock.close()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace_s)


class ForkedChild:
    """A trainer the fork server forked, answering as the supervisor's Popen does."""

    def __init__(self, server: ForkServer, pid: int, stdin: IO[bytes], args: list[str]):
        self.server, self.pid, self.stdin, self.args = server, pid, stdin, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.pump()
            status = self.server.exits.pop(self.pid, None)
            if status is not None:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif not self.server.alive() and not _exists(self.pid):
                self.returncode = -signal.SIGKILL  # the server died: its children with it (PDEATHSIG)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_servers: dict[str, ForkServer] = {}
_refused: dict[tuple[str, str], str] = {}  # (profile, environment) -> why its server cannot serve
_lock = threading.Lock()
_warned: set[str] = set()


def server_for(profile: str, env: dict[str, str]) -> ForkServer:
    """This process's server for `profile` with exactly this environment (a server imports with the
    trial's own environment); a server with another one, or one no longer running, is replaced."""
    key = (profile, json.dumps(env, sort_keys=True))
    with _lock:
        if key in _refused:
            raise ForkServerError(_refused[key])
        server = _servers.get(profile)
        if server is not None and (server.env != env or not server.alive()):
            server.stop()
            server = None
        if server is None:
            try:
                server = ForkServer(profile, env)
            except ForkServerError as exc:
                if "refused" in str(exc):
                    _refused[key] = str(exc)
                raise
            _servers[profile] = server
        return server


def stop_servers() -> None:
    """Stop every fork server this process started (by PID)."""
    with _lock:
        for server in _servers.values():
            server.stop()
        _servers.clear()


atexit.register(stop_servers)


def start_trainer(
    spec: Any,
    command: list[str],
    *,
    env: dict[str, str],
    cwd: str,
    log: IO[bytes],
    forkable: bool,
    preexec_fn: Any = None,
) -> subprocess.Popen | ForkedChild:
    """The trainer child for `spec`: forked where it can be (forkable: the command is the stock
    `python -m trainers spec.json`), else `command` started cold in a session of its own."""
    profile = profile_for(spec) if forkable and not cold_start_asked() else None
    if profile is not None:
        try:
            return server_for(profile, env).fork(command[3:], env, cwd, log)
        except (ForkServerError, OSError) as exc:
            if str(exc) not in _warned:  # a refusal is remembered: said once, not at every trial
                _warned.add(str(exc))
                print(f"warning: trainer started cold: {exc}", file=sys.stderr)
    return subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )
