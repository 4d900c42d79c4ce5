"""The feasibility frontier: per stack and model, the largest configuration that completed and the
smallest that ran out of memory."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from rich.console import Console

from orchestrator.judging.intervals import TIGHT_SPREAD
from orchestrator.views.report import frontier, frontier_table
from orchestrator.views.report._feasibility import FRONTIER_COLUMNS, feasibility_matrix
from orchestrator.views.report._feasibility_tables import NO_ANSWER, frontier_view, matrix_views


def trials_frame() -> pd.DataFrame:
    rows = []
    for stack in ("trl", "unsloth"):
        for k, b, status, peak in (
            (2, 1, "completed", 0.61),
            (4, 1, "completed", 0.74),
            (2, 2, "completed", 0.70),
            (4, 2, "oom", 1.12),
            (8, 1, "oom", 1.30),
            (8, 2, "pruned", None),
        ):
            rows.append(
                {
                    "trial_key": f"{stack}-k{k}-b{b}",
                    "stack": stack,
                    "mode": "grpo",
                    "model": "tiny",
                    "quantization": "nf4",
                    "num_generations": k,
                    "batch_size": b,
                    "micro_batch_size": None,
                    "max_prompt_length": 64,
                    "max_completion_length": 32,
                    "lora_r": 8,
                    "status": status,
                    "status_detail": f"guard: RSS {peak} GiB passed budget 1.00 GiB (+0.00 GiB margin)"
                    if status == "oom"
                    else "",
                    "peak_device_gib": None,
                    "peak_rss_gib": peak,
                }
            )
    rows.append(rows[0] | {"trial_key": "none-fit", "model": "big", "status": "oom", "peak_rss_gib": 3.0})
    return pd.DataFrame(rows)


def test_frontier_largest_fit_and_smallest_oom_per_group():
    df = frontier(trials_frame())
    assert list(df.columns) == list(FRONTIER_COLUMNS)
    trl = df[(df["stack"] == "trl") & (df.model == "tiny")].iloc[0]
    assert trl.largest_fit == "K=4 B=1 (4 completions/step)" and trl.fit_trial_key == "trl-k4-b1"
    assert trl.fit_peak_rss_gib == 0.74 and pd.isna(trl.fit_peak_device_gib)
    # K=4 B=2 and K=8 B=1 both make 8 completions: the lower peak is the smaller configuration
    assert trl.smallest_oom == "K=4 B=2 (8 completions/step)" and trl.oom_trial_key == "trl-k4-b2"
    assert trl.oom_detail.startswith("guard: RSS 1.12 GiB")
    assert (trl.completed, trl.oom, trl.pruned) == (3, 2, 1)
    big = df[df.model == "big"].iloc[0]
    assert pd.isna(big.largest_fit) and pd.isna(big.fit_trial_key) and big.smallest_oom.startswith("K=2 B=1")
    assert len(df) == 3


def test_frontier_labels_name_other_knobs_that_vary():
    t = trials_frame()
    t.loc[t.trial_key == "trl-k2-b2", "max_completion_length"] = 256
    df = frontier(t)
    trl, unsloth = (df[(df["stack"] == f) & (df.model == "tiny")].iloc[0] for f in ("trl", "unsloth"))
    # same completions per step: the longer completions make the larger configuration
    assert trl.largest_fit == "K=2 B=2 completion=256 (4 completions/step)"
    assert trl.smallest_oom == "K=4 B=2 completion=32 (8 completions/step)"
    assert unsloth.largest_fit == "K=4 B=1 (4 completions/step)"


def test_frontier_names_missing_columns():
    with pytest.raises(ValueError, match="lacks column\\(s\\) status"):
        frontier(trials_frame().drop(columns=["status"]))


def test_frontier_table_renders_every_group():
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(frontier_table(frontier(trials_frame())))
    text = console.file.getvalue()
    assert "Feasibility frontier" in text and "K=4 B=1" in text and "none fit" in text and "3 / 2 / 1" in text
    assert "0.74 GiB" in text and "1.12 GiB" in text and "RSS (CPU run)" in text


def test_a_budget_puts_a_completed_configuration_over_it_on_the_side_that_does_not_fit():
    df = frontier(trials_frame(), budget_gib=0.72)
    trl = df[(df["stack"] == "trl") & (df.model == "tiny")].iloc[0]
    # K=2 B=2 (0.70 GiB) fits; K=4 B=1 completed at 0.74 GiB, over 0.72: the smallest that does not fit
    assert trl.largest_fit == "K=2 B=2 (4 completions/step)" and trl.fit_peak_gib == 0.70
    assert trl.smallest_oom == "K=4 B=1 (4 completions/step)" and trl.oom_peak_gib == 0.74
    assert trl.oom_over_budget and "0.74 GiB passed the 0.72 GiB budget" in trl.oom_detail
    assert (trl.fit_memory_kind, trl.oom_memory_kind) == ("RSS", "RSS")
    view = frontier_view(df).set_index(["Stack", "Model"]).loc[("trl", "tiny")]
    assert view["Smallest that does not"] == "K=4 B=1 (4 completions/step): over budget"
    assert (view["Its peak"], view["Peak there"], view["Memory"]) == (
        "0.70 GiB; 0.02 GiB (2.8%) to spare",  # 0.72 - 0.70, 0.02 / 0.72 = 2.8%
        "0.74 GiB",
        "RSS (CPU run)",
    )
    # Without a budget the same rows split by outcome only.
    plain = frontier(trials_frame()).set_index(["stack", "model"]).loc[("trl", "tiny")]
    assert plain.smallest_oom == "K=4 B=2 (8 completions/step)" and not plain.oom_over_budget


def test_a_group_that_neither_completed_nor_ran_out_of_memory_says_so():
    rows = trials_frame().assign(status="failed")
    view = frontier_view(frontier(rows))
    assert set(view["Largest that fits"]) == set(view["Smallest that does not"]) == {NO_ANSWER}


def test_frontier_labels_a_micro_batch_only_where_it_is_not_b_times_k():
    rows = [
        {"trial_key": k, "stack": "trl", "mode": "grpo", "model": "tiny", "quantization": "nf4", **r}
        for k, r in (
            ("a", {"num_generations": 2, "batch_size": 1, "micro_batch_size": 2, "status": "completed"}),
            ("b", {"num_generations": 8, "batch_size": 1, "micro_batch_size": 8, "status": "oom"}),
        )
    ]
    (row,) = frontier(pd.DataFrame(rows)).itertuples()
    assert (row.largest_fit, row.smallest_oom) == (
        "K=2 B=1 (2 completions/step)",
        "K=8 B=1 (8 completions/step)",
    )
    rows[1]["micro_batch_size"] = 4
    (row,) = frontier(pd.DataFrame(rows)).itertuples()
    assert row.smallest_oom == "K=8 B=1 micro=4 (8 completions/step)"


def test_a_fit_closer_to_the_budget_than_the_spread_of_peaks_reads_tight_with_its_margin():
    # K=2 B=2 peaks at 0.70 GiB: the run-to-run spread is TIGHT_SPREAD of it (0.0175 GiB); a 0.715 GiB
    # budget leaves 0.015 GiB, under it.
    assert 0.715 - 0.70 < TIGHT_SPREAD * 0.70 < 0.72 - 0.70
    trl = frontier(trials_frame(), budget_gib=0.715).set_index(["stack", "model"]).loc[("trl", "tiny")]
    assert trl.largest_fit == "K=2 B=2 (4 completions/step)"
    assert (trl.fit_margin_gib, trl.fit_margin_pct, trl.fit_tight) == pytest.approx(
        (0.015, 0.015 / 0.715 * 100, True)
    )
    view = frontier_view(frontier(trials_frame(), budget_gib=0.715)).set_index(["Stack", "Model"])
    assert view.loc[("trl", "tiny"), "Its peak"] == "0.70 GiB; tight: 0.02 GiB (2.1%) to spare"
    assert not frontier(trials_frame(), budget_gib=0.72).set_index("stack").loc["trl"].iloc[0].fit_tight


def test_headroom_moves_the_frontier_to_configurations_that_leave_it_free():
    # A 0.80 GiB budget fits K=4 B=1 (0.74 GiB); 0.08 GiB of headroom leaves 0.72: only K=2 B=2 (0.70) fits.
    plain = frontier(trials_frame(), budget_gib=0.80).set_index(["stack", "model"]).loc[("trl", "tiny")]
    assert plain.largest_fit == "K=4 B=1 (4 completions/step)"
    kept = frontier(trials_frame(), budget_gib=0.80, headroom_gib=0.08)
    trl = kept.set_index(["stack", "model"]).loc[("trl", "tiny")]
    # Its margin is to what the user may fill: 0.80 - 0.08 - 0.70.
    assert trl.largest_fit == "K=2 B=2 (4 completions/step)" and trl.fit_margin_gib == pytest.approx(0.02)
    assert trl.smallest_oom == "K=4 B=1 (4 completions/step)"
    assert (
        trl.oom_detail
        == "completed, but its peak 0.74 GiB passed the 0.8 GiB budget less the 0.08 GiB headroom"
    )


def test_the_matrices_mark_tight_fits_and_count_headroom(tmp_path):
    grids = feasibility_matrix(trials_frame(), budget_gib=0.715)
    trl = next(g for g in grids if g.stack == "trl" and g.model == "tiny")
    assert trl.tight(2, 2) and not trl.tight(2, 1)  # 0.70 of 0.715 is tight, 0.61 is not
    (view,) = [v for v in matrix_views(grids) if v.model == "tiny"]
    cells = view.table.set_index("K × B")["grpo · trl"]
    assert cells["K=2 B=2 (4/step)"] == "0.70 GiB; tight: 0.02 GiB (2.1%) to spare"  # 0.015 GiB of 0.715
    assert cells["K=2 B=1 (2/step)"] == "0.61 GiB"
    assert "“tight”: fits by less than the run-to-run spread of peaks (2.5% of the peak)." in view.caption
    kept = feasibility_matrix(trials_frame(), budget_gib=0.80, headroom_gib=0.08)
    trl = next(g for g in kept if g.stack == "trl" and g.model == "tiny")
    assert trl.over_budget(4, 1) and not trl.over_budget(2, 2)


def test_a_fit_is_tight_against_the_budget_less_the_headroom_as_fits_is():
    # K=2 B=2 peaks at 0.70 GiB: 0.10 GiB under a 0.80 budget (not tight), but with 0.085 GiB of headroom
    # kept free only 0.015 GiB is left, under the 0.0175 GiB spread of a 0.70 peak (2.5%): tight.
    def trl_tiny(grids):
        return next(g for g in grids if g.stack == "trl" and g.model == "tiny")

    plain = trl_tiny(feasibility_matrix(trials_frame(), budget_gib=0.80))
    assert not plain.tight(2, 2) and plain.margin(2, 2).gib == pytest.approx(0.10)
    kept = trl_tiny(feasibility_matrix(trials_frame(), budget_gib=0.80, headroom_gib=0.085))
    assert kept.tight(2, 2) and kept.margin(2, 2).gib == pytest.approx(0.80 - 0.085 - 0.70)
    frontiers = frontier(trials_frame(), budget_gib=0.80, headroom_gib=0.085)
    trl = frontiers.set_index(["stack", "model"]).loc[("trl", "tiny")]
    assert trl.largest_fit == "K=2 B=2 (4 completions/step)" and trl.fit_tight


def test_a_narrow_terminal_tells_two_models_of_one_family_apart():
    both = pd.concat(
        [trials_frame().assign(model=model) for model in ("random:Qwen/Qwen3-1.7B", "random:Qwen/Qwen3-4B")]
    )
    both["trial_key"] = both["model"] + both["trial_key"]
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(frontier_table(frontier(both)))
    text = console.file.getvalue()
    assert "Qwen3-1.7B" in text and "Qwen3-4B" in text
    assert "random:Qwen/Qwen3…" not in text
