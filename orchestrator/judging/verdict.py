"""A trial's training verdict: does it learn, is it stable, does its memory creep. A completed trial is
judged on its steps; a timeout (killed at its wall-clock limit) on the steps it kept, and says so
(judge_trial); no other status is judged.

Pure functions over a trial's step rows (dicts with docs/schema.md's steps columns), so the recorder,
the supervisor's early stop and `rlsweep report` (for sweeps that predate the columns) judge alike.
Imports nothing of the project but outcome.py.

Verdicts, each a Finding with the steps and figures that triggered it:
  diverged      a NaN or infinite loss, grad_norm or update_ratio; an update_ratio at update_ratio_max or
                more (the step rewrote the weights it trains); or a kl / grad_norm above median + k x MAD of the
                trial's own preceding steps (with a minimum history)
  memory_creep  after the probe steps, a Theil-Sen slope of per-step peak memory (outcome.peak_memory)
                whose projection reaches the budget (else the GPU's total; nothing on CPU without a
                budget) within max_steps or a set horizon
  no_signal     frac_reward_zero_std at or above a threshold for N steps in a row: no reward variance,
                no advantage, no gradient from the reward
  truncated     clipped_ratio at or above a threshold for N steps in a row: the length limit, not the
                model, decides the reward
  collapsed     the reward rises (as `learning` judges it) while held-out accuracy falls (the interval
                of last minus first lies below zero) or completion entropy falls sharply (the median
                entropy of the last collapse_window_steps judged steps at most (1 - collapse_entropy_drop)
                x that of the first ones); or, rising reward or not, the completions converge to one
                text: distinct_completion_share at or below collapse_distinct_share for
                collapse_distinct_steps steps in a row
  learning      the positive verdict: the reward's trend over the judged steps rises, its interval
                wholly above zero, and where held-out accuracy was measured at least twice its last
                reading minus its first, with its interval, lies wholly above zero too (a reward that
                rises while held-out accuracy does not is not evidence the model learns the task)
The one-word verdict is the first that holds in PRECEDENCE: the problems (PROBLEMS) first, then
`learning`; `ok` when none holds (nothing wrong, and no evidence of learning), `too_short` when fewer
than min_steps steps followed the probe steps. Reward and length signals are judged over the non-probe
steps that carry them (a step that reuses completions has none; a probe step's completions were forced
to the length limit).

The reward's trend is a Theil-Sen slope (scipy.stats.theilslopes) with its confidence interval at
learning_confidence, fitted over at least learning_min_steps steps: a step's mean reward is a mean of
few 0/1-like rewards, heavy-tailed and prone to single-step jumps, and the median of pairwise slopes
is not moved by a few outlying steps the way an OLS slope and its t-interval (which assume normal
residuals) are. Its interval, like Sen's, treats the steps as independent. Held-out accuracy is a
proportion over eval_prompts prompts (prompts, not samples, are counted: a prompt's k samples are not
independent); the difference of the last and the first reading has Newcombe's hybrid score interval
(method 10: from the two readings' Wilson intervals), which treats them as independent samples: the
same prompts are evaluated each time, and with the positive correlation that brings the interval is
wider than a paired one, so the verdict errs towards not claiming a change.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.words.outcome import JUDGED_STATUSES, TIMEOUT, cut_short
from orchestrator.words.settings import VERDICT as DEFAULTS
from orchestrator.words.settings import VerdictSettings
from orchestrator.words.verdicts import (  # noqa: F401  (the names verdicts are judged by, defined below every job)
    COLLAPSED,
    DIVERGED,
    LEARNING,
    MARK,
    MEMORY_CREEP,
    NO_SIGNAL,
    OK,
    PRECEDENCE,
    PROBLEMS,
    STOPPABLE,
    TOO_SHORT,
    TRUNCATED,
    VERDICT_WORDS,
    VERDICTS,
)
from trainers.record import STEP, first_kind, held_out_evals, peak_memory, wilson_interval

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
    # What was measured towards `learning` where it does not hold (e.g. a reward that rises while
    # held-out accuracy does not show it): said after an `ok` or `too_short`.
    notes: list[str] = field(default_factory=list)
    # What the verdict was judged on where the trial did not run to its end (judge_trial): said last.
    basis: str = ""
    # A too_short verdict's fix: the steps it had that were probes, and the judged steps it needs.
    probe_steps: int = 0
    min_steps: int = 0

    @property
    def detail(self) -> str:
        if self.findings:
            said = [f"{f.verdict}: {f.detail}" for f in self.findings]
        elif self.verdict == TOO_SHORT:
            said = [
                f"too_short: {self.judged_steps} step(s) after the probe steps, too few to judge",
                *self.notes,
            ]
            if self.min_steps > self.judged_steps:
                said[0] += (
                    f" (verdict.min_steps {self.min_steps}: {self.probe_steps + self.min_steps} steps with its "
                    f"{self.probe_steps} probe step(s))"
                )
        else:
            problems = ", ".join(PROBLEMS)
            said = [
                f"ok: {self.judged_steps} steps judged; none of {problems} holds, and {LEARNING} is not shown"
            ]
            said += self.notes
        return "; ".join([*said, self.basis] if self.basis else said)


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
    steps: list[Mapping[str, Any]],
    column: str,
    share: float,
    n: int,
    verdict: str,
    what: str,
    at_most: bool = False,
) -> Finding | None:
    """The first run of n consecutive non-probe steps carrying `column` with a value >= share (<= share
    when at_most)."""
    run: list[tuple[int, float]] = []
    for row in steps:
        value = _number(row.get(column))
        if row.get("probe") or value is None or math.isnan(value):
            continue
        run = [*run, (int(row["step"]), value)] if (value <= share if at_most else value >= share) else []
        if len(run) >= n:
            first, last = run[0][0], run[-1][0]
            values = ", ".join(f"{v:.2f}" for _, v in run)
            return Finding(
                verdict, last, f"{column} {'<=' if at_most else '>='} {share:g} for {n} steps in a row "
                f"(steps {first}-{last}: {values}): {what}",
            )  # fmt: skip
    return None


def _diverged(steps: list[Mapping[str, Any]], s: VerdictSettings) -> Finding | None:
    from scipy.stats import median_abs_deviation

    history: dict[str, list[float]] = {STEP.kl: [], STEP.grad_norm: []}
    for row in steps:
        step = int(row["step"])
        for column in (STEP.loss, STEP.grad_norm, STEP.update_ratio):
            value = _number(row.get(column))
            if value is not None and not math.isfinite(value):
                return Finding(DIVERGED, step, f"{column} is {value} at step {step}")
        ratio = _number(row.get(STEP.update_ratio))
        if ratio is not None and ratio >= s.update_ratio_max:
            return Finding(
                DIVERGED, step, f"update_ratio {_fmt(ratio)} at step {step}: the step changed the trained weights by "
                f"{ratio:.0%} of their size (limit {s.update_ratio_max:g}); the learning rate is far too high",
            )  # fmt: skip
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


@dataclass(frozen=True)
class Trend:
    """The reward's Theil-Sen slope per step over the judged steps, with its interval."""

    slope: float
    low: float
    high: float
    first: int  # the steps it was fitted over
    last: int
    confidence: float

    @property
    def rises(self) -> bool:
        return self.low > 0

    def words(self) -> str:
        return (
            f"reward {10 * self.slope:+.3g} per 10 steps ({self.confidence:.0%} interval {10 * self.low:+.3g} "
            f"to {10 * self.high:+.3g}; Theil-Sen over steps {self.first}-{self.last})"
        )


