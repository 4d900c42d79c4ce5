"""Packing by the host's RAM as well as the GPU's memory: a trainer's RSS predicted from its stack's
baseline and its checkpoint, checked on the H100 rows (bench/data/h100-2026-11-26/trials.csv)."""

import csv
from pathlib import Path

import pytest

from orchestrator.running.host_memory import host_trainer, offloaded_checkpoints_gib, predicted_rss_gib
from orchestrator.running.phases import packing, stages
from orchestrator.spec.load import load_sweep, parse_sweep
from orchestrator.spec.plan import expand
from orchestrator.words.phases import HostGroup, HostRoom, HostTrainer, host_groups, unfinished
from trainers.trial import TrialSpec

ROOT = Path(__file__).parents[2]
H100 = ROOT / "bench" / "data" / "h100-2026-11-26" / "trials.csv"


def h100_rows() -> list[dict]:
    with H100.open() as f:
        return [r for r in csv.DictReader(f) if r["peak_rss_gib"]]


def row_spec(row: dict) -> TrialSpec:
    return TrialSpec(
        stack=row["stack"], model=row["model"], num_generations=int(row["K"]), batch_size=int(row["B"]),
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


def test_an_unsloth_trainer_is_predicted_with_the_checkpoints_it_offloads_and_named_by_its_shape():
    spec = TrialSpec(
        stack="unsloth", model="random:Qwen/Qwen2.5-3B-Instruct", num_generations=8, batch_size=2,
        max_prompt_length=256, max_completion_length=512,
    )  # fmt: skip
    trainer = host_trainer(spec)
    offload = offloaded_checkpoints_gib(spec)  # 36 layers x 2048 hidden x its 768 tokens, bf16
    assert offload == pytest.approx(36 * 2048 * 2 * spec.effective_micro_batch_size * 768 / 2**30)
    assert trainer.key == spec.trial_key and trainer.rss_gib == pytest.approx(7.42 + offload, abs=0.01)
    assert trainer.how.startswith("random:Qwen/Qwen2.5-3B-Instruct: unsloth baseline")
    assert trainer.how.endswith(f"+ offloaded checkpoints {offload:.2f} GiB")
    assert trainer.label == "unsloth K=8 B=2 512 tokens"


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
            "fixed": {"model": "random:Qwen/Qwen2.5-3B-Instruct", "stack": "trl", "max_steps": 10},
            "oom": {"probe_steps": 1},
            "memory": {"budget_gib": 16},
            "resources": {"gpu_memory_gib": 80},
        }
    )
    told: list[str] = []
    spec = TrialSpec(stack="trl", model="random:Qwen/Qwen2.5-3B-Instruct")
    [memory, _] = stages(sweep, True, told.append, [spec], gpu_count=1, host_ram_gib=16.0)
    # TRL 3B: (1.13 + 5.75) x 1.05 = 7.2 GiB each: 16 GiB holds 2 of the 4 the card would.
    assert memory.gpus == 0.5 and memory.phases.shared_gpu and memory.keys is None
    assert "the host's 16.0 GiB of available RAM holds 2 trainers of 7.2 GiB RSS" in told[0]


def test_an_unknown_model_leaves_the_packing_to_gpu_memory():
    unknown = host_trainer(TrialSpec(stack="trl", model="/nowhere/model"))
    assert unknown.rss_gib is None
    [group] = host_groups(4, [unknown], ram_gib=1.0)
    assert group.per_gpu == 4 and group.room(1.0) is None


def test_each_trial_packs_by_its_own_rss_and_the_larger_ones_run_after_the_smaller():
    # 64 GiB on one GPU the card packs 4 to: 7 GiB trainers 4 (9 fit), 20 GiB ones 3, 40 GiB ones 1.
    trainers = [HostTrainer("a", 7.0), HostTrainer("b", 40.0), HostTrainer("c", 20.0), HostTrainer("d", 7.0)]
    groups = host_groups(4, trainers, ram_gib=64.0)
    assert [(g.per_gpu, sorted(g.keys)) for g in groups] == [(4, ["a", "d"]), (3, ["c"]), (1, ["b"])]
    # Over 2 GPUs of the host the 7 GiB ones pack 4 (9 // 2), the 20 GiB ones 1 (3 // 2).
    groups = host_groups(4, trainers, ram_gib=64.0, gpus=2)
    assert [(g.per_gpu, sorted(g.keys)) for g in groups] == [(4, ["a", "d"]), (1, ["b", "c"])]


def test_a_trainer_larger_than_the_host_ram_still_runs_alone():
    [group] = host_groups(4, [HostTrainer("huge", 200.0)], ram_gib=100.0)
    assert group == HostGroup(1, (HostTrainer("huge", 200.0),))


FRONTIER_16GB = ROOT / "sweeps" / "frontier-16gb.yaml"


def test_a_trial_too_large_for_packed_ram_runs_alone_after_the_packed_ones():
    """The frontier-16gb sweep on an H100 (79.6475 GiB) with 123.7 GiB of RAM: the one Unsloth trial
    predicted at 155.9 GiB (K=64 B=2, 8192 tokens: its offloaded checkpoints) made every trial run alone;
    each trial now packs by its own RSS."""
    sweep = load_sweep(FRONTIER_16GB, ["resources.gpu_memory_gib=79.6475"])
    trials = expand(sweep)
    told: list[str] = []
    runs = stages(sweep, True, told.append, trials, gpu_count=1, host_ram_gib=123.7)
    assert [(len(r.keys), r.gpus, r.phases.shared_gpu) for r in runs] == [
        (159, 0.25, True),
        (5, 0.5, True),
        (4, 1, False),
    ]
    assert all(r.which is unfinished and r.phases.hold_at_step == 2 for r in runs)
    assert not runs[-1].phases.then_speed  # phases: [memory]
    by_key = {s.trial_key: s for s in trials}
    alone = sorted(
        (by_key[k].num_generations, by_key[k].batch_size, by_key[k].max_completion_length)
        for k in runs[-1].keys
    )
    assert alone == [(32, 2, 8192), (64, 1, 8192), (64, 2, 4096), (64, 2, 8192)]
    assert all(by_key[k].stack == "unsloth" for r in runs[1:] for k in r.keys)
    assert told == [
        "memory phase: 4 memory-phase trials per 79.6475 GiB GPU (17 GiB each with headroom), for 159 of 168 "
        "trials; 5 whose predicted RSS exceeds 41.2 GiB (the host's 123.7 GiB / 3) run 2 per GPU after "
        "them; 4 whose predicted RSS exceeds 61.9 GiB (the host's 123.7 GiB / 2) run 1 per GPU after them "
        "(largest: unsloth K=64 B=2 8192 tokens, 155.9 GiB predicted, more than the host's RAM)"
    ]


def test_a_stage_of_some_trials_runs_only_those_and_only_while_unfinished():
    sweep = load_sweep(FRONTIER_16GB, ["resources.gpu_memory_gib=79.6475"])
    trials = expand(sweep)
    packed, *_, alone = stages(sweep, True, lambda _: None, trials, gpu_count=1, host_ram_gib=123.7)
    huge = next(s for s in trials if s.trial_key in alone.keys)
    assert alone.runs(huge, None) and not packed.runs(huge, None)
    assert not alone.runs(huge, {"status": "pruned"})  # pruned by a smaller trial's oom: never run
