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
from contextlib import nullcontext
from types import MethodType, SimpleNamespace
from typing import Any


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


class _Accelerator(SimpleNamespace):
    """One process: gather, reduce and unwrap are identities, autocast is nothing on meta, no grad scaler
    (bf16). Unsloth's simulated trainer holds one too."""

    num_processes = 1
    is_main_process = True
    sync_gradients = True
    scaler = None

    def gather(self, tensor):
        return tensor

    def reduce(self, tensor, reduction="sum"):
        return tensor

    def unwrap_model(self, model, keep_fp32_wrapper=True):
        return model

    def autocast(self):
        return nullcontext()


def _config(spec: Any, dtype: Any):
    from trl import GRPOConfig

    from trainers.runtime import grpo_config_kwargs

    asked = grpo_config_kwargs(spec, dtype, on_gpu=True) | {"bf16": False, "fp16": False, "use_cpu": True}
    return GRPOConfig(**asked, reward_weights=[1.0])


def _model(spec: Any, dtype: Any, gradient_checkpointing: bool, device: str, attention: str):
    import torch
    from accelerate.utils import convert_outputs_to_fp32
    from peft import LoraConfig, get_peft_model

    from trainers.simulate._meta import qlora_model

    model = qlora_model(spec, dtype, device, attention)
    quantized = getattr(model, "is_loaded_in_4bit", False)
    if spec.adapter == "lora":
        lora = LoraConfig(
            r=spec.lora_r, lora_alpha=spec.lora_alpha, lora_dropout=spec.lora_dropout,
            target_modules="all-linear", task_type="CAUSAL_LM",
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
        args=args, model=model, accelerator=_Accelerator(), model_kwarg_keys=inspect.signature(base.forward).parameters.keys(),
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


def simulate_step(
    spec: Any,
    prompt_tokens: int,
    counter: Any,
    device: str = "meta",
    attention: str = "sdpa",
    as_cuda: bool = True,
    optimizer_state: str = "before",
    use_liger_kernel: bool = False,
) -> dict[str, Any]:
    """One training step of `spec` (a TrialSpec) on meta, counted by `counter` (simulate._count's
    AllocationCounter, entered here once the model, its adapters and the optimizer's state are built and
    held): the scoring forward where num_iterations > 1 or beta > 0, then the training micro-batch's
    loss, backward, clipping and the optimizer. Returns what was simulated. device "cpu" runs the same
    step on real tensors (the test that meta counts what real execution allocates)."""
    import torch

    dtype = torch.bfloat16
    args = _config(spec, dtype)
    model = _model(spec, dtype, args.gradient_checkpointing, device, attention)
    trainer = _trainer(args, model, use_liger_kernel)
    params, optimizer = optimizer_for(trainer, model, args, optimizer_state)
    held = held_before(model, optimizer)
    with counter, _trl_on_meta(as_cuda):
        counter.hold(held)
        for fresh in schedule(optimizer_state, args.num_iterations):
            said = _step(spec, args, model, trainer, optimizer, params, prompt_tokens, counter, device, fresh)
        return said


def schedule(optimizer_state: str, num_iterations: int = 1) -> list[bool]:
    """The steps a simulation runs, each True where it generates and scores a batch, False where it trains
    on the batch before again (num_iterations > 1, as TRL schedules them). How many, by when AdamW's
    moments are made: "before" the first step, as rlsweep's trainers make them (one step: the first is
    every step); "lazy", inside the first `optimizer.step()` as torch makes them in a plain TRL or Unsloth
    run (num_iterations + 1 steps: every step that trains on the first batch again, then one that
    generates with the moments live, whose peaks are the steady ones); "first", lazy's first step alone
    (a one-step run's). trainers.simulate checks the name (OPTIMIZER_STATES)."""
    count = num_iterations + 1 if optimizer_state == "lazy" else 1
    return [index % num_iterations == 0 for index in range(count)]


def optimizer_for(trainer: Any, model: Any, args: Any, optimizer_state: str) -> tuple[list, Any]:
    """The trainable weights and their AdamW (the trial's rate and decay), set on `trainer`, its state
    made before the step where `optimizer_state` is "before" (trainers/optimizer_state.py)."""
    import torch

    from trainers.optimizer_state import materialize

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.learning_rate, weight_decay=args.weight_decay, foreach=True)
    trainer.optimizer = optimizer
    if optimizer_state == "before":
        materialize(trainer)
    return params, optimizer


