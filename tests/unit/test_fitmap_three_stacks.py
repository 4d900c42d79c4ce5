"""The fit map with three stacks (orchestrator/judging/fitmap.py, `rlsweep fitmap`): every stack that parts
from TRL is named in its row, and one line a model says where each stack fits longer completions than TRL
and where shorter, checked against the map's own boundaries (the memory model's prior: nothing runs)."""

from __future__ import annotations

import re

import pytest

from orchestrator.cli import main
from orchestrator.judging.fitmap import Boundary, FitMap, _reach, fit_map
from orchestrator.words.outcome import GPU
from trainers.trial import TrialSpec

QWEN_3B = "Qwen/Qwen2.5-3B-Instruct"
QWEN_7B = "Qwen/Qwen2.5-7B-Instruct"
THREE = ["trl", "unsloth", "liger"]


@pytest.fixture(scope="module")
def three():
    """A prior-only 16 GiB map of two models, the three stacks, TRL first."""
    return fit_map([], TrialSpec(), [QWEN_3B, QWEN_7B], THREE, 16.0, measure=GPU)


def test_a_row_where_both_other_stacks_part_from_trl_names_each_of_them(three):
    table = three.table().set_index(["model", "K", "B"])
    both = [
        (p.model, p.k, p.b)
        for p in three.partings
        if p.other == "unsloth"
        and any((q.model, q.k, q.b, q.other) == (p.model, p.k, p.b, "liger") for q in three.partings)
    ]
    assert both, "the prior parts Unsloth and Liger from TRL at the same K and B somewhere on this map"
    for key in both:
        cell = table.loc[key, "stacks part at"]
        assert "Unsloth to" in cell and "Liger to" in cell


def _counted(fm: FitMap, model: str, other: str) -> tuple[int, int, int]:
    """(cells where `other` reaches past TRL, cells where TRL reaches past it, cells both predicted)."""
    longer = shorter = cells = 0
    for x in fm.boundaries:
        if (x.stack, x.model) != (other, model) or x.unknown:
            continue
        trl = fm.boundary("trl", model, x.k, x.b)
        cells += 1
        longer += _reach(x) > _reach(trl)
        shorter += _reach(x) < _reach(trl)
    return longer, shorter, cells


def test_one_line_a_model_says_where_each_stack_fits_longer_completions_than_trl_and_where_shorter(three):
    lines = three.against_base()
    assert [line.split(":")[0] for line in lines] == [QWEN_3B, QWEN_7B]
    for model, line in zip([QWEN_3B, QWEN_7B], lines, strict=True):
        for other, label in (("unsloth", "Unsloth"), ("liger", "Liger")):
            longer, shorter, cells = _counted(three, model, other)
            said = re.search(
                rf"{label} fits longer completions than TRL at (none|\d+ of \d+).*?, shorter at (none|\d+ of \d+)",
                line,
            )
            assert said, line
            assert said.group(1) == (f"{longer} of {cells}" if longer else "none")
            assert said.group(2) == (f"{shorter} of {cells}" if shorter else "none")
        assert re.search(r"Liger fits longer completions than TRL at \d+ of 12", line), (
            "the prior's Liger reaches past TRL"
        )


def _b(stack: str, k: int, likely: int | None, sure: int | None, possible: int | None) -> Boundary:
    return Boundary(stack, QWEN_7B, k, 1, likely, sure, possible, 128, 8192)


def test_where_liger_costs_more_the_line_says_it_fits_shorter_completions_than_trl():
    """Fixture boundaries: at K=2 Liger stops at 2,000 tokens where TRL goes on to 4,000 (surely: its sure
    end is past Liger's possible one); at K=8 Liger fits 900 where TRL fits none; at K=4 they agree."""
    boundaries = [
        _b("trl", 2, 4000, 3500, 4500), _b("liger", 2, 2000, 1500, 2500),
        _b("trl", 4, 1000, 800, 1200), _b("liger", 4, 1000, 800, 1200),
        _b("trl", 8, None, None, 200), _b("liger", 8, 900, 700, 1100),
    ]  # fmt: skip
    fm = FitMap(16.0, GPU, boundaries, [], [], {}, stacks=["trl", "liger"], models=[QWEN_7B])
    (line,) = fm.against_base()
    assert line == (
        f"{QWEN_7B}: Liger fits longer completions than TRL at 1 of 3 (K, B) (8 completions a step, surely at 1; "
        "most at K=8 B=1: <128 -> 900 tokens), shorter at 1 of 3 (K, B) (2 completions a step, surely at 1; "
        "most at K=2 B=1: 4000 -> 2000 tokens)"
    )


def test_a_map_of_one_stack_has_no_line_against_another():
    fm = FitMap(16.0, GPU, [_b("trl", 2, 4000, 3500, 4500)], [], [], {}, stacks=["trl"], models=[QWEN_7B])
    assert fm.against_base() == []


def test_fitmap_prints_where_liger_fits_longer_than_trl_under_the_table(tmp_path, capsys):
    args = ["fitmap", "--card", "16gb", "--model", QWEN_3B, "--stack", "trl,unsloth,liger", "--no-simulate",
            "--no-plot", "--output-dir", str(tmp_path)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    (line,) = [x for x in printed.splitlines() if x.startswith(f"{QWEN_3B}: ")]
    assert (
        "Unsloth fits longer completions than TRL at" in line
        and "; Liger fits longer completions than TRL at" in line
    )
