"""A trial whose probe step was synthetic (trainers/probe.py): its row says what was extrapolated and keeps
the synthetic step's time out of what it measured; the report marks the extrapolated step."""

import pytest

from orchestrator.judging.speed import predict_step
from orchestrator.recording.sinks import trial_row
from orchestrator.views.report._ranked import _step_s
from trainers.trial import TrialSpec

SPEC = TrialSpec(model="tiny", max_completion_length=512, probe_steps=1, max_steps=1)
SYNTHETIC_STEP = {
    "step": 1, "probe": True, "probe_kind": "synthetic", "step_s": 3.0, "gen_s": 1.2, "train_s": 1.8,
    "gen_share": 0.4, "decode_ms_per_token_at_prompt": 20.0, "decode_ms_per_token_at_full": 30.0,
    "decode_window_tokens": 8,
}  # fmt: skip


def test_a_synthetic_probes_row_extrapolates_the_full_length_step_and_measures_no_step_time():
    row = trial_row(SPEC, None, [SYNTHETIC_STEP], status="completed")
    expected = predict_step(20.0, 30.0, 512, 1.8).step_s
    assert row["extrapolated_step_s"] == pytest.approx(expected)
    # 0.02 s prefill + 512 x 20 ms + 30 - 20 ms x 511 / 2 of decode + 1.8 s of training
    assert expected == pytest.approx(0.02 + 10.24 + 2.555 + 1.8)
    assert row["median_step_s"] is None and row["median_gen_share"] is None  # 3.0 s is no real step


def test_a_decoded_probes_row_measures_its_step_and_extrapolates_nothing():
    decoded = {**SYNTHETIC_STEP, "probe_kind": "decode", "decode_ms_per_token_at_prompt": None,
               "decode_ms_per_token_at_full": None}  # fmt: skip
    row = trial_row(SPEC, None, [decoded], status="completed")
    assert row["median_step_s"] == 3.0 and row["extrapolated_step_s"] is None


def test_the_report_marks_an_extrapolated_step_and_prefers_a_measured_one():
    nan = float("nan")
    assert _step_s({"step_s_median": nan, "step_s_extrapolated": 14.6}) == "14.60 (extrapolated)"
    assert _step_s({"step_s_median": 3.0, "step_s_extrapolated": 14.6}) == "3.00"
    assert _step_s({"step_s_median": nan, "step_s_extrapolated": nan}) == _step_s({"step_s_median": nan})
