"""Training verdicts from step rows: each verdict on data that shows it, and a near-miss that must not."""

import math

import numpy as np
import pytest

from orchestrator.judging.verdict import (
    COLLAPSED,
    DIVERGED,
    LEARNING,
    MEMORY_CREEP,
    NO_SIGNAL,
    OK,
    PRECEDENCE,
    PROBLEMS,
    TOO_SHORT,
    TRUNCATED,
    VerdictSettings,
    judge,
    newcombe_interval,
    stop_check,
)
from orchestrator.recording.sinks import normalize_step, trial_row
from orchestrator.spec.load import parse_sweep
from orchestrator.spec.sweep import SweepError
from orchestrator.words.outcome import COMPLETED, TrialResult
from tools.inputs.learning_traces import (
    expected_verdict,
    learning_trace_files,
    load_learning_trace,
    trace_eval_before,
)
from trainers.trial import TrialSpec

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
    assert verdict.detail == (
        "ok: 10 steps judged; none of diverged, memory_creep, no_signal, truncated, collapsed holds, and "
        "learning is not shown"
    )


def test_fewer_steps_than_min_steps_after_the_probes_is_too_short():
    rows = steps(6, probe=[True, True] + [False] * 4)
    verdict = judge(rows, max_steps=6)
    assert verdict.verdict == TOO_SHORT
    assert verdict.detail == (
        "too_short: 4 step(s) after the probe steps, too few to judge (verdict.min_steps 5: 7 steps with its "
        "2 probe step(s))"
    )
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


def test_trial_row_holds_the_verdict_of_a_completed_trial_and_none_of_a_failed_one():
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


# ----------------------------------------------------------------------------------------------
# learning and collapsed: synthetic rows shaped like a real run's (a noisy mean of 0/1 rewards per step,
# an evaluation every 10 steps over 64 prompts)
# ----------------------------------------------------------------------------------------------
NOISE = [0.04, -0.03, 0.05, -0.05, 0.01, -0.02, 0.03, -0.04, 0.02, -0.01]


def run(n=30, rise=0.01, evals=None, prompts=64, **columns):
    """n steps whose reward_mean rises by `rise` a step (around a fixed noise); evals: {step: pass@1}."""
    rows = steps(n, **columns)
    for i, row in enumerate(rows):
        row.setdefault("reward_mean", 0.2 + rise * i + NOISE[i % len(NOISE)])
        row.setdefault("entropy", 0.9 + 0.02 * (i % 3))
        row.setdefault("distinct_completion_share", 0.8)
        row.setdefault("step_s", 2.0)
    for step, share in (evals or {}).items():
        rows[step - 1] |= {"eval_pass_at_1": share, "eval_prompts": prompts, "eval_k": 4}
    return rows


def test_a_rising_reward_and_held_out_accuracy_that_rises_beyond_its_interval_read_learning():
    verdict = judge(run(evals={10: 0.20, 20: 0.40, 30: 0.55}))
    assert verdict.verdict == LEARNING
    assert [f.verdict for f in verdict.findings] == [LEARNING]
    assert verdict.findings[0].step == 30
    detail = verdict.detail
    assert detail.startswith("learning: reward +0.1 per 10 steps (95% interval +")
    assert "Theil-Sen over steps 1-30)" in detail
    low, high = newcombe_interval(0.20, 64, 0.55, 64)
    assert low > 0
    assert detail.endswith(
        f"held-out accuracy 0.20 -> 0.55 (steps 10 -> 30, 64 prompts each), +0.35 (95% interval "
        f"{low:+.2f} to {high:+.2f})"
    )


def test_the_evaluation_before_the_first_step_is_the_baseline_of_the_held_out_change():
    """One evaluation during the run and the one before it (trials.parquet's eval_before_*) make a
    change: before training, step 0."""
    verdict = judge(run(evals={30: 0.55}), eval_before=(0.20, 64))
    assert verdict.verdict == LEARNING
    low, high = newcombe_interval(0.20, 64, 0.55, 64)
    assert verdict.detail.endswith(
        f"held-out accuracy 0.20 -> 0.55 (steps 0 -> 30, 64 prompts each), +0.35 (95% interval "
        f"{low:+.2f} to {high:+.2f})"
    )
    assert judge(run(evals={30: 0.55}), eval_before=(None, None)).detail.endswith(
        "judged on the reward alone"
    )


