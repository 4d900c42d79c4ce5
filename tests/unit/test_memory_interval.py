"""The memory model's interval (orchestrator/judging/memory/_interval.py): calibrated on held-out errors,
wider with fewer rows and beyond the measured range, narrow where the held-out errors are small, and
a verdict `uncertain` only where the interval crosses the budget."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from orchestrator.judging.intervals import TIGHT_SPREAD
from orchestrator.judging.memory import DOES_NOT_FIT, FITS, UNCERTAIN, MemoryModel
from orchestrator.judging.memory._interval import (
    LOO_FACTOR,
    calibrated_share,
    conformal_quantile,
    interval,
    score,
)
from tests.helpers.memory_rows import GRID, row, trial, true_peak


def reach(prediction) -> float:
    """How far the interval reaches from the prediction, the farther side, as a share of it."""
    return max(prediction.peak_gib - prediction.low_gib, prediction.high_gib - prediction.peak_gib) / (
        prediction.peak_gib
    )


# inside GRID's range (K 2-24, B 1-2, completions 16-128) without being one of its trials
INSIDE = trial("inside", num_generations=8, batch_size=2, max_completion_length=64)
BEYOND = trial("beyond", num_generations=24, batch_size=2, max_completion_length=512)


def test_the_conformal_quantile_takes_the_rank_the_stated_rate_needs():
    scores = [i / 100 for i in range(1, 20)]  # 19 scores: at 90% the 18th smallest
    assert conformal_quantile(scores, 0.9) == pytest.approx(0.18)
    assert conformal_quantile(scores[:9], 0.9) == pytest.approx(0.09)  # 9 scores: the largest
    assert conformal_quantile(scores[:8], 0.9) is None  # 8: no rank holds 90%
    assert conformal_quantile([], 0.9) is None


def test_too_few_scores_take_the_largest_times_a_factor_and_no_share_is_under_the_rerun_spread():
    assert calibrated_share([0.02, 0.04]) == pytest.approx(LOO_FACTOR * 0.04)
    assert calibrated_share([0.0] * 30) == TIGHT_SPREAD
    assert calibrated_share([]) is None


@pytest.mark.parametrize(
    "peak,predicted,extrapolated",
    [(10.0, 9.0, (0.0, 0.0)), (10.0, 11.0, (0.0, 0.0)), (11.5, 9.5, (1.0, 0.0)), (9.6, 10.8, (3.0, 0.0)),
     (3.5, 3.0, (0.0, 2.0)), (5.0, 5.0, (0.4, 0.2))],
)  # fmt: skip
def test_a_held_out_score_is_the_smallest_share_whose_interval_holds_that_peak(peak, predicted, extrapolated):
    s = score(peak, predicted, extrapolated)
    low, high = interval(predicted, 0.0, max(s, 1e-12), extrapolated)
    assert low - 1e-9 <= peak <= high + 1e-9
    if s > TIGHT_SPREAD:  # a smaller share misses it
        low, high = interval(predicted, 0.0, s * 0.9, extrapolated)
        assert not low <= peak <= high


def test_the_interval_widens_with_fewer_rows_and_is_widest_with_none():
    extremes = [s for s in GRID if s.trial_key in ("k2-b1-c16", "k24-b2-c128")]
    widths = [reach(MemoryModel.fit([row(s) for s in rows]).predict(INSIDE)) for rows in (GRID, extremes, [])]
    assert widths[0] < widths[1] < widths[2]


def test_rows_with_small_held_out_errors_narrow_the_interval_to_15_percent_and_it_holds_the_peak():
    model = MemoryModel.fit([row(s) for s in GRID])
    prediction = model.predict(INSIDE)
    assert prediction.beyond_gib == pytest.approx(0.0)
    assert reach(prediction) <= 0.15
    assert prediction.low_gib <= true_peak(INSIDE) <= prediction.high_gib
    assert reach(MemoryModel.fit([]).predict(INSIDE)) > 0.15  # the prior's, with no rows


def test_larger_held_out_errors_widen_the_interval():
    rng = np.random.default_rng(0)
    noisy = [row(s, peak=true_peak(s) * (1 + rng.uniform(-0.08, 0.08))) for s in GRID]
    clean = MemoryModel.fit([row(s) for s in GRID]).predict(INSIDE)
    assert reach(MemoryModel.fit(noisy).predict(INSIDE)) > reach(clean)


def test_a_configuration_beyond_the_measured_rows_gets_the_extrapolated_gib_in_its_interval():
    model = MemoryModel.fit([row(s) for s in GRID])
    inside, beyond = model.predict(INSIDE), model.predict(BEYOND)
    assert beyond.beyond_gib > 0
    grown = beyond.peak_gib - max(true_peak(s) for s in GRID)
    assert beyond.high_gib - beyond.peak_gib >= grown * 0.9  # up to twice the growth the terms give
    assert reach(beyond) > reach(inside)
    assert MemoryModel.fit([]).predict(BEYOND).beyond_gib is None  # no measured row: the prior's interval


@pytest.mark.parametrize("rows", [[], GRID[:2], GRID], ids=["prior", "two rows", "twelve rows"])
def test_a_verdict_is_uncertain_exactly_where_the_interval_crosses_the_budget(rows):
    model = MemoryModel.fit([row(s) for s in rows], measure="RSS")
    for spec in (INSIDE, BEYOND):
        p = model.predict(spec)
        budgets = np.linspace(0.5 * p.low_gib, 1.5 * p.high_gib, 61)
        for budget in itertools.chain(budgets, (p.low_gib, p.high_gib)):
            expected = DOES_NOT_FIT if p.low_gib > budget else FITS if p.high_gib <= budget else UNCERTAIN
            assert p.verdict(float(budget)) == expected
            assert (p.verdict(float(budget)) == UNCERTAIN) == (p.low_gib <= budget < p.high_gib)
