"""Small answers a new user meets first: the cards they own by name, the closest model id to a mistyped
one, a hub id in the wrong case, a YAML error that names its file, a length past the model's context,
and errors on stderr."""

from __future__ import annotations

import pytest

from tests.helpers.cli import run_cli


@pytest.mark.parametrize(
    "typed, name, gib",
    [("t4", "T4", 16.0), ("Tesla T4", "T4", 16.0), ("v100-16gb", "V100-16GB", 16.0),
     ("V100 32GB", "V100-32GB", 32.0), ("a4000", "A4000", 16.0), ("RTX A5000", "A5000", 24.0)],
)  # fmt: skip
def test_the_older_and_workstation_cards_are_known_by_name_with_their_memory(typed, name, gib):
    from orchestrator.judging.cards import card

    found = card(typed)
    assert (found.name, found.usable_gib, found.measured) == (name, gib, False)


def test_a_v100_without_its_size_asks_which_of_the_two():
    from orchestrator.judging.cards import UnknownCard, card

    with pytest.raises(UnknownCard, match="did you mean 'V100-16GB' or 'V100-32GB'"):
        card("v100")


@pytest.mark.parametrize(
    "typed, speed", [("t4", "T4"), ("v100-32gb", "V100"), ("a4000", "RTX A4000"), ("a5000", "RTX A5000")]
)
def test_the_new_cards_have_speed_figures_for_the_card_speed_model(typed, speed):
    from orchestrator.judging.card_speed import speed_of
    from orchestrator.judging.cards import card

    found = speed_of(typed, card(typed).name)
    assert found is not None and found.name == speed
    assert found.bandwidth_gbs > 0 and found.tflops > 0


def test_a_mistyped_random_id_suggests_the_bundled_id_it_extends_not_another_size():
    from trainers.models import model_problems

    (problem,) = model_problems("random:Qwen/Qwen3-4B-Instruct")
    assert "did you mean 'random:Qwen/Qwen3-4B'?" in problem
    assert "Qwen2.5-14B" not in problem


def test_a_hub_id_in_the_wrong_case_fails_validation_with_the_right_spelling(tmp_path, capsys):
    sweep = tmp_path / "case.yaml"
    sweep.write_text("name: case\nfixed: {model: qwen/qwen3-4b}\n")
    code, text = run_cli(["validate", str(sweep)], capsys)
    assert code == 2
    assert "'qwen/qwen3-4b' differs from the hub id 'Qwen/Qwen3-4B' only in case" in text
    assert "give Qwen/Qwen3-4B" in text


def test_a_yaml_error_names_the_file_not_a_unicode_string(tmp_path, capsys):
    sweep = tmp_path / "broken.yaml"
    sweep.write_text("name: x\ngrid:\n  num_generations: [2, 4\n")
    code, text = run_cli(["validate", str(sweep)], capsys)
    assert code == 2
    assert f'in "{sweep}", line 3' in text and "<unicode string>" not in text


def test_a_length_past_a_bundled_models_context_is_refused_with_its_fix():
    from trainers.trial import TrialSpec

    spec = TrialSpec(model="Qwen/Qwen3-4B", max_prompt_length=256, max_completion_length=40960)
    problems = " ".join(spec.problems())
    assert "41216 tokens exceeds Qwen/Qwen3-4B's context of 40960" in problems
    assert "lower max_prompt_length or max_completion_length" in problems
    assert TrialSpec(model="Qwen/Qwen3-4B", max_completion_length=8192).problems() == []


