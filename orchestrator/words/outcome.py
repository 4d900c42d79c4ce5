"""The words of a trial's outcome, defined once: statuses, their labels and colours, the result a
supervised trial hands back, and the peak memory precedence of the record (trainers/record.py).

Imports nothing of the orchestrator, so the supervisor, the sinks, the report and the CLI all share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Which reading is "peak memory" is the record's (trainers/record.py); the sinks, judges and views read it here.
from trainers.record import GPU, MEMORY_LABELS, PEAK_SOURCES, RSS, TORCH, peak_memory  # noqa: F401

COMPLETED = "completed"
OOM = "oom"
PRUNED = "pruned"
FAILED = "failed"
UNAVAILABLE = "unavailable"
STOPPED = "stopped"
# Killed at its wall-clock limit (the guard's timeout_s): done, with the steps it measured kept and judged.
# Not evidence of out of memory, nor of a fit beyond those steps; its measured peak is a lower bound.
TIMEOUT = "timeout"
# Fits without a probe of its own: a measured trial that fits dominates it (orchestrator/judging/frontier.py).
IMPLIED = "implied"
STATUSES = (COMPLETED, OOM, PRUNED, FAILED, TIMEOUT, UNAVAILABLE, STOPPED, IMPLIED)
# Statuses a resumed sweep does not run again; `stopped` means interrupted, so it runs again.
FINAL_STATUSES = (COMPLETED, OOM, PRUNED, FAILED, TIMEOUT, UNAVAILABLE, IMPLIED)
# The statuses whose steps are judged as a training run (a training verdict, the learning ranking and
# curves): a completed trial, and a timeout on the steps it kept before its limit (none kept: not judged).
JUDGED_STATUSES = (COMPLETED, TIMEOUT)
# The statuses that say a trial fits its budget: measured (completed) or implied by a measured fit.
FITS_STATUSES = (COMPLETED, IMPLIED)


def steps_of(kept: int, max_steps: int | None) -> str:
    """'19 of 20 steps': the steps a trial kept, of max_steps (those asked for) where known."""
    of = f" of {max_steps}" if max_steps else ""
    return f"{kept}{of} step{'s' if kept != 1 or of else ''}"


def cut_short(kept: int, max_steps: int | None) -> str:
    """What a timeout's figures stand on: 'the 19 of 20 steps measured before the time limit'."""
    return f"the {steps_of(kept, max_steps)} measured before the time limit"


# A status in a sentence ("3 out of memory").
STATUS_WORDS = {
    COMPLETED: "completed",
    OOM: "out of memory",
    PRUNED: "skipped (pruned)",
    FAILED: "failed",
    TIMEOUT: "timed out",
    UNAVAILABLE: "unavailable",
    STOPPED: "stopped",
    IMPLIED: "fit (implied, not probed)",
}
# A status in a table cell; where a cell holds several outcomes, the first listed wins.
STATUS_LABELS = {
    OOM: "OOM",
    FAILED: "failed",
    TIMEOUT: "timeout",
    STOPPED: "stopped",
    UNAVAILABLE: "unavailable",
    PRUNED: "pruned",
    IMPLIED: "fits (implied)",
    COMPLETED: "completed",
}
# One colour per outcome that is not a measured peak (plots and HTML).
STATUS_COLOURS = {
    OOM: "#d62728",
    PRUNED: "#c994c7",
    FAILED: "#5f5f5f",
    TIMEOUT: "#e6a532",
    UNAVAILABLE: "#c7c7c7",
    STOPPED: "#7fb8d6",
    IMPLIED: "#a1d99b",
}


@dataclass
class TrialResult:
    """What a supervised trial ends with: its status, the started event, every step row, its peaks."""

    status: str
    status_detail: str
    started: dict[str, Any] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    exit_code: int | None = None
    pid: int | None = None
    cuda_visible_devices: str | None = None
    peak: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0
    ended_at: float = 0.0
    phase: str | None = None  # the phase its figures come from (orchestrator/running/phases.py)
    settled_step: int | None = None  # the step at which the settled stop ended it
    session: str | None = None  # the probe session it ran in (orchestrator/running/session.py); None: alone
    session_startup_s: float | None = None  # its session's start-up, on the session's first shape only

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# What a run on a host without a GPU says where a GPU's name would go.
NO_GPU = "no GPU (CPU run)"
