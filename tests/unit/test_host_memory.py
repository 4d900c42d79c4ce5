"""Packing by the host's RAM as well as the GPU's memory: a trainer's RSS predicted from its stack's
baseline and its checkpoint, checked on the H100 rows (bench/data/h100-2026-11-26/trials.csv)."""

import csv
from pathlib import Path

import pytest

from orchestrator.running.host_memory import largest_rss, offloaded_checkpoints_gib, predicted_rss_gib
from orchestrator.running.phases import HostRoom, host_room, packing, stages
from orchestrator.spec.load import parse_sweep
from trainers.trial import TrialSpec

H100 = Path(__file__).parents[2] / "bench" / "data" / "h100-2026-11-26" / "trials.csv"


def h100_rows() -> list[dict]:
    with H100.open() as f:
        return [r for r in csv.DictReader(f) if r["peak_rss_gib"]]


def row_spec(row: dict) -> TrialSpec:
    return TrialSpec(
        framework=row["stack"], model=row["model"], num_generations=int(row["K"]), batch_size=int(row["B"]),
        max_prompt_length=int(row["max_prompt"]), max_completion_length=int(row["max_completion"]),
    )  # fmt: skip


def test_the_predicted_rss_holds_every_measured_3b_trainer_trl_within_a_tenth_unsloth_as_an_upper_bound():
    """TRL's RSS is its baseline and checkpoint; Unsloth's adds the checkpoints it offloads to the host,
    counted in full (at completion 2048 within a tenth, shorter ones over: the safe side for packing)."""
    rows = [r for r in h100_rows() if r["model"].endswith("3B-Instruct")]
    assert len(rows) == 16
    for row in rows:
        predicted = predicted_rss_gib(row_spec(row)).gib
        measured = float(row["peak_rss_gib"])
        over = 1.1 if row["stack"] == "trl" or int(row["max_completion"]) >= 2048 else 1.4
        assert measured <= predicted <= measured * over, (
            row["stack"],
            row["max_completion"],
            measured,
            predicted,
        )


def test_the_predicted_rss_of_a_1_5b_trainer_is_at_or_above_what_it_held():
    for row in (r for r in h100_rows() if r["model"].endswith("1.5B-Instruct")):
        measured = float(row["peak_rss_gib"])
        predicted = predicted_rss_gib(row_spec(row)).gib
        assert measured <= predicted <= measured * 2, (row["stack"], measured, predicted)


def test_the_largest_trainer_of_a_sweep_bounds_the_packing():
    specs = [
        TrialSpec(framework="trl", model="random:Qwen/Qwen2.5-1.5B-Instruct"),
        TrialSpec(framework="unsloth", model="random:Qwen/Qwen2.5-3B-Instruct"),
    ]
    predicted, model = largest_rss(specs)
    offload = offloaded_checkpoints_gib(specs[1])  # 36 layers x 2048 hidden x its tokens, bf16
    assert offload == pytest.approx(36 * 2048 * 2 * specs[1].effective_micro_batch_size * 384 / 2**30)
    assert model == "random:Qwen/Qwen2.5-3B-Instruct" and predicted.gib == pytest.approx(
        7.42 + offload, abs=0.01
    )
    assert predicted.how.endswith(f"+ offloaded checkpoints {offload:.2f} GiB")


def test_a_packing_that_fits_the_gpu_but_not_the_host_ram_packs_fewer_trials_and_says_why():
    # 80 GiB holds 4 budgets of 16 + 1 GiB; 20 GiB of RAM holds two 7 GiB trainers.
    host = HostRoom(ram_gib=20.0, rss_gib=7.0, how="unsloth baseline + checkpoint")
    packed = packing(16, 80, 1.0, per_process=True, asked=None, host=host)
    assert packed.per_gpu == 2
    assert packed.reason == (
        "2 memory-phase trials per GPU: the host's 20.0 GiB of available RAM holds 2 trainers of 7.0 GiB "
        "RSS each (predicted: unsloth baseline + checkpoint), not 4; 80 GiB GPU memory would hold 4"
    )


def test_the_host_ram_is_shared_by_every_gpu_of_the_host():
    host = HostRoom(ram_gib=64.0, rss_gib=7.0, how="x", gpus=4)  # 9 trainers over 4 GPUs
    packed = packing(16, 80, 1.0, per_process=True, asked=None, host=host)
    assert packed.per_gpu == 2 and "across 4 GPUs" in packed.reason


def test_an_asked_packing_over_the_host_ram_packs_fewer_trials():
    packed = packing(16, 80, 1.0, per_process=True, asked=4, host=HostRoom(15.0, 7.0, "x"))
    assert packed.per_gpu == 2 and "not 4" in packed.reason


def test_a_host_with_room_to_spare_packs_by_gpu_memory():
    packed = packing(16, 80, 1.0, per_process=True, asked=None, host=HostRoom(500.0, 7.0, "x"))
    assert packed.per_gpu == 4 and "RAM" not in packed.reason


def test_a_sweep_of_3b_trainers_on_a_small_host_packs_by_its_ram():
    sweep = parse_sweep(
        {
            "name": "p",
            "fixed": {"model": "random:Qwen/Qwen2.5-3B-Instruct", "framework": "trl", "max_steps": 10},
            "oom": {"probe_steps": 1},
            "memory": {"budget_gib": 16},
            "resources": {"gpu_memory_gib": 80},
        }
    )
    told: list[str] = []
    spec = TrialSpec(framework="trl", model="random:Qwen/Qwen2.5-3B-Instruct")
    [(_, memory, gpus), _] = stages(sweep, True, told.append, [spec], gpu_count=1, host_ram_gib=16.0)
    # TRL 3B: (1.13 + 5.75) x 1.05 = 7.2 GiB each: 16 GiB holds 2 of the 4 the card would.
    assert gpus == 0.5 and memory.shared_gpu
    assert "the host's 16.0 GiB of available RAM holds 2 trainers of 7.2 GiB RSS" in told[0]


def test_an_unknown_model_leaves_the_packing_to_gpu_memory():
    assert host_room([TrialSpec(framework="trl", model="/nowhere/model")], 1, 1.0) is None
