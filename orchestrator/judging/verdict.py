"""A completed trial's training verdict: does it learn, is it stable, does its memory creep.

Pure functions over a trial's step rows (dicts with docs/schema.md's steps columns), so the recorder,
the supervisor's early stop and `rlsweep report` (for sweeps that predate the columns) judge alike.
Imports nothing of the project but outcome.py.

Verdicts, each a Finding with the steps and figures that triggered it:
  diverged      a NaN or infinite loss or grad_norm; or a kl / grad_norm above median + k x MAD of the
                trial's own preceding steps (with a minimum history)
  memory_creep  after the probe steps, a Theil-Sen slope of per-step peak memory (outcome.peak_memory)
                whose projection reaches the budget (else the GPU's total; nothing on CPU without a
                budget) within max_steps or a set horizon
  no_signal     frac_reward_zero_std at or above a threshold for N steps in a row: no reward variance,
                no advantage, no gradient from the reward
  truncated     clipped_ratio at or above a threshold for N steps in a row: the length limit, not the
                model, decides the reward
The one-word verdict is the first that holds in PRECEDENCE; `ok` when none does, `too_short` when
fewer than min_steps steps followed the probe steps. Reward and length signals are judged over the
non-probe steps that carry them (a step that reuses completions has none; a probe step's completions
were forced to the length limit).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.words.settings import VERDICT as DEFAULTS
from orchestrator.words.settings import VerdictSettings
from orchestrator.words.verdicts import (  # noqa: F401  (the names verdicts are judged by, defined below every job)
    DIVERGED,
    MARK,
    MEMORY_CREEP,
    NO_SIGNAL,
    OK,
    PRECEDENCE,
    STOPPABLE,
    TOO_SHORT,
    TRUNCATED,
    VERDICT_WORDS,
    VERDICTS,
)
from trainers.record import STEP, first_kind, peak_memory

MIB_PER_GIB = 1024.0


@dataclass(frozen=True)
class Finding:
    verdict: str
    step: int  # the step at which it became certain
    detail: str


@dataclass
class TrainingVerdict:
    verdict: str
    findings: list[Finding] = field(default_factory=list)
    judged_steps: int = 0

    @property
    def detail(self) -> str:
        if self.findings:
            return "; ".join(f"{f.verdict}: {f.detail}" for f in self.findings)
        if self.verdict == TOO_SHORT:
            return f"too_short: {self.judged_steps} step(s) after the probe steps, too few to judge"
        return f"ok: {self.judged_steps} steps judged; none of {', '.join(PRECEDENCE)} holds"


def _number(value: Any) -> float | None:
    """A reported figure as a float (NaN and infinities kept: they are what `diverged` looks for)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _steps(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    by_step = {int(r.get("step") or 0): r for r in rows}  # a repeated report of a step counts once
    return [by_step[s] for s in sorted(by_step)]


def _fmt(value: float) -> str:
    return f"{value:.3g}"


# ----------------------------------------------------------------------------------------------
# The detectors: each returns its Finding, or None
# ----------------------------------------------------------------------------------------------
def _sustained(
    steps: list[Mapping[str, Any]], column: str, share: float, n: int, verdict: str, what: str
) -> Finding | None:
    """The first run of n consecutive non-probe steps carrying `column` with a value >= share."""
    run: list[tuple[int, float]] = []
    for row in steps:
        value = _number(row.get(column))
        if row.get("probe") or value is None or math.isnan(value):
            continue
        run = [*run, (int(row["step"]), value)] if value >= share else []
        if len(run) >= n:
            first, last = run[0][0], run[-1][0]
            values = ", ".join(f"{v:.2f}" for _, v in run)
            return Finding(
                verdict, last, f"{column} >= {share:g} for {n} steps in a row (steps {first}-{last}: "
                f"{values}): {what}",
            )  # fmt: skip
    return None


def _diverged(steps: list[Mapping[str, Any]], s: VerdictSettings) -> Finding | None:
    from scipy.stats import median_abs_deviation

    history: dict[str, list[float]] = {STEP.kl: [], STEP.grad_norm: []}
    for row in steps:
        step = int(row["step"])
        for column in (STEP.loss, STEP.grad_norm):
            value = _number(row.get(column))
            if value is not None and not math.isfinite(value):
                return Finding(DIVERGED, step, f"{column} is {value} at step {step}")
        for column, seen in history.items():
            value = _number(row.get(column))
            if value is None or not math.isfinite(value):
                continue
            if len(seen) >= s.spike_min_history:
                median = statistics.median(seen)
                spread = max(float(median_abs_deviation(seen)), s.spike_floor * abs(median))
                limit = median + s.spike_k * spread
                if spread > 0 and value > limit:
                    return Finding(
                        DIVERGED, step, f"{column} {_fmt(value)} at step {step}, over median {_fmt(median)} + "
                        f"{s.spike_k:g} x MAD {_fmt(spread)} = {_fmt(limit)} of steps "
                        f"{int(steps[0]['step'])}-{step - 1}",
                    )  # fmt: skip
            seen.append(value)
    return None


def _memory_creep(
    steps: list[Mapping[str, Any]],
    s: VerdictSettings,
    max_steps: int | None,
    limit_gib: float | None,
    limit_name: str,
) -> Finding | None:
    if limit_gib is None:
        return None
    horizon = s.creep_horizon_steps or max_steps
    if not horizon:
        return None
    peaks = [(int(r["step"]), *peak_memory(r)) for r in steps if not r.get("probe")]
    kind = first_kind(kind for _, _, kind in peaks)
    points = [(step, gib) for step, gib, k in peaks if k == kind]
    if len(points) < s.creep_min_steps:
        return None
    from scipy.stats import theilslopes

    xs, ys = [p[0] for p in points], [p[1] for p in points]
    slope, intercept, low, _ = theilslopes(ys, xs, alpha=s.creep_confidence)
    if not (slope > 0 and low > 0):
        return None
    exhausted = (limit_gib - intercept) / slope
    if exhausted > horizon:
        return None
    last = xs[-1]
    return Finding(
        MEMORY_CREEP, last, f"peak memory ({kind}) grows {slope * MIB_PER_GIB:.1f} MiB/step (Theil-Sen over "
        f"steps {xs[0]}-{last}, {ys[0]:.2f} -> {ys[-1]:.2f} GiB); it reaches the {limit_name} of "
        f"{limit_gib:g} GiB at step {math.ceil(exhausted)}, within {horizon} steps",
    )  # fmt: skip


def _findings(
    steps: list[Mapping[str, Any]],
    s: VerdictSettings,
    max_steps: int | None = None,
    limit: tuple[float | None, str] = (None, ""),
) -> list[Finding]:
    found = [
        _diverged(steps, s),
        _memory_creep(steps, s, max_steps, *limit),
        _sustained(steps, STEP.frac_reward_zero_std, s.no_signal_share, s.no_signal_steps, NO_SIGNAL,
                   "no reward variance in the groups, so no advantage and no gradient from the reward"),
        _sustained(steps, STEP.clipped_ratio, s.truncated_share, s.truncated_steps, TRUNCATED,
                   "completions are cut at max_completion_length, so the length limit decides the reward"),
    ]  # fmt: skip
    return [f for f in found if f is not None]


def memory_limit(budget_gib: float | None, device_total_gib: float | None) -> tuple[float | None, str]:
    """What memory creeps towards: the budget, else the GPU's total; (None, "") on CPU without a budget."""
    if budget_gib:
        return float(budget_gib), "budget"
    if device_total_gib:
        return float(device_total_gib), "GPU's total"
    return None, ""


def judge(
    rows: Sequence[Mapping[str, Any]],
    settings: VerdictSettings = DEFAULTS,
    *,
    max_steps: int | None = None,
    budget_gib: float | None = None,
    device_total_gib: float | None = None,
) -> TrainingVerdict:
    """The verdict of a trial from its step rows. max_steps: the steps it was asked for (memory_creep's
    horizon unless settings.creep_horizon_steps); budget_gib / device_total_gib: what memory creeps to."""
    steps = _steps(rows)
    findings = _findings(steps, settings, max_steps, memory_limit(budget_gib, device_total_gib))
    findings.sort(key=lambda f: PRECEDENCE.index(f.verdict))
    judged = sum(1 for r in steps if not r.get("probe"))
    if findings:
        return TrainingVerdict(findings[0].verdict, findings, judged)
    return TrainingVerdict(TOO_SHORT if judged < settings.min_steps else OK, [], judged)


def stop_check(settings: VerdictSettings) -> Callable[[Sequence[Mapping[str, Any]]], str | None] | None:
    """For the supervisor: a check of the steps so far that returns why to end the trial now (a verdict
    in settings.stop_on holds), else None; None when stop_on is empty."""
    if not settings.stop_on:
        return None

    def check(rows: Sequence[Mapping[str, Any]]) -> str | None:
        found = [f for f in _findings(_steps(rows), settings) if f.verdict in settings.stop_on]
        if not found:
            return None
        first = min(found, key=lambda f: PRECEDENCE.index(f.verdict))
        return f"{first.verdict}: {first.detail}"

    return check
