"""The fit map (orchestrator/judging/fitmap.py, `rlsweep fitmap`, the report's section): where each stack
stops fitting a card, predicted in seconds, its boundary monotone and in agreement with the predictor's
verdicts, the H100's measured trials drawn on it without contradicting it."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.cli._trials import measured_rows
from orchestrator.judging.fitmap import (
    MEASURED_FITS,
    MEASURED_OOM,
    MEASURED_UNDECIDED,
    fit_map,
)
from orchestrator.judging.memory import DOES_NOT_FIT, FITS
from orchestrator.recording.sinks import TrialsTable, trial_row
from orchestrator.views.report import write_report
from orchestrator.words.outcome import GPU, RSS
from tests.helpers.images import assert_varied_png
from trainers.trial import TrialSpec

H100 = Path(__file__).parents[2] / "bench" / "data" / "h100-2026-11-26"
QWEN_3B = "Qwen/Qwen2.5-3B-Instruct"


@pytest.fixture(scope="module")
def h100_rows():
    return measured_rows(H100)


@pytest.fixture(scope="module")
def h100_map(h100_rows):
    """The 16 GiB map of the 3B model, fitted on (and drawn with) the H100's trials."""
    return fit_map(h100_rows, TrialSpec(), [QWEN_3B], ["trl", "unsloth"], 16.0, measure=GPU)


@pytest.fixture(scope="module")
def prior_map():
    """A prior-only map of two models on 24 GiB."""
    return fit_map(
        [], TrialSpec(), [QWEN_3B, "Qwen/Qwen2.5-7B-Instruct"], ["trl", "unsloth"], 24.0, measure=GPU
    )


def _lengths(lo: int, hi: int) -> list[int]:
    lengths, n = [], lo
    while n < hi:
        lengths.append(n)
        n = int(n * 1.37) + 1
    return [*lengths, hi]


@pytest.mark.parametrize("which", ["h100_map", "prior_map"])
def test_a_longer_completion_never_fits_where_a_shorter_one_does_not(which, request):
    fm = request.getfixturevalue(which)
    model = fm.model
    lo, hi = fm.lengths
    for x in fm.boundaries:
        assert x.unknown is None
        base = TrialSpec(stack=x.stack, model=x.model, num_generations=x.k, batch_size=x.b)
        likely = lo - 1 if x.likely is None else x.likely
        for length in _lengths(lo, hi):
            peak = model.predict(dataclasses.replace(base, max_completion_length=length)).peak_gib
            assert (peak <= fm.budget_gib) == (length <= likely), (x, length, peak)
        # sure <= likely <= possible, and more completions per step never fit a longer completion
        ends = [lo - 1 if v is None else v for v in (x.sure, x.likely, x.possible)]
        assert ends == sorted(ends)
        for bigger in fm.boundaries:
            same = (bigger.stack, bigger.model) == (x.stack, x.model)
            if same and bigger.k >= x.k and bigger.b >= x.b:
                assert (bigger.likely or 0) <= (x.likely or 0)


@pytest.mark.parametrize("which", ["h100_map", "prior_map"])
def test_the_boundary_matches_the_predictors_verdicts_either_side_of_it(which, request):
    fm = request.getfixturevalue(which)
    model = fm.model
    lo, hi = fm.lengths
    for x in fm.boundaries:
        base = TrialSpec(stack=x.stack, model=x.model, num_generations=x.k, batch_size=x.b)

        def verdict(length: int, base=base) -> str:
            return model.predict(dataclasses.replace(base, max_completion_length=length)).verdict(
                fm.budget_gib
            )

        if x.sure is not None:
            assert verdict(x.sure) == FITS
        if x.sure is None or x.sure < hi:
            assert verdict(lo if x.sure is None else x.sure + 1) != FITS
        if x.possible is not None and x.possible < hi:
            assert verdict(x.possible) != DOES_NOT_FIT and verdict(x.possible + 1) == DOES_NOT_FIT
        if x.possible is None:
            assert verdict(lo) == DOES_NOT_FIT


def test_the_h100_trials_are_drawn_on_the_16gb_map_as_measured_fits_ooms_and_undecided(h100_map):
    points = {(p.stack, p.k, p.b, p.length): p for p in h100_map.measured}
    assert points[("trl", 8, 2, 512)].on_card == MEASURED_OOM  # out of memory under 16 GiB
    assert points[("trl", 8, 2, 256)].on_card == MEASURED_FITS
    # Round 2's TRL at 1024 timed out before its first step (undecided); round 3's ran out of memory.
    assert points[("trl", 8, 2, 1024)].on_card == MEASURED_OOM
    assert points[("trl", 8, 2, 2048)].on_card == MEASURED_UNDECIDED  # timed out while generating
    assert points[("unsloth", 8, 2, 1024)].on_card == MEASURED_FITS
    assert points[("unsloth", 8, 2, 2048)].on_card == MEASURED_FITS
    assert len(points) == 15 and h100_map.not_drawn == 2  # the 1.5B and 0.5B trials are other models'
    assert h100_map.basis[("trl", QWEN_3B)].startswith("fitted on")


