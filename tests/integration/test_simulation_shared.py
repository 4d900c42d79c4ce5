"""One simulated step answers every verb: a step that `predict`, `fits` or `fitmap` simulated is read from
disk by the others for the same configuration (counted: no simulation runs again), `solve` keys its steps
as they do, and the steps fits' workers simulate side by side (trainers/simulate/_pool.py) are the ones
the asking process simulates itself."""

import dataclasses

import pytest

import trainers.simulate as simulation
from tests.helpers.cli import run_cli
from trainers.simulate import _key, _meta, simulate, simulate_each
from trainers.trial import TrialSpec

pytestmark = pytest.mark.slow

SWEEP = """\
name: shared
task: arithmetic
grid:
  stack: [trl]
  num_generations: [4]
fixed:
  model: tiny
  batch_size: 1
  max_completion_length: 128
resources:
  gpus_per_trial: 1
memory:
  budget_gib: 16
"""
FITS = [
    "fits",
    "--model",
    "tiny",
    "--card",
    "16gb",
    "--k",
    "4",
    "--b",
    "1",
    "--length",
    "128",
    "--stack",
    "trl",
]


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """The simulations run in this process, counted; each verb starts with nothing in memory, so a step
    it does not simulate is one it read from disk."""
    monkeypatch.setenv("RLSWEEP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RLSWEEP_SIMULATE", "1")  # the suite's default is off (tests/conftest.py)
    monkeypatch.setenv("RLSWEEP_SIMULATE_WORKERS", "0")
    runs = []
    real = simulation._one

    def one(spec, *args, **kwargs):
        runs.append(spec.max_completion_length)
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(simulation, "_one", one)

    def verb(argv, capsys):
        monkeypatch.setattr(simulation, "_FRESH", {})
        before = len(runs)
        code, text = run_cli(argv, capsys)
        assert code == 0, text
        return len(runs) - before, text

    return verb


def test_a_step_predict_simulated_answers_fits_from_disk_without_simulating_again(counted, tmp_path, capsys):
    sweep = tmp_path / "shared.yaml"
    sweep.write_text(SWEEP)
    simulated, text = counted(
        ["predict", str(sweep), "--card", "16gb", "--output-dir", str(tmp_path / "o")], capsys
    )
    assert simulated == 1 and "simulated" in text
    simulated, text = counted(FITS, capsys)
    assert simulated == 0
    assert "simulated before, read from disk" in text
    assert len(list((tmp_path / "cache" / "simulated").glob("*.json"))) == 1


def test_a_shape_fitmap_simulated_answers_fits_and_predict_from_disk(counted, tmp_path, capsys):
    simulated, _ = counted(
        [
            "fitmap",
            "--model",
            "tiny",
            "--card",
            "16gb",
            "--k",
            "4",
            "--b",
            "1",
            "--stack",
            "trl",
            "--no-plot",
        ],
        capsys,
    )
    assert simulated == 2  # its shortest and longest completion (128 and 8192 tokens), each itself
    simulated, text = counted(FITS, capsys)  # 128 tokens: one of the map's shapes
    assert simulated == 0 and "simulated before, read from disk" in text
    sweep = tmp_path / "shared.yaml"
    sweep.write_text(SWEEP)
    simulated, _ = counted(
        ["predict", str(sweep), "--card", "16gb", "--output-dir", str(tmp_path / "o")], capsys
    )
    assert simulated == 0


def test_solve_keys_its_candidates_steps_as_fits_keys_the_same_configuration(tmp_path):
    from orchestrator.judging.solve import make_request

    request = make_request(
        "num_generations", 16.0, settings={"model": "tiny", "stack": "trl"},
        sets=["batch_size=1", "max_completion_length=128"], values=[4], output_dir=str(tmp_path / "solve"),
    )  # fmt: skip
    solved = request.spec(4)
    asked = TrialSpec(model="tiny", stack="trl", num_generations=4, batch_size=1, max_completion_length=128)
    config = _meta.model_config(asked)
    assert solved.trial_key and solved.sweep  # its own bookkeeping, not the step's
    assert _key(solved, config, solved.max_prompt_length) == _key(asked, config, asked.max_prompt_length)


def test_steps_simulated_side_by_side_in_workers_are_the_steps_simulated_in_this_process(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("RLSWEEP_CACHE", str(tmp_path / "workers"))
    monkeypatch.setenv("RLSWEEP_SIMULATE_WORKERS", "2")
    monkeypatch.setattr(simulation, "_FRESH", {})
    from trainers import stacks

    specs = [
        TrialSpec(model="tiny", stack=name, num_generations=4, batch_size=1, max_completion_length=128)
        for name in stacks.names()
    ]
    ran_here = []
    monkeypatch.setattr(
        simulation, "_one", lambda *a, **k: ran_here.append(a) or pytest.fail("simulated here")
    )
    simulate_each(specs)
    by_workers = [simulate(spec) for spec in specs]
    assert not ran_here and all("cached" not in step.simulated for step in by_workers)
    assert len(list((tmp_path / "workers" / "simulated").glob("*.json"))) == len(
        specs
    )  # kept for the next verb
    monkeypatch.undo()
    monkeypatch.setenv("RLSWEEP_SIMULATE_WORKERS", "0")
    for spec, worked in zip(specs, by_workers, strict=True):
        here = simulate(spec, cache=False)
        assert dataclasses.replace(worked, seconds=0) == dataclasses.replace(here, seconds=0), spec.stack
