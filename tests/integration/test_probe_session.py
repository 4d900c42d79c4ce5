"""A probe session measures what a fresh process measures (orchestrator/running/session.py): on `tiny`,
each shape's peak, run in one session in ascending and in descending order of size, within the run-to-run
spread of RSS peaks between processes (CPU_RSS_SPREAD, tests/helpers/trainer_child.py) of the
same shape run in a process of its own, so a shape's peak does not depend on the shapes before it. Each
side is the least of two readings (two fresh processes a shape, two sessions an order): an RSS peak's
run-to-run noise only adds (the heap's layout, which moves with the trainer's threads), and one reading a
side read 14% apart once at 256 tokens, past the spread, in a fresh clone's run. The shapes' peaks differ
by more than twice that spread, so the agreement is no flat baseline. A budget
breach ends its shape `oom` and the next shape starts a new session, saying so. Unsloth once (largest
first); `smollm2` (heavy: make test-all) as `tiny`, within its own spread."""

from __future__ import annotations

import pytest

from orchestrator.recording.sinks import trial_row
from orchestrator.running.session import ProbeSession
from orchestrator.running.supervisor import run_trial
from orchestrator.words.outcome import COMPLETED, OOM
from orchestrator.words.settings import GuardSettings
from tests.helpers.trainer_child import CPU_RSS_SPREAD
from trainers.record import peak_memory
from trainers.trial import TrialSpec

pytestmark = pytest.mark.slow
LENGTHS = (24, 128, 256)  # completion lengths: the shapes, smallest first
GUARD = GuardSettings(timeout_s=900)
READINGS = 2  # each side's readings, of which the least is compared (module docstring)


def shape(length: int, stack: str = "trl", model: str = "tiny") -> TrialSpec:
    return TrialSpec(stack=stack, model=model, num_generations=8, batch_size=2, max_prompt_length=96,
                     max_completion_length=length, max_steps=1, probe_steps=1, num_threads=1, seed=0)  # fmt: skip


def peak(spec: TrialSpec, result) -> float:
    """The peak the trial's trials.parquet row holds."""
    assert result.status == COMPLETED, result.status_detail
    value, kind = peak_memory(trial_row(spec, result, result.steps))
    assert kind == "RSS"
    return value


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """Each shape's peak in a process of its own."""
    folder = tmp_path_factory.mktemp("fresh")
    return {
        n: min(
            peak(shape(n), run_trial(shape(n), trial_dir=folder / f"{n}-{i}", guard=GUARD, cpus=1))
            for i in range(READINGS)
        )
        for n in LENGTHS
    }


def in_session(folder, lengths, stack="trl", model="tiny") -> dict[int, tuple[float, object]]:
    with ProbeSession(folder / "sessions", GUARD, cpus=1) as session:
        results = {n: session.run(shape(n, stack, model), trial_dir=folder / str(n)) for n in lengths}
    return {n: (peak(shape(n, stack, model), r), r) for n, r in results.items()}


@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_each_shape_of_a_session_peaks_where_a_fresh_process_of_it_does(tmp_path, fresh, order):
    lengths = LENGTHS if order == "ascending" else tuple(reversed(LENGTHS))
    sessions = [in_session(tmp_path / str(i), lengths) for i in range(READINGS)]
    least = {n: min(measured[n][0] for measured in sessions) for n in LENGTHS}
    for n in LENGTHS:
        tolerance = CPU_RSS_SPREAD["tiny"] * fresh[n]
        assert abs(least[n] - fresh[n]) <= tolerance, (order, n, least[n], fresh, tolerance)
    assert fresh[LENGTHS[-1]] - fresh[LENGTHS[0]] > 2 * CPU_RSS_SPREAD["tiny"] * fresh[LENGTHS[-1]], fresh
    for measured in sessions:
        results = [measured[n][1] for n in lengths]
        assert len({r.session for r in results}) == 1  # one process: one model load
        assert results[0].session_startup_s > 0 and all(r.session_startup_s is None for r in results[1:])


def test_a_budget_breach_ends_its_shape_oom_and_the_next_shape_starts_a_new_session(tmp_path, fresh):
    budget = (fresh[LENGTHS[0]] + fresh[LENGTHS[-1]]) / 2
    guard = GuardSettings(budget_gib=budget, margin_gib=0.0, timeout_s=900)
    with ProbeSession(tmp_path / "sessions", guard, cpus=1) as session:
        over = session.run(shape(LENGTHS[-1]), trial_dir=tmp_path / "over")
        under = session.run(shape(LENGTHS[0]), trial_dir=tmp_path / "under")
    assert over.status == OOM, over.status_detail
    assert under.status == COMPLETED, under.status_detail
    assert under.session != over.session
    assert "this shape started a new one" in under.status_detail


def test_an_unsloth_session_peaks_where_fresh_processes_do_largest_first(tmp_path):
    fresh_peaks = {
        n: peak(
            shape(n, "unsloth"),
            run_trial(shape(n, "unsloth"), trial_dir=tmp_path / f"fresh{n}", guard=GUARD, cpus=1),
        )
        for n in (LENGTHS[0], LENGTHS[-1])
    }
    measured = in_session(tmp_path, (LENGTHS[-1], LENGTHS[0]), "unsloth")
    for n, expected in fresh_peaks.items():
        assert abs(measured[n][0] - expected) <= CPU_RSS_SPREAD["tiny"] * expected, (
            n,
            measured[n][0],
            fresh_peaks,
        )


@pytest.mark.heavy
@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_each_shape_of_a_smollm2_session_peaks_where_a_fresh_process_of_it_does(tmp_path, order):
    lengths = (32, 160) if order == "ascending" else (160, 32)
    fresh = {
        n: peak(shape(n, model="smollm2"), run_trial(shape(n, model="smollm2"), trial_dir=tmp_path / f"fresh{n}",
                                                     guard=GUARD, cpus=1))
        for n in lengths
    }  # fmt: skip
    measured = in_session(tmp_path, lengths, model="smollm2")
    for n in lengths:
        tolerance = CPU_RSS_SPREAD["smollm2"] * fresh[n]
        assert abs(measured[n][0] - fresh[n]) <= tolerance, (order, n, measured[n][0], fresh, tolerance)