def test_no_h100_measurement_contradicts_the_map(h100_map):
    """A measured fit never lies where the map says surely out of memory, a measured OOM never where it
    says surely fits."""
    for point in h100_map.measured:
        x = h100_map.boundary(point.stack, point.model, point.k, point.b)
        if point.on_card == MEASURED_FITS:
            assert x.possible is not None and point.length <= x.possible, point
        elif point.on_card == MEASURED_OOM:
            assert x.sure is None or point.length > x.sure, point


def test_the_stacks_part_where_unsloth_fits_what_trl_cannot_anchored_on_the_h100(h100_map):
    """At K=8, B=2 TRL ran out of 16 GiB at completion 512 and Unsloth fit 1024: the map parts them there."""
    parting = next(p for p in h100_map.partings if (p.model, p.k, p.b) == (QWEN_3B, 8, 2))
    assert (parting.base, parting.other) == ("trl", "unsloth")
    assert 256 < parting.from_length <= 513 and parting.to_length >= 1024
    assert "Unsloth to" in h100_map.table().set_index(["K", "B"]).loc[(8, 2), "stacks part at"]


def test_fitmap_prints_a_map_for_a_named_card_from_prediction_alone_in_seconds(tmp_path, capsys):
    started = time.monotonic()
    code = main(["fitmap", "--card", "RTX4090", "--model", QWEN_3B, "--output-dir", str(tmp_path)])
    elapsed = time.monotonic() - started
    printed = capsys.readouterr().out
    assert code == 0 and elapsed < 30
    assert "Fit map on 24GB (24.00 GiB usable" in printed and "the prior" in printed
    # the column's header in full, or shortened where three stacks' columns do not fit the width
    assert re.search(r"TRL: (longest completion|tokens)", printed) and "stacks part at" in printed
    (png,) = tmp_path.glob("fitmap_24GB_*.png")
    assert_varied_png(png)


def test_fitmap_draws_the_h100_trials_said_to_be_measured(tmp_path, capsys):
    args = [
        "fitmap",
        "--card",
        "16gb",
        "--model",
        QWEN_3B,
        "--trials",
        str(H100),
        "--output-dir",
        str(tmp_path),
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "Measured (16 trial(s)" in printed and "the rest is predicted" in printed
    assert "2 measured trial(s) of other models" in printed


def test_fitmap_refuses_an_unknown_card_and_no_card_at_all(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["fitmap", "--card", "gtx1080", "--output-dir", str(tmp_path)])
    assert exited.value.code == 2 and "'gtx1080'" in capsys.readouterr().err
    assert main(["fitmap", "--output-dir", str(tmp_path)]) == 2
    assert "--card" in capsys.readouterr().err
    assert main(["fitmap", "--card", "l4", "--stack", "trl,nope", "--no-plot"]) == 2
    assert "unknown stack 'nope'" in capsys.readouterr().err


def _tiny_ledger(path: Path) -> TrialsTable:
    """Completed CPU trials of `tiny` on both stacks, their RSS growing with the tokens of a step."""
    ledger = TrialsTable(path / "trials.parquet")
    for stack in ("trl", "unsloth"):
        for k in (2, 4, 8):
            for length in (16, 64):
                spec = TrialSpec(
                    stack=stack, model="tiny", num_generations=k, batch_size=2,
                    max_completion_length=length, memory_budget_gib=1.0,
                    trial_key=f"{stack}-k{k}-l{length}",
                )  # fmt: skip
                row = trial_row(spec, None, [], status="completed")
                row["peak_rss_gib"] = 0.6 + 0.00005 * k * 2 * (256 + length) * (
                    1.0 if stack == "trl" else 0.6
                )
                ledger.upsert(row)
    ledger.write()
    return ledger


def test_a_tiny_model_under_an_rss_budget_gets_a_map_with_its_cpu_trials_on_it(tmp_path):
    ledger = _tiny_ledger(tmp_path)
    fm = fit_map(ledger.rows.values(), TrialSpec(), ["tiny"], ["trl", "unsloth"], 1.0, lengths=(16, 2048))
    assert fm.measure == RSS and len(fm.measured) == 12
    assert all(x.unknown is None for x in fm.boundaries)
    assert {p.on_card for p in fm.measured} == {MEASURED_FITS}


def test_a_report_with_a_budget_shows_the_fit_map_beside_what_the_sweep_measured(tmp_path):
    _tiny_ledger(tmp_path)
    paths = write_report(tmp_path, budget_gib=1.0)
    md, page = paths["report_md"].read_text(), paths["report_html"].read_text()
    section = md.split("## Where it stops fitting: the predicted fit map")[1].split("\n## ")[0]
    assert "longest completion" in section and "Measured trials on the map (12)" in section
    (png,) = (tmp_path / "plots").glob("fitmap_*.png")
    assert_varied_png(png)
    assert png in paths["plots"] and 'alt="Fit map tiny"' in page