@dataclass(frozen=True)
class AccuracyChange:
    """Held-out accuracy at the first and the last evaluation, and the difference's interval."""

    before: float
    after: float
    before_step: int
    after_step: int
    prompts: tuple[float, float]
    low: float
    high: float
    confidence: float

    @property
    def difference(self) -> float:
        return self.after - self.before

    def words(self) -> str:
        n1, n2 = self.prompts
        prompts = f"{n1:g} prompts each" if n1 == n2 else f"{n1:g} and {n2:g} prompts"
        return (
            f"held-out accuracy {self.before:.2f} -> {self.after:.2f} (steps {self.before_step} -> "
            f"{self.after_step}, {prompts}), {self.difference:+.2f} ({self.confidence:.0%} interval "
            f"{self.low:+.2f} to {self.high:+.2f})"
        )


def newcombe_interval(
    before: float, n_before: float, after: float, n_after: float, confidence: float = 0.95
) -> tuple[float, float]:
    """Newcombe's hybrid score interval (method 10) of after - before, two proportions over n_before and
    n_after independent trials, from each one's Wilson interval."""
    low1, high1 = wilson_interval(before, n_before, confidence)
    low2, high2 = wilson_interval(after, n_after, confidence)
    difference = after - before
    return (
        difference - math.sqrt((after - low2) ** 2 + (high1 - before) ** 2),
        difference + math.sqrt((high2 - after) ** 2 + (before - low1) ** 2),
    )


