"""The settings a sweep file sets and the jobs read, with their defaults defined once: the memory
guard's and sampler's (GuardSettings), the settled stop's (SettleSettings) and the verdicts'
(VerdictSettings).

A sweep's `memory`, `oom` and `timeout_s` sections, `rlsweep trial`'s flags and gpu-check all build a
GuardSettings; the supervisor reads it. The `stop:` section builds a SettleSettings
(orchestrator/running/settle.py judges with it), the `verdict:` section a VerdictSettings
(orchestrator/judging/verdict.py). orchestrator/spec/sweep.py describes each field.
"""

from __future__ import annotations

from dataclasses import dataclass

# The memory sampler's rate, and the guard's allowance over the budget (orchestrator/running/telemetry.py
# says why it is 0 by default).
DEFAULT_HZ = 20.0
DEFAULT_GUARD_MARGIN_GIB = 0.0


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


GUARD = GuardSettings()


@dataclass(frozen=True)
class SettleSettings:
    """The settled stop's thresholds (the sweep's `stop:` section; orchestrator/spec/sweep.py describes each)."""

    steps: int = 5
    half_width: float = 0.1
    confidence: float = 0.9
    growth_tolerance: float = 0.01


SETTLE = SettleSettings()


@dataclass(frozen=True)
class VerdictSettings:
    """The thresholds of the verdicts (the sweep's `verdict:` section; orchestrator/spec/sweep.py describes
    each field)."""

    min_steps: int = 5
    no_signal_share: float = 0.95
    no_signal_steps: int = 5
    truncated_share: float = 0.95
    truncated_steps: int = 5
    spike_k: float = 10.0
    spike_min_history: int = 5
    spike_floor: float = 0.1
    update_ratio_max: float = 1.0
    creep_min_steps: int = 5
    creep_horizon_steps: int | None = None
    creep_confidence: float = 0.95
    stop_on: tuple[str, ...] = ()
    learning_min_steps: int = 8
    learning_confidence: float = 0.95
    collapse_window_steps: int = 5
    collapse_entropy_drop: float = 0.75
    collapse_distinct_share: float = 0.1
    collapse_distinct_steps: int = 5
    accuracy_target: float = 0.5


VERDICT = VerdictSettings()
