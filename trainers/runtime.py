"""What both stacks share so they run on equal terms: device and dtype choice, thread and memory
limits, versions, the prompt-length check, and the GRPOConfig built from our batch semantics."""

from __future__ import annotations

import importlib.metadata
import os
import random
from typing import Any

from trainers.models import total_params
from trainers.spec import TrialSpec

GIB = 1024**3
VERSIONED = (
    "torch",
    "transformers",
    "trl",
    "peft",
    "accelerate",
    "bitsandbytes",
    "datasets",
    "unsloth",
    "unsloth_zoo",
)


class UnavailableError(RuntimeError):
    """The trial cannot run on this machine (a stack is missing or cannot start): not a failure."""


def versions() -> dict[str, str | None]:
    out = {}
    for name in VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def setup_process(spec: TrialSpec) -> None:
    """Threads, seeds and the memory budget, before any model is built."""
    import torch

    # Two busy threads per process on a 2-core host stall steps for seconds (stack-notes).
    threads = spec.num_threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads:
        torch.set_num_threads(threads)
    random.seed(spec.seed)
    torch.manual_seed(spec.seed)
    if torch.cuda.is_available() and spec.memory_budget_gib:
        # Emulate a smaller card: the caching allocator refuses to grow past the budget, so an
        # over-budget configuration fails with the same OutOfMemoryError it would on that card.
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, spec.memory_budget_gib * GIB / total), 0)


def device_info() -> dict[str, Any]:
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return {"device": "cuda", "gpu_name": props.name, "gpu_total_gib": props.total_memory / GIB}
    return {"device": "cpu", "gpu_name": None, "gpu_total_gib": None}


def choose_dtype(spec: TrialSpec):
    """The trial's dtype for its framework (framework_dtype over dtype). auto: bf16 where the GPU
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


def check_prompt_lengths(dataset, tokenizer, max_prompt_length: int) -> int:
    """Longest prompt in tokens; refuses a dataset whose prompts exceed max_prompt_length.

    TRL 1.x no longer truncates prompts, so the limit is checked here rather than silently ignored.
    """
    longest = 0
    for prompt in dataset["prompt"]:
        longest = max(longest, len(encode_prompt(tokenizer, prompt)["input_ids"]))
    if longest > max_prompt_length:
        raise ValueError(
            f"max_prompt_length: the task's longest prompt is {longest} tokens, over the limit of "
            f"{max_prompt_length}; raise max_prompt_length to at least {longest} or shorten the task's prompts"
        )
    return longest


def grpo_config_kwargs(spec: TrialSpec, dtype, on_gpu: bool) -> dict[str, Any]:
    """GRPOConfig arguments from our batch semantics. Every knob a stack might change behind our
    back is set explicitly here, so TRL and Unsloth get the same values."""
    import torch

    return {
        "output_dir": spec.output_dir or "/tmp/rlsweep-trainer",
        "max_steps": spec.max_steps,
        "learning_rate": spec.learning_rate,
        "lr_scheduler_type": spec.lr_scheduler,
        "warmup_steps": 0,
        "optim": "adamw_torch",
        "weight_decay": 0.0,
        "seed": spec.seed,
        # Completions per optimizer step (B x K, or with grad_accum B x grad_accum) in micro-batches of
        # completions; a generation is the fewest whole groups of K covering one step.
        "per_device_train_batch_size": spec.effective_micro_batch_size,
        "gradient_accumulation_steps": spec.gradient_accumulation_steps,
        "generation_batch_size": spec.generation_batch_size,
        "num_generations": spec.num_generations,
        "max_completion_length": spec.max_completion_length,
        "temperature": spec.temperature,
        "top_p": 1.0,
        "top_k": 0,
        "beta": spec.beta,
        "num_iterations": spec.num_iterations,
        "loss_type": spec.loss_type,
        "importance_sampling_level": "sequence" if spec.mode == "gspo" else "token",
        "epsilon": 0.2,
        "epsilon_high": 0.2,  # Unsloth sets 0.28 with loss_type dapo unless told
        "mask_truncated_completions": False,  # Unsloth turns this on with dapo unless told
        "scale_rewards": "group",
        "bf16": dtype == torch.bfloat16 and on_gpu,
        "fp16": dtype == torch.float16 and on_gpu,
        "use_cpu": not on_gpu,
        "gradient_checkpointing": spec.gradient_checkpointing and on_gpu,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }


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
    # adamw_torch_fused on CPU) and turns vLLM on with fast_inference: read them back too.
    "optim",
    "weight_decay",
    "warmup_steps",
    "use_vllm",
)


def effective_config(trainer, model, spec: TrialSpec) -> dict[str, Any]:
    """The configuration as the constructed trainer holds it, not as we asked for it."""
    args = trainer.args
    out = {k: _plain(getattr(args, k, None)) for k in EFFECTIVE_KNOBS}
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
    out["bnb_4bit_quant_type"] = quant.get("bnb_4bit_quant_type") if quant else None
    out["bnb_4bit_use_double_quant"] = quant.get("bnb_4bit_use_double_quant") if quant else None
    out["model_dtype"] = str(getattr(model, "dtype", None)).replace("torch.", "")
    out["trainable_params"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    out["total_params"] = total_params(model)
    out["completions_per_step"] = args.per_device_train_batch_size * args.gradient_accumulation_steps
    # Fractional where a group of K spans optimizer steps (grad_accum semantics, e.g. K 8 over 4 per step).
    prompts = out["completions_per_step"] / args.num_generations
    out["prompts_per_step"] = int(prompts) if prompts.is_integer() else prompts
    return out


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value.value if hasattr(value, "value") else value)


def lora_b_abs_sum(model) -> float:
    """Sum of |LoRA B|: PEFT initialises B to zero, so a positive value proves the adapters trained."""
    return float(sum(p.detach().abs().sum().item() for n, p in model.named_parameters() if "lora_B" in n))
