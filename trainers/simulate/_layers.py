"""A deep model simulated from two shallow copies of itself. A decoder's layers of one kind are the same
code on the same shapes, so every byte a step holds or allocates is a constant (embeddings, the output
head, the loss's logits) plus a sum over layers (weights, adapters, their optimizer state, the KV cache,
the checkpointed inputs): the step's peak at L layers is affine in L. Two copies of the model cut to
`small` and `2 x small` layers (whole periods of its layer pattern: sliding and full attention
alternating) give the line; the model's own depth is read off it. `python -m bench simulate --set whole=true` checks
it against every layer simulated.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Any

# The shallow copies: whole periods of the layer pattern, at least this many layers in the smaller one.
SMALLEST = 4

_CUT: contextvars.ContextVar[int | None] = contextvars.ContextVar("simulated_layers", default=None)


def period(layer_types: list | None) -> int:
    """The shortest repeat of a model's per-layer kinds (1 where every layer is alike)."""
    kinds = list(layer_types or [])
    for p in range(1, len(kinds) + 1):
        if all(kinds[i] == kinds[i % p] for i in range(len(kinds))):
            return p
    return max(1, len(kinds))


def depths(config: Any) -> tuple[int, int, int] | None:
    """(small, large, whole): the layer counts to simulate and the model's own, or None where the model
    is too shallow for the cut to save anything (simulate every layer)."""
    whole = int(config.num_hidden_layers)
    p = period(getattr(config, "layer_types", None))
    small = p * -(-SMALLEST // p)
    large = 2 * small
    return None if whole <= large + small else (small, large, whole)


@contextlib.contextmanager
def cut_to(layers: int | None):
    """Models built inside (trainers/simulate/_meta.py qlora_model) keep their first `layers` layers."""
    token = _CUT.set(layers)
    try:
        yield
    finally:
        _CUT.reset(token)


def cut(config: Any) -> Any:
    """`config` with the layer count set by cut_to (unchanged outside it): the first layers, their kinds."""
    layers = _CUT.get()
    if layers is None or layers >= config.num_hidden_layers:
        return config
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types)[:layers]
    return config


# The caching allocator's overhead (reserved less allocated) grows with depth by at most this much a layer
# on every configuration checked (TRL 3-4 MiB, Unsloth 5 MiB a layer).
OVERHEAD_PER_LAYER_GIB = 0.01


def _overhead(small: Any, large: Any, depth: tuple[int, int, int]) -> float:
    """Reserved less allocated at the model's own depth: the deeper cut's, grown by its growth between the
    cuts, at most OVERHEAD_PER_LAYER_GIB a layer. Read off the line through the two reserved peaks
    instead, a block split at one cut and not the other came out 8-fold at 36 layers (Qwen3-4B at 3,913
    tokens: 19.06 GiB against 15.60 with every layer simulated)."""
    n_small, n_large, whole = depth
    grows = (large.reserved_gib - large.allocated_gib) - (small.reserved_gib - small.allocated_gib)
    per_layer = min(max(grows / (n_large - n_small), 0.0), OVERHEAD_PER_LAYER_GIB)
    return large.reserved_gib - large.allocated_gib + per_layer * (whole - n_large)


def extrapolated(small: Any, large: Any, depth: tuple[int, int, int], seconds: float) -> Any:
    """The SimulatedStep at the model's own depth, read off the line through the two shallow ones."""
    n_small, n_large, whole = depth

    def at(a: float, b: float) -> float:
        return a + (b - a) * (whole - n_small) / (n_large - n_small)

    phases = {
        name: at(small.phase_gib[name], large.phase_gib[name])
        for name in large.phase_gib
        if name in small.phase_gib
    }
    # The step's peak is its largest phase's: each phase's is affine in the layers, their maximum is not (a
    # phase that grows with depth can overtake one that set the shallow copies' peaks).
    allocated = max(phases.values()) if phases else at(small.allocated_gib, large.allocated_gib)
    reserved = allocated + _overhead(small, large, depth)
    needed = None
    if large.needed_gib is not None:
        # the pages live blocks share beyond their bytes: the deeper cut's, at most reserved's overhead
        needed = min(reserved, allocated + max(large.needed_gib - large.allocated_gib, 0.0))
    return dataclasses.replace(
        large,
        allocated_gib=allocated,
        reserved_gib=reserved,
        needed_gib=needed,
        phase=max(phases, key=phases.get) if phases else large.phase,
        phase_gib=phases,
        resting_gib=at(small.resting_gib, large.resting_gib),
        seconds=seconds,
        simulated={**large.simulated, "layers": f"{n_small} and {n_large} of {whole}, extrapolated"},
    )
