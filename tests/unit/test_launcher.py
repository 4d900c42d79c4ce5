"""The launcher (orchestrator/running/launcher.py): trainers forked from a fork server, and the cold start
it falls back to. The `bare` profile preloads nothing heavy, so each server starts in about a second."""

import os
import signal
import subprocess
import sys

import psutil
import pytest

from orchestrator.running import launcher
from orchestrator.running.child_env import child_env
from orchestrator.running.launcher import (
    COLD_START_ENV,
    ForkedChild,
    ForkServer,
    ForkServerError,
    server_for,
    start_trainer,
)
from orchestrator.running.process_group import kill_group
from trainers.events import read_events
from trainers.trial import TrialSpec


@pytest.fixture
def server():
    server = ForkServer("bare", child_env(None, 1))
    yield server
    server.stop()


def _spec(tmp_path, **overrides) -> str:
    spec = TrialSpec(
        model="tiny", max_steps=1, num_generations=2, batch_size=2, max_completion_length=4,
        events_path=str(tmp_path / "events.jsonl"), output_dir=str(tmp_path / "out"), **overrides,
    )  # fmt: skip
    path = tmp_path / "spec.json"
    path.write_text(spec.to_json())
    return str(path)


def _fork(server, tmp_path, spec_path) -> ForkedChild:
    with open(tmp_path / "trainer.log", "wb") as log:
        return server.fork([spec_path], child_env(None, 1), str(tmp_path), log)


def test_a_forked_trainer_ends_with_its_final_event_and_exit_code_as_a_cold_one_does(server, tmp_path):
    child = _fork(server, tmp_path, _spec(tmp_path, micro_batch_size=3))  # refused before any model
    assert child.wait(timeout=60) == 1
    events, _ = read_events(tmp_path / "events.jsonl")
    assert [e["event"] for e in events] == ["error"]
    assert "micro_batch_size: 3 does not divide" in events[0]["message"]


def test_a_forked_trainers_output_goes_to_the_trials_log(server, tmp_path):
    child = _fork(server, tmp_path, str(tmp_path / "missing.json"))
    assert child.wait(timeout=60) != 0
    assert "missing.json" in (tmp_path / "trainer.log").read_text()


def test_a_forked_trainer_leads_its_own_process_group_in_the_trials_directory_and_kill_group_ends_it(
    server, tmp_path
):
    child = _fork(server, tmp_path, _spec(tmp_path))  # a real trial: seconds of imports to come
    try:
        assert os.getpgid(child.pid) == child.pid
        assert psutil.Process(child.pid).cwd() == str(tmp_path)
    finally:
        kill_group(child)
    assert child.returncode is not None and child.returncode < 0
    assert not psutil.pid_exists(child.pid)


def test_a_forked_trainer_dies_with_its_server(server, tmp_path):
    child = _fork(server, tmp_path, _spec(tmp_path))
    os.kill(server.pid, signal.SIGKILL)
    assert child.wait(timeout=60) == -signal.SIGKILL
    assert not psutil.pid_exists(child.pid)


def test_the_server_exits_when_the_launchers_end_of_its_socket_closes(server):
    server.sock.close()
    assert server.proc.wait(timeout=60) == 0


def test_an_idle_server_exits_on_its_own():
    server = ForkServer("bare", child_env(None, 1), idle_s=0.2)
    try:
        assert server.proc.wait(timeout=60) == 0
    finally:
        server.stop()


def test_stop_ends_the_server_by_its_pid(server):
    server.stop()
    assert server.proc.returncode is not None and not psutil.pid_exists(server.pid)


def test_a_server_that_cannot_serve_is_refused_once_and_remembered(monkeypatch):
    monkeypatch.setattr(launcher, "_refused", {})
    env = child_env(None, 1)
    with pytest.raises(ForkServerError, match="refused"):
        server_for("no-such-profile", env)
    monkeypatch.setattr(launcher, "ForkServer", None)  # a second ask starts no server
    with pytest.raises(ForkServerError, match="refused"):
        server_for("no-such-profile", env)


def _start(tmp_path, command):
    with open(tmp_path / "trainer.log", "wb") as log:
        return start_trainer(
            TrialSpec(model="tiny"),
            command,
            env=child_env(None, 1),
            cwd=str(tmp_path),
            log=log,
            forkable=True,
        )


def test_a_trial_whose_server_cannot_serve_starts_cold_with_a_warning(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(launcher, "_refused", {})
    monkeypatch.setattr(launcher, "_warned", set())
    monkeypatch.setattr(launcher, "profile_for", lambda spec: "no-such-profile")
    proc = _start(tmp_path, [sys.executable, "-c", "print('cold')"])
    assert isinstance(proc, subprocess.Popen) and proc.wait(timeout=60) == 0
    assert (tmp_path / "trainer.log").read_text().strip() == "cold"
    assert "trainer started cold" in capsys.readouterr().err
    assert _start(tmp_path, [sys.executable, "-c", "pass"]).wait(timeout=60) == 0
    assert capsys.readouterr().err == ""  # the refusal was said once


def test_the_cold_start_variable_starts_the_trainer_cold_without_a_server(tmp_path, monkeypatch):
    monkeypatch.setenv(COLD_START_ENV, "1")
    monkeypatch.setattr(launcher, "server_for", None)  # asking for a server would fail the test
    proc = _start(tmp_path, [sys.executable, "-c", "print('cold')"])
    assert isinstance(proc, subprocess.Popen) and proc.wait(timeout=60) == 0


@pytest.mark.parametrize("value,cold", [("", False), ("0", False), ("1", True), ("yes", True)])
def test_the_cold_start_variable_is_any_value_but_empty_and_zero(value, cold):
    assert launcher.cold_start_asked({COLD_START_ENV: value}) is cold


def test_a_server_that_died_or_has_another_environment_is_replaced(monkeypatch):
    monkeypatch.setattr(launcher, "_servers", {})
    env = child_env(None, 1)
    try:
        first = server_for("bare", env)
        assert server_for("bare", env) is first  # kept for the next trial
        os.kill(first.pid, signal.SIGKILL)
        first.proc.wait(timeout=60)
        second = server_for("bare", env)
        assert second is not first and second.alive()
        third = server_for("bare", env | {"OMP_NUM_THREADS": "2"})  # imports read the environment
        assert third is not second and third.alive() and not second.alive()
    finally:
        launcher.stop_servers()
