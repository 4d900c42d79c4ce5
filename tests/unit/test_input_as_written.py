"""User input accepted as users write it: the names the tool itself prints (TRL, Unsloth, GRPO), numbers
as HF and TRL configs write them (2e-4), cards by their number (4090); and what is refused, refused
alike: exit 2 from every verb, every error of a sweep at once."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from orchestrator.cli import build_parser
from orchestrator.cli.gpu_check import parse_modes
from orchestrator.judging.cards import card
from orchestrator.spec.load import load_sweep, trial_set_errors
from orchestrator.spec.plan import plan
from orchestrator.spec.sweep import SweepError
from tests.helpers.cli import run_cli

ROOT = Path(__file__).parents[2]


def _sweep(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    return path


def test_stack_and_mode_names_are_case_insensitive_in_yaml_set_and_flags(tmp_path):
    text = (
        "name: cased\ngrid: {stack: [TRL, Unsloth], mode: GRPO}\n"
        "fixed: {model: tiny, max_steps: 2, stack_dtype: {TRL: FP16}}\n"
    )
    trials = plan(load_sweep(_sweep(tmp_path, text))).trials
    assert sorted(t.stack for t in trials) == ["trl", "unsloth"]
    assert {t.mode for t in trials} == {"grpo"}
    assert all(t.stack_dtype == {"trl": "fp16"} for t in trials)
    swept = load_sweep(_sweep(tmp_path, "name: s\nfixed: {model: tiny}\n"), ["stack=Unsloth", "mode=GSPO"])
    assert (swept.fixed["stack"], swept.fixed["mode"]) == ("unsloth", "gspo")
    base: dict = {}
    assert trial_set_errors(["stack=TRL", "mode=Gspo"], base, {}) == []
    assert base == {"stack": "trl", "mode": "gspo"}
    parser = build_parser()
    trial = parser.parse_args(
        ["trial", "--stack", "Unsloth", "--mode", "GSPO", "--framework-dtype", "{TRL: BF16}"]
    )
    assert (trial.stack, trial.mode, trial.stack_dtype) == ("unsloth", "gspo", {"trl": "bf16"})
    solve = parser.parse_args(
        ["solve", "--budget-gib", "8", "--maximize", "num_generations", "--stack", "TRL"]
    )
    assert solve.stack == "trl"
    assert parser.parse_args(["report", "out", "--base-stack", "Unsloth"]).base_stack == "unsloth"
    assert parse_modes("GRPO,gspo") == ("grpo", "gspo")


def test_fitmap_takes_the_stacks_as_it_prints_them(tmp_path, capsys):
    argv = ["fitmap", "--budget-gib", "16", "--no-plot", "--stack", "TRL,Unsloth", "--k", "4", "--b", "1"]
    code, text = run_cli([*argv, "--model", "Qwen/Qwen2.5-3B-Instruct"], capsys)
    assert code == 0, text
    assert "trl" in text and "unsloth" in text


def test_an_unknown_stack_in_any_case_is_still_refused_naming_the_nearest(tmp_path, capsys):
    path = _sweep(tmp_path, "name: s\ngrid: {stack: [TRLL]}\n")
    with pytest.raises(SweepError) as refused:
        load_sweep(path)
    assert "grid.stack[0]: unknown value 'TRLL'; did you mean 'trl'" in str(refused.value)
    code, text = run_cli(["fitmap", "--budget-gib", "16", "--no-plot", "--stack", "TRL,Unslot"], capsys)
    assert code == 2 and "unknown stack 'Unslot'; did you mean 'unsloth'" in text


def test_a_float_setting_takes_an_exponent_without_a_dot_from_yaml_text(tmp_path):
    text = (
        "name: exponents\ngrid: {learning_rate: [1e-5, 2e-4]}\n"
        "fixed: {model: tiny, beta: 1E-3, temperature: 1.0e0}\nmemory: {budget_gib: 1.6e1}\n"
    )
    sweep = load_sweep(_sweep(tmp_path, text), ["lora_dropout=5e-2"])
    assert sweep.grid["learning_rate"] == [1e-5, 2e-4]
    assert (sweep.fixed["beta"], sweep.fixed["temperature"], sweep.fixed["lora_dropout"]) == (1e-3, 1.0, 0.05)
    assert sweep.memory.budget_gib == 16.0
    assert sorted(t.learning_rate for t in plan(sweep).trials) == [1e-5, 2e-4]
    base: dict = {}
    assert trial_set_errors(["learning_rate=2e-4"], base, {}) == [] and base == {"learning_rate": 2e-4}
    # a word is still a word, and an int setting still refuses a float
    with pytest.raises(SweepError) as refused:
        load_sweep(_sweep(tmp_path, "name: s\nfixed: {learning_rate: 2e-4x, max_steps: 1e3}\n"))
    assert "fixed.learning_rate: must be float, got '2e-4x' (str)" in str(refused.value)
    assert "fixed.max_steps: must be int, got 1000.0 (float)" in str(refused.value)


@pytest.mark.parametrize(
    ("given", "name"),
    [("4090", "24GB"), ("3090", "24GB"), ("3090Ti", "24GB"), ("5090", "32GB"), ("4080", "16GB"),
     ("H100", "H100-80GB"), ("h200", "H200"), ("A6000", "48GB")],
)  # fmt: skip
def test_a_bare_card_number_resolves_to_the_card_of_that_name(given, name):
    assert card(given).name == name


INVALID = {
    "a field's rule": "name: bad\nfixed: {model: tiny, learning_rate: -1}\n",
    "a cross-field rule": "name: bad\nfixed: {model: tiny, batch_size: 2, num_generations: 4, micro_batch_size: 3}\n",
    "a section's rule": "name: bad\nfixed: {model: tiny}\nmemory: {budget_gib: -8}\n",
}


@pytest.mark.parametrize("broken", INVALID)
def test_an_invalid_sweep_file_exits_2_from_every_verb_that_reads_one(broken, tmp_path, capsys):
    path = str(_sweep(tmp_path, INVALID[broken]))
    for argv in (["validate", path], ["run", path, "--dry-run"], ["run", path], ["predict", path],
                 ["submit", path, "--address", "http://127.0.0.1:1"]):  # fmt: skip
        code, text = run_cli(argv, capsys)
        assert code == 2, (argv, text)
        assert "Traceback" not in text


def _help(verb: str, capsys) -> tuple[str, list[str]]:
    """(the verb's --help before its examples, one string; the example command lines under it)."""
    code, text = run_cli([verb, "--help"], capsys)
    assert code == 0
    options, _, shown = text.partition("\nexamples:\n")
    options = options.partition("\noptions:\n")[2]  # the flags, past the usage line
    return " ".join(options.split()), [line.strip() for line in shown.splitlines() if line.strip()]


@pytest.mark.parametrize("verb", ["fitmap", "predict"])
def test_every_example_a_verbs_help_shows_is_one_it_takes(verb, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the examples name the repository's sweeps and bench data
    options, commands = _help(verb, capsys)
    assert commands and all(line.startswith(f"rlsweep {verb} ") for line in commands)
    for line in commands:
        argv = shlex.split(line)[1:] + (["--output-dir", str(tmp_path)] if verb == "fitmap" else [])
        code, text = run_cli(argv, capsys)
        assert code == 0, (line, text)
    sets = [s.rstrip(",") for s in re.findall(r"--set ([a-z][^\s;=]*=[^\s;]+)", options)]
    assert len(sets) >= 2, options
    base = (
        [
            "fitmap",
            "--budget-gib",
            "16",
            "--no-plot",
            "--model",
            "Qwen/Qwen2.5-3B-Instruct",
            "--k",
            "4",
            "--b",
            "1",
        ]
        if verb == "fitmap"
        else ["predict", str(ROOT / "sweeps" / "cpu-smoke.yaml"), "--budget-gib", "8"]
    )
    for item in sets:
        code, text = run_cli([*base, "--set", item], capsys)
        assert code == 0, (item, text)
    aliases = re.search(r"aliases like ([^)]*)\)", options).group(1).split(", ")
    assert all(card(alias) for alias in aliases)


def test_validate_lists_a_micro_batch_that_does_not_divide_bk_with_the_other_errors_at_once(tmp_path, capsys):
    text = (
        "name: bad\ngrid: {num_generations: [4, 1]}\nmemory: {budget_gib: -8}\n"
        "fixed: {model: tiny, batch_size: 2, micro_batch_size: 3, learning_rate: -1}\n"
    )
    code, out = run_cli(["validate", str(_sweep(tmp_path, text))], capsys)
    printed = " ".join(out.split())
    assert code == 2
    assert "4 error(s)" in printed
    assert "memory.budget_gib: input should be greater than 0, got -8" in printed
    assert "grid.num_generations[1]: must be >= 2, got 1; give 2 or more" in printed
    assert "fixed.learning_rate: must be > 0.0, got -1.0; give a number above 0" in printed
    assert (
        "micro_batch_size: 3 does not divide batch_size x num_generations = 2 x 4 = 8; choose a divisor"
        in printed
    )
    assert "Traceback" not in printed


def test_a_rule_across_settings_is_not_judged_on_a_value_that_was_refused(tmp_path):
    # batch_size 0 is refused: whether micro_batch_size 3 divides B x K would be judged on a stand-in
    text = "name: bad\nfixed: {model: tiny, batch_size: 0, micro_batch_size: 3, temperature: -1, eval_k: 2}\n"
    with pytest.raises(SweepError) as refused:
        load_sweep(_sweep(tmp_path, text))
    assert refused.value.errors == [
        "fixed.batch_size: must be >= 1, got 0; give 1 or more",
        "fixed.temperature: must be > 0.0, got -1.0; give a number above 0",
    ]
