"""When a speed-phase trial has told all it will: its peak memory stopped growing and its median
throughput is known closely enough. Pure functions over step rows (docs/schema.md's steps columns), so
the supervisor's settled stop and a test judge alike. Imports nothing of the project but outcome.py and intervals.py.

Settled at step s when, over the steps after the probe steps up to s:
  - peak memory (outcome.peak_memory of each step) has not risen above the highest earlier reading by
    more than `growth_tolerance` (relative) for the last `steps` steps, and
  - the median of tokens_per_s (reported on the steps that close a generation cycle) has a bootstrap
    confidence interval at `confidence` (orchestrator/judging/intervals.py: the method, and the
    minimum of cycles, every figure of the report is stated with) whose half-width is at most
    `half_width` of the median.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.judging.intervals import median_interval
from orchestrator.words.outcome import peak_memory
from orchestrator.words.settings import SettleSettings
from trainers.record import STEP, finite_or_none


def warm_up() -> None:
    """Import scipy.stats in a background thread: it takes seconds on a loaded host, and the first
    settled check must not hold the supervisor's loop while the trainer runs on."""
    threading.Thread(target=importlib.import_module, args=("scipy.stats",), daemon=True).start()


def _speeds(steps: Sequence[Mapping[str, Any]]) -> list[float]:
    values = (finite_or_none(row.get(STEP.tokens_per_s)) for row in steps)
    return [value for value in values if value is not None]


def steps_without_growth(steps: Sequence[Mapping[str, Any]], tolerance: float) -> int:
    """Steps since peak memory last rose above its highest earlier reading (by more than `tolerance`,
    relative); the first reading counts as a rise. 0 when no step measured memory."""
    highest: float | None = None
    since = 0
    for row in steps:
        peak, _ = peak_memory(row)
        if peak is None:
            since += highest is not None
            continue
        if highest is None or peak > highest * (1 + tolerance):
            since = 0
        else:
            since += 1
        highest = peak if highest is None else max(highest, peak)
    return since


def median_half_width(values: Sequence[float], confidence: float) -> float | None:
    """The bootstrap confidence interval's half-width of the median, relative to the median; None with
    fewer than intervals.MIN_CYCLES values or a median of 0."""
    estimate = median_interval([values], confidence)
    if estimate.low is None or estimate.high is None or not estimate.median or estimate.median <= 0:
        return None
    return (estimate.high - estimate.low) / 2 / estimate.median


def settled(steps: Sequence[Mapping[str, Any]], settings: SettleSettings, probe_steps: int) -> bool:
    """Whether the trial is settled after its last step (module docstring)."""
    measured = [r for r in steps if not r.get("probe") and int(r.get("step") or 0) > probe_steps]
    if steps_without_growth(measured, settings.growth_tolerance) < settings.steps:
        return False
    width = median_half_width(_speeds(measured), settings.confidence)
    return width is not None and width <= settings.half_width