def reward_trend(steps: list[Mapping[str, Any]], s: VerdictSettings) -> Trend | None:
    """The reward's trend over the non-probe steps that carry a reward; None under learning_min_steps."""
    points = [
        (int(r["step"]), value)
        for r in steps
        if not r.get("probe")
        and (value := _number(r.get(STEP.reward_mean))) is not None
        and math.isfinite(value)
    ]
    if len(points) < s.learning_min_steps:
        return None
    from scipy.stats import theilslopes

    xs, ys = [p[0] for p in points], [p[1] for p in points]
    slope, _, low, high = theilslopes(ys, xs, alpha=s.learning_confidence)
    return Trend(float(slope), float(low), float(high), xs[0], xs[-1], s.learning_confidence)


def accuracy_change(
    steps: list[Mapping[str, Any]], s: VerdictSettings, before: tuple[float, float] | None = None
) -> AccuracyChange | None:
    """Held-out accuracy at the first evaluation against the last; None under two evaluations. before:
    (pass@1, prompts) of the evaluation before the first step (trials.parquet's eval_before_*), which is
    then the first, at step 0."""
    evals = ([(0, *before)] if before is not None else []) + held_out_evals(steps)
    if len(evals) < 2:
        return None
    (step1, p1, n1), (step2, p2, n2) = evals[0], evals[-1]
    low, high = newcombe_interval(p1, n1, p2, n2, s.learning_confidence)
    return AccuracyChange(p1, p2, step1, step2, (n1, n2), low, high, s.learning_confidence)


def _learning(
    steps: list[Mapping[str, Any]], trend: Trend | None, change: AccuracyChange | None
) -> tuple[Finding | None, list[str]]:
    """`learning`'s Finding, or None with notes on what was measured towards it."""
    if trend is None:
        return None, []
    if not trend.rises:
        return None, [f"{trend.words()}: no rising reward shown"]
    if change is None:
        evaluated = len(held_out_evals(steps))
        return Finding(
            LEARNING, trend.last, f"{trend.words()}; held-out accuracy measured {evaluated} time(s), under the two "
            "a change needs, so judged on the reward alone",
        ), []  # fmt: skip
    if change.low > 0:
        return Finding(LEARNING, max(trend.last, change.after_step), f"{trend.words()}; {change.words()}"), []
    return None, [f"{trend.words()}, but {change.words()}: held-out accuracy does not show it"]


def _entropy_drop(steps: list[Mapping[str, Any]], s: VerdictSettings) -> tuple[str, int] | None:
    """Words and step for completion entropy falling by collapse_entropy_drop or more: the median of the
    last collapse_window_steps judged steps against that of the first ones."""
    points = [
        (int(r["step"]), value)
        for r in steps
        if not r.get("probe") and (value := _number(r.get(STEP.entropy))) is not None and math.isfinite(value)
    ]
    w = s.collapse_window_steps
    if len(points) < 2 * w:
        return None
    early, late = points[:w], points[-w:]
    before, after = statistics.median(v for _, v in early), statistics.median(v for _, v in late)
    if not (before > 0 and after <= (1 - s.collapse_entropy_drop) * before):
        return None
    return (
        f"entropy {before:.3g} -> {after:.3g} nats (medians of steps {early[0][0]}-{early[-1][0]} and "
        f"{late[0][0]}-{late[-1][0]}), {after / before - 1:+.0%}, a fall of {s.collapse_entropy_drop:.0%} or more",
        late[-1][0],
    )


