"""Training verdicts from step rows: each verdict on data that shows it, and a near-miss that must not."""

import math

import numpy as np
import pytest

from orchestrator.judging.verdict import (
    DIVERGED,
    MEMORY_CREEP,
    NO_SIGNAL,
    OK,
    TOO_SHORT,
    TRUNCATED,
    VerdictSettings,
    judge,
    stop_check,
)
from orchestrator.recording.sinks import normalize_step, trial_row
from orchestrator.spec.load import parse_sweep
from orchestrator.spec.sweep import SweepError
from orchestrator.words.outcome import COMPLETED, TrialResult
from trainers.spec import TrialSpec

SETTINGS = VerdictSettings()


def steps(n=10, **columns):
    """n healthy steps; a column given as a list overrides that column step by step."""
    rows = []
    for i in range(n):
        row = {
            "step": i + 1,
            "probe": False,
            "generated": True,
            "loss": 0.01 * (1 + i % 3),
            "grad_norm": 1.0 + 0.1 * (i % 4),
            "kl": 0.001 * (1 + i % 3),
            "frac_reward_zero_std": 0.5,
            "clipped_ratio": 0.2,
            "device_peak_gib": 4.0 + 0.01 * (i % 2),
        }
        for name, values in columns.items():
            row[name] = values[i]
        rows.append(row)
    return rows


def test_healthy_steps_are_ok_and_say_what_was_judged():
    verdict = judge(steps(), max_steps=10, budget_gib=16)
    assert verdict.verdict == OK
    assert verdict.detail == "ok: 10 steps judged; none of diverged, memory_creep, no_signal, truncated holds"


def test_fewer_steps_than_min_steps_after_the_probes_is_too_short():
    rows = steps(6, probe=[True, True] + [False] * 4)
    verdict = judge(rows, max_steps=6)
    assert verdict.verdict == TOO_SHORT
    assert verdict.detail == "too_short: 4 step(s) after the probe steps, too few to judge"
    assert judge(steps(5), max_steps=5).verdict == OK  # exactly min_steps: judged


def test_groups_without_reward_variance_for_n_steps_in_a_row_are_no_signal():
    share = [0.5, 1.0, 1.0, 0.96, 1.0, 1.0, 0.5, 0.5]
    verdict = judge(steps(8, frac_reward_zero_std=share), max_steps=8)
    assert verdict.verdict == NO_SIGNAL
    assert verdict.findings[0].step == 6
    assert verdict.detail == (
        "no_signal: frac_reward_zero_std >= 0.95 for 5 steps in a row (steps 2-6: 1.00, 1.00, 0.96, 1.00, "
        "1.00): no reward variance in the groups, so no advantage and no gradient from the reward"
    )


def test_four_steps_without_variance_or_one_step_just_under_the_share_is_not_no_signal():
    four = [1.0, 1.0, 1.0, 1.0, 0.5, 1.0, 1.0, 1.0, 1.0, 0.5]
    assert judge(steps(10, frac_reward_zero_std=four)).verdict == OK
    under = [1.0, 1.0, 0.94, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5]
    assert judge(steps(10, frac_reward_zero_std=under)).verdict == OK


def test_steps_that_reuse_completions_carry_no_reward_signal_and_do_not_break_the_run():
    # Every other step reuses completions (generated false, reward signals null): the 5 generating
    # steps in a row without variance are no_signal.
    share = [1.0, None] * 5
    rows = steps(10, frac_reward_zero_std=share, generated=[True, False] * 5)
    verdict = judge(rows)
    assert verdict.verdict == NO_SIGNAL
    assert "(steps 1-9: 1.00, 1.00, 1.00, 1.00, 1.00)" in verdict.detail


def test_probe_steps_do_not_count_towards_truncated():
    # Probe completions are forced to the limit, so they are cut by design.
    clipped = [1.0, 1.0, 1.0, 1.0, 1.0, 0.2, 0.2, 0.2]
    rows = steps(8, clipped_ratio=clipped, probe=[True] * 4 + [False] * 4)
    assert judge(rows).verdict == TOO_SHORT


