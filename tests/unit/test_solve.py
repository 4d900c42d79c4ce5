"""`rlsweep solve`'s search with a fake measure function: bisection, the guess, resume, the certificate;
and its settings' checks."""

import math

import pytest

from orchestrator.judging.intervals import TIGHT_SPREAD
from orchestrator.judging.memory import Prediction
from orchestrator.judging.solve import (
    Measured,
    SolveError,
    certify,
    ladder,
    make_request,
    measured_from_row,
    predicted_guess,
    search,
)

BUDGET = 16.0
VALUES = [2, 4, 8, 16, 32, 64, 128, 256]


def peak_of(value: int) -> float:
    """A fake memory curve rising with the value: 16 GiB is passed between 64 (14.8) and 128 (27.6)."""
    return 2.0 + 0.2 * value


class FakeTrials:
    """measure(value): a fake probe trial against peak_of, recording which values it ran."""

    def __init__(self, peak=peak_of, failing: tuple[int, ...] = ()):
        self.peak = peak
        self.failing = failing
        self.ran: list[int] = []

    def __call__(self, value: int) -> Measured:
        self.ran.append(value)
        if value in self.failing:
            return Measured(value, None, "failed", "RuntimeError: boom", None, None, f"k{value}")
        peak = self.peak(value)
        status = "completed" if peak <= BUDGET else "oom"
        return Measured(
            value, peak <= BUDGET, status, "", peak if peak <= BUDGET else None, "RSS", f"k{value}"
        )


@pytest.mark.parametrize("threshold", [1, 2, 3, 5, 8, 50, 64, 100, 255, 256, 1000])
def test_bisection_ends_at_the_largest_value_that_fits_for_every_boundary(threshold):
    trials = FakeTrials(peak=lambda v: BUDGET if v <= threshold else BUDGET + 1)
    answer = search("num_generations", VALUES, trials, BUDGET)
    fitting = [v for v in VALUES if v <= threshold]
    above = [v for v in VALUES if v > threshold]
    assert (answer.fit.value if answer.fit else None) == (fitting[-1] if fitting else None)
    assert (answer.above.value if answer.above else None) == (above[0] if above else None)
    assert answer.certified
    # Bisection over 8 candidates and 9 possible boundaries: at most ceil(log2(9)) = 4 probes, none twice.
    assert len(trials.ran) <= math.ceil(math.log2(len(VALUES) + 1))
    assert len(set(trials.ran)) == len(trials.ran)
    # Both neighbours of the boundary were measured, not inferred.
    assert {m.value for m in answer.probes} >= {*fitting[-1:], *above[:1]}


