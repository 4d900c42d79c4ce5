"""Bad input to the verbs that predict: `rlsweep fitmap` checks its settings as `predict` and
`run` do, by the trainer's own rules (field, value, rule, fix; exit 2), a budget given on a command line
must be a positive number, and a model the fit map knows nothing of is named with the models it knows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from trainers.models import bundled_models
from trainers.trial import knob_default

ROOT = Path(__file__).parents[2]
CPU_SMOKE = str(ROOT / "sweeps" / "cpu-smoke.yaml")
FITMAP = ["fitmap", "--budget-gib", "16", "--no-plot"]


def test_fitmap_refuses_a_k_of_zero_with_the_field_value_rule_and_fix(capsys):
    code, text = run_cli([*FITMAP, "--set", "num_generations=0"], capsys)
    assert code == 2
    assert "--set num_generations=0: num_generations must be >= 2, got 0; give 2 or more" in text
    assert "Traceback" not in text


def test_fitmap_refuses_a_word_where_a_number_goes(capsys):
    code, text = run_cli([*FITMAP, "--set", "max_prompt_length=abc"], capsys)
    assert code == 2
    default = knob_default("max_prompt_length")
    assert (
        f"--set max_prompt_length=abc: max_prompt_length must be int, got 'abc' (str); give a whole "
        f"number, e.g. {default}" in text
    )


def test_fitmap_sends_a_knob_its_own_flags_set_to_that_flag(capsys):
    code, text = run_cli([*FITMAP, "--set", "num_generations=8", "--set", "model=tiny"], capsys)
    assert code == 2
    assert (
        "--set num_generations=8: num_generations (K) is set by --num-generations or --k: give it there"
        in text
    )
    assert "--set model=tiny: model is set by --model: give it there" in text


def test_fitmap_checks_its_axes_and_lengths_by_the_knobs_rules_all_at_once(capsys):
    argv = [*FITMAP, "--k", "0,abc", "--b", "0", "--min-length", "0", "--stack", "trl,trll"]
    code, text = run_cli(argv, capsys)
    assert code == 2
    assert "fitmap: 5 error(s), nothing drawn:" in text
    assert "--k 0,abc: num_generations must be >= 2, got 0; give 2 or more" in text
    assert "--k 0,abc: 'abc' is not a whole number; give e.g. --k 4,8" in text
    assert "--b 0: batch_size must be >= 1, got 0; give 1 or more" in text
    assert "--min-length 0: max_completion_length must be >= 1, got 0; give 1 or more" in text
    assert "--stack trl,trll: unknown stack 'trll'; did you mean 'trl'" in text


def test_fitmap_refuses_a_length_range_that_runs_backwards(capsys):
    code, text = run_cli([*FITMAP, "--min-length", "512", "--max-length", "256"], capsys)
    assert code == 2
    assert "--min-length 512 is above --max-length 256; give a range" in text


def test_fitmap_refuses_a_model_it_has_no_config_for_with_the_command_that_fetches_it(capsys):
    code, text = run_cli([*FITMAP, "--model", "Qwen/Qwen9-99B", "--k", "4", "--b", "1"], capsys)
    assert code == 2
    assert (
        "--model Qwen/Qwen9-99B: model: 'Qwen/Qwen9-99B' is not bundled and its config.json is not in "
        in text
    )
    assert "HF_HUB_OFFLINE is set" in text and "`hf download Qwen/Qwen9-99B config.json`" in text
    assert "did you mean" not in text and "Qwen/Qwen3-8B" not in text  # no list of names to read past
    assert "`rlsweep models` lists the models it knows" in text
    assert "unknown  " not in text  # no table of unknown cells


def test_fitmap_names_the_known_models_once_for_a_name_that_is_no_model(capsys):
    code, text = run_cli([*FITMAP, "--model", "tyni", "--k", "4", "--b", "1"], capsys)
    assert code == 2
    assert "did you mean 'tiny'" in text
    assert all(text.count(f"random:{hub_id}") == 1 for hub_id in bundled_models())


def test_fitmap_names_only_the_unknown_model_among_known_ones(capsys):
    argv = [*FITMAP, "--model", "Qwen/Qwen3-4B", "--model", "someorg/unseen", "--k", "4", "--b", "1"]
    code, text = run_cli(argv, capsys)
    assert code == 2
    assert "fitmap: 1 model(s) it knows nothing of, nothing drawn:" in text
    assert "--model someorg/unseen: model: 'someorg/unseen' is not bundled and its config.json" in text
    assert "--model Qwen/Qwen3-4B" not in text


def test_fitmap_refuses_settings_no_cell_of_the_map_can_hold_with_the_fix(capsys):
    argv = [*FITMAP, "--model", "Qwen/Qwen3-4B", "--k", "4", "--b", "1", "--set", "micro_batch_size=5"]
    code, text = run_cli(argv, capsys)
    assert code == 2
    assert "fitmap: no cell of the map can be predicted, nothing drawn:" in text
    assert (
        "micro_batch_size: 5 does not divide batch_size x num_generations = 1 x 4 = 4; choose a divisor"
        in text
    )


def test_fitmap_draws_the_cells_it_can_and_says_why_not_the_others(capsys):
    argv = [*FITMAP, "--model", "Qwen/Qwen3-4B", "--k", "3,4", "--b", "1", "--set", "micro_batch_size=2"]
    code, text = run_cli(argv, capsys)
    assert code == 0
    assert "unknown (3 cell(s), e.g. trl Qwen/Qwen3-4B K=3 B=1): micro_batch_size: 2 does not divide" in text


@pytest.mark.parametrize(
    "verb",
    [
        ["fitmap", "--no-plot"],
        ["predict", CPU_SMOKE],
        ["report", "outputs/no-such-sweep"],
        ["solve", "--maximize", "num_generations"],
    ],
    ids=lambda verb: verb[0],
)
@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("-1", "must be > 0.0, got -1.0; give a number above 0 (GiB, e.g. 16)"),
        ("0", "must be > 0.0, got 0.0; give a number above 0 (GiB, e.g. 16)"),
        ("nan", "must be a finite number, got nan; give the budget in GiB, e.g. 16"),
        ("inf", "must be a finite number, got inf; give the budget in GiB, e.g. 16"),
        ("16GB", "'16GB' is not a number; give the budget in GiB, e.g. 16"),
    ],
)
def test_every_verb_refuses_a_budget_that_is_not_a_positive_number(verb, given, says, capsys):
    code, text = run_cli([*verb, "--budget-gib", given], capsys)
    assert code == 2
    assert f"argument --budget-gib: {says}" in text


def test_a_trials_budget_below_zero_is_refused_by_the_trials_own_rule(capsys):
    code, text = run_cli(["trial", "--memory-budget-gib", "-1"], capsys)
    assert code == 2
    assert "memory_budget_gib: must be > 0.0, got -1.0; give a number above 0" in text


def test_a_sweeps_budget_below_zero_set_on_the_command_line_is_refused_with_the_fix(capsys):
    code, text = run_cli(["predict", CPU_SMOKE, "--set", "memory.budget_gib=-1"], capsys)
    assert code == 2
    assert "memory.budget_gib: input should be greater than 0, got -1; give a number above 0" in text
