"""`rlsweep report SOURCE` and `rlsweep report --trials SOURCE`: a report of measured trials read from a
result file of `rlsweep export` (or a team's tracking server), written to --output-dir, with the trials'
tables; those sources hold one row per trial and no steps, and the report says so where steps would be (its tables as the sweep's own report has them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers.cli import run_cli

REPO = Path(__file__).parents[2]
FRONTIER = REPO / "bench" / "data" / "h100-2026-11-27" / "frontier"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    from orchestrator.cli._trials import load
    from orchestrator.recording.portable import write_export

    target = tmp_path_factory.mktemp("shared") / "frontier.parquet"
    write_export(
        [{k: v for k, v in r.items() if not k.startswith("_")} for r in load([str(FRONTIER)])], target
    )
    return target


def _section(report: str, heading: str) -> str:
    start = report.index(heading)
    return report[start : report.index("\n## ", start + 1)]


def test_a_report_of_an_exported_result_file_has_the_trials_tables_and_says_steps_were_not_recorded(
    exported, tmp_path, capsys
):
    sweep = tmp_path / "the-sweep"
    shutil.copytree(FRONTIER, sweep)
    code, text = run_cli(["report", str(sweep)], capsys)
    assert code == 0, text
    own = (sweep / "report.md").read_text()
    folder = tmp_path / "team-report"
    code, text = run_cli(["report", str(exported), "--output-dir", str(folder)], capsys)
    assert code == 0, text
    report = (folder / "report.md").read_text()
    assert report.startswith("# Measured trials: team-report")
    assert f"**Measured trials from**: `{exported}` (`--trials`)." in report
    assert f"from {exported}: NVIDIA H100 80GB HBM3 under a 16 GiB budget, 2026-11-27" in report
    # the trials' tables: the frontier from the rows, and summary.csv with one row per trial
    assert _section(report, "## What fits: the feasibility frontier") == _section(
        own, "## What fits: the feasibility frontier"
    )
    assert "| unsloth | grpo | K=16 B=1 completion=2048 (16 completions/step) | 11.69 GiB" in report
    assert "90 trials: 3 completed, 3 out of memory" in report
    assert len((folder / "summary.csv").read_text().splitlines()) == 1 + 90
    assert pq.read_table(folder / "trials.parquet").num_rows == 90
    # where steps would be, the report says they were not recorded, and no steps/ was written
    curves = report[report.index("## Training curves") :]
    assert curves.split("\n\n")[1].startswith("Steps were not recorded in these sources")
    assert "no `steps/`" in report[report.index("## Files") :] and not (folder / "steps").exists()
    assert "No trial recorded steps." not in report
    assert json.loads((folder / "sources.json").read_text())["sources"] == [str(exported)]


def test_trials_flag_gives_the_same_report_as_the_positional_source(exported, tmp_path, capsys):
    code, text = run_cli(["report", "--trials", str(exported), "--output-dir", str(tmp_path / "r")], capsys)
    assert code == 0, text
    assert "Steps were not recorded in these sources" in (tmp_path / "r" / "report.md").read_text()


def test_a_malformed_result_file_refuses_the_report_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "hostile.parquet"
    bad.write_bytes(b"PAR1 not a Parquet file PAR1")
    code, text = run_cli(["report", str(bad), "--output-dir", str(tmp_path / "r")], capsys)
    assert code == 2, text
    assert "report: 1 error(s), nothing written:" in text and str(bad) in text and "rlsweep export" in text
    assert not (tmp_path / "r").exists()


def test_a_report_of_sources_never_overwrites_a_sweep_s_own_folder(exported, tmp_path, capsys):
    sweep = tmp_path / "my-sweep"
    sweep.mkdir()
    (sweep / "trials.parquet").write_bytes(b"a sweep's own")
    code, text = run_cli(["report", str(exported), "--output-dir", str(sweep)], capsys)
    assert code == 2, text
    assert f"--output-dir {sweep}: holds a sweep's trials.parquet; give another folder" in text
    assert (sweep / "trials.parquet").read_bytes() == b"a sweep's own"


def test_a_sweep_folder_with_trials_is_refused_naming_both(exported, tmp_path, capsys):
    code, text = run_cli(["report", str(tmp_path), "--trials", str(exported)], capsys)
    assert code == 2, text
    assert f"{tmp_path} with --trials: give one, a sweep's folder or --trials sources" in text


def test_the_same_settings_from_two_sources_are_both_kept_in_the_report(exported, tmp_path, capsys):
    folder = tmp_path / "two"
    code, text = run_cli(["report", "--trials", str(exported), "--trials", str(FRONTIER), "--output-dir", str(folder)],
                         capsys)  # fmt: skip
    assert code == 0, text
    keys = pq.read_table(folder / "trials.parquet").column("trial_key").to_pylist()
    assert len(keys) == 180 and sum(k.endswith("#2") for k in keys) == 90
    assert "180 trials: 6 completed, 6 out of memory" in (folder / "report.md").read_text()
    assert json.loads((folder / "sources.json").read_text())["sources"] == [str(exported), str(FRONTIER)]
