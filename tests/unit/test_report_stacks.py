"""Unsloth against TRL: ratios of peak memory and tokens/s per shared configuration, and which stack fits
where the other does not, checked against figures computed here from the synthetic Parquet."""

from __future__ import annotations

import pandas as pd
import pytest

from orchestrator.views.report import load_outputs
from orchestrator.views.report._configs import aggregate_repeats
from orchestrator.views.report._stacks import comparison_view, stack_comparison
from tests.helpers.synthetic_sweep import write_synthetic_sweep


def _figures(outputs, framework: str, k: int, b: int) -> tuple[float, float]:
    """(worst peak over seeds, median tokens/s over the seeds' regular steps) of one configuration."""
    trials = outputs.trials.query(
        "framework == @framework and mode == 'grpo' and num_generations == @k and batch_size == @b"
    )
    steps = outputs.steps[outputs.steps["trial_key"].isin(trials["trial_key"]) & ~outputs.steps["probe"]]
    return trials["peak_device_gib"].max(), steps["tokens_per_s"].median()


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    out = tmp_path_factory.mktemp("stacks")
    write_synthetic_sweep(out)
    return load_outputs(out)


def test_ratios_are_unsloth_over_trl_for_each_configuration_both_ran(outputs):
    comparison = stack_comparison(aggregate_repeats(outputs), outputs.trials).set_index(
        ["num_generations", "batch_size"]
    )
    # Both stacks ran grpo K=2 B=1 (completed) and K=4 B=2 (TRL out of memory); nothing else is shared.
    assert sorted(comparison.index) == [(2, 1), (4, 2)]
    trl_peak, trl_tokens = _figures(outputs, "trl", 2, 1)
    unsloth_peak, unsloth_tokens = _figures(outputs, "unsloth", 2, 1)
    row = comparison.loc[(2, 1)]
    assert row["memory_ratio"] == pytest.approx(unsloth_peak / trl_peak)
    assert row["speed_ratio"] == pytest.approx(unsloth_tokens / trl_tokens)
    assert row["memory_kind"] == "GPU"
    out_of_memory = comparison.loc[(4, 2)]
    assert pd.isna(out_of_memory["memory_ratio"]) and pd.isna(out_of_memory["speed_ratio"])
    assert (out_of_memory["base_fits"], out_of_memory["stack_fits"]) == (False, True)

    view = comparison_view(comparison.reset_index()).set_index(["K", "B"])
    assert view.loc[(2, 1), "Memory Unsloth ÷ TRL"] == f"{unsloth_peak / trl_peak:.2f}×"
    assert view.loc[(2, 1), "Tokens/s Unsloth ÷ TRL"] == f"{unsloth_tokens / trl_tokens:.2f}×"
    assert view.loc[(2, 1), "Memory"] == "GPU (NVML)"
    assert list(view["Fits"]) == ["both", "only Unsloth"]
    assert view.loc[(4, 2), "TRL peak (GiB)"] == "out of memory"


def test_a_budget_between_the_two_peaks_fits_only_the_smaller_stack(outputs):
    trl_peak, _ = _figures(outputs, "trl", 2, 1)
    unsloth_peak, _ = _figures(outputs, "unsloth", 2, 1)
    assert unsloth_peak < trl_peak
    budget = (trl_peak + unsloth_peak) / 2
    comparison = stack_comparison(aggregate_repeats(outputs, budget), outputs.trials)
    view = comparison_view(comparison).set_index(["K", "B"])
    # K=4 B=2: TRL ran out of memory and Unsloth's peak is over the budget
    assert _figures(outputs, "unsloth", 4, 2)[0] > budget
    assert (view.loc[(2, 1), "Fits"], view.loc[(4, 2), "Fits"]) == ("only Unsloth", "neither")
