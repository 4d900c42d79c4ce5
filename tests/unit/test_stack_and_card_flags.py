"""One flag name for the stack on every verb that takes one (--stack; --stacks and --framework kept for one
release, hidden from help), and
`solve`'s budget as a card (--card NAME) or in GiB (--budget-gib), exactly one of the two."""

from __future__ import annotations

import argparse
import re

import pytest

from orchestrator.cli import build_parser
from orchestrator.judging.cards import card
from tests.helpers.cli import run_cli

SOLVE = ["solve", "--maximize", "num_generations", "--model", "tiny", "--values", "2", "4"]


def test_solve_without_a_budget_is_refused_with_exit_2_naming_both_flags(capsys):
    code, text = run_cli(SOLVE, capsys)
    assert code == 2
    assert "give the budget as --card NAME (e.g. --card 24gb" in text and "--budget-gib GIB" in text


def test_solve_with_a_card_and_a_budget_is_refused_with_exit_2_naming_both(capsys):
    code, text = run_cli([*SOLVE, "--card", "24gb", "--budget-gib", "8"], capsys)
    assert code == 2
    assert "--card 24GB and --budget-gib 8: give one" in text


def test_solve_on_a_card_searches_within_that_cards_usable_memory(monkeypatch, tmp_path, capsys):
    import orchestrator.running.solve as running
    import trainers.nvml

    asked = []

    def interrupted(request, say):
        asked.append(request)
        raise KeyboardInterrupt

    monkeypatch.setattr(running, "run_solve", interrupted)
    # a host with a GPU (NVML's count stood in for): without one, solve refuses a GPU card up front
    monkeypatch.setattr(trainers.nvml, "local_gpus", lambda: 1)
    code, text = run_cli([*SOLVE, "--card", "4090", "--output-dir", str(tmp_path / "out")], capsys)
    assert code == 130, text
    (request,) = asked
    usable = card("4090").usable_gib
    assert request.base.memory_budget_gib == usable and request.guard.budget_gib == usable
    assert f"in {card('4090').describe()}" in " ".join(text.split())


@pytest.mark.parametrize("flag", ["--stack", "--stacks", "--framework"])
def test_every_verb_that_takes_a_stack_takes_it_as_stack_stacks_or_stack(flag):
    parser = build_parser()
    assert parser.parse_args(["fits", "--model", "tiny", flag, "TRL,unsloth"]).stacks == "TRL,unsloth"
    assert parser.parse_args(["fitmap", flag, "unsloth"]).stacks == "unsloth"
    assert parser.parse_args(["calibrate", "--model", "tiny", flag, "trl"]).stack == "trl"
    assert parser.parse_args(["solve", "--maximize", "batch_size", flag, "Unsloth"]).stack == "unsloth"
    assert parser.parse_args(["trial", flag, "Unsloth"]).stack == "unsloth"


@pytest.mark.parametrize("verb", ["fits", "fitmap", "calibrate", "solve", "trial"])
def test_each_verbs_help_names_stack_and_hides_its_old_spellings(verb, capsys):
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[verb]
    (action,) = [a for a in sub._actions if "--stack" in a.option_strings]
    assert action.option_strings == ["--stack"]
    code, text = run_cli([verb, "--help"], capsys)
    options = text.partition("\noptions:\n")[2]
    assert code == 0 and "--stack " in options
    assert not re.search(r"--(stacks|framework|framework-dtype)(?![-\w])", options)  # old spellings hidden


def test_calibrate_given_several_stacks_asks_for_one(capsys):
    code, text = run_cli(
        ["calibrate", "--model", "tiny", "--stack", "trl,unsloth", "--budget-gib", "4"], capsys
    )
    assert code == 2
    assert "--stack trl,unsloth: calibrate probes one stack; give one (e.g. --stack trl)" in text


def test_fits_refuses_a_stack_set_by_set_pointing_to_stack(capsys):
    code, text = run_cli(["fits", "--model", "tiny", "--budget-gib", "4", "--set", "stack=trl"], capsys)
    assert (
        code == 2
        and "--set stack=trl: stack is set by --stack: give it there instead of --set (e.g. --stack trl)"
        in text
    )
