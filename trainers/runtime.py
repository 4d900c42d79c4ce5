"""What the stacks share so they run on equal terms: dtype choice, the prompt-length check, the
GRPOConfig built from our batch semantics and the knobs read back from a built trainer. The device and
the budget card are trainers/device.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainers._trial_rules import FIXED_GRPO
from trainers.models import total_params

if TYPE_CHECKING:  # the type only: trainers.trial imports the stacks, which import this module
    from trainers.trial import TrialSpec


class UnavailableError(RuntimeError):
    """The trial cannot run on this machine (a stack is missing or cannot start): not a failure."""


class RefusedError(ValueError):
    """The trial's settings do not fit its task (e.g. prompts over max_prompt_length): the trial
    fails with this message alone, which names the setting and its fix; no traceback."""


def choose_dtype(spec: TrialSpec):
    """The trial's dtype for its stack (stack_dtype over dtype). auto: bf16 where the GPU
    supports it, else fp16 on GPU, fp32 on CPU (bf16 on CPU is ~3.5x slower)."""
    import torch

    if spec.effective_dtype != "auto":
        return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[spec.effective_dtype]
    if not torch.cuda.is_available():
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def encode_prompt(tokenizer, prompt, **kwargs):
    """A prompt's model inputs (a mapping with input_ids) as GRPOTrainer builds them: a conversation
    through the chat template, plain text (the original benchmark's prompts) as it is."""
    if isinstance(prompt, str):
        return tokenizer(prompt, **kwargs)
    return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, return_dict=True, **kwargs)


def encode_prompts(tokenizer, prompts: list, **kwargs):
    """A batch of prompts' model inputs as tensors, padded on the tokenizer's padding side: conversations
    through the chat template, plain text as it is (encode_prompt's rule, one prompt kind a batch)."""
    if all(isinstance(prompt, str) for prompt in prompts):
        return tokenizer(prompts, padding=True, return_tensors="pt", **kwargs)
    return tokenizer.apply_chat_template(
        prompts, add_generation_prompt=True, return_dict=True, padding=True, return_tensors="pt", **kwargs
    )


def check_prompt_lengths(dataset, tokenizer, max_prompt_length: int) -> int:
    """Longest prompt in tokens; refuses a dataset whose prompts exceed max_prompt_length.

    TRL 1.x no longer truncates prompts, so the limit is checked here rather than silently ignored.
    """
    longest = 0
    for prompt in dataset["prompt"]:
        longest = max(longest, len(encode_prompt(tokenizer, prompt)["input_ids"]))
    if longest > max_prompt_length:
        raise RefusedError(
            f"max_prompt_length: the task's longest prompt is {longest} tokens, over the limit of "
            f"{max_prompt_length}; raise max_prompt_length to at least {longest} (trial: "
            f"--max-prompt-length {longest}; sweep: max_prompt_length: {longest}) or shorten the task's prompts"
        )
    return longest


def grpo_config_kwargs(spec: TrialSpec, dtype, on_gpu: bool) -> dict[str, Any]:
    """GRPOConfig arguments from our batch semantics. Every knob a stack might change behind our
    back is set explicitly here, so TRL and Unsloth get the same values."""
    import torch

    # optim: the trial's, or none given for `stack`, so the stack's own GRPOConfig default stands
    optim = {} if spec.optim == "stack" else {"optim": spec.optim}
    return {
        **FIXED_GRPO,  # clipping, sampling and logging: the same for every trial
        **optim,
        "output_dir": spec.output_dir or "/tmp/rlsweep-trainer",
        "max_steps": spec.max_steps,
        "learning_rate": spec.learning_rate,
        "lr_scheduler_type": spec.lr_scheduler,
        "warmup_steps": spec.warmup_ratio,  # transformers 5: below 1 a ratio of max_steps (Unsloth's: 0.1)
        "seed": spec.seed,
        # Completions per optimizer step (B x K, or with grad_accum B x grad_accum) in micro-batches of
        # completions; a generation is the fewest whole groups of K covering one step.
        "per_device_train_batch_size": spec.effective_micro_batch_size,
        "gradient_accumulation_steps": spec.gradient_accumulation_steps,
        "generation_batch_size": spec.generation_batch_size,
        "num_generations": spec.num_generations,
        "max_completion_length": spec.max_completion_length,
        "temperature": spec.temperature,
        "beta": spec.beta,
        "num_iterations": spec.num_iterations,
        "loss_type": spec.loss_type,
        "importance_sampling_level": "sequence" if spec.mode == "gspo" else "token",
        "epsilon": spec.epsilon,
        # TRL's unset epsilon_high is epsilon; Unsloth sets 0.28 with loss_type dapo unless told
        "epsilon_high": spec.epsilon if spec.epsilon_high is None else spec.epsilon_high,
        "mask_truncated_completions": spec.mask_truncated_completions,  # Unsloth turns it on with dapo unless told
        "scale_rewards": spec.scale_rewards,  # Unsloth turns group to none with dr_grpo unless told
        "bf16": dtype == torch.bfloat16 and on_gpu,
        "fp16": dtype == torch.float16 and on_gpu,
        "use_cpu": not on_gpu,
        "gradient_checkpointing": spec.gradient_checkpointing and on_gpu,
        "report_to": "none",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }


