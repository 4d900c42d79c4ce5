"""A budgeted sweep in two phases: memory first, then speed.

Memory phase: each trial runs its probe steps and one steady step (TrialSpec.hold_at_step), enough
for a verdict: it fits (with its measured peak) or ends `oom`, and pruning acts on that at once. On a
GPU larger than the budget several memory-phase trials share it (Ray's fractional GPUs): each
trainer's own cap and the supervisor's guard judge each process alone, which needs per-process
memory readings: NVML's per-process list on a GPU, RSS on a CPU. Where only device-wide readings
exist, memory-phase trials do not share a GPU.

Speed phase: the configurations that fit run their full steps, one per GPU. A trial whose memory
phase ran alone goes straight on in the same process (the supervisor tells it `continue` at its hold
step); a packed one is started again, alone. With a budget both phases run by default; `phases:
[memory]` stops after the first; without a budget only the speed phase runs. Every trials.parquet row
says which phase its figures come from.

No Ray here: the driver asks `plan_phases` for the stages to run and hands `TrialPhases` to each trial.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.outcome import COMPLETED
from orchestrator.settle import SettleSettings

MEMORY, SPEED = "memory", "speed"
PHASES = (MEMORY, SPEED)


@dataclass(frozen=True)
class TrialPhases:
    """What the supervisor does with one trial. hold_at_step: the memory phase's last step (None: no
    memory phase in this run); then_speed: at it, go on into the speed phase (else stop there);
    settle: end the speed phase once settled (orchestrator/settle.py), None: run to max_steps."""

    hold_at_step: int | None = None
    then_speed: bool = True
    settle: SettleSettings | None = None

    def for_trial(self, max_steps: int) -> TrialPhases:
        """These phases for a trial of max_steps: one whose memory phase would be its whole run has none
        (it runs as a speed-phase trial, and its figures are the speed phase's)."""
        if self.hold_at_step is not None and self.hold_at_step >= max_steps:
            return replace(self, hold_at_step=None)
        return self


SPEED_ONLY = TrialPhases()


def memory_phase_steps(probe_steps: int) -> int:
    """The memory phase's steps: the probe steps (worst case) and one steady step."""
    return probe_steps + 1


@dataclass(frozen=True)
class Packing:
    """How many memory-phase trials share one GPU (1: none share) and why."""

    per_gpu: int
    reason: str

    @property
    def gpu_fraction(self) -> float:
        return 1.0 / self.per_gpu


def packing(
    budget_gib: float,
    card_gib: float | None,
    headroom_gib: float,
    per_process: bool,
    asked: int | None,
) -> Packing:
    """Memory-phase trials per GPU: `asked`, else as many budgets (plus headroom each) as the card holds.
    Raises ValueError for an `asked` packing the card cannot hold."""
    if card_gib is None:
        return Packing(1, "the GPU's memory is unknown (set resources.gpu_memory_gib to pack trials)")
    each = budget_gib + headroom_gib
    fits = max(1, math.floor(card_gib / each))
    if asked is not None and asked > 1 and asked * each > card_gib:
        raise ValueError(
            f"resources.memory_phase_trials_per_gpu: {asked} trials x ({budget_gib:g} GiB budget + "
            f"{headroom_gib:g} GiB headroom) = {asked * each:g} GiB, over the card's {card_gib:g} GiB; "
            f"give at most {fits}, or leave it unset to pack as many as fit"
        )
    per_gpu = asked or fits
    if per_gpu > 1 and not per_process:
        return Packing(
            1,
            "memory-phase trials do not share a GPU: the driver reports only device-wide memory (no "
            "per-process readings in NVML), so the guard could not tell the trials apart",
        )
    if per_gpu == 1:
        return Packing(1, f"one {each:g} GiB trial (budget + headroom) per {card_gib:g} GiB GPU")
    return Packing(
        per_gpu, f"{per_gpu} memory-phase trials per {card_gib:g} GiB GPU ({each:g} GiB each with headroom)"
    )


def speed_pending(row: Mapping[str, Any] | None) -> bool:
    """A trial whose memory phase fitted and whose speed phase has not run yet."""
    return bool(row) and row.get("status") == COMPLETED and row.get("phase") == MEMORY
