"""One writer per output dir: a second `rlsweep run` is refused with the holder named; a crashed
holder's lock is taken over; on object stores a lease with an expiry (pyarrow's local filesystem
standing in for the store, plus one real S3 server from moto on loopback)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest
import yaml

from orchestrator.cli import main
from orchestrator.words import runlock
from orchestrator.words.runlock import LOCK_NAME, Holder, OutputDirBusy, output_dir_lock, read_lease
from orchestrator.words.storage import RemotePath, output_location

ROOT = Path(__file__).parents[2]
HOLD = (
    "import sys; from pathlib import Path; from orchestrator.words.runlock import output_dir_lock\n"
    "with output_dir_lock(Path(sys.argv[1])) as me:\n"
    "    print(me.text(), flush=True); sys.stdin.read()\n"
)


def hold_in_another_process(folder: Path) -> tuple[subprocess.Popen, Holder]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return proc, Holder.parse(proc.stdout.readline())


def take(location) -> None:
    with output_dir_lock(location):
        pass


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_second_run_on_a_held_output_dir_is_refused_naming_the_holder(tmp_path, capsys):
    out = tmp_path / "out"
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        yaml.safe_dump({"name": "locked", "fixed": {"max_steps": 1}, "tracking": {"enabled": False}})
    )
    proc, holder = hold_in_another_process(out)
    try:
        assert holder.pid == proc.pid and holder.host == socket.gethostname()
        assert main(["run", str(sweep), "--output-dir", str(out)]) == 2
    finally:
        proc.communicate("")
    said = capsys.readouterr().err
    assert f"host {holder.host}, PID {proc.pid}, started {holder.started_at}" in said, said
    assert "another --output-dir" in said
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing of the sweep written


def test_the_lock_of_a_killed_run_is_taken_over_at_once(tmp_path):
    proc, holder = hold_in_another_process(tmp_path)
    with pytest.raises(OutputDirBusy):
        take(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert Holder.parse((tmp_path / LOCK_NAME).read_text()).pid == proc.pid  # the crash left its file
    with output_dir_lock(tmp_path) as me:
        assert me.pid == os.getpid()
        assert Holder.parse((tmp_path / LOCK_NAME).read_text()) == me


def test_a_lock_file_naming_a_dead_pid_does_not_block_a_run(tmp_path):
    stale = Holder(socket.gethostname(), dead_pid(), "2026-01-01T00:00:00+00:00")
    (tmp_path / LOCK_NAME).write_text(stale.text())
    with output_dir_lock(tmp_path) as me:
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == me.pid == os.getpid()


# -- object stores: a lease ---------------------------------------------------------------------------
@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(runlock, "SETTLE_S", 0.0)
    return RemotePath(pafs.LocalFileSystem(), str(tmp_path / "bucket" / "sweep"), "file")


def put_lease(location: RemotePath, holder: Holder) -> None:
    location.mkdir()
    (location / LOCK_NAME).write_text(holder.text())


def test_a_live_lease_of_another_host_refuses_the_run_naming_it(store):
    other = Holder("node-7", 4242, "2026-11-21T10:00:00+00:00", expires_at=time.time() + 30)
    put_lease(store, other)
    with pytest.raises(OutputDirBusy, match="host node-7, PID 4242, started 2026-11-21T10:00:00"):
        take(store)
    assert read_lease(store) == other


def test_an_expired_lease_is_taken_over_and_deleted_at_the_end(store):
    put_lease(store, Holder("node-7", 4242, "2026-11-21T10:00:00+00:00", expires_at=time.time() - 1))
    with output_dir_lock(store) as me:
        held = read_lease(store)
        assert me.same(held) and held.expires_at == pytest.approx(time.time() + runlock.LEASE_S, abs=5)
    assert not (store / LOCK_NAME).exists()


def test_a_lease_of_a_dead_pid_on_this_host_is_taken_over(store):
    put_lease(store, Holder(socket.gethostname(), dead_pid(), "x", expires_at=time.time() + 30))
    with output_dir_lock(store) as me:
        assert read_lease(store).pid == me.pid


def test_the_lease_is_renewed_while_the_run_lasts(store, monkeypatch):
    monkeypatch.setattr(runlock, "LEASE_S", 0.6)
    monkeypatch.setattr(runlock, "RENEW_S", 0.1)
    with output_dir_lock(store):
        first = read_lease(store).expires_at
        time.sleep(1.0)  # past the first expiry: only renewal keeps it live
        later = read_lease(store)
        assert later.expires_at > first + 0.5 and not later.gone(time.time())


def test_a_lease_on_a_real_s3_server_refuses_a_second_run(monkeypatch):
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        for key, value in {
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setattr(runlock, "SETTLE_S", 0.0)
        import boto3

        boto3.client("s3").create_bucket(Bucket="sweeps")
        location = output_location("s3://sweeps/locked")
        with output_dir_lock(location) as me:
            assert read_lease(location) == Holder(
                me.host, me.pid, me.started_at, read_lease(location).expires_at
            )
            with pytest.raises(OutputDirBusy, match=f"PID {os.getpid()}"):
                take(output_location("s3://sweeps/locked"))
        assert read_lease(location) is None
    finally:
        server.stop()
