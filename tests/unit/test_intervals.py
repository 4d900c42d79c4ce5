"""The intervals mean what they say: on synthetic cycle times drawn from known distributions the 95%
interval of a speed ratio covers the true ratio, identical stacks read "no clear difference", and
figures from too few cycles say so."""

import numpy as np
import pytest

from orchestrator.judging.intervals import (
    MIN_CYCLES,
    NO_CLEAR,
    TIGHT_SPREAD,
    TOO_FEW,
    Estimate,
    margin,
    median_interval,
    memory_ratio_interval,
    peak_spread,
    ratio_interval,
    tie_ranks,
)
from orchestrator.recording.sinks import trial_row
from trainers.trial import TrialSpec

REPETITIONS = 100
TOKENS_PER_CYCLE = 1000.0


def cycles(rng: np.random.Generator, speed_up: float, n: int) -> np.ndarray:
    """tokens/s of n generation cycles whose wall time is log-normal (median 1 s, 20% spread): the
    median tokens/s is TOKENS_PER_CYCLE x speed_up exactly."""
    return TOKENS_PER_CYCLE * speed_up / rng.lognormal(0.0, 0.2, n)


@pytest.mark.parametrize(("seeds", "per_seed"), [(1, 12), (3, 4)], ids=["one seed", "three seeds"])
def test_the_ratio_interval_covers_the_true_ratio_in_at_least_90_of_100_repetitions(seeds, per_seed):
    true_ratio = 1.5
    covered = 0
    for repetition in range(REPETITIONS):
        rng = np.random.default_rng(repetition)
        fast = [cycles(rng, true_ratio, per_seed) for _ in range(seeds)]
        base = [cycles(rng, 1.0, per_seed) for _ in range(seeds)]
        ratio = ratio_interval(fast, base)
        covered += ratio.low <= true_ratio <= ratio.high
    assert covered >= 90


def test_two_identical_stacks_read_no_clear_difference_in_at_least_90_of_100_repetitions():
    no_difference = 0
    for repetition in range(REPETITIONS):
        rng = np.random.default_rng(10_000 + repetition)
        ratio = ratio_interval([cycles(rng, 1.0, 12)], [cycles(rng, 1.0, 12)])
        no_difference += ratio.words().startswith(NO_CLEAR)
    assert no_difference >= 90


def test_a_clear_difference_reads_the_ratio_with_its_interval():
    rng = np.random.default_rng(7)
    ratio = ratio_interval([cycles(rng, 2.0, 20)], [cycles(rng, 1.0, 20)])
    assert ratio.clear
    assert ratio.words() == f"{ratio.value:.2f}× (95% CI {ratio.low:.2f}–{ratio.high:.2f}×)"
    assert ratio.low < 2.0 < ratio.high


def test_one_cycle_per_stack_reads_too_few_cycles_to_compare_with_the_true_ratio_of_medians():
    ratio = ratio_interval([[810.0]], [[486.0]])
    assert ratio.value == pytest.approx(810 / 486)
    assert (ratio.low, ratio.high) == (None, None)
    assert ratio.words() == f"{TOO_FEW} (1 and 1 cycles)"


def test_a_side_below_the_minimum_makes_the_ratio_too_few_even_when_the_other_has_many():
    ratio = ratio_interval([[100.0] * 50], [[90.0] * (MIN_CYCLES - 1)])
    assert not ratio.enough
    assert ratio.words() == f"{TOO_FEW} (50 and {MIN_CYCLES - 1} cycles)"


def test_seeds_are_resampled_within_each_seed_so_each_keeps_its_weight():
    # Seed 1 ran at 100 tokens/s, seed 2 at 300, three cycles each: every stratified resample holds
    # three of each, so the pooled median is (100 + 300) / 2 = 200 in every resample.
    estimate = median_interval([[100.0, 100.0, 100.0], [300.0, 300.0, 300.0]])
    assert (estimate.median, estimate.low, estimate.high) == (200.0, 200.0, 200.0)
    assert (estimate.cycles, estimate.seeds) == (6, 2)


def test_an_estimate_states_its_sample_and_interval_or_that_it_has_too_few_cycles():
    assert median_interval([[486.0]]).words() == "486 tokens/s (1 cycle: too few for an interval)"
    values = [400.0, 420.0, 440.0, 460.0, 480.0, 500.0, 520.0]
    estimate = median_interval([values])
    assert estimate.median == 460.0
    assert values[0] <= estimate.low < 460.0 < estimate.high <= values[-1]
    assert estimate.words() == f"460 tokens/s (95% CI {estimate.low:,.0f}–{estimate.high:,.0f}; 7 cycles)"
    assert median_interval([]).words() == "—"


def test_the_same_readings_give_the_same_interval_on_every_call():
    values = [[float(v) for v in np.random.default_rng(3).normal(500, 40, 15)]]
    assert median_interval(values) == median_interval(values)


def test_rankings_tie_configurations_whose_intervals_overlap_the_group_leaders():
    ranked = [
        Estimate(500.0, 480.0, 520.0, 10, 1),
        Estimate(490.0, 470.0, 505.0, 10, 1),  # overlaps the first: tie
        Estimate(300.0, 290.0, 310.0, 10, 1),  # separated: rank 3
        Estimate(295.0, None, None, 2, 1),  # no interval: unranked
        Estimate(280.0, 270.0, 292.0, 10, 1),  # overlaps 290-310: tie with rank 3
        Estimate(100.0, 90.0, 110.0, 10, 1),
    ]
    assert tie_ranks(ranked) == [1, 1, 3, None, 3, 5]  # places among the ranked


