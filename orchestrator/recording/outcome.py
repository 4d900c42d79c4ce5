"""The words of a trial's outcome, defined once: statuses, their labels and colours, the result a
supervised trial hands back, and which measured figure is "peak memory".

Imports nothing of the project, so the supervisor, the sinks, the report and the CLI all share it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

COMPLETED = "completed"
OOM = "oom"
PRUNED = "pruned"
FAILED = "failed"
UNAVAILABLE = "unavailable"
STOPPED = "stopped"
STATUSES = (COMPLETED, OOM, PRUNED, FAILED, UNAVAILABLE, STOPPED)
# Statuses a resumed sweep does not run again; `stopped` means interrupted, so it runs again.
FINAL_STATUSES = (COMPLETED, OOM, PRUNED, FAILED, UNAVAILABLE)

# A status in a sentence ("3 out of memory").
STATUS_WORDS = {
    COMPLETED: "completed",
    OOM: "out of memory",
    PRUNED: "skipped (pruned)",
    FAILED: "failed",
    UNAVAILABLE: "unavailable",
    STOPPED: "stopped",
}
# A status in a table cell; where a cell holds several outcomes, the first listed wins.
STATUS_LABELS = {
    OOM: "OOM",
    FAILED: "failed",
    STOPPED: "stopped",
    UNAVAILABLE: "unavailable",
    PRUNED: "pruned",
    COMPLETED: "completed",
}
# One colour per outcome that is not a measured peak (plots and HTML).
STATUS_COLOURS = {
    OOM: "#d62728",
    PRUNED: "#c994c7",
    FAILED: "#5f5f5f",
    UNAVAILABLE: "#c7c7c7",
    STOPPED: "#7fb8d6",
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

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# What a run on a host without a GPU says where a GPU's name would go.
NO_GPU = "no GPU (CPU run)"

# "Peak memory", one precedence: what NVML saw of the GPU (the trainer's process, else the device),
# then torch's reserved pool, then the process's RSS (a CPU run). Each source: (kind, the trials.parquet
# column, the step columns).
GPU, TORCH, RSS = "GPU", "torch reserved", "RSS"
PEAK_SOURCES = (
    (GPU, "peak_device_gib", ("device_peak_gib",)),
    (TORCH, "peak_torch_reserved_gib", ("torch_peak_reserved_gib", "torch_reserved_gib")),
    (RSS, "peak_rss_gib", ("rss_peak_gib", "rss_gib")),
)
# Each kind as a reader sees it beside a figure: which memory it is and where it was measured.
MEMORY_LABELS = {GPU: "GPU (NVML)", TORCH: "torch reserved", RSS: "RSS (CPU run)"}


def _finite(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def peak_memory(row: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """(peak GiB, kind) of a trials row or a step row, by PEAK_SOURCES' precedence; (None, None) if
    nothing was measured. kind is GPU, TORCH or RSS."""
    for kind, trial_column, step_columns in PEAK_SOURCES:
        values = [_finite(row.get(name)) for name in (trial_column, *step_columns)]
        values = [v for v in values if v is not None]
        if values:
            return max(values), kind
    return None, None
