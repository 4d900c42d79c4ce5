"""A step's update of the trainable weights, for trainers/measure.py: a copy at the step's start, the
relative change at its end (record.py's update_ratio), and undoing it after a synthetic probe step."""

from __future__ import annotations

import math

# Trainable weights copied at each step's start to measure its update; above this many, none (a copy of a
# full fine-tuning's weights every step would cost more than the measurement is worth).
UPDATE_RATIO_MAX_PARAMS = 200_000_000


def _trainable(trainer) -> list:
    model = getattr(trainer, "model", None)
    return [p for p in model.parameters() if p.requires_grad] if model is not None else []


def trainable_snapshot(trainer) -> list | None:
    """A copy of the trainer's trainable weights (None: no trainer, none trainable, or too many)."""
    params = _trainable(trainer)
    if not params or sum(p.numel() for p in params) > UPDATE_RATIO_MAX_PARAMS:
        return None
    return [p.detach().clone() for p in params]


def update_ratio(before: list | None, trainer) -> float | None:
    """norm(after - before) / norm(before) over the trainable weights (record.py's update_ratio); None where
    nothing was copied or the weights are empty (sharded)."""
    if before is None:
        return None
    after = _trainable(trainer)
    if len(after) != len(before):
        return None
    change = sum(
        float((a.detach().float() - b.float()).pow(2).sum()) for a, b in zip(after, before, strict=True)
    )
    size = sum(float(b.float().pow(2).sum()) for b in before)
    return math.sqrt(change / size) if size > 0 else None


def undo_update(before: list | None, trainer) -> bool:
    """Put back the trainable weights copied at the step's start and zero the optimizer's moments (their
    memory stays allocated, as a real step leaves it): a synthetic probe step leaves the model as it found
    it. False where nothing was copied (no trainer, or more trainable weights than UPDATE_RATIO_MAX_PARAMS)."""
    import torch

    after = _trainable(trainer)
    if before is None or len(after) != len(before):
        return False
    with torch.no_grad():
        for param, saved in zip(after, before, strict=True):
            param.copy_(saved)
    optimizer = getattr(trainer, "optimizer", None)
    for state in getattr(optimizer, "state", {}).values():
        for value in state.values():
            if torch.is_tensor(value):
                value.zero_()
    return True
