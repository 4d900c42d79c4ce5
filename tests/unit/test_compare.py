"""`rlsweep compare A B`: trials matched by key or settings side by side with B/A ratios, the ones only one
sweep has with the settings that separate them, and the same as CSV and JSON."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from rich.console import Console

from orchestrator.judging.intervals import TIGHT_SPREAD, median_interval, ratio_interval
from orchestrator.views.compare import compare_outputs
from orchestrator.views.report import load_outputs, summary_table
from tests.helpers.synthetic_sweep import GRID, trial_key, write_synthetic_sweep

SPEEDUP, MEMORY_SCALE = 1.7, 1.4


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    write_synthetic_sweep(a)
    # B: faster, hungrier, lacks the last two trials of A and has one of its own.
    extra = ("trl", "gspo", 4, 4, 1, "completed", 5)
    write_synthetic_sweep(b, grid=[*GRID[:-2], extra], speedup=SPEEDUP, memory_scale=MEMORY_SCALE, rng_seed=1)
    console = Console(record=True, width=220)
    result = compare_outputs(a, b, console=console)
    return a, b, result, console.export_text()


def test_shared_keys_carry_both_sides_and_ratios(compared):
    a, b, result, _ = compared
    both = result[result["present"] == "both"].set_index("trial_key")
    assert set(both.index) == {trial_key(f, m, k, bb, s) for f, m, k, bb, s, *_ in GRID[:-2]}
    sa = summary_table(load_outputs(a)).set_index("run_name")
    sb = summary_table(load_outputs(b)).set_index("run_name")
    key = trial_key("unsloth", "grpo", 4, 2, 1)
    row = both.loc[key]
    assert row["tokens_per_s_a"] == pytest.approx(sa.loc[key, "median_tokens_per_s"])
    assert row["tokens_per_s_ratio"] == pytest.approx(
        sb.loc[key, "median_tokens_per_s"] / sa.loc[key, "median_tokens_per_s"]
    )
    assert row["step_s_ratio"] == pytest.approx(sb.loc[key, "median_step_s"] / sa.loc[key, "median_step_s"])
    assert row["peak_gib_ratio"] == pytest.approx(
        sb.loc[key, "peak_device_gib"] / sa.loc[key, "peak_device_gib"]
    )
    completed = both[both["status_a"] == "completed"]
    assert (completed["tokens_per_s_ratio"] > 1).all()  # B was generated faster
    assert (completed["step_s_ratio"] < 1).all()
    assert (completed["peak_gib_ratio"] > 1).all()  # and hungrier
    # A pruned trial has no figures: its ratios are unknown, not 0 or inf.
    assert both.loc[trial_key("trl", "grpo", 8, 2, 1), ["tokens_per_s_ratio", "peak_gib_ratio"]].isna().all()


def test_keys_only_one_sweep_has_are_listed(compared):
    _, _, result, printed = compared
    only_a = set(result.loc[result["present"] == "only A", "trial_key"])
    only_b = set(result.loc[result["present"] == "only B", "trial_key"])
    assert only_a == {trial_key(f, m, k, b, s) for f, m, k, b, s, *_ in GRID[-2:]}
    assert only_b == {trial_key("trl", "gspo", 4, 4, 1)}
    assert result.loc[result["present"] == "only B", "status_a"].isna().all()
    assert list(result["present"]) == sorted(result["present"], key=["both", "only A", "only B"].index)
    for key in only_a | only_b:
        assert key in printed
    assert "B/A" in printed and "OOM" in printed


def test_memory_ratio_needs_the_same_kind_of_measurement(tmp_path):
    gpu, cpu = tmp_path / "gpu", tmp_path / "cpu"
    write_synthetic_sweep(gpu, grid=GRID[:1])
    write_synthetic_sweep(cpu, grid=GRID[:1], gpu=False)
    result = compare_outputs(gpu, cpu, console=Console(record=True, width=200))
    row = result.iloc[0]
    assert (row["memory_kind_a"], row["memory_kind_b"]) == ("GPU", "RSS")
    assert pd.isna(row["peak_gib_ratio"])
    assert pd.notna(row["tokens_per_s_ratio"])


def test_peaks_print_with_two_decimals(compared):
    _, _, result, printed = compared
    both = result[(result["present"] == "both") & result["peak_gib_a"].notna()]
    assert all(f"{peak:.2f}" in printed for peak in both["peak_gib_a"])


def _rekeyed(out, suffix: str, seed_of: dict[str, int] | None = None) -> None:
    """The same trials under other keys (another machine's sweep), some with another seed."""
    import pyarrow.parquet as pq

    trials = pq.read_table(out / "trials.parquet").to_pandas()
    for key, seed in (seed_of or {}).items():
        trials.loc[trials.trial_key == key, "seed"] = seed
    trials["trial_key"] = trials["trial_key"] + suffix
    trials.to_parquet(out / "trials.parquet", index=False)


def test_trials_pair_on_their_settings_and_unmatched_ones_say_which_settings_separate_them(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    grid = [GRID[0], GRID[3], GRID[7]]  # the last differs from the others in more than its seed
    write_synthetic_sweep(a, grid=grid)
    write_synthetic_sweep(b, grid=grid, speedup=SPEEDUP)
    _rekeyed(b, "-other-gpu", seed_of={trial_key(*grid[2][:5]): 7})
    console = Console(record=True, width=250)
    result = compare_outputs(a, b, console=console)
    both = result[result["present"] == "both"]
    assert sorted(both["trial_key"]) == sorted(trial_key(*row[:5]) for row in grid[:2])
    assert (both["trial_key_b"] == both["trial_key"] + "-other-gpu").all()
    assert (both["tokens_per_s_ratio"] > 1).all()
    unmatched = result[result["present"] != "both"].set_index("present")
    assert unmatched.loc["only A", "separated_by"] == "seed 1 vs 7"
    assert unmatched.loc["only B", "separated_by"] == "seed 7 vs 1"
    assert "differs in seed 1 vs 7" in console.export_text()


def test_compare_prints_csv_and_json_for_scripts(compared, capsys):
    from orchestrator.cli import main

    a, b, result, _ = compared
    assert main(["compare", str(a), str(b), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["trial_key"] for r in records] == result["trial_key"].tolist()
    ratios = [float("nan") if r["tokens_per_s_ratio"] is None else r["tokens_per_s_ratio"] for r in records]
    assert ratios == pytest.approx(
        result["tokens_per_s_ratio"].tolist(), nan_ok=True
    )  # JSON's null: no ratio
    assert main(["compare", str(a), str(b), "--csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert table["trial_key"].tolist() == result["trial_key"].tolist()
    assert table["peak_gib_b"].tolist() == pytest.approx(result["peak_gib_b"].tolist(), nan_ok=True)


LONG = [("trl", "grpo", 2, 1, 1, "completed", 12)]  # 11 measured cycles after the probe step


@pytest.mark.parametrize(
    ("speedup", "reads"), [(1.7, "clear"), (1.0, "no clear difference")], ids=["faster", "same speed"]
)
def test_the_b_over_a_speed_ratio_carries_its_interval_in_the_table_and_the_json(
    tmp_path, capsys, speedup, reads
):
    a, b = tmp_path / "a", tmp_path / "b"
    write_synthetic_sweep(a, grid=LONG)
    write_synthetic_sweep(b, grid=LONG, speedup=speedup, rng_seed=1)
    speeds = {side: load_outputs(side).steps.query("not probe")["tokens_per_s"].tolist() for side in (a, b)}
    expected = ratio_interval([speeds[b]], [speeds[a]])
    console = Console(record=True, width=260, file=io.StringIO())
    row = compare_outputs(a, b, console=console).iloc[0]
    assert (row["tokens_per_s_ratio_lo"], row["tokens_per_s_ratio_hi"]) == (expected.low, expected.high)
    assert (row["cycles_a"], row["cycles_b"]) == (11, 11)
    assert (row["tokens_per_s_a_lo"], row["tokens_per_s_a_hi"]) == (
        median_interval([speeds[a]]).low,
        median_interval([speeds[a]]).high,
    )
    words = expected.words()
    assert row["tokens_per_s_words"] == words
    assert words.startswith(f"{expected.value:.2f}×" if reads == "clear" else "no clear difference")
    assert words.split(" (")[0] in console.export_text()
    from orchestrator.cli import main

    assert main(["compare", str(a), str(b), "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    assert (record["tokens_per_s_ratio_lo"], record["tokens_per_s_ratio_hi"]) == pytest.approx(
        (expected.low, expected.high), rel=1e-9
    )  # pandas' JSON keeps 10 digits
    assert record["tokens_per_s_words"] == words


def test_a_b_over_a_ratio_from_too_few_cycles_says_so_in_the_json(compared):
    _, _, result, _ = compared
    row = result.set_index("trial_key").loc[trial_key("unsloth", "grpo", 4, 2, 1)]
    assert row["tokens_per_s_words"] == "too few cycles to compare (4 and 4 cycles)"
    assert pd.isna(row["tokens_per_s_ratio_lo"]) and pd.isna(row["tokens_per_s_ratio_hi"])


def test_step_time_and_peak_ratios_carry_their_ranges_in_the_json(compared):
    a, b, result, text = compared
    key = trial_key("trl", "grpo", 2, 1, 1)
    row = result.set_index("trial_key").loc[key]
    steps = {}
    for side in (a, b):
        rows = load_outputs(side).steps
        steps[side] = rows[(rows["trial_key"] == key) & ~rows["probe"]]["step_s"].tolist()
    expected = ratio_interval([steps[b]], [steps[a]])
    assert (row["step_s_ratio_lo"], row["step_s_ratio_hi"], row["step_s_words"]) == (
        expected.low,
        expected.high,
        expected.words(),
    )
    peak_a, peak_b = row["peak_gib_a"], row["peak_gib_b"]
    low = peak_b * (1 - TIGHT_SPREAD) / (peak_a * (1 + TIGHT_SPREAD))  # one run a side: the default spread
    high = peak_b * (1 + TIGHT_SPREAD) / (peak_a * (1 - TIGHT_SPREAD))
    assert (row["peak_gib_ratio_lo"], row["peak_gib_ratio_hi"]) == (pytest.approx(low), pytest.approx(high))
    assert row["peak_gib_words"] == f"{peak_b / peak_a:.2f}× (spread {low:.2f}–{high:.2f}×)"  # B is 1.4x
    assert row["peak_gib_words"] in text
