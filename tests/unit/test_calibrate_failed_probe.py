"""A probe that did not run its step (the model not loadable, no GPU for a GPU card) is never a
measurement: calibrate says its reason, scores it against nothing, draws no map from it and never ends
`calibrated`; calibrate and solve refuse a GPU card up front on a host without a GPU."""

from __future__ import annotations

import pytest

from orchestrator.words.outcome import COMPLETED, FAILED, OOM, TIMEOUT, TrialResult
from tests.helpers.cli import run_cli

LOAD_FAILED = "OSError: Qwen/Qwen3-4B is not a local folder and the hub is out of reach"


def _fake_probe(status: str, detail: str, calls: list[str]):
    """A stand-in for running a probe: records the given outcome with 0.57 GiB of RSS read, as a process
    that failed to load its model still reads."""

    def run_recorded(spec, recorder, out, guard, verb, run=None):
        calls.append(spec.trial_key)
        recorder.start(spec.trial_key)
        result = TrialResult(status=status, status_detail=detail, wall_s=1.0, peak={"rss_peak_gib": 0.57})
        recorder.end(spec.trial_key, result)
        return result

    return run_recorded


@pytest.fixture
def argv(tmp_path):
    out = tmp_path / "calibrate"
    return out, ["calibrate", "--model", "tiny", "--stack", "trl", "--budget-gib", "4", "--output-dir", str(out),
                 "--no-simulate", "--no-plot"]  # fmt: skip


def test_a_probe_that_failed_to_load_its_model_is_no_measurement_and_no_map_is_drawn(
    argv, capsys, monkeypatch
):
    import orchestrator.cli.calibrate as cli
    import orchestrator.running.calibrate as running

    out, args = argv
    calls: list[str] = []
    monkeypatch.setattr(running, "run_recorded", _fake_probe(FAILED, LOAD_FAILED, calls))
    drawn = []
    monkeypatch.setattr(cli, "cmd_fitmap", lambda ns: drawn.append(ns) or 0)
    code, text = run_cli(args, capsys)
    assert code == 1
    assert len(calls) == 1  # the probes after it load the same model: none more run
    assert f"did not run its step: failed ({LOAD_FAILED}); not a measurement" in text
    assert "0.57" not in text and "outside the interval" not in text
    assert "no probe ran its step, so nothing was measured and no map is drawn" in text
    assert drawn == [] and "calibrated" not in text.replace("calibrate:", "")


def test_a_failed_probe_is_run_again_by_the_same_command(argv, capsys, monkeypatch):
    import orchestrator.running.calibrate as running

    _, args = argv
    calls: list[str] = []
    monkeypatch.setattr(running, "run_recorded", _fake_probe(FAILED, LOAD_FAILED, calls))
    run_cli(args, capsys)
    run_cli(args, capsys)
    assert len(calls) == 2 and calls[0] == calls[1]


@pytest.mark.parametrize(
    "status, steps, ran",
    [(COMPLETED, 1, True), (OOM, 0, True), (TIMEOUT, 1, True), (TIMEOUT, 0, False), (FAILED, 0, False),
     ("unavailable", None, False), ("stopped", 0, False)],
)  # fmt: skip
def test_a_probe_ran_its_step_only_when_it_completed_ran_out_of_memory_or_timed_out_after_it(
    status, steps, ran
):
    from orchestrator.running.calibrate import ran_its_step

    assert ran_its_step(status, steps) is ran


def test_a_failed_probes_peak_reads_as_not_measured(monkeypatch):
    from orchestrator.judging.calibrate import choose
    from orchestrator.judging.memory import MemoryModel
    from orchestrator.running.calibrate import _result
    from trainers.trial import TrialSpec

    probe = choose(TrialSpec(model="tiny"), MemoryModel.fit([], "RSS"), 4.0).probes[0]
    row = {"status": FAILED, "status_detail": LOAD_FAILED, "peak_rss_gib": 0.57, "steps_completed": 0}
    measured = _result(probe, row, 3.0)
    assert measured.peak_gib is None and measured.memory_kind is None and measured.error is None
    assert not measured.ran


@pytest.mark.parametrize(
    "verb, predict",
    [
        (["calibrate", "--model", "tiny", "--stack", "trl"], "`rlsweep fitmap --card 4090 --model tiny --stack trl`"),
        (["solve", "--maximize", "num_generations", "--model", "tiny"], "`rlsweep fits --card 4090 --model tiny`"),
    ],
)  # fmt: skip
def test_a_gpu_card_is_refused_up_front_on_a_host_without_a_gpu(verb, predict, tmp_path, capsys, monkeypatch):
    import trainers.nvml

    monkeypatch.setattr(trainers.nvml, "local_gpus", lambda: 0)
    out = tmp_path / "o"
    code, text = run_cli([*verb, "--card", "4090", "--output-dir", str(out)], capsys)
    assert code == 2
    assert "--card 4090: this host has no GPU (NVML finds none)" in text
    assert "would measure this host's RSS, not the memory of the card (4090: 24GB, 24 GiB)" in text
    assert predict in text and "--budget-gib 24 instead of --card" in text
    assert "Traceback" not in text and not out.exists()


def test_a_gpu_card_is_not_refused_where_the_host_has_a_gpu(monkeypatch):
    import argparse

    import trainers.nvml
    from orchestrator.cli._common import card_unmeasurable
    from orchestrator.judging.cards import card

    args = argparse.Namespace(card=card("4090"))
    monkeypatch.setattr(trainers.nvml, "local_gpus", lambda: 1)
    assert card_unmeasurable(args, "solve", "rlsweep fits --card 4090") is None
    monkeypatch.setattr(trainers.nvml, "local_gpus", lambda: 0)
    assert card_unmeasurable(args, "solve", "rlsweep fits --card 4090") is not None
    assert card_unmeasurable(argparse.Namespace(card=None), "solve", "x") is None


def test_solve_reads_no_peak_from_a_probe_that_did_not_run_its_step():
    from orchestrator.judging.solve import measured_from_row

    row = {"status": FAILED, "status_detail": LOAD_FAILED, "peak_rss_gib": 0.57, "trial_key": "k"}
    failed = measured_from_row(8, row, 4.0)
    assert failed.fits is None and failed.peak_gib is None and failed.memory_kind is None
    done = measured_from_row(8, {**row, "status": COMPLETED, "status_detail": "1 step"}, 4.0)
    assert done.fits is True and done.peak_gib == 0.57
