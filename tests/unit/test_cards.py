"""Cards by name (orchestrator/judging/cards.py): `--card 24GB`-style input gives a card's usable memory
wherever a budget is taken, and an unknown name is refused with the known cards and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.judging.cards import CARDS, H100_TORCH_GIB, UnknownCard, card

CPU_SMOKE = str(Path(__file__).parents[2] / "sweeps" / "cpu-smoke.yaml")


@pytest.mark.parametrize(
    ("given", "name"),
    [
        ("24gb", "24GB"),
        ("RTX4090", "24GB"),
        ("rtx-3090", "24GB"),
        ("l4", "L4"),
        ("A10", "A10"),
        ("a100-40gb", "A100-40GB"),
        ("A100 80GB", "A100-80GB"),
        ("l40s", "48GB"),
        ("a6000", "48GB"),
        ("h100", "H100-80GB"),
        ("H200", "H200"),
        ("16GB", "16GB"),
    ],
)
def test_a_card_resolves_by_any_of_its_names_whatever_the_case(given, name):
    assert card(given).name == name


def test_the_h100_is_the_measured_card_and_its_usable_memory_is_torchs_total_not_less_the_context():
    h100 = card("h100")
    assert h100.measured and h100.usable_gib == H100_TORCH_GIB == pytest.approx(79.18, abs=0.005)
    # the context (0.51 GiB) and what lies outside torch's allocator are in the predicted peak: not subtracted
    assert h100.usable_gib > 79.0
    assert 139 < card("h200").usable_gib < 143771 / 1024
    assert all(not c.measured for c in CARDS.values() if c.name != "H100-80GB")
    assert all("not measured" in c.describe() for c in CARDS.values() if c.name != "H100-80GB")


def test_an_unknown_card_is_refused_naming_the_value_the_known_cards_and_the_fix():
    with pytest.raises(UnknownCard) as refused:
        card("rtx9090")
    message = str(refused.value)
    assert "'rtx9090'" in message and "--budget-gib" in message
    assert all(name in message for name in CARDS)


def test_an_ambiguous_card_name_suggests_each_card_it_could_mean():
    with pytest.raises(UnknownCard, match="did you mean 'A100-40GB' or 'A100-80GB'"):
        card("a100")


def test_predict_takes_a_card_as_its_budget(tmp_path, capsys):
    out = str(tmp_path / "out")
    assert main(["predict", CPU_SMOKE, "--card", "24gb", "--output-dir", out, "--no-simulate"]) == 0
    printed = capsys.readouterr().out
    assert "card: 24GB (24.00 GiB usable" in printed and "budget 24 GiB" in printed
    assert "peak GPU predicted" in printed  # a card's memory is a GPU's, on this host without one too


def test_a_card_is_never_answered_in_the_hosts_rss(tmp_path, capsys):
    out = str(tmp_path / "out")
    assert main(["predict", CPU_SMOKE, "--card", "24gb", "--output-dir", out, "--measure", "RSS"]) == 2
    said = capsys.readouterr()
    assert "--card 24GB and --measure RSS: a card is answered in GPU memory" in said.out + said.err
    assert "--budget-gib 24" in said.out + said.err  # the fix: judge the host's RSS against that much


def test_predict_refuses_an_unknown_card_with_the_list(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["predict", CPU_SMOKE, "--card", "rtx9090", "--output-dir", str(tmp_path)])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "'rtx9090'" in error and "H100-80GB" in error and "--budget-gib" in error


def test_a_card_and_a_budget_together_are_refused(tmp_path, capsys):
    code = main(["predict", CPU_SMOKE, "--card", "l4", "--budget-gib", "20", "--output-dir", str(tmp_path)])
    assert code == 2 and "give one" in capsys.readouterr().out