def test_a_flat_noisy_reward_is_not_learning_and_the_ok_detail_says_what_was_measured():
    verdict = judge(run(rise=0.0))
    assert verdict.verdict == OK
    assert verdict.detail.endswith(
        "learning is not shown; reward +0 per 10 steps (95% interval -0.0167 to +0.0158; Theil-Sen over "
        "steps 1-30): no rising reward shown"
    )


def test_fewer_reward_steps_than_learning_min_steps_judge_no_trend():
    rows = run(n=7, rise=0.05)
    assert judge(rows).verdict == OK
    assert judge(rows, VerdictSettings(learning_min_steps=7)).verdict == LEARNING


def test_probe_steps_and_steps_without_a_reward_are_left_out_of_the_trend():
    rows = run(n=12, rise=0.02, probe=[True, True] + [False] * 10)
    rows[0]["reward_mean"] = rows[1]["reward_mean"] = 5.0  # forced full length: not the policy's reward
    rows[5]["reward_mean"] = None  # a step that reused its cycle's completions
    verdict = judge(rows)
    assert verdict.verdict == LEARNING
    assert "Theil-Sen over steps 3-12" in verdict.detail


def test_a_rising_reward_with_one_held_out_evaluation_is_judged_on_the_reward_alone():
    verdict = judge(run(evals={30: 0.5}))
    assert verdict.verdict == LEARNING
    assert verdict.detail.endswith(
        "held-out accuracy measured 1 time(s), under the two a change needs, so judged on the reward alone"
    )


def test_a_rising_reward_whose_held_out_accuracy_change_covers_zero_is_ok_not_learning():
    verdict = judge(run(evals={10: 0.30, 30: 0.40}))
    low, high = newcombe_interval(0.30, 64, 0.40, 64)
    assert low < 0 < high
    assert verdict.verdict == OK
    assert verdict.detail.endswith(": held-out accuracy does not show it")
    assert "held-out accuracy 0.30 -> 0.40" in verdict.detail


def test_a_rising_reward_while_held_out_accuracy_falls_beyond_its_interval_is_collapsed_not_learning():
    verdict = judge(run(evals={10: 0.50, 30: 0.20}))
    assert verdict.verdict == COLLAPSED
    assert [f.verdict for f in verdict.findings] == [COLLAPSED]
    assert "while held-out accuracy 0.50 -> 0.20" in verdict.detail


def test_a_falling_held_out_accuracy_without_a_rising_reward_is_not_collapsed():
    assert judge(run(rise=0.0, evals={10: 0.50, 30: 0.20})).verdict == OK


def test_entropy_falling_by_the_drop_while_the_reward_rises_is_collapsed_and_just_short_is_not():
    entropy = [1.0] * 5 + [0.6] * 20 + [0.25] * 5  # the last five's median is 0.25 x the first five's
    verdict = judge(run(entropy=entropy))
    assert verdict.verdict == COLLAPSED
    assert [f.verdict for f in verdict.findings] == [COLLAPSED, LEARNING]  # both listed, the problem first
    assert "while entropy 1 -> 0.25 nats (medians of steps 1-5 and 26-30), -75%" in verdict.detail
    assert judge(run(entropy=[1.0] * 5 + [0.6] * 20 + [0.26] * 5)).verdict == LEARNING
    assert judge(run(rise=0.0, entropy=entropy)).verdict == OK  # no rising reward: a sharpening policy


def test_entropy_falling_while_held_out_accuracy_rises_beyond_its_interval_is_learning_not_collapse():
    """A policy that grows sure of right answers loses entropy: with held-out accuracy up, that is learning
    (recorded on SmolLM2: entropy -90% while accuracy rose 0.22 -> 0.80)."""
    entropy = [1.0] * 5 + [0.6] * 20 + [0.1] * 5
    assert judge(run(entropy=entropy, evals={10: 0.20, 30: 0.55})).verdict == LEARNING
    assert judge(run(entropy=entropy, evals={10: 0.30, 30: 0.40})).verdict == COLLAPSED  # not shown to rise


def test_completions_converging_to_one_text_for_n_steps_are_collapsed_and_four_steps_are_not():
    share = [0.8] * 20 + [0.06] * 5 + [0.8] * 5
    verdict = judge(run(rise=0.0, distinct_completion_share=share))
    assert verdict.verdict == COLLAPSED
    assert verdict.findings[0].step == 25
    assert verdict.detail.startswith(
        "collapsed: distinct_completion_share <= 0.1 for 5 steps in a row (steps 21-25: 0.06, "
    )
    assert verdict.detail.endswith("the completions converge to one text")
    four = [0.8] * 20 + [0.06] * 4 + [0.8] * 6
    assert judge(run(rise=0.0, distinct_completion_share=four)).verdict == OK
    unmeasured = judge(run(rise=0.0, distinct_completion_share=[None] * 30))  # null: not measured, never 0
    assert unmeasured.verdict == OK


