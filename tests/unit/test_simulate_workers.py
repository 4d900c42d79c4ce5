"""How many steps are simulated at once (trainers/simulate/_pool.py): one a CPU, never more than the
steps, RLSWEEP_SIMULATE_WORKERS over both, and a value that is no whole number refused before any work."""

from tests.helpers.cli import run_cli
from trainers.simulate import _pool


def test_one_step_a_cpu_at_once_never_more_than_the_steps(monkeypatch):
    monkeypatch.delenv(_pool.ENV, raising=False)
    monkeypatch.setattr(_pool.os, "sched_getaffinity", lambda pid: {0, 1})
    assert (_pool.workers(3), _pool.workers(1), _pool.workers(0)) == (2, 1, 0)
    monkeypatch.setenv(_pool.ENV, "0")
    assert _pool.workers(3) == 0  # one after another in the asking process
    monkeypatch.setenv(_pool.ENV, "3")
    assert _pool.workers(5) == 3


def test_a_workers_count_that_is_no_whole_number_is_refused_naming_it_and_its_fix(monkeypatch, capsys):
    monkeypatch.setenv(_pool.ENV, "two")
    code, text = run_cli(["fits", "--model", "tiny", "--card", "16gb"], capsys)
    assert code == 2
    assert "RLSWEEP_SIMULATE_WORKERS='two'" in text and "whole number" in text
    assert "set e.g. RLSWEEP_SIMULATE_WORKERS=2" in text and "Traceback" not in text
