"""Bad input to `rlsweep calibrate`: every error at once with its field, value, rule and fix (exit 2), by
the same checks as `rlsweep fitmap`, before any probe runs (nothing is written to --output-dir)."""

from __future__ import annotations

import pytest

from tests.helpers.cli import run_cli


@pytest.fixture
def calibrate(tmp_path):
    out = tmp_path / "calibrate"
    return out, [
        "calibrate",
        "--model",
        "tiny",
        "--stack",
        "trl",
        "--budget-gib",
        "4",
        "--output-dir",
        str(out),
    ]


def test_calibrate_refuses_bad_settings_all_at_once_and_runs_nothing(calibrate, capsys):
    out, argv = calibrate
    argv += ["--set", "num_generations=8", "--set", "max_prompt_length=abc", "--set", "max_steps=3",
             "--k", "0", "--min-length", "600", "--max-length", "300"]  # fmt: skip
    code, text = run_cli(argv, capsys)
    assert code == 2
    assert "calibrate: 5 error(s), nothing run:" in text
    assert (
        "--set num_generations=8: num_generations (K) is set by --num-generations or --k: give it there"
        in text
    )
    assert "--set max_prompt_length=abc: max_prompt_length must be int, got 'abc' (str)" in text
    assert "--set max_steps=3: each probe is one step (max_steps 1, probe_steps 1): drop this --set" in text
    assert "--k 0: num_generations must be >= 2, got 0; give 2 or more" in text
    assert "--min-length 600 is above --max-length 300" in text
    assert "Traceback" not in text and not out.exists()


def test_calibrate_names_the_nearest_stack_to_an_unknown_one(calibrate, capsys):
    out, argv = calibrate
    argv[argv.index("trl")] = "trll"
    code, text = run_cli(argv, capsys)
    assert code == 2
    assert "--stack trll: unknown stack 'trll'; did you mean 'trl'" in text
    assert not out.exists()


def test_calibrate_names_the_models_it_knows_when_it_knows_not_the_one_asked_for(calibrate, capsys):
    out, argv = calibrate
    argv[argv.index("tiny")] = "Qwen/Qwen9-99B"
    code, text = run_cli(argv, capsys)
    assert code == 2
    assert "calibrate: 1 error(s), nothing run:" in text
    assert (
        "--model Qwen/Qwen9-99B: model: 'Qwen/Qwen9-99B' is not bundled and its config.json is not in "
        in text
    )
    assert "`hf download Qwen/Qwen9-99B config.json`" in text
    assert "`rlsweep models` lists the models it knows" in text
    assert not out.exists()


@pytest.mark.parametrize(
    "flags,said",
    [
        ([], "name the card (--card 24GB; rlsweep fitmap --help lists them) or --budget-gib GIB"),
        (["--budget-gib", "4", "--card", "24GB"], "--card 24GB and --budget-gib 4: give one"),
    ],
)
def test_calibrate_wants_one_budget(tmp_path, capsys, flags, said):
    argv = ["calibrate", "--model", "tiny", "--stack", "trl", "--output-dir", str(tmp_path / "c"), *flags]
    code, text = run_cli(argv, capsys)
    assert code == 2 and said in text


def test_calibrate_refuses_a_negative_budget_and_a_probe_count_it_cannot_choose(calibrate, capsys):
    _, argv = calibrate
    code, text = run_cli([*argv[:-4], "--budget-gib", "-1"], capsys)
    assert (
        code == 2
        and "argument --budget-gib: must be > 0.0, got -1.0; give a number above 0 (GiB, e.g. 16)" in text
    )
    code, text = run_cli([*argv, "--probes", "7"], capsys)
    assert code == 2 and "argument --probes: invalid choice: 7 (choose from 3, 4)" in text


def test_calibrate_refuses_a_budget_its_smallest_probe_is_predicted_over(calibrate, capsys):
    out, argv = calibrate
    argv[argv.index("4")] = "0.1"
    code, text = run_cli(argv, capsys)
    assert code == 2
    assert "calibrate: nothing run: the smallest probe (K=2 B=1 completion 128) is predicted" in text
    assert "over the 0.1 GiB budget" in text
    assert not (out / "trials.parquet").exists()


@pytest.mark.parametrize("flag, session", [([], True), (["--session"], True), (["--no-session"], False)])
def test_calibrate_runs_its_probes_in_a_session_unless_told_no_session(calibrate, flag, session):
    from orchestrator.cli import build_parser
    from orchestrator.cli.calibrate import request_of

    _, argv = calibrate
    request, errors = request_of(build_parser().parse_args([*argv, *flag]))
    assert errors == []
    assert request.session is session and request.simulated == []
