"""One GRPO/GSPO trial on the Hugging Face TRL stack, top to bottom.

QLoRA here means: the base model loaded in 4-bit NF4 with double quantisation (bitsandbytes), LoRA
adapters on every linear layer, trained with TRL's GRPOTrainer. Everything the stacks must share
(batch semantics, explicit GRPO knobs, measurement, the trial's assembly) comes from
trainers.runtime, trainers.measure and trainers.stacks._base.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from trainers.distributed import SHARDS_WEIGHTS
from trainers.events import EventWriter
from trainers.stacks._base import Built, Stack, assemble, grpo_config, prepare

if TYPE_CHECKING:
    from trainers.trial import TrialSpec


class TrlStack(Stack):
    def own_config(self, on_gpu: bool) -> dict:
        """GRPOConfig arguments a stack built on this one adds to the trial's (none here)."""
        return {}

    def own_read_back(self, trainer) -> dict:
        """What such a stack reports of the built trainer beside the knobs (none here)."""
        return {}

    def build(self, spec: TrialSpec, events: EventWriter) -> Built:
        from peft import LoraConfig
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig
        from trl import GRPOConfig, GRPOTrainer

        from trainers._session import held, hold
        from trainers.device import card_total_bytes
        from trainers.generation import prepare_vllm, trl_vllm_kwargs
        from trainers.models import load_tokenizer
        from trainers.runtime import check_prompt_lengths, grpo_config_kwargs
        from trainers.startup import mark
        from trainers.trial import peft_targets

        mark("imports")
        ready = prepare(spec)
        vllm_read_back = prepare_vllm(spec, ready.on_gpu)
        tokenizer = load_tokenizer(ready.model_path)
        longest_prompt = check_prompt_lengths(ready.task.train, tokenizer, spec.max_prompt_length)

        sharded = spec.distributed in SHARDS_WEIGHTS
        quantization_config = None
        if spec.quantization == "nf4":
            quantization_config = BitsAndBytesConfig(
                load_in_4bit=True,
                bnb_4bit_quant_type="nf4",
                bnb_4bit_use_double_quant=True,
                bnb_4bit_compute_dtype=ready.dtype,
                # FSDP and ZeRO-3 shard the packed 4-bit weights as tensors of one dtype with the rest:
                # store them in the compute dtype (bitsandbytes' default uint8 cannot be flattened with them).
                **({"bnb_4bit_quant_storage": ready.dtype} if sharded else {}),
            )
        model = held(spec)  # a probe session's model, loaded by its first shape (trainers/_session.py)
        reused = model is not None
        if reused and "ref" in getattr(model, "peft_config", {}):
            model.delete_adapter("ref")  # TRL adds the reference adapter (beta > 0) again
        if not reused:
            model = AutoModelForCausalLM.from_pretrained(
                ready.model_path,
                dtype=ready.dtype,
                quantization_config=quantization_config,
                # A replica on each rank's own device; a sharding strategy places the weights itself.
                device_map={"": int(os.environ.get("LOCAL_RANK", "0"))}
                if ready.on_gpu and not sharded
                else None,
            )
        mark("model")
        lora = LoraConfig(
            r=spec.lora_r,
            lora_alpha=spec.lora_alpha,
            lora_dropout=spec.lora_dropout,
            target_modules=peft_targets(spec.lora_target_modules),
            task_type="CAUSAL_LM",
        )
        asked = grpo_config_kwargs(spec, ready.dtype, ready.on_gpu) | trl_vllm_kwargs(
            spec, card_total_bytes()
        )
        config = grpo_config(GRPOConfig, asked | self.own_config(ready.on_gpu), ready.task)
        trainer, meter = assemble(
            spec,
            events,
            trainer_class=GRPOTrainer,
            model=model,
            config=config,
            task=ready.task,
            tokenizer=tokenizer,
            generation_probe=self.generation_probe(),
            # none: every weight trains; a held model has its adapters already
            peft_config=lora if spec.adapter == "lora" and not reused else None,
        )
        hold(spec, trainer.model)
        if spec.generation == "vllm":
            vllm_read_back["vllm_gpu_memory_utilization_asked"] = spec.vllm_gpu_memory_utilization
        return Built(trainer, meter, longest_prompt, vllm_read_back | self.own_read_back(trainer))

    def simulate_step(self, spec: TrialSpec, prompt_tokens: int, counter, **how) -> dict:
        """TRL's own loss, backward, clipping and AdamW on the trial's model as TRL holds it on a GPU, on
        meta tensors (trainers/stacks/_simulate_trl.py)."""
        from trainers.stacks._simulate_trl import simulate_step

        return simulate_step(spec, prompt_tokens, counter, **how)
