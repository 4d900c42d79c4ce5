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
    """TRL's simulated GRPOConfig (the trial's, as a real trial builds it) with UnslothGRPOConfig's own
    fields at their defaults."""
    from trainers.stacks._simulate_trl import _config as trl_config

    config = trl_config(spec, dtype)
    for name, value in UNSLOTH_CONFIG_DEFAULTS.items():
        setattr(config, name, value)
    return config


def _trainer(args: Any, model: Any):
    """What grpo_accumulated_loss reads of the UnslothGRPOTrainer."""
    from trainers.stacks._simulate_trl import _Accelerator

    return SimpleNamespace(
        args=args, model=model, accelerator=_Accelerator(), processing_class=SimpleNamespace(pad_token_id=-1),
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
    fast_lora(model)
    model.train()
    return _hidden_states_forward(model)


def simulate_step(
    spec: Any,
    prompt_tokens: int,
    counter: Any,
    device: str = "meta",
    attention: str = "sdpa",
    as_cuda: bool = True,
    optimizer_state: str = "before",
) -> dict[str, Any]:
    """One training step of `spec` (a TrialSpec) through Unsloth's GRPO loss on meta, counted by `counter`
    (entered here once the model, its adapters, the optimizer's state and Unsloth's persistent buffers are
    built and held): generation, the scoring pass where num_iterations > 1 or beta > 0, then the training
    micro-batch's loss, backward, clipping and the optimizer. Returns what was simulated. device "cpu"
    runs the same step on real tensors."""
    import torch

    from trainers.stacks._simulate_trl import held_before, optimizer_for, schedule
    from trainers.stacks._simulate_unsloth_kernels import OffloadingCheckpointer, unsloth_on_meta

    zoo = _zoo()
    dtype = torch.bfloat16
    args = _config(spec, dtype)
    rows = spec.effective_micro_batch_size
    length = prompt_tokens + spec.max_completion_length
    checkpointer = OffloadingCheckpointer(device)
    model = _model(spec, dtype, device, attention, checkpointer)
    config = model.config.get_text_config()
    if spec.gradient_checkpointing:
        checkpointer.prepare(config.num_hidden_layers, rows * length * config.hidden_size, dtype)
    trainer = _trainer(args, model)
    params, optimizer = optimizer_for(trainer, model, args, optimizer_state)
    held = held_before(model, optimizer) + checkpointer.buffers
    with counter, unsloth_on_meta(zoo, as_cuda):
        counter.hold(held)
        for fresh in schedule(optimizer_state, args.num_iterations):
            said = _step(
                fresh,
                spec,
                zoo,
                args,
                model,
                checkpointer,
                trainer,
                optimizer,
                params,
                prompt_tokens,
                counter,
                device,
            )
        return said


def _step(
    fresh, spec, zoo, args, model, checkpointer, trainer, optimizer, params, prompt_tokens, counter, device
) -> dict[str, Any]:
    import torch

    from trainers.stacks._simulate_trl import _generation
    from trainers.stacks._simulate_unsloth_kernels import decode_buffers, release_on_forward

    n = spec.effective_micro_batch_size
    completion = spec.max_completion_length
    prompt_ids = torch.ones(n, prompt_tokens, dtype=torch.long, device=device)
    completion_ids = torch.ones(n, completion, dtype=torch.long, device=device)
    prompt_mask = torch.ones(n, prompt_tokens, dtype=torch.long, device=device)
    completion_mask = torch.ones(n, completion, dtype=torch.long, device=device)
    advantages = torch.zeros(n, device=device)
    if fresh:
        # generation (it turns torch's checkpointing back on: Unsloth's is put back after), with Unsloth's
        # decoding buffers, held until the next forward reaches each layer
        buffers = _generation(
            model,
            spec,
            args,
            prompt_tokens,
            counter,
            device,
            during=partial(decode_buffers, model, device=device),
        )
        release_on_forward(model, buffers)
        del buffers
        if spec.gradient_checkpointing:
            _checkpoint_with(model, checkpointer)
    old_logps = None if fresh else torch.zeros(n, completion, device=device)  # kept from the fresh step
    if fresh and (args.num_iterations > 1 or args.beta != 0.0):
        counter.phase("scoring")
        with torch.no_grad():
            old_logps = _score(zoo, model, prompt_ids, completion_ids, prompt_mask, completion_mask)
    counter.phase("training")
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    del prompt_ids, prompt_mask
    loss, *_ = zoo.grpo_accumulated_loss(
        trainer=trainer, input_ids=input_ids, logits_to_keep=completion, completion_mask=completion_mask,
        advantages=advantages, old_logps=old_logps, ref_logps=None, n_chunks=args.unsloth_num_chunks,
        loss_type=args.loss_type, importance_sampling_level=args.importance_sampling_level,
        epsilon_low=trainer.epsilon_low, epsilon_high=trainer.epsilon_high,
        max_completion_length=args.max_completion_length, delta=getattr(args, "delta", None),
        temperature=args.temperature, max_left_pad=0, logit_softcapping=0.0, logit_scale_multiply=0.0,
        logit_scale_divide=0.0, attention_mask=attention_mask, num_items_in_batch=n * completion,
        current_gradient_accumulation_steps=args.gradient_accumulation_steps, num_processes=1,
        sampling_per_token_logps=None,
    )  # fmt: skip
    del input_ids, attention_mask, old_logps
    loss.backward()
    del loss
    torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"micro_batch": n, "prompt_tokens": prompt_tokens, "num_iterations": args.num_iterations}


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
