"""TRL's GRPO step simulated on meta tensors (trainers/simulate): TRL's own loss code on the trial's model
as TRL holds it on a GPU, counted as CUDA's allocator counts `allocated`.

The model: built on meta from its config (bitsandbytes 4-bit linear layers where the trial quantizes),
PEFT LoRA on every linear layer, the adapters in bf16 as GRPOTrainer casts them for a quantized model,
gradient checkpointing (transformers' default, non-reentrant) with input gradients on, and accelerate's
fp32 outputs around its forward, as `Accelerator.prepare` wraps it under bf16 mixed precision. TRL's
GRPOTrainer.compute_loss / _compute_loss / _get_per_token_logps_and_entropies run unmodified, bound to a
trainer holding the attributes they read, set from the trial's GRPOConfig (the same
runtime.grpo_config_kwargs path as a real trial). Then backward, gradient clipping and AdamW's step, its
state allocated before the step as rlsweep's trainers allocate it (trainers/optimizer_state.py), or
inside the first step as torch does in a plain run (`steps`).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from types import MethodType
from typing import Any

from trainers.simulate._step import Accelerator, StepHooks, run_step


def _fused_logprob_entropy(logits, index, temperature=1.0, row_mask=None):
    """TRL's Triton log-prob/entropy kernel (trl/kernels/logprob_entropy.py) by its allocations: four
    fp32 row tensors in forward (log-probs, entropy, log Z, expected logit), the logits saved, and a
    gradient the size of the logits in backward."""
    import torch

    class _Stand(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, index):
            rows = logits.shape[:-1]
            logprobs = torch.empty(rows, device=logits.device, dtype=torch.float32)
            entropy = torch.empty_like(logprobs)
            log_z, expected = torch.empty_like(logprobs), torch.empty_like(logprobs)
            ctx.save_for_backward(logits, log_z, expected)
            return logprobs, entropy

        @staticmethod
        def backward(ctx, grad_logprobs, grad_entropy):
            logits, _, _ = ctx.saved_tensors
            return torch.empty_like(logits, memory_format=torch.contiguous_format), None

    return _Stand.apply(logits, index)


@contextlib.contextmanager
def _trl_on_meta(as_cuda: bool):
    """TRL's own arrangements (docs/oom.md, "Simulated steps"): its nanmin/nanmax branch on a tensor's
    value (plain min/max on meta), and with as_cuda its fused Triton log-prob kernel, which TRL takes on
    CUDA, stood in for by one of the same allocations."""
    import trl.trainer.grpo_trainer as grpo
    import trl.trainer.utils as trl_utils

    from trainers.simulate._meta import patcher, restore

    saved: list = []
    patch = patcher(saved)
    nanmin, nanmax, supports = trl_utils.nanmin, trl_utils.nanmax, trl_utils._supports_trl_loss_kernel
    patch(grpo, "nanmin", lambda t: t.min() if t.is_meta else nanmin(t))
    patch(grpo, "nanmax", lambda t: t.max() if t.is_meta else nanmax(t))
    if as_cuda:
        patch(trl_utils, "_fused_logprob_entropy", _fused_logprob_entropy)
        patch(
            trl_utils,
            "_supports_trl_loss_kernel",
            lambda logits, *a, **k: logits.is_meta or supports(logits, *a, **k),
        )
    try:
        yield
    finally:
        restore(saved)


def _model(spec: Any, dtype: Any, gradient_checkpointing: bool, device: str, attention: str):
    import torch
    from accelerate.utils import convert_outputs_to_fp32
    from peft import LoraConfig, get_peft_model

    from trainers.simulate._meta import qlora_model
    from trainers.trial import peft_targets

    model = qlora_model(spec, dtype, device, attention)
    quantized = getattr(model, "is_loaded_in_4bit", False)
    if spec.adapter == "lora":
        lora = LoraConfig(
            r=spec.lora_r, lora_alpha=spec.lora_alpha, lora_dropout=spec.lora_dropout,
            target_modules=peft_targets(spec.lora_target_modules), task_type="CAUSAL_LM",
        )  # fmt: skip
        model = get_peft_model(model, lora)
        if gradient_checkpointing:
            model.enable_input_require_grads()
        if quantized:
            for param in model.parameters():
                if param.requires_grad:
                    param.data = param.data.to(torch.bfloat16)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.forward = MethodType(convert_outputs_to_fp32(model.forward.__func__), model)
    model.train()
    return model


def _trainer(args: Any, model: Any, use_liger_kernel: bool = False):
    """A GRPOTrainer holding what its loss code reads; use_liger_kernel: TRL's chunked log-probs (the
    liger stack's loss path, trainers/stacks/_simulate_liger.py)."""
    import inspect

    from trl import GRPOTrainer

    t = object.__new__(GRPOTrainer)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    t.__dict__.update(
        args=args, model=model, accelerator=Accelerator(), model_kwarg_keys=inspect.signature(base.forward).parameters.keys(),
        _is_vlm=False, is_fsdp_enabled=False, use_liger_kernel=use_liger_kernel, use_vllm=False,
        vllm_importance_sampling_correction=False, loss_type=args.loss_type, temperature=args.temperature,
        importance_sampling_level=args.importance_sampling_level, off_policy_mask_threshold=args.off_policy_mask_threshold,
        top_entropy_quantile=args.top_entropy_quantile, entropy_coef=args.entropy_coef,
        use_adaptive_entropy=args.use_adaptive_entropy,
        _entropy_bonus_enabled=args.entropy_coef != 0.0 or args.use_adaptive_entropy,
        _last_world_entropy=float("inf"), _entropy_window_stats=None, aux_loss_enabled=False,
        max_completion_length=args.max_completion_length, num_iterations=args.num_iterations,
        epsilon_low=args.epsilon, epsilon_high=args.epsilon_high if args.epsilon_high is not None else args.epsilon,
        beta=args.beta, current_gradient_accumulation_steps=args.gradient_accumulation_steps,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )  # fmt: skip
    return t


class TrlHooks(StepHooks):
    """TRL's parts of the simulated step (trainers/simulate/_step.py): its model, its trainer, its
    arrangements on meta, its scoring pass and its loss (compute_loss). use_liger_kernel: TRL's chunked
    log-probs in the loss and the scoring pass (the liger stack's hooks set it)."""

    use_liger_kernel = False

    def model(self, spec, args, dtype, device, attention):
        return _model(spec, dtype, args.gradient_checkpointing, device, attention)

    def trainer(self, args, model):
        return _trainer(args, model, self.use_liger_kernel)

    def patches(self, as_cuda):
        return _trl_on_meta(as_cuda)

    def score(self, trainer, model, inputs):
        """GRPOTrainer._get_per_token_logps_and_entropies over the whole batch, as its scoring pass."""
        import torch

        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        completion = inputs["completion_ids"].shape[1]
        logps, *_ = trainer._get_per_token_logps_and_entropies(
            model, ids, mask, completion, batch_size=ids.shape[0]
        )
        return logps

    def loss(self, trainer, model, inputs):
        return trainer.compute_loss(model, inputs)


def simulate_step(spec: Any, prompt_tokens: int, counter: Any, **how: Any) -> dict[str, Any]:
    """One training step of `spec` (a TrialSpec) through TRL's code on meta, counted by `counter`
    (trainers/simulate/_step.py run_step: generation, the scoring forward where num_iterations > 1 or
    beta > 0, then the training micro-batch's loss, backward, clipping and the optimizer). device "cpu"
    runs the same step on real tensors."""
    return run_step(TrlHooks(), spec, prompt_tokens, counter, **how)
