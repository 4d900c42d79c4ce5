"""A simulated answer's interval knows what it has not seen (orchestrator/judging/memory/_interval.py): the
simulator's error on GPU rows of the model's own family where the stack has such rows, else the error
across families with one left out, and no upper bound where fewer than two families were measured; the
stacks' ranges are the shipped rows' (bench/data/simulated-h100.csv), and on those rows no answer is a
false "fits" at the row's budget or on any smaller card (bench/accuracy/false_fits.py)."""

import math

import pytest

from orchestrator.judging.answer import judged as answer
from orchestrator.judging.memory._interval import (
    LOO_FACTOR,
    UNCHECKED_ERROR,
    architecture,
    simulated_error,
    unseen_error,
)
from tools.inputs.simulated_rows import coverage, error_ranges, judged, load
from trainers.simulate import SimulatedStep
from trainers.stacks import STACKS
from trainers.trial import TrialSpec


def _step(allocated: float) -> SimulatedStep:
    return SimulatedStep(
        allocated, allocated + 0.5, "training", {"training": allocated}, 2.0, 1.0, {}, allocated
    )


def test_a_family_with_gpu_rows_of_the_stack_takes_that_familys_own_error_and_says_so():
    low, high, named = simulated_error("unsloth", "qwen2")
    ((family, want_low, want_high, n),) = STACKS["unsloth"].memory.simulated_error
    assert (family, low, high) == ("qwen2", want_low, want_high)
    assert named == f"the simulator's error on {n} qwen2 GPU rows" and "H100" not in named


def test_a_family_no_row_measured_with_one_family_known_has_no_upper_bound():
    low, high, named = simulated_error("unsloth", "qwen3")
    assert (low, high) == UNCHECKED_ERROR and high == math.inf
    assert "no qwen3 GPU row" in named and "measured: qwen2" in named


def test_one_family_left_out_widens_the_union_by_how_far_a_family_reached_past_the_others():
    # the second family reaches 0.2 past the first: too few families for the quantile, 1.5 x 0.2
    low, high = unseen_error([(1.0, 1.1), (1.0, 1.3)])
    assert (low, high) == pytest.approx((1.0 - LOO_FACTOR * 0.2, 1.3 + LOO_FACTOR * 0.2))
    assert unseen_error([(1.0, 1.1)]) is None  # one family says nothing of another
    # from 9 families the quantile: the 9th smallest of 9 scores at 90%, 0.1 here, either way
    families = [(1.0, 1.1)] * 8 + [(1.0, 1.2)]
    assert unseen_error(families) == pytest.approx((0.9, 1.3))


def test_an_unmeasured_familys_answer_is_uncertain_where_a_measured_ones_would_fit():
    spec = TrialSpec(model="Qwen/Qwen3-4B", stack="unsloth", learning_rate=2e-4)
    assert architecture("Qwen/Qwen3-4B") == "qwen3"
    said = answer(spec, _step(4.0), 24.0)
    assert said.verdict == "uncertain" and said.high_gib == math.inf and "no qwen3 GPU row" in said.interval
    qwen2 = TrialSpec(model="Qwen/Qwen2.5-3B-Instruct", stack="unsloth", learning_rate=2e-4)
    assert answer(qwen2, _step(4.0), 24.0).verdict == "fits"


def test_the_stacks_error_ranges_are_the_shipped_gpu_rows():
    ranges = error_ranges(load())
    for name, entry in STACKS.items():
        assert entry.memory.simulated_error == ranges.get(name, ()), name


def test_the_shipped_rows_cover_registered_stacks_each_with_a_family():
    found = coverage(load())
    assert found and set(found) <= set(STACKS) and all(sum(f.values()) > 0 for f in found.values())


@pytest.mark.parametrize("leave_family_out", [False, True])
def test_no_false_fits_on_the_shipped_gpu_rows_at_their_budget_or_any_smaller_card(leave_family_out):
    answers = judged(load(), leave_family_out)
    assert answers and [a for a in answers if a.false_fit] == []
    # the count is of real answers: rows that fitted are answered "fits" somewhere
    assert leave_family_out or any(a.verdict == "fits" for a in answers)