# TRL's vLLM settings, read back only from a trainer that generates with vLLM (use_vllm).
VLLM_EFFECTIVE = ("vllm_mode", "vllm_gpu_memory_utilization", "vllm_enable_sleep_mode")
# What the `started` event reports as effective: read back from the constructed trainer.
EFFECTIVE_KNOBS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "generation_batch_size",
    "steps_per_generation",
    "num_generations",
    "max_completion_length",
    "learning_rate",
    "lr_scheduler_type",
    "temperature",
    "top_p",
    "top_k",
    "beta",
    "num_iterations",
    "loss_type",
    "importance_sampling_level",
    "epsilon",
    "epsilon_high",
    "mask_truncated_completions",
    "scale_rewards",
    "bf16",
    "fp16",
    "gradient_checkpointing",
    "max_steps",
    "seed",
    # Unsloth's GRPOConfig has its own defaults for these (adamw_8bit, weight decay 0.001, 10% warmup;
    # adamw_torch_fused on CPU) and turns vLLM on with fast_inference: read them back too (with vLLM,
    # its mode and pool share as the trainer holds them).
    "optim",
    "weight_decay",
    "warmup_steps",
    "max_grad_norm",
    "use_vllm",
    *VLLM_EFFECTIVE,
)


def effective_config(trainer, model, spec: TrialSpec) -> dict[str, Any]:
    """The configuration as the constructed trainer holds it, not as we asked for it."""
    args = trainer.args
    out = {k: _plain(getattr(args, k, None)) for k in EFFECTIVE_KNOBS}
    if not out["use_vllm"]:
        out |= dict.fromkeys(VLLM_EFFECTIVE)  # TRL's defaults for a vLLM it does not start: not run with
    peft_config = getattr(model, "peft_config", {}) or {}
    lora = next(iter(peft_config.values()), None) if isinstance(peft_config, dict) else None
    if lora is not None:
        out["lora_r"] = lora.r
        out["lora_alpha"] = lora.lora_alpha
        out["lora_dropout"] = lora.lora_dropout
        # Leaf names (q_proj, ...): "all-linear" resolves to full paths, an explicit list to leaf names.
        targets = lora.target_modules
        out["lora_target_modules"] = sorted({m.rsplit(".", 1)[-1] for m in targets}) if targets else None
    quant = getattr(getattr(model, "config", None), "quantization_config", None)
    if quant is not None:
        quant = quant.to_dict() if hasattr(quant, "to_dict") else dict(quant)
    out["load_in_4bit"] = bool(quant and quant.get("load_in_4bit"))
    # The checkpoint loaded (a stack may swap the name it was given for another) and, when 4-bit, the
    # linear layers left in 16 bit (leaf names; lm_head on both stacks, more in a dynamic quant).
    out["resolved_checkpoint"] = getattr(getattr(model, "config", None), "_name_or_path", None)
    out["unquantized_linear_modules"] = unquantized_linear_modules(model) if out["load_in_4bit"] else None
    out["bnb_4bit_quant_type"] = quant.get("bnb_4bit_quant_type") if quant else None
    out["bnb_4bit_use_double_quant"] = quant.get("bnb_4bit_use_double_quant") if quant else None
    out["bnb_4bit_quant_storage"] = quant.get("bnb_4bit_quant_storage") if quant else None
    out["distributed"] = spec.distributed
    out["adapter"] = spec.adapter
    # Full fine-tuning with beta > 0: TRL's reference model, a second copy of the weights (None: none).
    ref_model = getattr(trainer, "ref_model", None)
    out["reference_model"] = type(ref_model).__name__ if ref_model is not None else None
    # What accelerate made of it (MULTI_CPU or MULTI_GPU for DDP, FSDP, DEEPSPEED); NO for one process.
    accelerator = getattr(trainer, "accelerator", None)
    out["distributed_type"] = accelerator.distributed_type.value if accelerator is not None else None
    out["model_dtype"] = str(getattr(model, "dtype", None)).replace("torch.", "")
    out["trainable_params"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    out["total_params"] = total_params(model)
    out["num_processes"] = args.world_size
    out["completions_per_step"] = (
        args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
    )
    # Fractional where a group of K spans optimizer steps (grad_accum semantics, e.g. K 8 over 4 per step).
    prompts = out["completions_per_step"] / args.num_generations
    out["prompts_per_step"] = int(prompts) if prompts.is_integer() else prompts
    return out


def unquantized_linear_modules(model) -> list[str]:
    """Leaf names of the model's linear layers that bitsandbytes did not quantize (LoRA's own
    adapters not counted)."""
    import torch
    from bitsandbytes.nn import Linear4bit

    return sorted(
        {
            name.rsplit(".", 1)[-1]
            for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear)
            and not isinstance(module, Linear4bit)
            and ".lora_" not in f".{name}"
        }
    )


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value.value if hasattr(value, "value") else value)


def lora_b_abs_sum(model) -> float:
    """Sum of |LoRA B|: PEFT initialises B to zero, so a positive value proves the adapters trained."""
    return float(sum(p.detach().abs().sum().item() for n, p in model.named_parameters() if "lora_B" in n))


# What accelerate's distributed_type must be for each sharding strategy to have run as asked.
STRATEGY_TYPES = {"fsdp": "FSDP", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED"}


def check_strategy(spec: TrialSpec, distributed_type: str | None) -> None:
    """Raise UnavailableError where accelerate did not set up the trial's sharding strategy: on a host
    without a GPU it makes the ranks MULTI_CPU (plain DDP over gloo) whatever the launcher was told, so
    an FSDP or ZeRO trial there would be recorded as what it is not."""
    wanted = STRATEGY_TYPES.get(spec.distributed)
    if wanted is not None and distributed_type != wanted:
        raise UnavailableError(
            f"distributed: {spec.distributed} needs GPUs: accelerate set the ranks up as {distributed_type} "
            f"(not {wanted}), as it does on a host without a GPU; run it on GPUs, or choose distributed: ddp"
        )
