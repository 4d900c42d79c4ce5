"""One GRPO/GSPO trial on the Hugging Face TRL stack, top to bottom.

QLoRA here means: the base model loaded in 4-bit NF4 with double quantisation (bitsandbytes), LoRA
adapters on every linear layer, trained with TRL's GRPOTrainer. Everything the two stacks must
share (batch semantics, explicit GRPO knobs, measurement) comes from trainers.runtime / .measure.
"""

from __future__ import annotations

from trainers.events import FINISHED, STARTED, EventWriter
from trainers.spec import TrialSpec


def run(spec: TrialSpec, events: EventWriter) -> None:
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    from trl import GRPOConfig, GRPOTrainer

    from tasks import load_task
    from trainers.control import SupervisorChannel
    from trainers.evaluate import Evaluator
    from trainers.measure import StepMeter, measured
    from trainers.models import load_tokenizer, resolve_model
    from trainers.runtime import (
        check_prompt_lengths,
        choose_dtype,
        device_info,
        effective_config,
        grpo_config_kwargs,
        lora_b_abs_sum,
        setup_process,
        versions,
    )

    setup_process(spec)
    on_gpu = torch.cuda.is_available()
    dtype = choose_dtype(spec)

    # Data and rewards first: a bad task fails in seconds, before a model is loaded.
    task = load_task(spec.task, spec.task_args, seed=spec.task_seed)
    model_path = resolve_model(spec.model, spec.model_cache_dir)
    tokenizer = load_tokenizer(model_path)
    longest_prompt = check_prompt_lengths(task.train, tokenizer, spec.max_prompt_length)

    quantization_config = None
    if spec.quantization == "nf4":
        quantization_config = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=dtype,
        )
    model = AutoModelForCausalLM.from_pretrained(
        model_path,
        dtype=dtype,
        quantization_config=quantization_config,
        device_map={"": 0} if on_gpu else None,
    )
    lora = LoraConfig(
        r=spec.lora_r,
        lora_alpha=spec.lora_alpha,
        lora_dropout=spec.lora_dropout,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
    rewards = list(task.rewards.values())
    config = GRPOConfig(
        **grpo_config_kwargs(spec, dtype, on_gpu),
        reward_weights=[weight for _, weight in rewards],
    )
    evaluator = Evaluator.for_trial(task, tokenizer, spec)
    meter = StepMeter(
        events,
        spec.max_prompt_length,
        probe_steps=spec.probe_steps,
        evaluator=evaluator,
        channel=SupervisorChannel(spec.hold_at_step),
    )
    trainer = measured(GRPOTrainer)(
        model=model,
        reward_funcs=[func for func, _ in rewards],
        args=config,
        train_dataset=task.train,
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[meter],
    )
    meter.attach(trainer)

    events.emit(
        STARTED,
        framework="trl",
        versions=versions(),
        **device_info(),
        effective_config=effective_config(trainer, trainer.model, spec)
        | {"longest_prompt_tokens": longest_prompt},
    )
    trainer.train()
    events.emit(FINISHED, steps=meter.steps_emitted, lora_b_abs_sum=lora_b_abs_sum(trainer.model))