def test_completions_cut_at_the_limit_for_n_steps_in_a_row_are_truncated():
    clipped = [0.2, 1.0, 1.0, 1.0, 1.0, 0.97, 1.0]
    verdict = judge(steps(7, clipped_ratio=clipped))
    assert verdict.verdict == TRUNCATED
    assert verdict.detail == (
        "truncated: clipped_ratio >= 0.95 for 5 steps in a row (steps 2-6: 1.00, 1.00, 1.00, 1.00, 0.97): "
        "completions are cut at max_completion_length, so the length limit decides the reward"
    )


def test_completions_mostly_but_not_nearly_all_cut_are_not_truncated():
    assert judge(steps(10, clipped_ratio=[0.9] * 10)).verdict == OK


@pytest.mark.parametrize("column", ["loss", "grad_norm"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_nan_or_infinite_loss_or_grad_norm_is_diverged(column, bad):
    values = [1.0] * 6
    values[3] = bad
    verdict = judge(steps(6, **{column: values}))
    assert verdict.verdict == DIVERGED
    assert verdict.findings[0].step == 4
    assert verdict.detail == f"diverged: {column} is {bad} at step 4"


def test_a_grad_norm_far_outside_its_running_range_is_diverged_and_its_limit_is_median_plus_k_mad():
    history = [1.0, 1.2, 0.9, 1.1, 1.0, 1.3]
    verdict = judge(steps(8, grad_norm=[*history, 25.0, 1.0]))
    median = float(np.median(history))
    mad = float(np.median(np.abs(np.array(history) - median)))
    limit = median + 10 * max(mad, 0.1 * median)
    assert verdict.verdict == DIVERGED
    assert verdict.detail == (
        f"diverged: grad_norm 25 at step 7, over median {median:.3g} + 10 x MAD {max(mad, 0.1 * median):.3g}"
        f" = {limit:.3g} of steps 1-6"
    )


def test_a_grad_norm_rise_within_k_mad_or_before_enough_history_is_not_diverged():
    history = [1.0, 1.2, 0.9, 1.1, 1.0, 1.3]
    # median 1.05, MAD 0.1 (floor 0.105): limit 2.1; 2.0 is under it.
    assert judge(steps(8, grad_norm=[*history, 2.0, 1.0])).verdict == OK
    # A spike with only 4 preceding steps is not judged (spike_min_history 5).
    assert judge(steps(8, grad_norm=[1.0, 1.1, 0.9, 1.0, 50.0, 1.0, 1.0, 1.0])).verdict == OK


def test_a_flat_kl_history_does_not_call_every_rise_a_spike():
    # kl 0 for five steps (policy equal to the reference), then small: no spread to judge against.
    assert judge(steps(8, kl=[0.0] * 5 + [0.002, 0.003, 0.004])).verdict == OK
    # A constant kl history (MAD 0) with the floor: 10 x (0.1 x 0.01) over 0.01 is 0.02.
    assert judge(steps(8, kl=[0.01] * 6 + [0.019, 0.01])).verdict == OK
    assert judge(steps(8, kl=[0.01] * 6 + [0.021, 0.01])).verdict == DIVERGED


def _creeping(n, start, mib_per_step):
    return [start + i * mib_per_step / 1024 for i in range(n)]


def test_peak_memory_that_projects_past_the_budget_within_max_steps_is_memory_creep():
    # 4.0 GiB + 100 MiB/step from step 1: reaches 16 GiB at step 1 + 12 * 1024 / 100 = 123.88 -> 124.
    rows = steps(10, device_peak_gib=_creeping(10, 4.0, 100))
    verdict = judge(rows, max_steps=200, budget_gib=16)
    assert verdict.verdict == MEMORY_CREEP
    assert verdict.detail == (
        "memory_creep: peak memory (GPU) grows 100.0 MiB/step (Theil-Sen over steps 1-10, 4.00 -> 4.88 GiB); "
        "it reaches the budget of 16 GiB at step 124, within 200 steps"
    )


def test_memory_creep_that_would_exhaust_memory_after_the_horizon_is_not_flagged():
    rows = steps(10, device_peak_gib=_creeping(10, 4.0, 100))
    assert judge(rows, max_steps=120, budget_gib=16).verdict == OK  # exhausted at 124 > 120
    horizon = VerdictSettings(creep_horizon_steps=130)
    assert judge(rows, horizon, max_steps=120, budget_gib=16).verdict == MEMORY_CREEP


def test_memory_creep_without_a_budget_uses_the_gpus_total_and_on_cpu_nothing():
    gpu = steps(10, device_peak_gib=_creeping(10, 4.0, 100))
    verdict = judge(gpu, max_steps=200, device_total_gib=16)
    assert "the GPU's total of 16 GiB at step 124" in verdict.detail
    cpu = [
        {k: v for k, v in r.items() if k != "device_peak_gib"} | {"rss_gib": r["device_peak_gib"]}
        for r in gpu
    ]
    assert judge(cpu, max_steps=200).verdict == OK


def test_flat_peak_memory_with_one_outlier_is_not_memory_creep():
    # Theil-Sen takes the median of pairwise slopes: one high step does not tilt it.
    peaks = [9.0, 9.0, 4.0, 4.0, 4.01, 4.0, 9.5, 4.0, 4.01, 4.0]
    rows = steps(10, device_peak_gib=peaks, probe=[True, True] + [False] * 8)
    assert judge(rows, max_steps=10, budget_gib=10).verdict == OK


def test_several_verdicts_are_all_listed_and_the_one_word_follows_the_precedence():
    rows = steps(8, frac_reward_zero_std=[1.0] * 8, clipped_ratio=[1.0] * 8, loss=[0.1] * 7 + [math.nan])
    verdict = judge(rows)
    assert verdict.verdict == DIVERGED
    assert [f.verdict for f in verdict.findings] == [DIVERGED, NO_SIGNAL, TRUNCATED]
    assert verdict.detail.startswith("diverged: loss is nan at step 8; no_signal: ")
    assert "; truncated: clipped_ratio" in verdict.detail


def test_stop_check_answers_when_a_stop_on_verdict_first_holds_and_ignores_the_others():
    check = stop_check(VerdictSettings(stop_on=(NO_SIGNAL,), no_signal_steps=3))
    rows = steps(6, frac_reward_zero_std=[1.0] * 6, clipped_ratio=[1.0] * 6)
    assert check(rows[:2]) is None
    assert check(rows[:3]).startswith(
        "no_signal: frac_reward_zero_std >= 0.95 for 3 steps in a row (steps 1-3"
    )
    assert stop_check(VerdictSettings()) is None


def test_trial_row_holds_the_verdict_of_a_completed_trial_only():
    spec = TrialSpec(trial_key="t", max_steps=8)
    rows = steps(8, frac_reward_zero_std=[1.0] * 8)
    normalized = [normalize_step("t", r) for r in rows]
    row = trial_row(spec, TrialResult(status=COMPLETED, status_detail="8 steps"), normalized)
    assert row["training_verdict"] == NO_SIGNAL
    assert row["training_verdict_detail"] == judge(rows).detail
    failed = trial_row(spec, TrialResult(status="failed", status_detail="x"), normalized)
    assert "training_verdict" not in failed or failed["training_verdict"] is None


def test_the_sweeps_verdict_section_sets_the_thresholds_and_refuses_bad_ones():
    sweep = parse_sweep(
        {"name": "s", "verdict": {"no_signal_steps": 3, "stop_on": ["diverged", "no_signal"]}}
    )
    assert sweep.verdict.settings() == VerdictSettings(no_signal_steps=3, stop_on=(DIVERGED, NO_SIGNAL))
    with pytest.raises(SweepError) as err:
        parse_sweep({"name": "s", "verdict": {"stop_on": ["memory_creep"], "no_signal_share": 1.5}})
    text = str(err.value)
    assert "verdict.stop_on: value error, memory_creep is a projection, not certain" in text
    assert "give some of diverged, no_signal, truncated" in text
    assert "verdict.no_signal_share: input should be less than or equal to 1, got 1.5" in text
