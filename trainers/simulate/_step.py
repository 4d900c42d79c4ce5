"""A GRPO step simulated as one skeleton with each stack's hooks, as torchtitan's estimator runs each model's
own TrainSpec with no estimator code per model: the skeleton here is the step every stack takes - its
config, a one-process accelerator, the optimizer and when its state is made, the schedule of steps,
generation, the scoring pass, the training micro-batch's loss, backward, clipping and the optimizer step -
and a stack supplies its own parts through StepHooks in its own module (trainers/stacks/_simulate_*.py):
the model as the stack holds it, the trainer its loss code reads, the patches that make that code run on
meta, its decoding and its loss. No stack's simulator imports another's.

    return run_step(MyHooks(), spec, prompt_tokens, counter, **how)   # in Stack.simulate_step
"""

from __future__ import annotations

import contextlib
from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any


class Accelerator(SimpleNamespace):
    """One process: gather, reduce and unwrap are identities, autocast is nothing on meta, no grad scaler
    (bf16). Every stack's simulated trainer holds one."""

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


class StepHooks:
    """A stack's parts of the simulated step. model, trainer and loss are the stack's own; the rest have
    the defaults a stack that adds nothing there keeps."""

    def config(self, spec: Any, dtype: Any) -> Any:
        """The trial's GRPOConfig, as a real trial builds it (runtime.grpo_config_kwargs)."""
        return grpo_config(spec, dtype)

    def model(self, spec: Any, args: Any, dtype: Any, device: str, attention: str) -> Any:
        """The trial's model as the stack holds it on a GPU, on `device`."""
        raise NotImplementedError

    def trainer(self, args: Any, model: Any) -> Any:
        """What the stack's loss code reads of its trainer."""
        raise NotImplementedError

    def patches(self, as_cuda: bool) -> contextlib.AbstractContextManager:
        """The stack's own arrangements for its code to run on meta (docs/oom.md, "Simulated steps")."""
        return nullcontext()

    def held(self) -> list:
        """Persistent buffers the stack makes before the step, beyond the model and the optimizer's state."""
        return []

    def inputs(self, n: int, prompt_tokens: int, completion: int, device: str) -> dict:
        """The micro-batch the stack's trainer hands its loss: ids, masks, advantages (TRL's inputs)."""
        import torch

        return {
            "prompt_ids": torch.zeros(n, prompt_tokens, dtype=torch.long, device=device),
            "prompt_mask": torch.ones(n, prompt_tokens, dtype=torch.long, device=device),
            "completion_ids": torch.zeros(n, completion, dtype=torch.long, device=device),
            "completion_mask": torch.ones(n, completion, dtype=torch.long, device=device),
            "advantages": torch.zeros(n, device=device),
            "num_items_in_batch": torch.tensor(float(n * completion), device=device),
        }

    def decoding(self, model: Any, device: str):
        """`during(rows, tokens)`: the stack's own decoding buffers beside the full cache, or None where it
        decodes through transformers' generate."""
        return None

    def after_generation(self, model: Any, decoded: Any) -> None:
        """What the stack does as generation returns to training (with what `decoding` returned)."""

    def score(self, trainer: Any, model: Any, inputs: dict) -> Any:
        """The old policy's per-token log-probs (no grad), as the stack's scoring pass makes them."""
        raise NotImplementedError

    def loss(self, trainer: Any, model: Any, inputs: dict) -> Any:
        """The training micro-batch's loss through the stack's own code (backward follows)."""
        raise NotImplementedError

    def said(self, model: Any) -> dict[str, Any]:
        """What the stack adds to the simulation's account of itself."""
        return {}