def test_refused_input_goes_to_stderr_and_leaves_stdout_empty(tmp_path, capsys):
    from orchestrator.cli import main

    sweep = tmp_path / "broken.yaml"
    sweep.write_text("name: x\ngrid: [\n")
    assert main(["validate", str(sweep)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "not valid YAML" in captured.err
    assert main(["calibrate", "--model", "tiny", "--stack", "trl", "--budget-gib", "4", "--k", "0",
                 "--output-dir", str(tmp_path / "c")]) == 2  # fmt: skip
    captured = capsys.readouterr()
    assert captured.out == "" and "calibrate: 1 error(s), nothing run:" in captured.err


def test_a_two_step_sweep_trial_left_to_the_default_probe_steps_keeps_a_step_to_train():
    from orchestrator.spec.load import parse_sweep
    from orchestrator.spec.plan import plan

    def trials(**oom):
        raw = {"name": "s", "fixed": {"model": "tiny", "max_steps": 2}, "grid": {"num_generations": [2]}}
        return plan(parse_sweep({**raw, **({"oom": oom} if oom else {})}))

    default = trials()
    assert [t.probe_steps for t in default.trials] == [1]
    assert not any("every step is a probe" in w for w in default.warnings)
    asked = trials(probe_steps=2)  # set on purpose: kept, and said
    assert [t.probe_steps for t in asked.trials] == [2]
    assert any("probe_steps: 2 of max_steps 2: every step is a probe" in w for w in asked.warnings)


@pytest.mark.parametrize("max_steps, probes", [(1, 2), (2, 1), (3, 2), (10, 2)])
def test_probe_steps_left_to_their_default_leave_the_last_step_to_train(max_steps, probes):
    from trainers.trial import probe_steps_within

    assert probe_steps_within(max_steps, 2) == probes


def test_rlsweep_trial_of_two_steps_probes_one_unless_told(monkeypatch, tmp_path):
    import orchestrator.cli.trial as trial_cli
    from orchestrator.cli import build_parser

    ran = []
    monkeypatch.setattr(
        trial_cli.TrialSpec, "problems", lambda self, skip=frozenset(): ran.append(self) or ["stop"]
    )
    for extra, probes in (([], 1), (["--probe-steps", "2"], 2)):
        args = build_parser().parse_args(["trial", "--max-steps", "2", "--output-dir", str(tmp_path), *extra])
        assert args.func(args) == 2
        assert ran[-1].probe_steps == probes


def test_rlsweep_report_on_a_trial_folder_writes_its_report_beside_it(tmp_path, capsys):
    from orchestrator.cli import main
    from orchestrator.recording.recorder import Recorder, TrialFolder
    from orchestrator.spec.plan import trial_key
    from orchestrator.words.outcome import COMPLETED, TrialResult
    from trainers.trial import TrialSpec

    spec = TrialSpec(model="tiny", max_steps=2, probe_steps=1)
    spec.trial_key = trial_key(spec)
    folder = tmp_path / spec.trial_key
    folder.mkdir()
    step = {"step": 2, "probe": False, "step_s": 1.0, "rss_peak_gib": 0.7, "reward_mean": 0.5}
    recorder = Recorder([spec], [TrialFolder(folder)])
    recorder.start(spec.trial_key)
    recorder.step(spec.trial_key, {"step": 1, "probe": True, "step_s": 1.0, "rss_peak_gib": 0.75})
    recorder.step(spec.trial_key, step)
    recorder.end(
        spec.trial_key, TrialResult(status=COMPLETED, status_detail="2 steps", peak={"rss_peak_gib": 0.75})
    )
    assert (folder / "trial.json").is_file() and not (folder / "trials.parquet").exists()
    assert main(["report", str(folder)]) == 0
    said = capsys.readouterr().out
    assert f"Report: {folder / 'report' / 'report.html'}" in said
    assert (folder / "report" / "report.html").is_file()
    assert "0.75 GiB" in said


@pytest.mark.parametrize("verb", ["fits", "fitmap", "calibrate", "solve"])
def test_the_card_flag_says_a_card_that_drives_a_display_has_less(verb, capsys):
    from orchestrator.cli import main

    with pytest.raises(SystemExit):
        main([verb, "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "a card that also drives a display has less, give --budget-gib as docs/oom.md says" in said


def test_the_budget_advice_says_what_a_card_name_stands_for_and_what_a_display_takes():
    from pathlib import Path

    from orchestrator.judging.cards import CARDS

    text = " ".join((Path(__file__).parents[2] / "docs" / "oom.md").read_text().split())
    assert "Type the total nvidia-smi shows for the card" in text
    assert "the marketed size for every other card (`T4` is 16, `24GB` is 24)" in text
    assert CARDS["T4"].usable_gib == 16 and CARDS["24GB"].usable_gib == 24  # what the page says
    assert "A card that also drives a display has less" in text


def test_fitmap_draws_under_outputs_not_a_fitmap_folder_in_the_working_directory(
    tmp_path, monkeypatch, capsys
):
    from orchestrator.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["fitmap", "--budget-gib", "4", "--model", "tiny", "--stack", "trl", "--k", "2", "--b", "1",
                 "--no-simulate"])  # fmt: skip
    assert code == 0, capsys.readouterr()
    assert not (tmp_path / "fitmap").exists()
    assert list((tmp_path / "outputs" / "fitmap").glob("fitmap_*.png"))
