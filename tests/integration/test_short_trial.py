"""A short trial trains: its synthetic probe step's random completions are used by that one step
(trainers.probe.end_synthetic_cycle), so with num_iterations 2 a trial of max_steps 2 generates and
trains its second step instead of reusing the probe's; a decoded probe's completions are real and are
reused, and the verdict then says why nothing was judged and how many steps would be."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from orchestrator.cli import main

pytestmark = pytest.mark.slow
SHORT = (
    "--framework trl --model-name tiny --max-steps 2 --num-generations 2 --batch-size 1 --num-iterations 2"
)
SHORT += " --max-completion-length 8 --max-prompt-length 96 --quantization none --lora-r 4 --num-threads 1"


def run(tmp_path, extra: str = "") -> tuple[pd.DataFrame, dict]:
    code = main(["trial", *SHORT.split(), *extra.split(), "--output-dir", str(tmp_path)])
    assert code == 0
    steps = pd.read_parquet(tmp_path / "steps.parquet").sort_values("step")
    return steps, json.loads((tmp_path / "trial.json").read_text())["outcome"]


def test_a_two_step_trial_with_a_synthetic_probe_trains_its_second_step_on_completions_it_generated(tmp_path):
    steps, outcome = run(tmp_path)  # probe steps left to their default: 1 of 2 (probe_steps_within)
    assert outcome["status"] == "completed" and len(steps) == 2
    probe, trained = steps.iloc[0], steps.iloc[1]
    assert bool(probe["probe"]) and probe["probe_kind"] == "synthetic"
    assert probe["cycle_steps"] == 1  # the probe's cycle ends with its one step
    assert not bool(trained["probe"]) and bool(trained["generated"])
    # rewards measured on its own completions (a synthetic probe's are random: not recorded)
    assert trained["completions"] == 2 and pd.notna(trained["reward_mean"]) and pd.isna(probe["reward_mean"])
    assert "1 step(s) after the probe steps" in outcome["training_verdict_detail"]


def test_a_two_step_trial_with_a_decoded_probe_reuses_it_and_its_verdict_says_how_many_steps_would_judge(
    tmp_path,
):
    steps, outcome = run(tmp_path, "--probe-kind decode")
    assert steps["probe"].tolist() == [True, True]  # the second step reuses the probe's real completions
    assert not bool(steps.iloc[1]["generated"])
    detail = outcome["training_verdict_detail"]
    assert detail.startswith("too_short: 0 step(s) after the probe steps"), detail
    assert "(verdict.min_steps 5: 7 steps with its 2 probe step(s))" in detail, detail
