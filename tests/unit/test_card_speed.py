"""How fast on the user's card: the dry run's estimate names the card it assumes (--card, else the GPU
detected, else the H100 its times were measured on), scales the H100's times to a named card with its
basis and an interval, says "not measured" where it cannot, and never breaks on a sweep packed for a
larger card (orchestrator/judging/card_speed.py, orchestrator/judging/duration.py)."""

from pathlib import Path

import pytest

import orchestrator.cli._plan as plan_table
from orchestrator.cli import main
from orchestrator.judging.card_speed import MEASURED, SPEEDS, AssumedCard, Scale, speed_of
from orchestrator.judging.cards import card
from orchestrator.judging.duration import estimate_sweep, load_times
from orchestrator.spec.load import load_sweep
from orchestrator.spec.plan import plan

ROOT = Path(__file__).resolve().parents[2]
FRONTIER = ROOT / "sweeps" / "frontier-16gb.yaml"
PACKED_FOR_H200 = "resources.memory_phase_per_gpu=8"  # 8 x (16 GiB + 1 GiB headroom): an H200's 136 GiB


@pytest.fixture(autouse=True)
def no_gpu_here(monkeypatch):
    """A host without a GPU, as CI's, whatever this one has."""
    monkeypatch.setattr(plan_table, "detected_gpu", lambda: None)


def test_a_sweep_packed_for_an_h200_dry_runs_without_a_gpu_and_says_the_card_it_assumed(capsys):
    assert main(["run", "--dry-run", str(FRONTIER), "--set", PACKED_FOR_H200]) == 0
    said = capsys.readouterr().out
    assert "card assumed: H100 80GB HBM3 (no GPU detected here: the card the times were measured on" in said
    assert "packed 4 to the card here, as it holds: resources.memory_phase_per_gpu: 8" in said
    assert "Traceback" not in said


def test_the_same_sweep_on_the_h200_it_was_packed_for_packs_8_and_scales_decode_by_bandwidth(capsys):
    assert main(["run", "--dry-run", str(FRONTIER), "--set", PACKED_FOR_H200, "--card", "h200"]) == 0
    said = capsys.readouterr().out
    assert "card assumed: H200 (--card h200)" in said
    assert "expected memory phase packed 8 to the card" in said and "packed 4" not in said
    assert "memory bandwidth 3,350 / 4,800 GB/s" in said


def test_card_4090_scales_the_h100_times_and_states_its_basis_and_interval(capsys):
    assert main(["run", "--dry-run", str(FRONTIER), "--card", "4090"]) == 0
    said = capsys.readouterr().out
    assert "card assumed: RTX 4090 (--card 4090)" in said and "estimated time on RTX 4090" in said
    assert "estimated (RTX 4090, scaled)" in said
    assert "memory bandwidth 3,350 / 1,008 GB/s" in said and "dense BF16 989 / 165.2 TFLOPS" in said
    assert "worst case, every trial run: " in said and "(between " in said


def test_a_scaled_estimate_lies_between_the_h100s_times_and_the_fully_scaled_ones():
    sweep = load_sweep(FRONTIER)
    trials = plan(sweep).trials
    h100 = estimate_sweep(sweep, trials)
    rtx = card("4090")
    on_4090 = estimate_sweep(
        sweep, trials, card=AssumedCard(rtx.name, rtx.usable_gib, speed_of("4090", rtx.name), "test")
    )
    low, high = on_4090.ranges["worst"]
    assert low == pytest.approx(h100.worst_s)  # launch-bound: the H100's own time
    assert h100.worst_s < on_4090.worst_s <= high  # slower card: every scaled figure above the H100's
    assert on_4090.search.outcome == h100.search.outcome  # memory verdicts do not depend on speed
    # a 24 GiB card holds one 16 GiB probe with its headroom: no packing
    assert on_4090.per_gpu == 1 and h100.per_gpu == 4


def test_a_card_known_by_its_memory_alone_says_its_times_are_an_h100s(capsys):
    assert main(["run", "--dry-run", str(FRONTIER), "--card", "24gb"]) == 0
    said = capsys.readouterr().out
    assert "card assumed: 24GB (--card 24gb)" in said and "estimated (H100)" in said
    assert "not measured on 24GB, and no speed figures for it" in said and "--card 4090" in said


def test_an_unknown_card_exits_2_naming_the_known_ones(capsys):
    with pytest.raises(SystemExit) as ended:
        main(["run", "--dry-run", str(FRONTIER), "--card", "4091"])
    assert ended.value.code == 2
    said = capsys.readouterr().err
    assert "--card: '4091' is not a known card; known: 16GB, 24GB" in said and "H100-80GB, H200" in said
    assert "Traceback" not in said