def test_the_problems_come_before_learning_in_the_precedence():
    assert (*PROBLEMS, LEARNING) == PRECEDENCE
    assert PROBLEMS[-1] == COLLAPSED
    rows = run(frac_reward_zero_std=[1.0] * 30)
    verdict = judge(rows)
    assert verdict.verdict == NO_SIGNAL
    assert [f.verdict for f in verdict.findings] == [NO_SIGNAL, LEARNING]


def test_stop_check_can_end_a_trial_whose_completions_converge_to_one_text():
    check = stop_check(VerdictSettings(stop_on=(COLLAPSED,), collapse_distinct_steps=2))
    rows = run(rise=0.0, distinct_completion_share=[0.8] * 5 + [0.05] * 25)
    assert check(rows[:6]) is None
    assert check(rows[:7]).startswith("collapsed: distinct_completion_share <= 0.1 for 2 steps")


def test_the_sweeps_verdict_section_sets_the_learning_and_collapse_thresholds_and_refuses_bad_ones():
    sweep = parse_sweep(
        {"name": "s", "verdict": {"learning_min_steps": 10, "collapse_entropy_drop": 0.5,
                                  "accuracy_target": 0.7, "stop_on": ["collapsed"]}}
    )  # fmt: skip
    assert sweep.verdict.settings() == VerdictSettings(
        learning_min_steps=10, collapse_entropy_drop=0.5, accuracy_target=0.7, stop_on=(COLLAPSED,)
    )
    with pytest.raises(SweepError) as err:
        parse_sweep({"name": "s", "verdict": {"collapse_entropy_drop": 1.0, "accuracy_target": 0,
                                              "learning_min_steps": 2, "learning_confidence": 1}})  # fmt: skip
    text = str(err.value)
    assert "verdict.collapse_entropy_drop: input should be less than 1" in text
    assert "verdict.accuracy_target: input should be greater than 0" in text
    assert "verdict.learning_min_steps: input should be greater than or equal to 3" in text
    assert "verdict.learning_confidence: input should be less than 1" in text


def test_newcombes_interval_matches_its_published_example():
    # Newcombe (1998), Statistics in Medicine 17:873, table II example (a): 56/70 - 48/80, method 10
    low, high = newcombe_interval(48 / 80, 80, 56 / 70, 70)
    assert (round(low, 4), round(high, 4)) == (0.0524, 0.3339)


@pytest.mark.parametrize("path", learning_trace_files(), ids=lambda p: p.stem)
def test_each_recorded_real_trace_reads_the_verdict_its_name_gives(path):
    verdict = judge(load_learning_trace(path), eval_before=trace_eval_before(path))
    assert verdict.verdict == expected_verdict(path), verdict.detail


def test_the_trainer_counts_distinct_completions_by_their_token_ids():
    from types import SimpleNamespace

    from trainers.measure import StepCounters, measured

    class Base:
        def _generate(self, prompts):
            return [[1]] * 4, [[5, 6], [5, 6], [7], [5, 6, 0]]

    trainer = measured(Base)()
    trainer.args = SimpleNamespace(max_completion_length=8)
    trainer.model = SimpleNamespace(training=True)
    trainer.counters = StepCounters()
    trainer._generate(["p"] * 4)
    assert trainer.counters.completions == 4 and len(trainer.counters.texts) == 3  # a share of 0.75


def test_a_step_that_changes_the_trained_weights_by_their_own_size_is_diverged():
    """A learning rate far too high rewrites the weights in one step; the reward may then just stop varying
    (no_signal), but the update says why."""
    rows = steps(update_ratio=[0.002] * 3 + [2.5] + [0.0] * 6)
    verdict = judge(rows)
    assert verdict.verdict == DIVERGED and verdict.findings[0].step == 4
    assert verdict.detail.startswith(
        "diverged: update_ratio 2.5 at step 4: the step changed the trained weights"
    )
    assert judge(steps(update_ratio=[0.9] * 10)).verdict != DIVERGED  # under the limit of 1
    assert judge(steps(update_ratio=[0.9] * 10), VerdictSettings(update_ratio_max=0.5)).verdict == DIVERGED
