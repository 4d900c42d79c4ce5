"""One flag per concept, declared once: every verb's flags are owned by the vocabulary (orchestrator/cli/
_flags.py's shared flags, the knobs' own declarations, a verb's own list), the old spellings still parse
with a note, and a knob set both by a verb's flag and by --set is refused with one text everywhere."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from orchestrator.cli import build_parser
from orchestrator.cli._flags import OLD, taken, unowned_flags
from tests.helpers.cli import run_cli
from trainers.trial import knob_flags, knob_letter


def verbs() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("verb", sorted(verbs()))
def test_every_flag_of_every_verb_is_owned_by_the_vocabulary(verb):
    assert unowned_flags(verb, verbs()[verb]) == []


def test_an_ad_hoc_flag_added_to_a_verb_is_caught_as_unowned():
    parser = verbs()["fits"]
    parser.add_argument("--kk", type=int)
    assert unowned_flags("fits", parser) == ["--kk"]


def test_k_b_and_the_length_each_declare_one_long_flag_and_one_short_form_on_the_knob():
    assert knob_flags("num_generations") == ("--num-generations", "--k")
    assert knob_flags("batch_size") == ("--batch-size", "--b")
    assert knob_flags("max_completion_length") == ("--max-completion-length", "--length")
    assert (knob_letter("num_generations"), knob_letter("batch_size"), knob_letter("seed")) == (
        "K",
        "B",
        "seed",
    )


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["fits", "--model", "tiny", "--num-generations", "16", "--batch-size", "2"], "num_generations", 16),
        (["fits", "--model", "tiny", "--max-completion-length", "512"], "max_completion_length", 512),
        (["fitmap", "--num-generations", "4,8"], "num_generations", "4,8"),
        (["calibrate", "--model", "tiny", "--stack", "trl", "--batch-size", "1,2"], "batch_size", "1,2"),
        (["trial", "--k", "8"], "num_generations", 8),
        (["trial", "--length", "64"], "max_completion_length", 64),
    ],
)
def test_a_knob_reads_the_same_by_its_long_flag_and_its_short_form_on_every_verb(argv, dest, value):
    assert getattr(build_parser().parse_args(argv), dest) == value


@pytest.mark.parametrize(
    ("argv", "old", "dest", "value"),
    [
        (["fits", "--model", "tiny", "--stacks", "trl"], "--stacks", "stacks", "trl"),
        (["fitmap", "--framework", "unsloth"], "--framework", "stacks", "unsloth"),
        (["calibrate", "--model", "tiny", "--framework", "trl"], "--framework", "stack", "trl"),
        (["solve", "--maximize", "batch_size", "--stacks", "Unsloth"], "--stacks", "stack", "unsloth"),
        (["trial", "--framework", "Unsloth"], "--framework", "stack", "unsloth"),
        (["calibrate", "--model", "tiny", "--stack", "trl", "--out", "x"], "--out", "output_dir", "x"),
        (["fitmap", "--out", "maps"], "--out", "output_dir", Path("maps")),
        (["fits", "--model-name", "tiny"], "--model-name", "model", "tiny"),
        (["trial", "--model-name", "tiny"], "--model-name", "model", "tiny"),
    ],
)
def test_an_old_spelling_still_parses_and_notes_its_new_flag_on_stderr(argv, old, dest, value, capsys):
    assert getattr(build_parser().parse_args(argv), dest) == value
    assert f"rlsweep: {old} is now {OLD[old]};" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["fits", "fitmap", "calibrate", "solve", "trial", "run", "predict"])
def test_the_old_spellings_are_hidden_from_every_verbs_help(verb):
    text = verbs()[verb].format_help()
    assert not [old for old in OLD if f"{old} " in text or f"{old}," in text]


SET_TWICE = {
    "fits": ["fits", "--model", "tiny", "--budget-gib", "8"],
    "fitmap": ["fitmap", "--budget-gib", "8", "--no-plot"],
    "calibrate": ["calibrate", "--model", "tiny", "--stack", "trl", "--budget-gib", "8"],
}


@pytest.mark.parametrize("verb", sorted(SET_TWICE))
@pytest.mark.parametrize("knob", ["num_generations", "batch_size", "max_completion_length"])
def test_each_verb_refuses_a_knob_set_by_its_flag_and_by_set_with_the_same_text(
    verb, knob, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # calibrate names its output folder before it refuses
    code, text = run_cli([*SET_TWICE[verb], "--set", f"{knob}=4"], capsys)
    assert code == 2
    assert f"--set {knob}=4: {taken(knob)[knob]}" in " ".join(text.split())
    assert " or ".join(knob_flags(knob)) in taken(knob)[knob]


MODEL_GIVEN = {
    **SET_TWICE,
    "solve": [
        "solve",
        "--model",
        "tiny",
        "--budget-gib",
        "8",
        "--maximize",
        "num_generations",
        "--values",
        "2",
    ],
}


@pytest.mark.parametrize("verb", sorted(MODEL_GIVEN))
@pytest.mark.parametrize("item", ["model=tiny", "memory_budget_gib=8"])
def test_each_verb_refuses_the_model_or_budget_in_set_beside_its_flag_with_the_same_text(
    verb, item, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    code, text = run_cli([*MODEL_GIVEN[verb], "--set", item], capsys)
    knob = item.partition("=")[0]
    assert code == 2
    assert f"--set {item}: {taken(knob)[knob]}" in " ".join(text.split())


def test_an_old_spelling_of_a_repeatable_flag_adds_to_it_as_the_flag_does(capsys):
    args = build_parser().parse_args(["fitmap", "--model", "tiny", "--model-name", "smollm2"])
    assert args.model == ["tiny", "smollm2"]
    assert "rlsweep: --model-name is now --model;" in capsys.readouterr().err
