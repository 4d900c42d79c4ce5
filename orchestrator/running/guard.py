"""The memory guard's and sampler's settings of a trial, with their defaults defined once.

A sweep's `memory`, `oom` and `timeout_s` sections, `rlsweep trial`'s flags and gpu-check all build a
GuardSettings; the supervisor reads it. No Ray here.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.running.telemetry import DEFAULT_GUARD_MARGIN_GIB, DEFAULT_HZ


@dataclass(frozen=True)
class GuardSettings:
    """budget_gib: emulate a card of this size (None: the device's total memory, no guard).
    margin_gib: allowance over the budget before the guard kills (telemetry.py says why it is 0 by
    default). sample_hz: memory samples a second. timeout_s: wall-clock limit of a trial
    (None: none). probe_steps: leading worst-case steps (completions forced to max length)."""

    budget_gib: float | None = None
    margin_gib: float = DEFAULT_GUARD_MARGIN_GIB
    sample_hz: float = DEFAULT_HZ
    timeout_s: float | None = 3600.0
    probe_steps: int = 2


DEFAULTS = GuardSettings()