def held_before(model: Any, optimizer: Any) -> list:
    """The storages made before the step, for the counter to hold: weights and buffers, bitsandbytes'
    quantization state (absmax, code, the nested absmax), the optimizer's state where it exists."""
    import torch

    held = list(model.parameters()) + list(model.buffers())
    for module in model.modules():
        state = getattr(getattr(module, "weight", None), "quant_state", None)
        if state is not None:
            held += [state.absmax, state.code]
            if state.nested:
                held += [state.state2.absmax, state.state2.code, state.offset]
    return held + [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]


def _step(
    spec, args, model, trainer, optimizer, params, prompt_tokens, counter, device, fresh=True
) -> dict[str, Any]:
    """One optimizer step: generation, the scoring pass where TRL takes one, then training; `fresh` False
    trains on a batch an earlier step generated and scored (num_iterations > 1): training alone."""
    import torch

    n = spec.effective_micro_batch_size
    completion = spec.max_completion_length
    inputs = {
        "prompt_ids": torch.zeros(n, prompt_tokens, dtype=torch.long, device=device),
        "prompt_mask": torch.ones(n, prompt_tokens, dtype=torch.long, device=device),
        "completion_ids": torch.zeros(n, completion, dtype=torch.long, device=device),
        "completion_mask": torch.ones(n, completion, dtype=torch.long, device=device),
        "advantages": torch.zeros(n, device=device),
        "num_items_in_batch": torch.tensor(float(n * completion), device=device),
    }
    if not fresh:
        inputs["old_per_token_logps"] = torch.zeros(n, completion, device=device)
    else:
        _generation(model, spec, args, prompt_tokens, counter, device)
    if fresh and (args.num_iterations > 1 or args.beta != 0.0):
        counter.phase("scoring")
        with torch.no_grad():
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            logps, _, _ = trainer._get_per_token_logps_and_entropies(
                model, ids, mask, completion, batch_size=n
            )
            del ids, mask
        inputs["old_per_token_logps"] = logps
        del logps
    counter.phase("training")
    loss = trainer.compute_loss(model, inputs)
    loss.backward()
    del loss
    torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"micro_batch": n, "prompt_tokens": prompt_tokens, "num_iterations": args.num_iterations}


def _generation(model, spec, args, prompt_tokens: int, counter, device: str, during=None) -> Any:
    """Generation's memory where the synthetic probe's reaches its peak (trainers/probe.py): the whole
    generation batch's KV cache holding prompt + max_completion_length less one prefill chunk, the last
    chunk prefilled onto it (the cache concatenated layer by layer, its logits for the last token only, as
    generate's); no gradients, gradient checkpointing off, as TRL generates. The chunks before the last
    allocate less than it and hold nothing after it, so the cache stands in for them; the decoding steps
    after it allocate less again and are not run (decoded token by token on meta they peak lower:
    docs/benchmarks.md). `during(rows, tokens)`, where given, runs with the cache at full length
    (a stack's own decoding buffers: Unsloth's); what it returns is returned."""
    import torch
    from transformers import DynamicCache

    from trainers.probe import chunk_tokens

    rows = args.generation_batch_size or spec.effective_micro_batch_size
    total = prompt_tokens + spec.max_completion_length
    last = min(chunk_tokens(rows), total - 1)
    config = model.config.get_text_config()
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    counter.phase("generation")
    was = model.is_gradient_checkpointing
    model.gradient_checkpointing_disable()
    try:
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            for layer in range(config.num_hidden_layers):
                shape = (rows, kv_heads, total - last, head_dim)
                cache.update(
                    torch.zeros(shape, dtype=torch.bfloat16, device=device),
                    torch.zeros(shape, dtype=torch.bfloat16, device=device),
                    layer,
                )
            for size in (last,):  # the last chunk (a decoding step after it allocates less)
                ids = torch.zeros(rows, size, dtype=torch.long, device=device)
                out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
                cache = out.past_key_values
                del out, ids
            if during is not None:
                counter.phase("decoding")
            held = during(rows, total) if during is not None else None
            del cache
    finally:
        if was:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return held
