"""One writer per output dir: `rlsweep run` holds the output dir's lock for the whole run.

A local or shared folder: an exclusive flock on <output_dir>/.rlsweep.lock, which names the holder (host,
PID, start time). The kernel drops the flock when its process dies, so a crashed run's lock is free at
once; the file it leaves behind is only read for the message.

An object store (a RemotePath: s3://, gs://...): a lease object <output_dir>/.rlsweep.lock naming the
holder and an expiry, renewed by a thread while the run lasts and deleted at its end. A lease is taken
over when it has expired, or when its holder is a PID on this host that is gone. Object stores have no
compare-and-swap through pyarrow.fs, so a new lease is written, then read back after a pause: the
writer whose lease is read back holds it.

`rlsweep report` and `compare` only read and take no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

from orchestrator.words.storage import RemotePath, StoragePath

LOCK_NAME = ".rlsweep.lock"
LEASE_S = 60.0  # an object-store lease lasts this long unless renewed
RENEW_S = LEASE_S / 3
SETTLE_S = 2.0  # pause between writing a lease and reading it back


class OutputDirBusy(RuntimeError):
    def __init__(self, location: StoragePath, holder: Holder):
        self.holder = holder
        super().__init__(
            f"{location} is in use by another `rlsweep run` (host {holder.host}, PID {holder.pid}, "
            f"started {holder.started_at}); two runs on one output dir overwrite each other. Wait for "
            f"it to end, stop it, or give this run another --output-dir"
        )


@dataclass
class Holder:
    host: str
    pid: int
    started_at: str
    expires_at: float | None = None  # epoch seconds; leases only

    @classmethod
    def me(cls) -> Holder:
        started = datetime.now(UTC).isoformat(timespec="seconds")
        return cls(socket.gethostname(), os.getpid(), started)

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        try:
            raw = json.loads(text)
            return cls(str(raw["host"]), int(raw["pid"]), str(raw["started_at"]), raw.get("expires_at"))
        except (ValueError, KeyError, TypeError):
            return None

    def text(self) -> str:
        return json.dumps(asdict(self))

    def same(self, other: Holder | None) -> bool:
        return other is not None and (self.host, self.pid, self.started_at) == (
            other.host,
            other.pid,
            other.started_at,
        )

    def gone(self, now: float) -> bool:
        """An expired lease, or a holder PID on this host that no longer runs."""
        if self.expires_at is not None and self.expires_at < now:
            return True
        return self.host == socket.gethostname() and not psutil.pid_exists(self.pid)


@contextlib.contextmanager
def output_dir_lock(location: StoragePath) -> Iterator[Holder]:
    """Hold the output dir's lock for the `with` block; raises OutputDirBusy naming the holder."""
    if isinstance(location, RemotePath):
        with _lease(location) as me:
            yield me
    else:
        with _flock(location) as me:
            yield me


@contextlib.contextmanager
def _flock(folder: Path) -> Iterator[Holder]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = Holder.parse(path.read_text()) or Holder("unknown host", -1, "at an unknown time")
            raise OutputDirBusy(folder, holder) from None
        me = Holder.me()
        os.ftruncate(fd, 0)
        os.pwrite(fd, me.text().encode(), 0)
        yield me
    finally:
        os.close(fd)  # releases the flock


def read_lease(location: RemotePath) -> Holder | None:
    lock = location / LOCK_NAME
    return Holder.parse(lock.read_text()) if lock.exists() else None


def _write_lease(location: RemotePath, holder: Holder) -> None:
    holder.expires_at = time.time() + LEASE_S
    (location / LOCK_NAME).write_text(holder.text())


@contextlib.contextmanager
def _lease(location: RemotePath) -> Iterator[Holder]:
    location.mkdir()
    current = read_lease(location)
    if current is not None and not current.gone(time.time()):
        raise OutputDirBusy(location, current)
    me = Holder.me()
    _write_lease(location, me)
    time.sleep(SETTLE_S)
    current = read_lease(location)
    if not me.same(current):  # another run wrote its lease after ours
        raise OutputDirBusy(location, current or me)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(RENEW_S):
            with contextlib.suppress(OSError):
                _write_lease(location, me)

    thread = threading.Thread(target=renew, name="rlsweep-lease", daemon=True)
    thread.start()
    try:
        yield me
    finally:
        stop.set()
        thread.join()
        with contextlib.suppress(OSError):
            if me.same(read_lease(location)):
                location.fs.delete_file((location / LOCK_NAME).path)
