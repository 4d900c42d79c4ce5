"""What would make it fit (orchestrator/judging/remedies.py, under `rlsweep fits` and `fitmap`): every
suggestion is one change in the user's terms, checked by the verb's own answer, the nearest of its kind;
where nothing fits on the card, the smallest card that does; fitmap's parting column both ways. The
memory model's prior is the check here (fast); one test goes through the real simulated step."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.judging.cards import CARDS
from orchestrator.judging.fitmap import fit_map
from orchestrator.judging.memory import MemoryModel
from orchestrator.judging.remedies import FITS, lines, model_check, remedies
from orchestrator.words.outcome import GPU
from tests.helpers.cli import run_cli
from trainers.trial import TrialSpec

PRIOR = MemoryModel.fit([], GPU, unmeasured=GPU)
CHECK = model_check(PRIOR)
QWEN3_4B = TrialSpec(
    model="Qwen/Qwen3-4B", stack="trl", num_generations=8, batch_size=1, max_completion_length=1024
)


def _changed(a: TrialSpec, b: TrialSpec) -> set[str]:
    return {f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)}


def test_each_suggestion_fits_by_the_same_check_and_changes_one_thing():
    assert CHECK(QWEN3_4B, 16.0).verdict != FITS
    found = remedies(QWEN3_4B, 16.0, CHECK, ["trl", "unsloth"])
    kinds = {r.kind for r in found.fits}
    assert {"micro-batch", "K", "length", "stack"} <= kinds
    for r in found.fits:
        assert CHECK(r.spec, 16.0).verdict == FITS and r.peak_gib <= 16.0
        changed = _changed(QWEN3_4B, r.spec)
        assert len(changed) == 1 or changed == {"generation", "vllm_mode"}, (r.kind, changed)


def test_each_suggestion_is_the_nearest_of_its_kind():
    found = {r.kind: r for r in remedies(QWEN3_4B, 16.0, CHECK, ["trl", "unsloth"]).fits}
    micro = found["micro-batch"].spec.micro_batch_size
    larger = [m for m in range(micro + 1, 8) if 8 % m == 0]
    assert all(CHECK(dataclasses.replace(QWEN3_4B, micro_batch_size=m), 16.0).verdict != FITS for m in larger)
    length = found["length"].spec.max_completion_length
    assert CHECK(dataclasses.replace(QWEN3_4B, max_completion_length=length + 64), 16.0).verdict != FITS
    assert (
        "--set micro_batch_size=" in found["micro-batch"].words
        and f"--length {length}" in found["length"].words
    )


def test_where_nothing_fits_on_the_card_it_names_the_smallest_card_that_does():
    big = dataclasses.replace(
        QWEN3_4B, model="Qwen/Qwen2.5-14B-Instruct", num_generations=2, max_completion_length=128
    )
    found = remedies(big, 4.0, CHECK, ["trl"])
    assert not found.fits and found.card is not None
    fits_on = CARDS[found.card_name].usable_gib
    assert CHECK(big, fits_on).verdict == FITS
    smaller = {c.usable_gib for c in CARDS.values() if 4.0 < c.usable_gib < fits_on}
    assert all(CHECK(big, gib).verdict != FITS for gib in smaller)
    assert any(found.card_name in line for line in lines(found))


def test_a_slow_check_is_spent_only_where_the_proposer_calls_it_near_the_budget():
    asked: list = []

    def counting(spec, budget):
        asked.append(spec)
        return CHECK(spec, budget)

    def propose(spec):
        return PRIOR.predict(spec).peak_gib

    found = remedies(QWEN3_4B, 16.0, counting, ["trl", "unsloth"], propose=propose, per_kind=1)
    assert found.checks == len(asked) <= 8
    assert all(propose(s) <= 16.0 for s in asked if s.max_completion_length == 1024)


def test_remedy_lines_stay_within_80_columns(capsys):
    code, text = run_cli(
        ["fits", "--model", "Qwen/Qwen3-4B", "--card", "16gb", "--k", "8", "--b", "1", "--length", "1024"],
        capsys,
    )
    assert code == 0, text
    block = text[text.index("would fit with one change") :].split("Seconds per step")[0]
    assert "--set micro_batch_size=" in block and "(--k 2)" in block
    assert all(len(line) <= 80 for line in block.splitlines()[1:]), block


def test_the_stacks_part_either_way_on_the_map():
    # with Unsloth as the map's base, the parting still names the stack that goes on: Unsloth
    fm = fit_map([], TrialSpec(), ["Qwen/Qwen2.5-3B-Instruct"], ["unsloth", "trl"], 24.0, ks=[8], bs=[2],
                measure=GPU, unmeasured=GPU)  # fmt: skip
    (parting,) = fm.partings
    assert (parting.base, parting.other) == ("trl", "unsloth")
    assert "Unsloth to" in fm.table()["stacks part at"].iloc[0]


def test_fitmap_gives_remedies_where_not_even_the_shortest_completion_surely_fits(capsys):
    code, text = run_cli(
        ["fitmap", "--card", "16gb", "--model", "Qwen/Qwen2.5-14B-Instruct", "--k", "32,64", "--b", "2",
         "--stack", "trl", "--no-plot"], capsys,
    )  # fmt: skip
    assert code == 0, text
    said = " ".join(text.split())
    assert "TRL Qwen2.5-14B-Instruct at K=32 B=2 (not surely 128 tokens, 1 more such cell(s))" in said
    assert "K=2 (--k 2)" in text  # the prior's interval at 14B is wide: only K=2 surely fits


@pytest.mark.slow
def test_through_the_real_simulated_step_each_suggestion_simulates_as_fitting(monkeypatch):
    """fits' own answer (measured rows, else its step simulated on meta tensors) as the check."""
    from orchestrator.cli._answers import prior_proposer
    from orchestrator.judging.answer import answer, answer_check

    monkeypatch.setenv("RLSWEEP_SIMULATE", "1")
    spec = TrialSpec(model="Qwen/Qwen2.5-0.5B-Instruct", stack="trl", num_generations=8, batch_size=1,
                     max_completion_length=1024)  # fmt: skip
    asked = answer(spec, [], 3.0, None, simulate=True)
    assert asked.basis.startswith("simulated") and asked.verdict != FITS, asked
    check = answer_check(spec, {"trl": asked}, [], 3.0, None, True)
    found = remedies(spec, 3.0, check, ["trl"], prior_proposer(spec, asked, None), per_kind=1)
    assert found.fits, found
    for r in found.fits:
        again = answer(r.spec, [], 3.0, None, simulate=True)
        assert again.basis.startswith("simulated") and again.verdict == FITS, (r.words, again)


