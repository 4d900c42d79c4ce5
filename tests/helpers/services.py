"""Services a test starts on loopback (an MLflow server, an S3 server, a Ray head): a free port, start
in a session of its own, wait until it answers, stop it by the PID started here."""

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

START_TIMEOUT_S = 90


_TAKEN: set[int] = set()


def free_port() -> int:
    """A free port between Ray's worker ports (10002-19999) and the kernel's ephemeral range (32768+):
    a port the OS hands out for port 0 could be handed again to one of Ray's own components."""
    start = 20000 + secrets.randbelow(10000)
    for port in (*range(start, 30000), *range(20000, start)):
        if port in _TAKEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _TAKEN.add(port)
        return port
    raise RuntimeError("no free port in 20000-29999")


def wait_for(what: str, ready, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if ready():
                return
        except Exception:
            pass
        time.sleep(0.5)
    pytest.fail(f"{what} not ready after {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def http_answers(url: str) -> bool:
    """Up, whatever it answers: with token auth the dashboard says 401 to a request without the token."""
    try:
        return http_ok(url)
    except urllib.error.HTTPError:
        return True


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as r:
        return r.status == 200


def start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    # A session of its own: its process group is ours to stop, and Ctrl-C in the terminal does not reach it.
    with open(log, "w") as f:
        return subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> list[psutil.Process]:
    """SIGTERM the process we started (and its group), SIGKILL what is left of its descendants; returns
    survivors (none expected). Descendants are listed first: once their parent is gone they are orphans."""
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)
    _, alive = psutil.wait_procs(family, timeout=10)
    for p in alive:
        p.kill()
    _, alive = psutil.wait_procs(alive, timeout=10)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
