"""`rlsweep solve --trials SOURCE`: a row measured for exactly a candidate on the same card or budget (here,
one from a result file another machine exported) answers that candidate instead of a probe, and the answer
names its source; a source that cannot be used refuses solve before any probe runs."""

from __future__ import annotations

import json

import pytest

from orchestrator.words.outcome import COMPLETED, OOM, TrialResult
from tests.helpers.cli import run_cli

SOLVE = ["solve", "--maximize", "num_generations", "--model", "tiny", "--stack", "trl", "--budget-gib", "4",
         "--no-simulate"]  # fmt: skip


def _fake_probes(calls: list[tuple[str, int]]):
    """A stand-in for running a probe on a host without a GPU: K up to 8 completes at 0.3 GiB of RSS per
    generation, a larger K runs out of memory; each probe is recorded in `calls` as (output dir, K)."""

    def run_recorded(spec, recorder, out, guard, verb, run=None):
        calls.append((out.name, spec.num_generations))
        recorder.start(spec.trial_key)
        k = spec.num_generations
        result = (
            TrialResult(status=COMPLETED, status_detail="", wall_s=1.0, peak={"rss_peak_gib": 0.3 * k})
            if k <= 8
            else TrialResult(
                status=OOM, status_detail="RSS over the budget", wall_s=1.0, peak={"rss_peak_gib": 4.2}
            )  # fmt: skip
        )
        recorder.end(spec.trial_key, result)
        return result

    return run_recorded


@pytest.fixture
def probes(monkeypatch):
    import orchestrator.running.solve as running
    import trainers.nvml

    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(running, "run_recorded", _fake_probes(calls))
    monkeypatch.setattr(trainers.nvml, "local_gpus", lambda: 0)  # the probes read RSS, as the rows did
    return calls


def test_a_value_an_exported_result_file_measured_is_not_probed_and_the_answer_names_the_file(
    tmp_path, capsys, probes
):
    other = tmp_path / "other-machine"
    code, text = run_cli([*SOLVE, "--values", "4", "16", "--output-dir", str(other)], capsys)
    assert code == 0, text
    assert sorted(k for _, k in probes) == [4, 16]
    shared = tmp_path / "shared" / "solve.parquet"
    code, text = run_cli(["export", str(other), "-o", str(shared)], capsys)
    assert code == 0, text

    probes.clear()
    here = ["--output-dir", str(tmp_path / "here"), "--trials", str(shared)]
    code, text = run_cli([*SOLVE, "--values", "2", "4", "8", "16", *here], capsys)
    assert code == 0, text
    assert [k for _, k in probes] == [8]  # 4 fits and 16 does not, from the file: only 8 is left
    assert "K=4: measured by " in text and f"from {shared}: " in text
    assert "largest K that fits 4 GiB: 8, measured 2.40 GiB RSS peak" in text
    assert "next K above it: 16, does not fit" in text
    for k in (4, 16):
        said = f"K={k}: not probed, measured by a --trials row from {shared}: CPU under a 4 GiB budget"
        assert said in text
    assert "K=8: not probed" not in text
    answer = json.loads((tmp_path / "here" / "solve.json").read_text())
    assert set(answer["sources"]) == {"4", "16"} and answer["sources"]["16"].startswith(str(shared))


def test_a_row_measured_under_another_budget_answers_nothing_and_the_value_is_probed(
    tmp_path, capsys, probes
):
    other = tmp_path / "other-budget"
    run_cli([*SOLVE[:-3], "--budget-gib", "8", "--no-simulate", "--values", "4", "--output-dir", str(other)],
            capsys)  # fmt: skip
    probes.clear()
    code, text = run_cli([*SOLVE, "--values", "4", "--output-dir", str(tmp_path / "here"), "--trials", str(other)],
                         capsys)  # fmt: skip
    assert code == 0, text
    assert [k for _, k in probes] == [4] and "measured by" not in text


def test_a_malformed_result_file_refuses_solve_before_any_probe_runs(tmp_path, capsys, probes):
    bad = tmp_path / "hostile.parquet"
    bad.write_bytes(b"PAR1 this is not a Parquet file PAR1")
    out = tmp_path / "here"
    code, text = run_cli(
        [*SOLVE, "--values", "2", "4", "--output-dir", str(out), "--trials", str(bad)], capsys
    )
    assert code == 2, text
    assert "solve: 1 error(s), nothing started:" in text and str(bad) in text
    assert probes == [] and not out.exists()


def test_a_source_that_names_nothing_refuses_solve_with_the_sources_it_takes(tmp_path, capsys, probes):
    missing = tmp_path / "nowhere.parquet"
    code, text = run_cli([*SOLVE, "--values", "2", "--output-dir", str(tmp_path / "o"), "--trials", str(missing)],
                         capsys)  # fmt: skip
    assert code == 2, text
    assert f"--trials {missing}: no such file or folder" in text and "mlflow+http://" in text
    assert probes == []