def test_the_gpu_detected_here_is_the_card_assumed(capsys, monkeypatch):
    monkeypatch.setattr(plan_table, "detected_gpu", lambda: "NVIDIA GeForce RTX 4090")
    assert main(["run", "--dry-run", str(FRONTIER)]) == 0
    assert "card assumed: RTX 4090 (detected here: NVIDIA GeForce RTX 4090)" in capsys.readouterr().out
    monkeypatch.setattr(plan_table, "detected_gpu", lambda: "NVIDIA H100 80GB HBM3")
    assert main(["run", "--dry-run", str(FRONTIER)]) == 0
    said = capsys.readouterr().out
    assert "card assumed: H100 80GB HBM3 (detected here" in said and "scaled" not in said


def test_a_card_is_found_by_the_name_people_type_and_a_memory_class_has_no_speed():
    assert speed_of("4090", "24GB").name == "RTX 4090"
    assert speed_of("RTX 3090", "24GB").name == "RTX 3090"
    assert speed_of("h100", "H100-80GB") == MEASURED
    assert speed_of("A100-80GB", "A100-80GB").name == "A100 80GB"
    assert speed_of("24gb", "24GB") is None
    assert speed_of("rtx5060ti", "16GB") is None


def test_the_interval_runs_from_the_h100s_time_to_the_scaled_one_on_either_side():
    slower, faster = Scale.to(SPEEDS["rtx4090"]), Scale.to(SPEEDS["h200"])
    assert (
        slower.decode > 1
        and slower.train > 1
        and slower.ends() == ((1.0, 1.0), (slower.decode, slower.train))
    )
    assert faster.decode < 1 and faster.ends()[0][0] == faster.decode and faster.ends()[1][0] == 1.0
    assert Scale.to(MEASURED).measured and (Scale.to(MEASURED).decode, Scale.to(MEASURED).train) == (1.0, 1.0)


def test_fitmap_on_a_named_card_prints_seconds_per_step_scaled_from_the_h100s_with_the_basis(capsys):
    argv = ["fitmap", "--model", "Qwen/Qwen2.5-3B-Instruct", "--model", "google/gemma-3-4b-it", "--no-plot"]
    assert main([*argv, "--card", "4090"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "longest completion that fits, on the RTX 4090:" in said and "RTX 4090 decode x3.32" in said
    assert "Qwen/Qwen2.5-3B-Instruct TRL at" in said and "google/gemma-3-4b-it TRL at" in said
    assert "Decode on the" not in said  # no ms per token headed by the bandwidth-scaled end any more
    assert main([*argv, "--card", "h100"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "on the H100 80GB HBM3:" in said and "Scaled by" not in said
    assert main([*argv, "--card", "24gb"]) == 0
    assert "could be RTX 3090, RTX 4090" in " ".join(capsys.readouterr().out.split())


def test_the_decode_line_is_headed_by_the_launch_bound_figure_the_h100s():
    from orchestrator.judging.card_speed import decode_line

    line = decode_line("24GB", SPEEDS["rtx4090"], [("trl", "Qwen/Qwen2.5-3B-Instruct")])
    ms = load_times()["times"]["trl|Qwen/Qwen2.5-3B-Instruct"]["ms_per_token"]
    assert (
        f"TRL Qwen2.5-3B-Instruct {ms:.0f} ({ms:.0f}-{ms * Scale.to(SPEEDS['rtx4090']).decode:.0f};" in line
    )
    assert "launch-bound" in line


def test_predict_on_a_named_card_prints_the_decode_speed_of_its_stacks(capsys):
    sweep = str(ROOT / "sweeps" / "workstation-16gb.yaml")
    assert main(["predict", sweep, "--card", "l40s"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Decode on the L40S"))
    assert "3,350 / 864 GB/s" in line and "TRL Qwen2.5-3B-Instruct" in line and "Unsloth" in line


def test_a_plan_with_a_trial_already_run_labels_the_cards_times_beside_each(tmp_path, capsys, monkeypatch):
    from orchestrator.recording.sinks import TrialsTable, trial_row

    first = plan(load_sweep(FRONTIER)).trials[0]
    row = trial_row(first, None, [], status="completed")
    row["wall_s"] = 42.0
    TrialsTable(tmp_path / "trials.parquet").upsert(row)
    from orchestrator.cli import _common

    monkeypatch.setattr(_common.out, "width", 200)  # the trial keys beside the memory answers: wide
    assert main(["run", "--dry-run", str(FRONTIER), "--output-dir", str(tmp_path), "--card", "4090"]) == 0
    said = capsys.readouterr().out
    ran = next(line for line in said.splitlines() if first.trial_key in line)
    assert "42 s ran: completed" in ran and "RTX 4090" not in ran
    assert "(RTX 4090, scaled, measured)" in said and "estimated (RTX 4090" not in said
