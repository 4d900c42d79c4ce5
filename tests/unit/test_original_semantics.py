"""sweeps/original-16gb.yaml gives TRL the configuration the original benchmark's flags gave it.

The original's runners built GRPOConfig from --batch-size B (per_device_train_batch_size),
--grad-accum 2, --num-generations K, --learning-rate 2e-4 and nothing else of interest: the scheduler,
the trainer seed and the loss type stayed TRL's defaults; the TRL runner trained in fp16 (its --dtype
default), the Unsloth runner in bf16 where the GPU supports it and passed a generation batch rounded
up to whole groups of K. Each expectation below is built from those flags with the real GRPOConfig,
independently of rlsweep's knobs. (On a GPU the Unsloth runner's GRPOConfig was Unsloth's, whose own
defaults — seed 3407, 8-bit AdamW, warmup — rlsweep deliberately does not take: see docs/original-benchmark.md.)
"""

import dataclasses
import random
from pathlib import Path

import pytest
import torch
import transformers.training_args
from trl import GRPOConfig

from orchestrator.spec.load import load_sweep
from orchestrator.spec.plan import expand
from tasks import load_task
from trainers.runtime import choose_dtype, grpo_config_kwargs

SWEEP = Path(__file__).resolve().parents[2] / "sweeps" / "original-16gb.yaml"
GRAD_ACCUM = 2  # the original run_matrix's --grad-accum default
TRIALS = expand(load_sweep(SWEEP))


@pytest.fixture
def bf16_gpu(monkeypatch):
    """The original's card (an RTX 4070 Ti Super) supports bf16; this CPU host lets TRL accept bf16."""
    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)


def runner_config(spec) -> GRPOConfig:
    """GRPOConfig as the trainer child builds it on a CUDA host with bf16 (dtype chosen there)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.cuda, "is_available", lambda: True)
        mp.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
        dtype = choose_dtype(spec)
    return GRPOConfig(**grpo_config_kwargs(spec, dtype, on_gpu=True))


def original_unsloth_generation_batch(batch_size: int, grad_accum: int, k: int) -> int:
    """The original Unsloth runner's generation batch: one step's completions, rounded up to groups of K."""
    effective = max(1, batch_size * grad_accum)
    if effective % k == 0:
        return effective
    return (effective + k - 1) // k * k


def original_config(stack: str, batch_size: int, k: int, tmp_path) -> GRPOConfig:
    """GRPOConfig from the original runner's flags (fields rlsweep does not vary left at TRL's defaults)."""
    kwargs = dict(
        output_dir=str(tmp_path),
        max_steps=120,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=GRAD_ACCUM,
        learning_rate=2e-4,
        max_completion_length=128,
        num_generations=k,
        gradient_checkpointing=True,
        report_to=[],
    )
    if stack == "trl":
        kwargs |= {"bf16": False, "fp16": True}  # --dtype fp16
    else:
        kwargs |= {"bf16": True, "fp16": False}  # torch.cuda.is_bf16_supported()
        kwargs["generation_batch_size"] = original_unsloth_generation_batch(batch_size, GRAD_ACCUM, k)
    return GRPOConfig(**kwargs)


@pytest.mark.parametrize("spec", TRIALS, ids=[t.trial_key for t in TRIALS])
def test_each_trial_gets_the_grpo_config_of_the_original_flags(spec, tmp_path, bf16_gpu):
    ours = runner_config(spec)
    stack, b, k = spec.stack, spec.batch_size, spec.num_generations
    if stack == "trl" and (b * GRAD_ACCUM) % k:
        # TRL refuses the original TRL runner's flags here; the Unsloth runner's rounding is the only
        # way this grid point of the original ever ran.
        with pytest.raises(ValueError, match="must be divisible by num_generations"):
            original_config("trl", b, k, tmp_path)
        expected = original_config("unsloth", b, k, tmp_path)
        expected.bf16, expected.fp16 = False, True
    else:
        expected = original_config(stack, b, k, tmp_path)

    assert ours.per_device_train_batch_size * ours.gradient_accumulation_steps == b * GRAD_ACCUM
    for field in (
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "generation_batch_size",
        "steps_per_generation",
        "num_generations",
        "lr_scheduler_type",
        "warmup_steps",
        "learning_rate",
        "seed",
        "bf16",
        "fp16",
        "loss_type",
        "max_completion_length",
        "max_steps",
        "num_iterations",
    ):
        assert getattr(ours, field) == getattr(expected, field), field
    assert ours.lr_scheduler_type.value == "linear" and ours.seed == 42


def test_a_group_of_eight_spans_two_optimizer_steps_of_four_completions(tmp_path, bf16_gpu):
    spec = next(t for t in TRIALS if (t.stack, t.num_generations, t.batch_size) == ("trl", 8, 2))
    config = runner_config(spec)
    per_step = config.per_device_train_batch_size * config.gradient_accumulation_steps
    assert (per_step, config.generation_batch_size) == (4, 8)
    assert config.steps_per_generation // config.gradient_accumulation_steps == 2


def test_rlsweeps_own_sweeps_keep_a_constant_learning_rate():
    for path in ("workstation-16gb.yaml", "cpu-smoke.yaml"):
        assert {t.lr_scheduler for t in expand(load_sweep(SWEEP.parent / path))} == {"constant"}


def test_the_data_is_the_originals_4000_plain_prompts_drawn_with_seed_17():
    spec = TRIALS[0]
    assert (spec.seed, spec.task_seed) == (42, 17)
    train = load_task(spec.task, spec.task_args, seed=spec.task_seed).train
    rng = random.Random()
    rng.seed(17)  # the original: random.seed(seed), then randint(10, 99) twice per sample
    expected = []
    for _ in range(4000):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        prompt = (
            "Solve arithmetic problems. Return only the final integer answer with no extra text.\n\n"
            f"Question: What is {a} + {b}?\nAnswer:"
        )
        expected.append((prompt, a + b))
    assert list(zip(train["prompt"], train["answer"], strict=True)) == expected


def test_trial_knobs_match_the_flags_the_original_matrix_passed():
    keys = {(t.stack, t.mode, t.num_generations, t.batch_size) for t in TRIALS}
    assert len(keys) == len(TRIALS) == 24
    fixed = {
        "model": "Qwen/Qwen2.5-3B-Instruct",
        "max_steps": 120,
        "max_prompt_length": 256,
        "max_completion_length": 128,
        "quantization": "nf4",
        "lora_r": 16,
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "learning_rate": 2e-4,
        "num_iterations": 1,
        "probe_steps": 0,
    }
    for spec in TRIALS:
        assert {k: v for k, v in dataclasses.asdict(spec).items() if k in fixed} == fixed
