"""Unsloth's GRPO step simulated on meta tensors (trainers/simulate): Unsloth's own loss code on the trial's
model as Unsloth holds it on a GPU, counted as CUDA's allocator counts `allocated`.

Unsloth's own code that runs here: unsloth_zoo's `grpo_accumulated_loss` (the loss the UnslothGRPOTrainer
it generates calls from compute_loss), bound to a trainer holding the attributes it reads, set from the
trial's GRPOConfig (the same runtime.grpo_config_kwargs path as a real trial) plus UnslothGRPOConfig's own
fields at their defaults; through it `grpo_chunked_hidden_states_logprobs` and the fused chunked
log-prob op (hidden states in, one chunk of rows projected to the vocabulary at a time: no full logits),
`UnslothEfficientGRPO` and `grpo_compute_loss`. Stood in for (trainers/stacks/_simulate_unsloth_kernels.py,
docs/oom.md "Simulated steps"): what is Triton or CUDA streams and host memory, with the allocations
CUDA makes for them - the offloading gradient checkpointer, the fused log-prob op's logits buffer, the
LoRA kernels (LoRA_MLP, LoRA_W / LoRA_QKV), and the model's forward returning hidden states as Unsloth's
does under UNSLOTH_RETURN_HIDDEN_STATES. The model is the TRL simulation's (transformers' layers on meta,
bitsandbytes' 4-bit weights) with PEFT's LoRA modules holding the adapters, in fp32 as Unsloth keeps them.
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from functools import partial
from types import MethodType, SimpleNamespace
from typing import Any

from trainers.simulate._step import Accelerator, StepHooks, grpo_config, run_step
from trainers.stacks._unsloth_paths import FUSED

# UnslothGRPOConfig's own fields (unsloth/models/rl.py) at the defaults a trial leaves them at.
UNSLOTH_CONFIG_DEFAULTS = {
    "unsloth_num_chunks": -1,
    "unsloth_grpo_mini_batch": None,
    "unsloth_logit_chunk_multiplier": None,
}


def _zoo():
    """unsloth_zoo's GRPO code; Unsloth itself is imported first by the stack (trainers/stacks/unsloth.py,
    import_unsloth_for_simulation), as a trial imports it."""
    import unsloth_zoo.rl_replacements as zoo

    return zoo


def _config(spec: Any, dtype: Any):
    """The trial's GRPOConfig (as a real trial builds it) with UnslothGRPOConfig's own fields at their
    defaults."""
    config = grpo_config(spec, dtype)
    for name, value in UNSLOTH_CONFIG_DEFAULTS.items():
        setattr(config, name, value)
    return config


def _trainer(args: Any, model: Any):
    """What grpo_accumulated_loss reads of the UnslothGRPOTrainer."""
    return SimpleNamespace(
        args=args, model=model, accelerator=Accelerator(), processing_class=SimpleNamespace(pad_token_id=-1),
        beta=args.beta, use_vllm=False, vllm_importance_sampling_correction=False, loss_type=args.loss_type,
        num_generations=args.num_generations, mask_truncated_completions=args.mask_truncated_completions,
        entropy_coef=getattr(args, "entropy_coef", 0.0), epsilon_low=args.epsilon,
        epsilon_high=args.epsilon_high if args.epsilon_high is not None else args.epsilon,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, is_deepspeed_enabled=False,
        _autocast_dtype=None,
    )  # fmt: skip


def _hidden_states_forward(model):
    """The model's forward as Unsloth's CausalLM forward answers it under UNSLOTH_RETURN_HIDDEN_STATES=1:
    the last hidden states in place of the logits, the output head never applied."""
    peft_forward = model.forward

    def forward(self, input_ids=None, attention_mask=None, logits_to_keep=0, **kwargs):
        if os.environ.get("UNSLOTH_RETURN_HIDDEN_STATES", "0") != "1":
            return peft_forward(
                input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep, **kwargs
            )
        decoder = self.get_base_model().model
        hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:, :]
        return SimpleNamespace(logits=hidden)

    model.forward = MethodType(forward, model)
    return model


def _checkpoint_with(model, checkpointer) -> None:
    """Gradient checkpointing on, every layer through Unsloth's offloading checkpointer (its stand-in)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    for module in model.modules():
        if hasattr(module, "_gradient_checkpointing_func"):
            module._gradient_checkpointing_func = checkpointer


