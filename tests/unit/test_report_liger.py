"""Three stacks in the report: Unsloth and Liger each against TRL side by side, and a sentence per pair
saying where the stack fits what TRL cannot and where its peak is above TRL's (it costs more memory),
checked against figures computed here from the synthetic Parquet (Liger's peak set to 1.2x TRL's)."""

from __future__ import annotations

import pytest

from orchestrator.views.report import load_outputs, write_report
from orchestrator.views.report._configs import aggregate_repeats
from orchestrator.views.report._stacks import pair_sentence, stack_comparison, stack_pairs
from tests.helpers import synthetic_sweep
from tests.helpers.synthetic_sweep import write_synthetic_sweep

# TRL ran K=2 B=1 and ran out of memory at K=4 B=2; Liger and Unsloth completed both.
GRID = [
    ("trl", "grpo", 2, 1, 1, "completed", 5),
    ("trl", "grpo", 4, 2, 1, "oom", 1),
    ("unsloth", "grpo", 2, 1, 1, "completed", 5),
    ("unsloth", "grpo", 4, 2, 1, "completed", 5),
    ("liger", "grpo", 2, 1, 1, "completed", 5),
    ("liger", "grpo", 4, 2, 1, "completed", 5),
]


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    monkeypatch.setitem(synthetic_sweep.STACK_FACTORS, "liger", (1.2, 0.9))
    write_synthetic_sweep(tmp_path, grid=GRID)
    return load_outputs(tmp_path)


def _peak(outputs, stack: str) -> float:
    trials = outputs.trials.query("stack == @stack and num_generations == 2 and batch_size == 1")
    return float(trials["peak_device_gib"].max())


def test_liger_and_unsloth_are_each_compared_with_trl_in_registration_order(outputs):
    comparison = stack_comparison(aggregate_repeats(outputs), outputs.trials)
    assert [(base, other) for base, other, _ in stack_pairs(comparison)] == [
        ("TRL", "Unsloth"),
        ("TRL", "Liger"),
    ]


def test_the_sentence_says_where_liger_fits_what_trl_cannot_and_where_it_costs_more(outputs):
    comparison = stack_comparison(aggregate_repeats(outputs), outputs.trials)
    sentences = {other: pair_sentence(rows) for _, other, rows in stack_pairs(comparison)}
    ratio = _peak(outputs, "liger") / _peak(outputs, "trl")
    assert ratio > 1.1
    assert sentences["Liger"] == (
        "Liger fits where TRL does not at 1 configuration(s) (grpo K=4 B=2; TRL ran out of memory at each); "
        f"Liger's peak is above TRL's, so it costs more memory, at 1 "
        f"(grpo K=2 B=1 ({ratio:.2f}×))."
    )
    unsloth = _peak(outputs, "unsloth") / _peak(outputs, "trl")
    assert sentences["Unsloth"].endswith(
        f"Unsloth's peak is below TRL's at 1 (grpo K=2 B=1 ({unsloth:.2f}×))."
    )


def test_two_stacks_whose_peaks_agree_within_their_spread_get_no_claim(tmp_path, monkeypatch):
    monkeypatch.setitem(synthetic_sweep.STACK_FACTORS, "liger", (1.0, 1.0))
    write_synthetic_sweep(tmp_path, grid=[GRID[0], GRID[4]])
    outputs = load_outputs(tmp_path)
    ((_, _, rows),) = stack_pairs(stack_comparison(aggregate_repeats(outputs), outputs.trials))
    assert rows.iloc[0]["memory_ratio_lo"] <= 1 <= rows.iloc[0]["memory_ratio_hi"]
    assert pair_sentence(rows) == (
        "Liger and TRL fit the same configurations here, and no peak of one is clearly above the other's."
    )


def test_the_written_report_shows_each_pair_under_its_own_heading_with_its_sentence(outputs, tmp_path):
    write_report(tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "The stacks against TRL" in text
    unsloth, liger = text.index("Unsloth against TRL"), text.index("Liger against TRL")
    assert unsloth < liger
    assert "Liger fits where TRL does not at 1 configuration(s)" in text[liger:]
    assert "so it costs more memory" in text[liger:]
