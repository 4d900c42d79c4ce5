"""Equal terms: one trial configuration, built by each stack in its own process (forked from the stack's
fork server, as a sweep's trainers are), runs with the same effective knobs, read back from each
constructed trainer (the `started` event), not as requested.

The configuration is chosen where Unsloth changes settings by itself on a GPU host: micro_batch_size (2)
below K (4), where its GRPOConfig raises per_device_train_batch_size to K, and loss_type dapo, where it
turns on mask_truncated_completions and sets epsilon_high 0.28 unless told otherwise. In the CPU fallback
this test runs in, Unsloth's rewrite is its TrainingArguments normalisation (optim), countered too.
"""

import pytest

from tests.helpers.trainer_child import run_forked_child
from trainers.runtime import EFFECTIVE_KNOBS

pytestmark = pytest.mark.slow

TRIAL = {
    "mode": "grpo",
    "quantization": "nf4",
    "num_generations": 4,
    "batch_size": 2,
    "micro_batch_size": 2,
    "loss_type": "dapo",
    "max_completion_length": 8,
    "max_steps": 1,
}
# What the trainer ran with beyond the GRPO knobs: model, quantization and LoRA as built.
MODEL_KNOBS = (
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "load_in_4bit",
    "bnb_4bit_quant_type",
    "bnb_4bit_use_double_quant",
    "resolved_checkpoint",  # the same checkpoint, not a stack's substitute for it
    "unquantized_linear_modules",
    "model_dtype",
    "trainable_params",
    "total_params",
    "completions_per_step",
    "prompts_per_step",
    "longest_prompt_tokens",
)
# Knobs that may differ between the stacks, with the reason. Empty: on this configuration every
# effective knob matches. (On a GPU host with fast_inference, Unsloth sets use_vllm True and top_k -1,
# vLLM's spelling of TRL's "no top-k" 0; this CPU test cannot reach that path.)
ALLOWED_DIFFERENCES: dict[str, str] = {}
# What Unsloth 2026.10.9 changed in the config we built and the runner put back (CPU fallback: it swaps
# optim adamw_torch for adamw_torch_fused in every TrainingArguments).
EXPECTED_UNSLOTH_REWRITES = {"optim": ["adamw_torch", "adamw_torch_fused"]}


def test_effective_knobs_match_across_stacks(tmp_path):
    started, steps = {}, {}
    for stack in ("trl", "unsloth"):
        (tmp_path / stack).mkdir()
        proc, events = run_forked_child(tmp_path / stack, stack=stack, **TRIAL)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert [e["event"] for e in events] == ["started", "step", "finished"]
        started[stack], steps[stack] = events[0]["effective_config"], events[1]

    trl, unsloth = started["trl"], started["unsloth"]
    compared = (*EFFECTIVE_KNOBS, *MODEL_KNOBS)
    differing = {k: (trl.get(k), unsloth.get(k)) for k in compared if trl.get(k) != unsloth.get(k)}
    assert set(differing) <= set(ALLOWED_DIFFERENCES), differing

    # The knobs Unsloth would have changed are what we asked on both stacks.
    assert unsloth["per_device_train_batch_size"] == 2 and unsloth["steps_per_generation"] == 4
    assert unsloth["epsilon_high"] == 0.2 and unsloth["mask_truncated_completions"] is False
    assert unsloth["optim"] == "adamw_torch" and unsloth["weight_decay"] == 0.0
    assert unsloth["unsloth_changed_config"] == EXPECTED_UNSLOTH_REWRITES
    # Same measurement on both stacks: a step event has the same columns.
    assert set(steps["trl"]) == set(steps["unsloth"])