# -- the trial row carries the interval, the sample size and the memory margin ---------------------


def test_the_trial_row_carries_the_median_tokens_per_s_interval_and_the_cycles_it_was_taken_over():
    speeds = [400.0, 420.0, 440.0, 460.0, 480.0, 500.0]
    steps = [{"step": 1, "probe": True, "tokens_per_s": 10.0}]
    steps += [{"step": n, "probe": False, "tokens_per_s": v} for n, v in enumerate(speeds, start=2)]
    row = trial_row(TrialSpec(trial_key="k"), None, steps, status="completed")
    expected = median_interval([speeds])  # the probe cycle left out
    assert row["median_tokens_per_s"] == 450.0
    assert (row["median_tokens_per_s_lo"], row["median_tokens_per_s_hi"]) == (expected.low, expected.high)
    assert row["cycles_measured"] == 6


def test_a_trial_row_from_too_few_cycles_has_a_median_but_a_null_interval():
    steps = [{"step": n, "probe": False, "tokens_per_s": 486.0} for n in (1, 2)]
    row = trial_row(TrialSpec(trial_key="k"), None, steps, status="completed")
    assert (row["median_tokens_per_s"], row["cycles_measured"]) == (486.0, 2)
    assert (row["median_tokens_per_s_lo"], row["median_tokens_per_s_hi"]) == (None, None)


@pytest.mark.parametrize(
    ("peak", "margin_gib", "margin_pct", "tight"),
    [(6.0, 2.0, 25.0, False), (7.98, 0.02, 0.25, True), (8.5, -0.5, -6.25, False)],
    ids=["room to spare", "tight", "over"],
)
def test_the_trial_row_states_the_peaks_margin_to_the_budget_in_gib_and_percent(
    peak, margin_gib, margin_pct, tight
):
    steps = [{"step": 1, "probe": False, "rss_peak_gib": peak}]
    row = trial_row(TrialSpec(trial_key="k", memory_budget_gib=8.0), None, steps, status="completed")
    assert row["budget_margin_gib"] == pytest.approx(margin_gib)
    assert row["budget_margin_pct"] == pytest.approx(margin_pct)
    assert row["tight"] is tight


def test_a_trial_without_a_budget_has_a_null_margin_and_no_tight_flag():
    row = trial_row(TrialSpec(trial_key="k"), None, [{"step": 1, "rss_peak_gib": 0.7}], status="completed")
    assert (row["budget_margin_gib"], row["budget_margin_pct"], row["tight"]) == (None, None, None)


def test_a_margin_reads_tight_within_the_spread_of_peaks_and_over_when_it_passed_the_budget():
    assert margin(7.98, 8.0).words() == "tight: 0.02 GiB (0.25%) to spare"
    assert margin(6.0, 8.0).words() == "2.00 GiB (25%) to spare"
    assert margin(8.5, 8.0).words() == "over by 0.50 GiB (6.2%)"
    # Tight below the run-to-run spread of the peak (TIGHT_SPREAD of it), not at twice that.
    assert margin(7.9, 8.0).tight is (TIGHT_SPREAD * 7.9 > 0.1)
    assert margin(8.0 / (1 + 2 * TIGHT_SPREAD), 8.0).tight is False


def test_a_memory_ratio_of_one_peak_a_side_spans_the_spread_a_rerun_moves_each_peak_by():
    ratio = memory_ratio_interval([6.0], [8.0])
    s = TIGHT_SPREAD
    assert (ratio.value, ratio.runs) == (0.75, (1, 1))
    assert (ratio.low, ratio.high) == (
        pytest.approx(6 * (1 - s) / (8 * (1 + s))),
        pytest.approx(6 * (1 + s) / (8 * (1 - s))),
    )
    assert ratio.clear and ratio.words() == f"0.75× (spread {ratio.low:.2f}–{ratio.high:.2f}×)"


def test_peaks_within_each_others_spread_read_no_clear_difference():
    ratio = memory_ratio_interval([8.2], [8.0])  # 2.5% apart: inside the ±2.5% each side may move
    assert not ratio.clear and ratio.words().startswith(f"{NO_CLEAR} (spread ")


def test_repeats_that_spread_wider_than_the_default_widen_the_memory_ratio():
    peaks = [7.0, 8.0]  # 13% apart over two seeds
    assert peak_spread(peaks) == pytest.approx(1.0 / 7.5)
    assert peak_spread([8.0, 8.01]) == TIGHT_SPREAD  # two repeats can agree by chance
    ratio = memory_ratio_interval(peaks, [4.0])
    assert ratio.value == 2.0  # the worst peak of each side, as the report states it
    assert ratio.low == pytest.approx(8 * (1 - 1 / 7.5) / (4 * (1 + TIGHT_SPREAD)))


def test_a_memory_ratio_without_a_peak_on_a_side_is_not_stated():
    assert memory_ratio_interval([], [8.0]).words() == "—"
    assert memory_ratio_interval([float("nan")], [8.0]).value is None