def grpo_config(spec: Any, dtype: Any) -> Any:
    """TRL's GRPOConfig from the trial (the same runtime.grpo_config_kwargs path as a real trial), on the
    host's CPU as far as the config is concerned (the model is on meta)."""
    from trl import GRPOConfig

    from trainers.runtime import grpo_config_kwargs
    from trainers.trial import optim_of

    asked = grpo_config_kwargs(spec, dtype, on_gpu=True) | {"bf16": False, "fp16": False, "use_cpu": True}
    config = GRPOConfig(**asked, reward_weights=[1.0])
    # the optimizer the GPU run builds: `stack` is the stack's own default, and Unsloth's config, imported on
    # a host without a GPU, swaps adamw_8bit for adamw_torch_fused
    config.optim = type(config.optim)(optim_of(spec)) if hasattr(config.optim, "value") else optim_of(spec)
    return config


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
    from trainers.optimizer_state import materialize
    from trainers.simulate._optim import optimizer as simulated_optimizer

    params = [p for p in model.parameters() if p.requires_grad]
    name = str(getattr(args.optim, "value", args.optim))  # the trial's, or its stack's GRPOConfig default
    optimizer = simulated_optimizer(name, params, args.learning_rate, args.weight_decay)
    trainer.optimizer = optimizer
    if optimizer_state == "before" and not materialize(trainer) and hasattr(optimizer, "allocate"):
        optimizer.allocate()  # bitsandbytes' 8-bit state, as every step after the first carries it
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


def run_step(
    hooks: StepHooks,
    spec: Any,
    prompt_tokens: int,
    counter: Any,
    device: str = "meta",
    attention: str = "sdpa",
    as_cuda: bool = True,
    optimizer_state: str = "before",
) -> dict[str, Any]:
    """One training step of `spec` (a TrialSpec) through the stack's hooks on `device`, counted by
    `counter` (simulate._count's AllocationCounter, entered once the model, its adapters, the optimizer's
    state and the stack's persistent buffers are built and held): per scheduled step, generation, the
    scoring pass where num_iterations > 1 or beta > 0, then the training micro-batch's loss, backward,
    clipping and the optimizer. Returns what was simulated. device "cpu" runs the same step on real
    tensors (the test that meta counts what real execution allocates)."""
    import torch

    dtype = torch.bfloat16
    args = hooks.config(spec, dtype)
    model = hooks.model(spec, args, dtype, device, attention)
    trainer = hooks.trainer(args, model)
    params, optimizer = optimizer_for(trainer, model, args, optimizer_state)
    held = held_before(model, optimizer) + hooks.held()
    with counter, hooks.patches(as_cuda):
        counter.hold(held)
        for fresh in schedule(optimizer_state, args.num_iterations):
            _one_step(
                hooks, fresh, spec, args, model, trainer, optimizer, params, prompt_tokens, counter, device
            )
    return {"micro_batch": spec.effective_micro_batch_size, "prompt_tokens": prompt_tokens,
            "num_iterations": args.num_iterations} | hooks.said(model)  # fmt: skip


def _one_step(hooks, fresh, spec, args, model, trainer, optimizer, params, prompt_tokens, counter, device):
    """One optimizer step: generation, the scoring pass where the stack takes one, then training; `fresh`
    False trains on a batch an earlier step generated and scored (num_iterations > 1): training alone."""
    import torch

    n = spec.effective_micro_batch_size
    completion = spec.max_completion_length
    inputs = hooks.inputs(n, prompt_tokens, completion, device)
    if not fresh:
        inputs["old_per_token_logps"] = torch.zeros(n, completion, device=device)  # kept from the fresh step
    else:
        decoded = generation(model, spec, args, prompt_tokens, counter, device, hooks.decoding(model, device))
        hooks.after_generation(model, decoded)
        del decoded
    if fresh and (args.num_iterations > 1 or args.beta != 0.0):
        counter.phase("scoring")
        with torch.no_grad():
            inputs["old_per_token_logps"] = hooks.score(trainer, model, inputs)
    counter.phase("training")
    loss = hooks.loss(trainer, model, inputs)
    loss.backward()
    del loss
    torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def generation(model, spec, args, prompt_tokens: int, counter, device: str, during=None) -> Any:
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
