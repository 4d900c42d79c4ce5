"""Per-trial figures of the report: which measured peak a trial's memory is."""

from __future__ import annotations

import pandas as pd

from orchestrator.views.report._outputs import trial_peak
from orchestrator.words.outcome import GPU, RSS, TORCH


def test_a_trial_row_without_a_peak_takes_the_steps_maxima_in_one_precedence():
    steps = pd.DataFrame(
        {"device_peak_gib": [1.0, 3.5, 2.0], "rss_gib": [0.4, 0.9, 0.5], "rss_peak_gib": [0.5, 0.6, 0.7]}
    )
    assert trial_peak({}, steps) == (3.5, GPU)
    # the trial row's own peak wins over its steps'
    assert trial_peak({"peak_device_gib": 2.0}, steps) == (2.0, GPU)
    cpu = steps.drop(columns="device_peak_gib")
    assert trial_peak({}, cpu) == (max(0.4, 0.9, 0.5, 0.5, 0.6, 0.7), RSS)
    # torch's reserved pool comes before the process RSS
    assert trial_peak({"peak_torch_reserved_gib": 1.25}, cpu) == (1.25, TORCH)
    assert trial_peak({}, pd.DataFrame()) == (None, None)
