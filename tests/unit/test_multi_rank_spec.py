"""A trial over several ranks: its knobs, its checks and the batch semantics across ranks."""

import sys

from orchestrator.spec.plan import expand
from trainers.distributed import launch_command, rank_events_path
from trainers.runtime import grpo_config_kwargs
from trainers.trial import TrialSpec, mode_warnings


def problems(**overrides):
    return TrialSpec(**overrides).problems()


def test_b_prompts_per_step_are_split_over_the_ranks_with_micro_batches_per_rank():
    spec = TrialSpec(batch_size=2, num_generations=4, num_processes=2, distributed="ddp")
    assert spec.problems() == []
    # B x K = 8 completions per optimizer step over both ranks: 4 on each, one micro-batch of 4.
    assert (spec.completions_per_step, spec.completions_per_rank) == (8, 4)
    assert (spec.effective_micro_batch_size, spec.gradient_accumulation_steps) == (4, 1)
    assert spec.generation_batch_size == 8
    micro = TrialSpec(batch_size=4, num_generations=4, num_processes=2, distributed="ddp", micro_batch_size=2)
    assert (micro.completions_per_rank, micro.gradient_accumulation_steps) == (8, 4)


def test_trl_gets_per_device_micro_batches_whose_global_sum_is_b_times_k():
    spec = TrialSpec(batch_size=4, num_generations=4, num_processes=2, distributed="ddp", micro_batch_size=2)
    import torch

    kwargs = grpo_config_kwargs(spec, torch.float32, on_gpu=False)
    per_device, accum, generation = (
        kwargs["per_device_train_batch_size"],
        kwargs["gradient_accumulation_steps"],
        kwargs["generation_batch_size"],
    )
    assert per_device * accum * spec.num_processes == 4 * 4
    # TRL's own rule (GRPOConfig.__post_init__): the generation splits into global micro-batches.
    assert generation % (per_device * spec.num_processes) == 0
    assert generation // (per_device * spec.num_processes) == 4


def test_completions_that_do_not_split_over_the_ranks_are_refused_with_the_nearest_valid_values():
    (msg,) = problems(batch_size=3, num_generations=4, num_processes=5, distributed="ddp")
    assert msg == (
        "num_processes: batch_size x num_generations = 3 x 4 = 12 completions per optimizer step do not "
        "split evenly over 5 ranks; choose batch_size 5 or 10, or num_processes 4 or 6"
    )


def test_a_micro_batch_that_does_not_divide_a_ranks_share_is_refused_with_the_share():
    (msg,) = problems(batch_size=2, num_generations=4, num_processes=2, distributed="ddp", micro_batch_size=3)
    assert msg == (
        "micro_batch_size: 3 does not divide the 4 completions each rank trains on per step (batch_size x "
        "num_generations = 2 x 4 = 8 over num_processes 2); choose a divisor of 4 (e.g. 2) or leave it unset"
    )


def test_grad_accum_semantics_count_batch_size_per_rank_and_refuse_a_generation_that_does_not_split():
    ok = TrialSpec(batch_size=2, grad_accum=2, num_generations=4, num_processes=2, distributed="ddp")
    assert ok.problems() == [] and ok.completions_per_step == 8
    (msg,) = problems(batch_size=3, grad_accum=1, num_generations=4, num_processes=2, distributed="ddp")
    assert msg.startswith("grad_accum: a generation of 8 completions")
    assert msg.endswith("choose a batch_size dividing 4")


def test_several_ranks_need_a_strategy_and_one_rank_needs_none():
    (msg,) = problems(num_processes=2)
    assert msg.startswith("distributed: none with num_processes 2: say how the 2 ranks share the model")
    assert "ddp, fsdp, zero2, zero3" in msg
    (msg,) = problems(distributed="zero3")
    assert msg.startswith("distributed: zero3 with num_processes 1")
    (msg,) = problems(distributed="zero4")
    assert msg.startswith("distributed: unknown value 'zero4'")


def test_only_trl_runs_over_several_ranks():
    (msg,) = problems(stack="unsloth", num_processes=2, distributed="ddp", quantization="none")
    assert msg == (
        "stack: unsloth with num_processes 2: only trl runs a trial over several ranks (accelerate's "
        "launcher); set stack: trl or num_processes: 1"
    )


def test_a_multi_rank_trial_has_a_key_of_its_own():
    from orchestrator.spec.plan import trial_key

    assert trial_key(TrialSpec()) != trial_key(TrialSpec(num_processes=2, distributed="ddp"))