def _collapsed(
    steps: list[Mapping[str, Any]], s: VerdictSettings, trend: Trend | None, change: AccuracyChange | None
) -> list[Finding | None]:
    found: list[Finding | None] = []
    if trend is not None and trend.rises:
        if change is not None and change.high < 0:
            step = max(trend.last, change.after_step)
            found.append(Finding(COLLAPSED, step, f"{trend.words()} while {change.words()}"))
        # A policy that grows sure of right answers loses entropy too: a fall counts only where held-out
        # accuracy does not show a rise (SmolLM2 learning one-digit sums: entropy -90%, accuracy +58 points).
        accuracy_rose = change is not None and change.low > 0
        dropped = None if accuracy_rose else _entropy_drop(steps, s)
        if dropped is not None:
            words, step = dropped
            found.append(Finding(COLLAPSED, max(trend.last, step), f"{trend.words()} while {words}"))
    found.append(
        _sustained(steps, STEP.distinct_completion_share, s.collapse_distinct_share, s.collapse_distinct_steps,
                   COLLAPSED, "the completions converge to one text", at_most=True)
    )  # fmt: skip
    return found


def _judged(
    steps: list[Mapping[str, Any]],
    s: VerdictSettings,
    max_steps: int | None = None,
    limit: tuple[float | None, str] = (None, ""),
    before: tuple[float, float] | None = None,
) -> tuple[list[Finding], list[str]]:
    """Every verdict that holds, and the notes on learning where it does not."""
    trend, change = reward_trend(steps, s), accuracy_change(steps, s, before)
    learning, notes = _learning(steps, trend, change)
    found = [
        _diverged(steps, s),
        _memory_creep(steps, s, max_steps, *limit),
        _sustained(steps, STEP.frac_reward_zero_std, s.no_signal_share, s.no_signal_steps, NO_SIGNAL,
                   "no reward variance in the groups, so no advantage and no gradient from the reward"),
        _sustained(steps, STEP.clipped_ratio, s.truncated_share, s.truncated_steps, TRUNCATED,
                   "completions are cut at max_completion_length, so the length limit decides the reward"),
        *_collapsed(steps, s, trend, change),
        learning,
    ]  # fmt: skip
    return [f for f in found if f is not None], notes


def _findings(
    steps: list[Mapping[str, Any]],
    s: VerdictSettings,
    max_steps: int | None = None,
    limit: tuple[float | None, str] = (None, ""),
) -> list[Finding]:
    return _judged(steps, s, max_steps, limit)[0]


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
    eval_before: tuple[float | None, float | None] = (None, None),
) -> TrainingVerdict:
    """The verdict of a trial from its step rows. max_steps: the steps it was asked for (memory_creep's
    horizon unless settings.creep_horizon_steps); budget_gib / device_total_gib: what memory creeps to;
    eval_before: held-out (pass@1, prompts) before the first step, where measured (the baseline)."""
    steps = _steps(rows)
    accuracy, prompts = eval_before
    before = (accuracy, prompts) if accuracy is not None and prompts is not None else None
    findings, notes = _judged(steps, settings, max_steps, memory_limit(budget_gib, device_total_gib), before)
    findings.sort(key=lambda f: PRECEDENCE.index(f.verdict))
    judged = sum(1 for r in steps if not r.get("probe"))
    if findings:
        return TrainingVerdict(findings[0].verdict, findings, judged)
    if judged < settings.min_steps:
        probes = len(steps) - judged
        return TrainingVerdict(TOO_SHORT, [], judged, notes, probe_steps=probes, min_steps=settings.min_steps)
    return TrainingVerdict(OK, [], judged, notes)


def judge_trial(
    status: str | None, rows: Sequence[Mapping[str, Any]], settings: VerdictSettings = DEFAULTS, **how: Any
) -> TrainingVerdict | None:
    """The verdict of a trial by its status (`how`: judge's keyword arguments): a completed trial on its
    steps; a timeout on the steps it kept before the time limit, its detail saying how many of max_steps;
    None (not judged) for any other status, and for a timeout that kept no step."""
    if status not in JUDGED_STATUSES:
        return None
    kept = len(_steps(rows))
    if status == TIMEOUT and not kept:
        return None
    verdict = judge(rows, settings, **how)
    if status == TIMEOUT:
        verdict.basis = f"judged on {cut_short(kept, how.get('max_steps'))}"
    return verdict


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
