"""The end of `rlsweep run`: --no-report leaves the report to `rlsweep report`; each figure is drawn once."""

from __future__ import annotations

import os
from pathlib import Path

from matplotlib.figure import Figure
from rich.console import Console

from orchestrator.cli import main
from orchestrator.recording.sinks import TrialsTable, trial_row
from orchestrator.spec.load import load_sweep
from orchestrator.spec.plan import expand
from orchestrator.views.report import write_report
from tests.helpers.synthetic_sweep import write_synthetic_sweep

REPORT_FILES = ("report.md", "report.html", "summary.csv")


def finished_sweep(tmp_path: Path) -> tuple[Path, Path]:
    """A sweep file and an output dir whose ledger already holds every trial as completed: a run on it
    starts no Ray and no trainer, and goes straight to its end."""
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: ended\ngrid: {num_generations: [2, 4]}\nfixed: {model: tiny, max_steps: 3}\n"
        "tracking: {enabled: false}\n"
    )
    out = tmp_path / "out"
    table = TrialsTable(out / "trials.parquet")
    for spec in expand(load_sweep(path)):
        table.upsert(trial_row(spec, None, [], status="completed", detail="3 steps"))
    return path, out


def test_a_run_with_no_report_writes_no_report_and_says_how_to_make_one(tmp_path, capsys):
    path, out = finished_sweep(tmp_path)
    assert main(["run", str(path), "--output-dir", str(out), "--no-report"]) == 0
    assert not any((out / name).exists() for name in REPORT_FILES) and not (out / "plots").exists()
    assert f"make it with: rlsweep report {out}" in capsys.readouterr().err
    assert main(["report", str(out)]) == 0  # the command it names makes the report from what the run left
    assert all((out / name).exists() for name in REPORT_FILES)


def test_a_run_without_the_flag_writes_the_report(tmp_path, capsys):
    path, out = finished_sweep(tmp_path)
    assert main(["run", str(path), "--output-dir", str(out)]) == 0
    assert all((out / name).exists() for name in REPORT_FILES)
    assert "--no-report" not in capsys.readouterr().err


def test_each_figure_of_the_report_is_rendered_once(tmp_path, monkeypatch):
    write_synthetic_sweep(tmp_path, gpu=True)
    log = tmp_path / "savefig.log"
    savefig = Figure.savefig

    def counted(self, fname, *args, **kwargs):
        # O_APPEND: one line per call, from this process or any it forks to draw figures.
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, f"{Path(fname).name}\n".encode())
        os.close(fd)
        return savefig(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", counted)
    paths = write_report(tmp_path, console=Console(file=open(os.devnull, "w")))  # noqa: SIM115
    drawn = log.read_text().split()
    assert sorted(drawn) == sorted(p.name for p in paths["plots"])  # every figure drawn, none twice
    assert len(set(drawn)) == len(drawn) == len(list((tmp_path / "plots").glob("*.png")))
