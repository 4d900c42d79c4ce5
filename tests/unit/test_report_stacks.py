"""Unsloth against TRL: ratios of peak memory and tokens/s per shared configuration, and which stack fits
where the other does not, checked against figures computed here from the synthetic Parquet."""

from __future__ import annotations

import pandas as pd
import pytest

from orchestrator.judging.intervals import NO_CLEAR, TIGHT_SPREAD, ratio_interval
from orchestrator.views.report import load_outputs
from orchestrator.views.report._configs import aggregate_repeats
from orchestrator.views.report._document import fmt
from orchestrator.views.report._ranked import ranked_table
from orchestrator.views.report._stacks import comparison_view, stack_comparison
from tests.helpers import synthetic_sweep
from tests.helpers.synthetic_sweep import write_synthetic_sweep

# Both stacks ran grpo K=2 B=1 for 12 steps (11 measured cycles after the probe step).
LONG = [("trl", "grpo", 2, 1, 1, "completed", 12), ("unsloth", "grpo", 2, 1, 1, "completed", 12)]


def _figures(outputs, stack: str, k: int, b: int) -> tuple[float, float]:
    """(worst peak over seeds, median tokens/s over the seeds' regular steps) of one configuration."""
    trials = outputs.trials.query(
        "stack == @stack and mode == 'grpo' and num_generations == @k and batch_size == @b"
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

    # Each peak may move by its seeds' relative spread (at least 2.5%) either way: the ratio's range.
    spreads = []
    for stack in ("unsloth", "trl"):
        trials = outputs.trials
        mine = trials[(trials["stack"] == stack) & (trials["mode"] == "grpo")]
        peaks = mine[(mine["num_generations"] == 2) & (mine["batch_size"] == 1)]["peak_device_gib"]
        observed = (peaks.max() - peaks.min()) / peaks.mean() if len(peaks) > 1 else 0.0
        spreads.append(max(0.025, observed))
    low = unsloth_peak * (1 - spreads[0]) / (trl_peak * (1 + spreads[1]))
    high = unsloth_peak * (1 + spreads[0]) / (trl_peak * (1 - spreads[1]))
    assert (row["memory_ratio_lo"], row["memory_ratio_hi"]) == (pytest.approx(low), pytest.approx(high))
    assert high < 1, "the synthetic Unsloth peak is 0.8x TRL's: clear beyond the spread"

    view = comparison_view(comparison.reset_index()).set_index(["K", "B"])
    assert view.loc[(2, 1), "Memory Unsloth ÷ TRL"] == (
        f"{unsloth_peak / trl_peak:.2f}× (spread {low:.2f}–{high:.2f}×)"
    )
    # Unsloth ran K=2 B=1 once (4 measured cycles), under the minimum: no ratio is stated.
    assert view.loc[(2, 1), "Tokens/s Unsloth ÷ TRL"] == "too few cycles to compare (4 and 8 cycles)"
    trl = aggregate_repeats(outputs).query("stack == 'trl' and num_generations == 2 and batch_size == 1")
    low, high = trl.iloc[0]["tokens_low"], trl.iloc[0]["tokens_high"]
    assert (
        view.loc[(2, 1), "TRL tokens/s"]
        == f"{fmt(trl_tokens)} (95% CI {fmt(low)}–{fmt(high)}; 8 cycles, 2 seeds)"
    )
    assert (
        view.loc[(2, 1), "Unsloth tokens/s"] == f"{fmt(unsloth_tokens)} (4 cycles: too few for an interval)"
    )
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


def _long_comparison(out) -> pd.Series:
    write_synthetic_sweep(out, grid=LONG)
    outputs = load_outputs(out)
    return stack_comparison(aggregate_repeats(outputs), outputs.trials).iloc[0], outputs


def test_a_speed_ratio_the_cycles_support_reads_with_its_95_percent_interval(tmp_path):
    row, outputs = _long_comparison(tmp_path)  # Unsloth runs 1.6x TRL's tokens/s (STACK_FACTORS)
    cycles = {
        f: outputs.steps.query("trial_key.str.startswith(@f) and not probe")["tokens_per_s"].tolist()
        for f in ("trl", "unsloth")
    }
    expected = ratio_interval([cycles["unsloth"]], [cycles["trl"]])
    assert (row["base_cycles"], row["stack_cycles"]) == (11, 11)
    assert (row["speed_ratio_lo"], row["speed_ratio_hi"]) == (expected.low, expected.high)
    assert 1 < row["speed_ratio_lo"] < 1.6 < row["speed_ratio_hi"]
    view = comparison_view(pd.DataFrame([row]))
    words = f"{row['speed_ratio']:.2f}× (95% CI {expected.low:.2f}–{expected.high:.2f}×)"
    assert view.loc[0, "Tokens/s Unsloth ÷ TRL"] == words


def test_two_stacks_at_the_same_speed_read_no_clear_difference_never_a_bare_ratio(tmp_path, monkeypatch):
    monkeypatch.setitem(synthetic_sweep.STACK_FACTORS, "unsloth", (0.8, 1.0))
    row, _ = _long_comparison(tmp_path)
    assert row["speed_ratio"] != 1.0  # the medians differ by noise alone
    assert row["speed_ratio_lo"] <= 1 <= row["speed_ratio_hi"]
    view = comparison_view(pd.DataFrame([row]))
    assert view.loc[0, "Tokens/s Unsloth ÷ TRL"] == (
        f"{NO_CLEAR} (95% CI {row['speed_ratio_lo']:.2f}–{row['speed_ratio_hi']:.2f}×)"
    )


@pytest.mark.parametrize(("unsloth_speed", "ranks"), [(1.0, ["1 (tie)", "1 (tie)"]), (1.6, ["1", "2"])])
def test_the_ranking_ties_configurations_no_measurement_separates(
    tmp_path, monkeypatch, unsloth_speed, ranks
):
    monkeypatch.setitem(synthetic_sweep.STACK_FACTORS, "unsloth", (0.8, unsloth_speed))
    write_synthetic_sweep(tmp_path, grid=LONG)
    ranked = aggregate_repeats(load_outputs(tmp_path))
    table = ranked_table(ranked)
    assert list(table["Rank"]) == ranks
    assert list(table["Cycles"]) == [11, 11]
    first = ranked.iloc[0]
    assert table.loc[0, "Tokens/s 95% CI"] == f"{fmt(first['tokens_low'])}–{fmt(first['tokens_high'])}"


def test_the_ranking_states_each_fits_margin_and_flags_a_tight_one(tmp_path):
    write_synthetic_sweep(tmp_path, grid=LONG)
    outputs = load_outputs(tmp_path)
    peaks = aggregate_repeats(outputs).set_index("stack")["peak_gib"]
    budget = peaks["trl"] + 0.01  # TRL fits by 0.01 GiB, under the spread of its peak; Unsloth by more
    assert TIGHT_SPREAD * peaks["trl"] > 0.01 and budget - peaks["unsloth"] > TIGHT_SPREAD * peaks["unsloth"]
    ranked = aggregate_repeats(outputs, budget)
    fits = ranked_table(ranked, budget).set_index("Stack")[f"Fits {budget:g} GiB"]
    trl, unsloth = (ranked.set_index("stack").loc[f] for f in ("trl", "unsloth"))
    assert trl["tight"] and not unsloth["tight"]
    assert fits["trl"] == f"tight: 0.01 GiB ({0.01 / budget * 100:.2g}%) to spare"
    spare = budget - peaks["unsloth"]
    assert fits["unsloth"] == f"yes, {spare:.2f} GiB ({spare / budget * 100:.2g}%) to spare"
    # memory.headroom_gib: a fit must leave that much free; TRL's 0.01 GiB is not enough for 0.05
    kept = aggregate_repeats(outputs, budget, headroom_gib=0.05).set_index("stack")
    assert (kept.loc["trl", "fits"], kept.loc["unsloth", "fits"]) == (False, True)