def test_the_off_policy_warning_counts_the_micro_batches_of_all_ranks():
    # 8 completions, 4 per rank in one micro-batch: one generation is consumed by one optimizer step.
    spec = TrialSpec(batch_size=2, num_generations=4, num_processes=2, distributed="ddp")
    assert any(w.startswith("mode: grpo and gspo differ only off-policy") for w in mode_warnings(spec))


def test_accelerates_launcher_runs_the_trainer_module_as_n_ranks_on_loopback():
    spec = TrialSpec(num_processes=2, distributed="ddp")
    cmd = launch_command(spec, "/t/spec.json", 29123)
    assert cmd[:4] == [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu"]
    assert cmd[cmd.index("--num_processes") + 1] == "2"
    assert cmd[cmd.index("--main_process_ip") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--main_process_port") + 1] == "29123"
    assert cmd[-3:] == ["--module", "trainers", "/t/spec.json"]
    zero3 = launch_command(TrialSpec(num_processes=2, distributed="zero3"), "s.json", 1)
    assert zero3[3:7] == ["--use_deepspeed", "--zero_stage", "3", "--zero3_init_flag"]


def test_rank_zero_writes_the_trials_stream_and_other_ranks_a_file_of_their_own():
    assert rank_events_path("/t/events.jsonl", 0) == "/t/events.jsonl"
    assert rank_events_path("/t/events.jsonl", 3) == "/t/events.jsonl.rank3"


def test_gpus_per_trial_of_n_runs_every_trial_as_n_ranks():
    from orchestrator.spec.load import parse_sweep

    sweep = parse_sweep(
        {"name": "r", "resources": {"gpus_per_trial": 2}, "fixed": {"model": "tiny", "distributed": "ddp"}}
    )
    assert {s.num_processes for s in expand(sweep)} == {2}


def test_a_fractional_gpu_count_above_one_is_refused_with_whole_numbers():
    import pytest

    from orchestrator.spec.load import parse_sweep
    from orchestrator.spec.sweep import SweepError

    with pytest.raises(SweepError) as info:
        parse_sweep({"name": "r", "resources": {"gpus_per_trial": 2.5}})
    (error,) = info.value.errors
    assert "resources.gpus_per_trial" in error and "give a whole number, e.g. 2 or 3" in error


def test_more_ranks_than_the_hosts_gpus_are_refused_before_anything_runs():
    from orchestrator.spec.plan import rank_problems

    trials = [TrialSpec(num_processes=n, distributed="ddp", trial_key=f"t{n}") for n in (2, 8)]
    (msg,) = rank_problems(trials, gpus=4)
    assert msg.startswith("num_processes: 8 ranks, one GPU each on one node, but this machine has 4 GPU(s)")
    assert "1 trial(s) (e.g. t8)" in msg and "to at most 4" in msg
    assert rank_problems(trials, gpus=0) == [], "without a GPU, ranks are CPU processes"


def test_full_fine_tuning_needs_unquantized_weights_and_trl():
    assert problems(adapter="none", quantization="none") == []
    (msg,) = problems(adapter="none")
    assert msg == (
        "adapter: none (full fine-tuning) with quantization nf4: 4-bit weights cannot be trained; set "
        "quantization: none, or adapter: lora (QLoRA)"
    )
    (msg,) = problems(adapter="none", quantization="none", stack="unsloth")
    assert msg == (
        "adapter: none with stack unsloth: full fine-tuning runs on trl; set stack: trl or adapter: lora"
    )


def test_solve_answers_the_fewest_gpus_that_fit_searching_from_the_most_down():
    from orchestrator.judging.solve import Measured, make_request, search

    request = make_request(
        "num_processes", 24.0, settings={"distributed": "zero3", "model": "tiny"}, output_dir=None
    )
    # Memory per GPU falls with more GPUs: the candidates run from the most down.
    assert request.values == [8, 4, 2, 1]
    assert request.spec(1).distributed == "none" and request.spec(2).distributed == "zero3"
    peaks = {8: 9.0, 4: 14.0, 2: 22.5, 1: 30.0}  # GiB per GPU: 2 GPUs fit 24 GiB, 1 does not

    def measure(n):
        fits = peaks[n] <= 24.0
        return Measured(n, fits, "completed" if fits else "oom", "", peaks[n], "GPU (NVML)", f"t{n}")

    answer = search("num_processes", request.values, measure, 24.0)
    assert answer.lines() == [
        "fewest GPUs that fit 24 GiB: 2, measured 22.50 GiB GPU (NVML) peak, 1.50 GiB (6.2%) to spare (t2)",
        "next GPUs below it: 1, does not fit (out of memory: no detail; t1)",
    ]