def _path(model):
    """The model's family's path through Unsloth (trainers/stacks/_unsloth_paths.py)."""
    from trainers.stacks._unsloth_paths import path_for

    return path_for(model.config.get_text_config().model_type)


def _model(spec: Any, dtype: Any, device: str, attention: str, checkpointer: Any):
    import torch
    from peft import LoraConfig, get_peft_model

    from trainers.simulate._meta import qlora_model
    from trainers.stacks._simulate_unsloth_kernels import fast_lora
    from trainers.trial import peft_targets

    model = qlora_model(spec, dtype, device, attention)
    lora = LoraConfig(
        r=spec.lora_r, lora_alpha=spec.lora_alpha, lora_dropout=spec.lora_dropout,
        target_modules=peft_targets(spec.lora_target_modules), task_type="CAUSAL_LM", bias="none",
    )  # fmt: skip
    model = get_peft_model(model, lora)
    for param in model.parameters():  # unsloth_zoo's prepare_model_for_training: LoRA upcast to fp32
        if param.requires_grad:
            param.data = param.data.to(torch.float32)
    if spec.gradient_checkpointing:
        model.enable_input_require_grads()
        _checkpoint_with(model, checkpointer)
    fast_lora(model, fused_mlp=_path(model).lora == FUSED)
    model.train()
    return _hidden_states_forward(model)


class UnslothHooks(StepHooks):
    """Unsloth's parts of the simulated step (trainers/simulate/_step.py), on the family's path
    (trainers/stacks/_unsloth_paths.py): its model with the offloading checkpointer and, where its model
    file installs them, its fused LoRA kernels; its arrangements on meta; its decoding buffers where the
    family decodes through Unsloth's fast path; its scoring pass and unsloth_zoo's loss."""

    def __init__(self, spec: Any, prompt_tokens: int, device: str):
        from trainers.stacks._simulate_unsloth_kernels import OffloadingCheckpointer

        self.zoo = _zoo()
        self.rows = spec.effective_micro_batch_size
        self.length = prompt_tokens + spec.max_completion_length
        self.checkpointer = OffloadingCheckpointer(device)
        self.gradient_checkpointing = spec.gradient_checkpointing

    def config(self, spec, dtype):
        return _config(spec, dtype)

    def model(self, spec, args, dtype, device, attention):
        model = _model(spec, dtype, device, attention, self.checkpointer)
        config = model.config.get_text_config()
        if self.gradient_checkpointing:
            self.checkpointer.prepare(
                config.num_hidden_layers, self.rows * self.length * config.hidden_size, dtype
            )
        return model

    def trainer(self, args, model):
        return _trainer(args, model)

    def patches(self, as_cuda):
        from trainers.stacks._simulate_unsloth_kernels import unsloth_on_meta

        return unsloth_on_meta(self.zoo, as_cuda)

    def held(self):
        return list(self.checkpointer.buffers)

    def inputs(self, n, prompt_tokens, completion, device):
        """The ids, masks and advantages grpo_accumulated_loss takes (no item count: it takes an int)."""
        import torch

        ids = {"prompt_ids": (n, prompt_tokens), "completion_ids": (n, completion)}
        masks = {"prompt_mask": (n, prompt_tokens), "completion_mask": (n, completion)}
        made = {
            name: torch.ones(shape, dtype=torch.long, device=device) for name, shape in (ids | masks).items()
        }
        return made | {"advantages": torch.zeros(n, device=device)}

    def decoding(self, model, device):
        """Unsloth's decoding buffers, held until the next forward reaches each layer, where the family
        decodes through Unsloth's fast path; none where it decodes through transformers' generate."""
        from trainers.stacks._simulate_unsloth_kernels import decode_buffers
        from trainers.stacks._unsloth_paths import UNSLOTH

        return partial(decode_buffers, model, device=device) if _path(model).decoding == UNSLOTH else None

    def after_generation(self, model, decoded):
        """The decoding buffers dropped as the next forward reaches each layer; generation turned torch's
        checkpointing back on: Unsloth's is put back."""
        from trainers.stacks._simulate_unsloth_kernels import release_on_forward

        if decoded is not None:
            release_on_forward(model, decoded)
        if self.gradient_checkpointing:
            _checkpoint_with(model, self.checkpointer)

    def score(self, trainer, model, inputs):
        return _score(self.zoo, model, inputs["prompt_ids"], inputs["completion_ids"], inputs["prompt_mask"],
                      inputs["completion_mask"])  # fmt: skip

    def loss(self, trainer, model, inputs):
        """unsloth_zoo's grpo_accumulated_loss on the whole micro-batch, as the UnslothGRPOTrainer's
        compute_loss calls it."""
        import torch

        args = trainer.args
        n, completion = inputs["completion_ids"].shape
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        del inputs["prompt_ids"], inputs["prompt_mask"]
        loss, *_ = self.zoo.grpo_accumulated_loss(
            trainer=trainer, input_ids=input_ids, logits_to_keep=completion, completion_mask=inputs["completion_mask"],
            advantages=inputs["advantages"], old_logps=inputs.pop("old_per_token_logps", None), ref_logps=None,
            n_chunks=args.unsloth_num_chunks, loss_type=args.loss_type,
            importance_sampling_level=args.importance_sampling_level, epsilon_low=trainer.epsilon_low,
            epsilon_high=trainer.epsilon_high, max_completion_length=args.max_completion_length,
            delta=getattr(args, "delta", None), temperature=args.temperature, max_left_pad=0,
            logit_softcapping=0.0, logit_scale_multiply=0.0, logit_scale_divide=0.0, attention_mask=attention_mask,
            num_items_in_batch=n * completion, current_gradient_accumulation_steps=args.gradient_accumulation_steps,
            num_processes=1, sampling_per_token_logps=None,
        )  # fmt: skip
        return loss

    def said(self, model):
        path = _path(model)
        return {
            "unsloth_path": f"{path.model_type}: {path.patch}, {path.decoding} decoding, {path.lora} LoRA"
        }


