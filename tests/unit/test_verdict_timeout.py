"""A trial cut short by its wall-clock limit (status `timeout`) is judged on the steps it kept, as the
recorder writes its row: the real SmolLM2 run of sweeps/cpu-learn.yaml (bench/data/learning), its
last step lost to the limit."""

from orchestrator.judging.verdict import LEARNING, TOO_SHORT, judge, judge_trial
from orchestrator.recording.sinks import trial_row
from orchestrator.words.outcome import COMPLETED, FAILED, TIMEOUT, TrialResult
from tools.inputs.learning_traces import LEARNING_TRACES, load_learning_trace, trace_eval_before
from trainers.trial import TrialSpec

TRACE = LEARNING_TRACES / "learning-smollm2-learning.parquet"
DETAIL = "killed at the wall-clock limit of 900 s with 19 of 20 steps measured (kept)"


def timed_out(kept: int) -> tuple[TrialSpec, TrialResult, list[dict]]:
    """The recorded cpu-learn run (20 steps asked) killed at its limit with its first `kept` steps."""
    steps = load_learning_trace(TRACE)[:kept]
    accuracy, prompts = trace_eval_before(TRACE)
    started = {"eval_before": {"eval_pass_at_1": accuracy, "eval_prompts": prompts}}
    spec = TrialSpec(trial_key="cpu-learn", model="smollm2", max_steps=20, probe_steps=0)
    return spec, TrialResult(status=TIMEOUT, status_detail=DETAIL, started=started, steps=steps), steps


def test_a_timeout_that_kept_19_of_20_steps_whose_reward_rises_reads_learning_judged_on_the_kept_steps():
    spec, result, steps = timed_out(19)
    row = trial_row(spec, result, steps)
    assert row["status"] == TIMEOUT and row["steps_completed"] == 19
    assert row["training_verdict"] == LEARNING
    detail = row["training_verdict_detail"]
    assert detail.startswith("learning: reward +0.525 per 10 steps")
    assert "Theil-Sen over steps 1-19" in detail and "held-out accuracy 0.22 -> 0.67 (steps 0 -> 10" in detail
    assert detail.endswith("; judged on the 19 of 20 steps measured before the time limit")


def test_a_timeout_that_kept_no_step_has_no_verdict():
    spec, result, steps = timed_out(0)
    row = trial_row(spec, result, steps)
    assert row["status"] == TIMEOUT and row["training_verdict"] is None
    assert row["training_verdict_detail"] is None
    assert judge_trial(TIMEOUT, [], max_steps=20) is None


def test_a_timeout_with_too_few_kept_steps_is_too_short_and_says_on_what():
    verdict = judge_trial(TIMEOUT, load_learning_trace(TRACE)[:2], max_steps=20)
    assert verdict.verdict == TOO_SHORT
    assert verdict.detail == (
        "too_short: 2 step(s) after the probe steps, too few to judge (verdict.min_steps 5: 5 steps with its "
        "0 probe step(s)); "
        "judged on the 2 of 20 steps measured before the time limit"
    )


def test_a_completed_trial_reads_as_judge_says_and_other_statuses_are_not_judged():
    steps = load_learning_trace(TRACE)
    assert judge_trial(COMPLETED, steps, max_steps=20).detail == judge(steps, max_steps=20).detail
    assert judge_trial(FAILED, steps, max_steps=20) is None
