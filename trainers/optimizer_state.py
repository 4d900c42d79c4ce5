"""The optimizer's state allocated before the first step, so that the first step's peak is every step's.

torch's Adam and AdamW create their moments (exp_avg, exp_avg_sq: two tensors the size and dtype of
each trainable weight) lazily, inside the first `optimizer.step()`, after the first step's
generation, forward and backward have set that step's peak. From the second step on the moments are live
through the whole step. So a trial measured on its first step alone (a memory probe: `probe_steps: 1`, or
any trial stopped after one step) reads a peak short of the steady one by the moments and by what the
caching allocator then reserves around them: on an H100 (random Qwen2.5, nf4, LoRA r16 on every linear
layer) step 1 against step 2 was, in torch allocated / reserved GiB, 2.407 / 2.881 against 2.508 / 3.195
(1.5B, K=4 B=2, 128 tokens) and 4.705 / 5.598 against 4.849 / 6.164 (3B, K=8 B=2, 128 tokens); steps 3-5
equalled step 2.

`materialize` runs the optimizer's own step once before the first step, with every trainable weight's
gradient zero and every group's learning rate zero, so the optimizer allocates exactly the state it would
(its own code, its own dtypes and devices) and changes no weight (Adam's update with zero gradients and a
zero rate is 0, and decoupled weight decay multiplies by 1 - 0 x decay). It then zeroes that state:
Adam's moments and step count start at zero, so the optimizer is, to the bit, the fresh one the first
real step would have made, only allocated earlier. Only for optimizers whose fresh state is all zeros
(MATERIALIZED: torch's Adam and AdamW, fused or not); for any other (bitsandbytes' 8-bit optimizers keep
quantization maps, Adagrad starts its sums at a set value) nothing is done and the first step's peak is
as the first step made it.
"""

from __future__ import annotations

from typing import Any

# Optimizer classes (by name, the torch.optim classes HF's `optim` names map to) whose state a fresh
# instance would create as zeros, so zeroing it puts the optimizer back as new.
MATERIALIZED = ("Adam", "AdamW")


def _torch_optimizer(trainer: Any):
    """The torch optimizer behind a trainer's (accelerate wraps it in AcceleratedOptimizer); None if none."""
    import torch

    optimizer = getattr(trainer, "optimizer", None)
    inner = getattr(optimizer, "optimizer", optimizer)
    return inner if isinstance(inner, torch.optim.Optimizer) else None


def materialize(trainer: Any) -> bool:
    """Allocate the trainer's optimizer state now, as its first step would, and leave the optimizer and
    the weights as they were (module docstring). True when it did; False where there was nothing to do
    (no torch optimizer yet, its state already exists, no trainable weight) or the optimizer is not one
    whose fresh state is zeros."""
    import torch

    inner = _torch_optimizer(trainer)
    if inner is None or len(inner.state) or type(inner).__name__ not in MATERIALIZED:
        return False
    params = [p for group in inner.param_groups for p in group["params"] if p.requires_grad]
    if not params:
        return False
    grads = [p.grad for p in params]
    rates = [group["lr"] for group in inner.param_groups]
    try:
        for p in params:
            p.grad = torch.zeros_like(p)
        for group in inner.param_groups:
            group["lr"] = 0.0
        inner.step()
    finally:
        for group, rate in zip(inner.param_groups, rates, strict=True):
            group["lr"] = rate
        for p, grad in zip(params, grads, strict=True):
            p.grad = grad
    with torch.no_grad():
        for state in inner.state.values():
            for value in state.values():
                if torch.is_tensor(value):
                    value.zero_()
    return True


def state_gib(trainer: Any) -> float | None:
    """GiB the trainer's optimizer state holds in tensors now (record.py's optimizer_state_gib); None
    without a torch optimizer."""
    import torch

    from trainers.units import GIB

    inner = _torch_optimizer(trainer)
    if inner is None:
        return None
    tensors = [v for state in inner.state.values() for v in state.values() if torch.is_tensor(v)]
    return sum(v.numel() * v.element_size() for v in tensors) / GIB