def test_without_a_guess_the_search_starts_in_the_middle():
    trials = FakeTrials()
    search("num_generations", VALUES, trials, BUDGET)
    assert trials.ran[0] == VALUES[(len(VALUES) - 1) // 2]


def test_a_right_guess_is_certified_by_two_probes():
    trials = FakeTrials()
    answer = search("num_generations", VALUES, trials, BUDGET, guess=VALUES.index(64))
    assert trials.ran == [64, 128]
    assert (answer.fit.value, answer.above.value) == (64, 128)


@pytest.mark.parametrize("guess", [0, 2, 6, 7])
def test_a_wrong_guess_still_ends_at_the_true_boundary(guess):
    trials = FakeTrials()
    answer = search("num_generations", VALUES, trials, BUDGET, guess=guess)
    assert (answer.fit.value, answer.above.value) == (64, 128)
    assert trials.ran[0] == VALUES[guess]


def test_the_certificate_gives_the_measured_peak_margin_and_the_next_value():
    answer = search("num_generations", VALUES, FakeTrials(), BUDGET)
    first, second = answer.lines()
    spare = BUDGET - peak_of(64)  # 16 - 14.8 = 1.2 GiB, 7.5% of the budget
    assert first == (
        f"largest K that fits 16 GiB: 64, measured {peak_of(64):.2f} GiB RSS peak, "
        f"{spare:.2f} GiB ({spare / BUDGET * 100:.2g}%) to spare (k64)"
    )
    assert second.startswith("next K above it: 128, does not fit (out of memory")


def test_values_measured_before_are_not_measured_again():
    first = FakeTrials()
    done = search("num_generations", VALUES, first, BUDGET)
    known = {m.value: m for m in done.probes[:2]}
    again = FakeTrials()
    answer = search("num_generations", VALUES, again, BUDGET, known=known)
    assert not set(again.ran) & set(known)
    assert (answer.fit.value, answer.above.value) == (64, 128)
    # Everything known: nothing runs, the same answer.
    idle = FakeTrials()
    assert search(
        "num_generations", VALUES, idle, BUDGET, known={m.value: m for m in done.probes}
    ).lines() == (done.lines())
    assert idle.ran == []


def test_a_failed_probe_stops_the_search_without_an_answer():
    trials = FakeTrials(failing=(16,))
    answer = search("num_generations", VALUES, trials, BUDGET)
    assert trials.ran == [16]
    assert not answer.certified and answer.stopped_by.value == 16
    (line,) = answer.lines()
    assert line.startswith("no answer: the probe of K=16 ended failed (RuntimeError: boom)")


def test_a_failed_value_measured_before_is_not_run_again_and_stops_the_search():
    failed = Measured(16, None, "failed", "RuntimeError: boom", None, None, "k16")
    trials = FakeTrials()
    answer = search("num_generations", VALUES, trials, BUDGET, known={16: failed})
    assert trials.ran == [] and answer.stopped_by == failed


def test_none_fits_when_the_smallest_candidate_does_not():
    answer = search("batch_size", [1, 2, 4], FakeTrials(peak=lambda v: BUDGET * 2), BUDGET)
    assert answer.fit is None and answer.above.value == 1
    assert answer.lines()[0].startswith(
        "none fits 16 GiB: the smallest candidate B=1 does not (out of memory"
    )


def test_the_top_candidate_fitting_says_no_larger_value_was_tried():
    answer = search("max_completion_length", [32, 64], FakeTrials(peak=lambda v: 1.0), BUDGET)
    assert answer.fit.value == 64 and answer.above is None
    assert "give a larger --to" in answer.lines()[1]


def test_a_fit_above_a_value_that_does_not_is_reported_as_not_certain():
    measured = {
        v: Measured(v, fits, "completed" if fits else "oom", "", 1.0 if fits else None, "RSS", f"k{v}")
        for v, fits in ((2, True), (4, False), (8, True))
    }
    answer = certify("num_generations", [2, 4, 8], measured, BUDGET)
    assert (answer.fit.value, answer.above.value) == (2, 4)
    assert not answer.certified
    assert answer.contradictions == [
        "K=8 fits (1.00 GiB) above K=4, which does not: memory is not monotone in num_generations here, so "
        "the bisection's answer is a lower bound"
    ]


def test_a_completed_trial_over_the_budget_does_not_fit():
    row = {"trial_key": "k8", "status": "completed", "status_detail": "2 steps", "peak_rss_gib": 16.2}
    assert measured_from_row(8, row, BUDGET).fits is False
    assert measured_from_row(8, {**row, "peak_rss_gib": 15.9}, BUDGET).fits is True
    assert measured_from_row(8, {**row, "status": "oom", "peak_rss_gib": None}, BUDGET).fits is False
    assert measured_from_row(8, {**row, "status": "failed"}, BUDGET).fits is None


def test_a_timed_out_trial_does_not_fit_only_where_the_peak_it_measured_already_passed_the_budget():
    row = {"trial_key": "k8", "status": "timeout", "status_detail": "killed at ...", "peak_rss_gib": 15.5}
    assert measured_from_row(8, row, BUDGET).fits is None  # a lower bound under the budget says nothing
    assert measured_from_row(8, row, BUDGET, headroom_gib=1.0).fits is False
    assert measured_from_row(8, {**row, "peak_rss_gib": None}, BUDGET).fits is None


def test_the_ladder_doubles_up_to_its_last_value():
    assert ladder(2, 24) == [2, 4, 8, 16, 24]
    assert ladder(1, 1) == [1]
    assert ladder(32, 8192) == [32 * 2**i for i in range(9)]


def test_solve_settings_errors_name_the_flag_the_value_and_the_rule(tmp_path):
    with pytest.raises(SolveError) as caught:
        make_request(
            "num_generations",
            0.0,
            sets=["lora_r=0", "lora_rank=8", "num_generations=4", "trial_key=x", "memory_budget_gib=3"],
            values=[1, 4],
            output_dir=str(tmp_path),
        )
    assert caught.value.errors == [
        "--budget-gib: 0 is not a size; give the memory to fit in GiB, e.g. 16",
        "--set lora_r=0: lora_r must be >= 1, got 0; give 1 or more",
        "--set lora_rank=8: unknown trial setting 'lora_rank'; lora_rank is TRL's name; rlsweep sets lora_r",
        "--set num_generations=4: num_generations is the setting --maximize searches; give its candidates "
        "with --values or --from/--to instead",
        "--set trial_key=x: trial_key is set by rlsweep for each trial; remove it",
        "--set memory_budget_gib=3: the budget is --budget-gib or --card; give it there and drop this --set",
        "--values 1: num_generations must be >= 2, got 1; give 2 or more",
    ]


def test_ladder_values_no_trial_can_hold_are_left_out_with_a_note(tmp_path):
    request = make_request(
        "max_completion_length", 1.0, settings={"model": "tiny"}, first=1024, output_dir=str(tmp_path)
    )
    assert request.values == [1024, 2048]  # tiny's context is 4096 tokens, the prompt takes 256
    assert [n.split(":")[0] for n in request.notes] == [
        "completion length=4096 left out of the ladder",
        "completion length=8192 left out of the ladder",
    ]
    assert request.base.max_steps == request.base.probe_steps == request.guard.probe_steps == 2
    assert request.guard.budget_gib == request.base.memory_budget_gib == 1.0
    with pytest.raises(SolveError) as caught:
        make_request("max_completion_length", 1.0, values=[2048, 4096], output_dir=str(tmp_path))
    assert caught.value.errors[0].startswith("--values 4096: max_prompt_length + max_completion_length: 4352")


def _predicted(peak: float | None) -> Prediction:
    if peak is None:
        return Prediction(None, None, None, "RSS", 0, "prior", unknown="model: no config.json")
    return Prediction(peak, peak * 0.9, peak * 1.1, "RSS", 2, "fitted")


def test_the_guess_is_the_largest_candidate_predicted_within_the_budget():
    assert predicted_guess([_predicted(p) for p in (10.0, 15.0, 16.0, 17.0)], BUDGET) == 2
    assert predicted_guess([_predicted(p) for p in (17.0, 18.0)], BUDGET) == 0  # none: start at the smallest
    assert predicted_guess([_predicted(None), _predicted(12.0), _predicted(None)], BUDGET) == 1
    assert predicted_guess([_predicted(None), _predicted(None)], BUDGET) is None  # no number: the middle


def test_a_fit_within_the_spread_of_peaks_reads_tight_with_its_margin_in_the_answer_and_solve_json():
    # K=64 peaks at 15.9 GiB of 16: 0.1 GiB to spare, under the run-to-run spread (TIGHT_SPREAD of 15.9).
    answer = search(
        "num_generations", VALUES, FakeTrials(peak=lambda v: 15.9 if v == 64 else peak_of(v)), BUDGET
    )
    assert TIGHT_SPREAD * 15.9 > 0.1
    assert answer.lines()[0] == (
        "largest K that fits 16 GiB: 64, measured 15.90 GiB RSS peak, tight: 0.10 GiB (0.62%) to spare (k64): "
        "another run may not fit (docs/benchmarks.md)"
    )
    record = answer.to_dict()
    assert (record["budget_margin_gib"], record["budget_margin_pct"], record["tight"]) == pytest.approx(
        (0.1, 0.625, True)
    )


def test_headroom_makes_a_completed_peak_within_it_not_fit_and_the_answer_says_so():
    row = {"status": "completed", "peak_rss_gib": 15.5, "trial_key": "k64", "status_detail": ""}
    assert measured_from_row(64, row, BUDGET).fits is True
    tight = measured_from_row(64, row, BUDGET, headroom_gib=1.0)
    assert tight.fits is False  # 15.5 GiB leaves 0.5 of the 1 GiB asked for
    answer = search("num_generations", VALUES, FakeTrials(), BUDGET)
    answer.headroom_gib = 1.0
    assert answer.lines()[0].startswith("largest K that fits 16 GiB less 1 GiB headroom: 64")


def test_a_headroom_that_leaves_nothing_of_the_budget_is_refused(tmp_path):
    with pytest.raises(SolveError) as info:
        make_request("num_generations", 8.0, headroom_gib=8.0, output_dir=str(tmp_path / "s"))
    assert info.value.errors == [
        "--headroom-gib: 8 must be at least 0 and below --budget-gib 8; give the GiB a fit must leave free, e.g. 0.8"
    ]
