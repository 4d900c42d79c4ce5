"""Real `tiny` trials through the supervisor (no Ray) that end with a training verdict: a reward that
never varies within a group is no_signal (and ends the trial early when asked), completions cut at a
tiny max_completion_length are truncated."""

from pathlib import Path

import pytest

from orchestrator.judging.verdict import NO_SIGNAL, TRUNCATED, VerdictSettings, judge, stop_check
from orchestrator.recording.sinks import normalize_step, trial_row
from orchestrator.running.supervisor import run_trial
from trainers.trial import TrialSpec

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SHORT = {
    "model": "tiny",
    "num_generations": 2,
    "batch_size": 2,
    "max_completion_length": 8,
    "quantization": "none",
    "probe_steps": 0,
    "num_threads": 1,
    "model_cache_dir": str(ROOT / ".cache"),
}


@pytest.fixture(scope="module")
def no_signal_trial(tmp_path_factory):
    # A random model never answers right: accuracy alone is 0 for every completion, so every group's
    # rewards are equal. Asked for 200 steps, it ends once 3 in a row had no reward variance.
    spec = TrialSpec(**SHORT, max_steps=200, task_args={"rewards": {"accuracy": 1.0}}, trial_key="no-signal")
    settings = VerdictSettings(no_signal_steps=3, min_steps=3, stop_on=(NO_SIGNAL,))
    trial_dir = tmp_path_factory.mktemp("no-signal")
    result = run_trial(spec, trial_dir=trial_dir, stop_check=stop_check(settings))
    return spec, settings, result


def normalized(spec, result):
    return [normalize_step(spec.trial_key, row) for row in result.steps]


def test_a_reward_constant_in_every_group_ends_the_trial_no_signal(no_signal_trial):
    spec, settings, result = no_signal_trial
    assert result.status == "completed", result.status_detail
    assert all(row["frac_reward_zero_std"] == 1.0 and row["reward_std"] == 0.0 for row in result.steps)
    row = trial_row(spec, result, normalized(spec, result), verdict=settings)
    assert row["training_verdict"] == NO_SIGNAL
    assert row["training_verdict_detail"].startswith(
        "no_signal: frac_reward_zero_std >= 0.95 for 3 steps in a row (steps 1-3: 1.00, 1.00, 1.00)"
    )


def test_stop_on_no_signal_ends_the_trial_early_as_completed_with_its_steps(no_signal_trial):
    spec, settings, result = no_signal_trial
    steps = [row["step"] for row in result.steps]
    assert steps[:3] == [1, 2, 3] and len(steps) < spec.max_steps
    assert result.status_detail.startswith(
        f"{len(steps)} steps; ended early at step {steps[-1]}: no_signal: "
    )
    assert judge(result.steps[:3], settings).verdict == NO_SIGNAL


def test_completions_all_cut_at_a_tiny_max_completion_length_end_truncated(tmp_path):
    spec = TrialSpec(**(SHORT | {"max_completion_length": 2}), max_steps=3, trial_key="truncated")
    result = run_trial(spec, trial_dir=tmp_path)
    assert result.status == "completed", result.status_detail
    assert all(row["clipped_ratio"] == 1.0 and row["completion_len_max"] == 2 for row in result.steps)
    # Two-token completions earn no reward either, so no_signal would hold too and rank first: put it out
    # of reach to see truncated as the one-word verdict.
    settings = VerdictSettings(truncated_steps=3, min_steps=3, no_signal_steps=99)
    row = trial_row(spec, result, normalized(spec, result), verdict=settings)
    assert row["training_verdict"] == TRUNCATED
    assert row["training_verdict_detail"] == (
        "truncated: clipped_ratio >= 0.95 for 3 steps in a row (steps 1-3: 1.00, 1.00, 1.00): completions "
        "are cut at max_completion_length, so the length limit decides the reward"
    )