def simulate_step(spec: Any, prompt_tokens: int, counter: Any, **how: Any) -> dict[str, Any]:
    """One training step of `spec` (a TrialSpec) through Unsloth's GRPO loss on meta, counted by `counter`
    (trainers/simulate/_step.py run_step: generation, the scoring pass where num_iterations > 1 or beta >
    0, then the training micro-batch's loss, backward, clipping and the optimizer). device "cpu" runs the
    same step on real tensors."""
    return run_step(
        UnslothHooks(spec, prompt_tokens, how.get("device", "meta")), spec, prompt_tokens, counter, **how
    )


def _score(zoo, model, prompt_ids, completion_ids, prompt_mask, completion_mask):
    """The old policy's log-probs as the UnslothGRPOTrainer's _get_per_token_logps_and_entropies makes
    them on a GPU: the hidden states of the whole batch (Unsloth's forward under
    UNSLOTH_RETURN_HIDDEN_STATES), then unsloth_zoo's chunked log-probs over the completion rows."""
    import torch

    keep = completion_ids.shape[1]
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    with _returning_hidden_states():
        hidden = model(input_ids=ids, attention_mask=mask).logits
    hidden = hidden[:, -(keep + 1) : -1, :]
    lm_head = model.get_output_embeddings().weight
    return zoo.grpo_chunked_hidden_states_logprobs(hidden, lm_head, completion_ids, ids.shape[0] * 4)


@contextlib.contextmanager
def _returning_hidden_states():
    before = os.environ.get("UNSLOTH_RETURN_HIDDEN_STATES")
    os.environ["UNSLOTH_RETURN_HIDDEN_STATES"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("UNSLOTH_RETURN_HIDDEN_STATES", None)
        else:
            os.environ["UNSLOTH_RETURN_HIDDEN_STATES"] = before