def test_where_no_one_change_fits_the_changes_taken_together_do_each_kind_named_once():
    huge = dataclasses.replace(
        QWEN3_4B,
        model="Qwen/Qwen2.5-14B-Instruct",
        num_generations=64,
        batch_size=2,
        max_completion_length=8192,
    )
    found = remedies(huge, 16.0, CHECK, ["trl"])
    assert not found.fits and found.together is not None
    assert CHECK(found.together.spec, 16.0).verdict == FITS
    said = found.together.words.split("; ")
    assert len(said) >= 2 and len({w.split(" ")[0] for w in said}) == len(said)
    assert all(len(line) <= 80 for x in lines(found) for line in x.splitlines())


def test_an_answer_with_no_upper_bound_gets_no_search_and_says_what_would_bound_it(capsys):
    """A simulated answer on a family no GPU row measured has no upper bound: no change could be called
    a fit, so none is checked (each would be a simulation spent for nothing) and the line says why."""
    from orchestrator.cli._answers import print_remedies
    from orchestrator.judging.answer import Answer

    unbounded = Answer("TRL", "uncertain", "simulated (...)", 16.0, 12.4, float("inf"), "no qwen3 GPU row")
    checked = []

    def check(spec, budget):
        checked.append(spec)
        return CHECK(spec, budget)

    print_remedies(QWEN3_4B, {"trl": unbounded}, ["trl", "unsloth"], 16.0, check, None)
    said = capsys.readouterr().out
    assert checked == []
    assert "no change can be called a fit" in said and "calibrate" in said
