"""TRL's names for what rlsweep names otherwise, or holds at one value: the pointer an unknown setting's
error gives instead of the nearest names (orchestrator/spec/load.py)."""

from __future__ import annotations

from tasks.names import did_you_mean
from trainers.trial import FIXED_GRPO

# TRL's (and Unsloth's) names for what rlsweep sets otherwise: the pointer an error gives instead.
FOREIGN_NAMES = {
    "gradient_accumulation_steps": "micro_batch_size (completions per forward/backward; the accumulation "
    "is B x K / micro_batch_size), or grad_accum for TRL's own batch semantics",
    "per_device_train_batch_size": "batch_size (B, prompts per optimizer step: completions per step = "
    "B x K), or micro_batch_size for completions per forward/backward",
    "importance_sampling_level": "mode: gspo (sequence-level) or mode: grpo (token-level)",
    "generation_batch_size": "batch_size x num_generations (each step generates B x K completions)",
    "steps_per_generation": "batch_size and micro_batch_size (steps per generation follow from them)",
    "num_train_epochs": "max_steps",
    "lr_scheduler_type": "lr_scheduler",
    "max_seq_length": "max_prompt_length and max_completion_length",
    "load_in_4bit": "quantization: nf4 (quantization: none for LoRA on the base)",
    "bf16": "dtype: bf16 (or stack_dtype for one stack)",
    "fp16": "dtype: fp16 (or stack_dtype for one stack)",
    "use_vllm": "generation: vllm (with vllm_mode, vllm_gpu_memory_utilization, vllm_enable_sleep_mode)",
    "fast_inference": "generation: vllm (Unsloth's fast_inference is vllm_mode: colocate)",
    "gpu_memory_utilization": "vllm_gpu_memory_utilization (vLLM's share of the budget, or of the card)",
    "lora_rank": "lora_r",
    "r": "lora_r",
    "model_name_or_path": "model (a hub id, a local folder, random:<hub id> or tiny)",
    "use_peft": "adapter: lora (LoRA adapters on the frozen base) or adapter: none (full fine-tuning)",
    "eval_steps": "eval_every (held-out evaluation every N steps; eval_samples prompts, eval_k samples each)",
    "eval_strategy": "eval_every (every N steps) and eval_at_end",
    "per_device_eval_batch_size": "eval_samples (held-out prompts per evaluation) and eval_k (samples per "
    "prompt): rlsweep evaluates them itself, not through TRL's eval loop",
    "warmup_steps": "warmup_ratio (a share of max_steps, as transformers 5 reads a warmup_steps below 1)",
}
# GRPOConfig (and PEFT) settings rlsweep holds at one value on both stacks, so their comparison is fair:
# the name, the value and why; an error says so instead of pointing to a knob.
FIXED_NAMES = {
    **{name: (value, "on both stacks") for name, value in FIXED_GRPO.items()},
    "weight_decay": (FIXED_GRPO["weight_decay"], "on both stacks (Unsloth's 0.001 default is put back)"),
    "top_k": (FIXED_GRPO["top_k"], "(no top-k: sampling reads temperature alone)"),
    "logging_steps": (FIXED_GRPO["logging_steps"], "(every step is recorded)"),
    "save_steps": (
        "none",
        f"(save_strategy {FIXED_GRPO['save_strategy']}: a trial measures, it keeps no weights)",
    ),
    "save_strategy": (FIXED_GRPO["save_strategy"], "(a trial measures, it keeps no weights)"),
}


def unknown_name_hint(name: str, candidates) -> str:
    """rlsweep's name for a TRL one ('gradient_accumulation_steps is TRL's; rlsweep sets ...'), what
    rlsweep fixes a TRL setting at ('max_grad_norm is TRL's name; rlsweep fixes max_grad_norm at 1.0 ...'),
    else did_you_mean's nearest candidates."""
    if name in FOREIGN_NAMES:
        return f"{name} is TRL's name; rlsweep sets {FOREIGN_NAMES[name]}"
    if name in FIXED_NAMES:
        value, why = FIXED_NAMES[name]
        return f"{name} is TRL's name; rlsweep fixes {name} at {value} {why}: remove it"
    return did_you_mean(name, candidates)
