"""The command line without surprises: suggestions for mistyped verbs and settings (TRL's names pointing to
rlsweep's), --version, help for every argument, one exit code for a missing input, the planned trials of
`run --dry-run` with their estimated durations."""

from __future__ import annotations

import argparse
import importlib.metadata
import statistics
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator.cli import build_parser, main
from orchestrator.recording.sinks import TRIAL_SCHEMA
from orchestrator.spec.load import load_sweep
from orchestrator.spec.plan import plan
from orchestrator.spec.sweep import FOREIGN_NAMES
from orchestrator.views.progress import estimate_durations

SMOKE = str(Path(__file__).parents[2] / "sweeps" / "cpu-smoke.yaml")


def test_a_mistyped_verb_gets_the_nearest_verb(capsys):
    assert main(["reprot", "outputs/x"]) == 2
    assert "unknown command 'reprot'; did you mean 'report'" in capsys.readouterr().err  # (or 'export')


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"rlsweep {importlib.metadata.version('rlsweep')}"


def test_a_source_checkout_that_is_not_installed_reports_pyprojects_version(monkeypatch, capsys):
    # An offline GPU host runs `python3 -m orchestrator.cli` from the checkout with PYTHONPATH alone:
    # no installed metadata, and --version (built with every parser) raised PackageNotFoundError.
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.strip() == "rlsweep 0.1.0 (source checkout, not installed)"


def test_a_mistyped_bare_knob_in_set_suggests_the_knob(capsys):
    assert main(["validate", SMOKE, "--set", "max_step=5"]) == 2
    assert "--set max_step: unknown setting; did you mean 'max_steps'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("trl_name", "ours"),
    [
        ("gradient_accumulation_steps", "micro_batch_size"),
        ("importance_sampling_level", "mode: gspo"),
        ("per_device_train_batch_size", "batch_size"),
    ],
)
def test_trls_names_point_to_rlsweeps(trl_name, ours, capsys):
    for where in (trl_name, f"fixed.{trl_name}"):
        assert main(["validate", SMOKE, "--set", f"{where}=2"]) == 2
        printed = " ".join(capsys.readouterr().err.split())  # rich folds long lines
        assert f"{where}: unknown setting; {trl_name} is TRL's name; rlsweep sets {ours}" in printed
    assert FOREIGN_NAMES[trl_name].startswith(ours)


def _actions(parser: argparse.ArgumentParser, path: str = "rlsweep"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for verb, sub in action.choices.items():
                yield from _actions(sub, f"{path} {verb}")
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            yield path, action


def test_every_argument_of_every_verb_has_help():
    missing = [f"{path} {action.dest}" for path, action in _actions(build_parser()) if not action.help]
    assert not missing


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "{missing}"],
        ["validate", "{missing}"],
        ["report", "{missing}"],
        ["sync-mlflow", "{missing}"],
        ["compare", "{missing}", "{missing}"],
        ["fitmap", "--card", "l4", "--trials", "{missing}"],
    ],
)
def test_a_missing_file_or_folder_exits_2_whatever_the_verb(argv, tmp_path):
    missing = str(tmp_path / "nothing-here")
    assert main([a.replace("{missing}", missing) for a in argv]) == 2
    assert list(tmp_path.iterdir()) == []


def _recorded(out: Path, rows: list[dict]) -> None:
    out.mkdir(parents=True)
    table = pa.Table.from_pylist(rows, schema=TRIAL_SCHEMA)
    pq.write_table(table, out / "trials.parquet")


def test_planned_trials_are_estimated_from_the_trials_recorded_so_far(tmp_path):
    sweep = load_sweep(SMOKE)
    trials = plan(sweep).trials
    first, second, unrun = trials[0], trials[1], trials[4]
    recorded = [
        {"trial_key": s.trial_key, "stack": s.stack, "model": s.model, "mode": s.mode,
         "num_generations": s.num_generations, "batch_size": s.batch_size, "status": "completed",
         "steps_completed": 3, "median_step_s": step_s, "wall_s": wall}
        for s, step_s, wall in ((first, 2.0, 20.0), (second, 4.0, 30.0))
    ]  # fmt: skip
    _recorded(tmp_path / "out", recorded)
    estimates = estimate_durations(trials, tmp_path / "out")
    assert estimates[first.trial_key] == (20.0, "ran: completed")
    # Start-up: wall time less the steps (14 and 18 s); step time per completion: 2/2 and 4/2 s.
    startup = statistics.median([20.0 - 3 * 2.0, 30.0 - 3 * 4.0])
    per_completion = statistics.median([2.0 / first.completions_per_step, 4.0 / second.completions_per_step])
    expected = startup + unrun.max_steps * per_completion * unrun.completions_per_step
    assert estimates[unrun.trial_key] == (pytest.approx(expected), "from 2 recorded")


def test_dry_run_lists_every_planned_trial_and_says_when_no_estimate_is_possible(tmp_path, capsys):
    out = tmp_path / "fresh"
    assert main(["run", SMOKE, "--dry-run", "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    for spec in plan(load_sweep(SMOKE)).trials:
        assert spec.trial_key in printed
    assert "estimated total: unknown" in printed
    assert not out.exists(), "a dry run writes nothing"


def test_validate_list_prints_the_same_plan_as_a_dry_run(tmp_path, capsys):
    assert main(["validate", SMOKE, "--list", "--output-dir", str(tmp_path / "o")]) == 0
    listed = capsys.readouterr().out
    assert main(["run", SMOKE, "--dry-run", "--output-dir", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().out == listed


def test_report_run_from_another_directory_writes_nothing_outside_the_sweeps_dir(
    tmp_path, monkeypatch, capsys
):
    from orchestrator.spec.load import parse_sweep, resolved_yaml
    from tests.helpers.synthetic_sweep import write_synthetic_sweep

    out, elsewhere = tmp_path / "sweeps" / "synthetic", tmp_path / "elsewhere"
    write_synthetic_sweep(out)
    (out / "sweep.yaml").write_text(resolved_yaml(parse_sweep({"name": "synthetic"})))  # default store
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    before = {p for p in tmp_path.rglob("*") if not p.is_relative_to(out)}
    assert main(["report", str(out)]) == 0
    assert {p for p in tmp_path.rglob("*") if not p.is_relative_to(out)} == before
    err = " ".join(capsys.readouterr().err.split())
    # The default store would be next to the output dir; a report does not make one, and says so.
    assert f"no MLflow store at sqlite:///{out.parent / 'mlflow.db'}" in err
    assert "the report is written without it" in err
