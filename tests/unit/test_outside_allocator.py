"""Memory outside torch's caching allocator (trainers/simulate/_outside.py): each term says its process and
source, only measured terms count into the simulated NVML figure, and the trainer's term is what every
H100 row of bench/data read as NVML less torch's reserved."""

import csv
from pathlib import Path

import pytest

from trainers.simulate._outside import (
    H100_TRAINER_OUTSIDE_GIB,
    counted_gib,
    outside,
    possible_gib,
    shared_terms,
)
from trainers.trial import TrialSpec

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = ("bench/data/h100-2026-11-26/trials.csv", "bench/data/h100-2026-11-27/trials.csv")


def test_every_term_names_its_process_and_source_and_unmeasured_ones_are_not_counted():
    terms = outside(TrialSpec(model="tiny", stack="unsloth"))
    assert all(t.process and t.source for t in terms)
    assert counted_gib(terms) == sum(t.gib for t in terms if t.gib is not None)
    assert possible_gib(terms) >= counted_gib(terms)


def test_the_trainers_term_is_nvml_less_reserved_on_every_h100_row():
    gaps = []
    for name in ROUNDS:
        with (ROOT / name).open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row["peak_nvml_gib"] and row["peak_torch_reserved_gib"]:
                    gaps.append(float(row["peak_nvml_gib"]) - float(row["peak_torch_reserved_gib"]))
    assert len(gaps) > 10
    # NVML's and torch's peaks are each a maximum over the step, not always at one moment: most rows agree
    near = [gap for gap in gaps if abs(gap - H100_TRAINER_OUTSIDE_GIB) <= 0.025]
    assert len(near) >= 0.9 * len(gaps), sorted(gaps)
    assert sorted(gaps)[len(gaps) // 2] == pytest.approx(H100_TRAINER_OUTSIDE_GIB, abs=0.015)


def test_unsloths_compile_workers_are_a_term_of_their_own_unmeasured_and_absent_with_one_compile_thread(
    monkeypatch,
):
    spec = TrialSpec(model="random:google/gemma-3-1b-it", stack="unsloth")
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "16")
    (workers,) = [t for t in outside(spec) if t.process == "Inductor compile workers"]
    assert workers.gib is None and workers.possible_gib == pytest.approx(17 * 0.51)
    assert "compile_worker" in workers.source and "gemma3_text" in workers.source
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    assert outside(spec) == shared_terms()


def test_trl_holds_nothing_outside_torch_beyond_every_trainers_terms():
    assert outside(TrialSpec(model="random:google/gemma-3-1b-it", stack="trl")) == shared_terms()


def test_a_simulated_row_reads_nvml_as_reserved_plus_the_counted_terms_and_keeps_the_bound():
    from types import SimpleNamespace

    from orchestrator.judging.memory._model import MEASURE_COLUMNS
    from orchestrator.judging.memory._simulated import row
    from orchestrator.words.outcome import GPU

    spec = TrialSpec(model="tiny", stack="unsloth")
    # NVML as the least the step runs in under a card's cap (the replay's needed) plus the counted terms
    step = SimpleNamespace(
        reserved_gib=3.0, allocated_gib=2.5, needed_gib=2.6, resting_gib=1.0, phase="training"
    )
    made = row(spec, step, 0)
    terms = outside(spec)
    assert made[MEASURE_COLUMNS[GPU]] == pytest.approx(2.6 + counted_gib(terms))
    assert made["simulated_outside_possible_gib"] == pytest.approx(possible_gib(terms))
