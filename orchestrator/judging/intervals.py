"""Intervals: the one method behind every throughput figure, speed ratio and ranking rlsweep states.

A throughput figure is the median tokens/s over a configuration's measured generation cycles (the step
rows' `tokens_per_s`, probe cycles left out). Its 95% interval is a percentile bootstrap of that median
(scipy.stats.bootstrap, RESAMPLES resamples, seed SEED, so a figure reads the same on every rebuild).
Where a configuration was repeated over seeds, the cycles are resampled within each seed (a stratified
bootstrap: every resample keeps each seed's number of cycles) and the median is taken over all seeds'
cycles together; seeds themselves are not resampled, since two or three seeds give an interval of two
or three points. A ratio (one stack over another, sweep B over sweep A) resamples both sides'
cycles independently (their cycles are not paired) and takes the ratio of the two medians.

Memory has its uncertainty too: the same configuration's peak moves between runs (seeds, allocator
timing, the sampler's moment). A fit whose margin to the budget is under TIGHT_SPREAD of its peak, the
spread of peaks measured over repeated runs, reads "tight": another run may not fit. A ratio of two
peaks carries the same spread (memory_ratio_interval): each side's peak may move by its relative spread
(the larger of the spread its own repeats show and TIGHT_SPREAD) either way, and the ratio's range is
the extremes of the two; a range that covers 1 reads "no clear difference". With one run a side, that is
about ±5%: no bootstrap can be taken over one peak, so the range is the measured spread, not a 95% CI.

Below MIN_CYCLES measured cycles a figure has no interval and a ratio reads "too few cycles to
compare"; a ratio whose interval covers 1 reads "no clear difference". The settled stop
(orchestrator/running/settle.py) judges its median with the same bootstrap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 999
SEED = 0
# The fewest cycles a median's interval is stated from. A percentile bootstrap interval of a median
# lies within the range of the readings, and the range of n readings covers the true median with
# probability 1 - 2^(1-n): 75% for 3, 87.5% for 4, 93.75% for 5. Below 5 no 95% interval can be
# honest, so a figure from fewer cycles says so instead.
MIN_CYCLES = 5

# The run-to-run spread of one configuration's peak, relative to the peak: the largest (max - min) / mean
# over 3 seeds of 2 configurations on both stacks was 2.3% (Unsloth, K=24: 0.827-0.846 GiB RSS), measured
# in docs/benchmarks.md ("Run-to-run spread of peaks"); rounded up. A fit whose margin is under this share
# of its peak is within what a rerun moves the peak by.
TIGHT_SPREAD = 0.025

TOO_FEW = "too few cycles to compare"
TIGHT = "tight"
NO_CLEAR = "no clear difference"


def _groups(groups: Sequence[Sequence[float]]) -> list[np.ndarray]:
    """Each group's finite readings as an array; groups left empty dropped."""
    arrays = [np.asarray([v for v in g if v is not None and math.isfinite(v)], dtype=float) for g in groups]
    return [a for a in arrays if a.size]


def _pooled_median(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(np.concatenate(samples, axis=axis), axis=axis)


def _bootstrap(samples: list[np.ndarray], statistic, confidence: float) -> tuple[float, float]:
    from scipy.stats import bootstrap

    interval = bootstrap(
        samples,
        statistic,
        vectorized=True,
        paired=False,
        confidence_level=confidence,
        n_resamples=RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(SEED),
    ).confidence_interval
    return float(interval.low), float(interval.high)


@dataclass(frozen=True)
class Estimate:
    """A median over measured cycles with its interval (low, high: None below MIN_CYCLES cycles)."""

    median: float | None
    low: float | None
    high: float | None
    cycles: int
    seeds: int

    @property
    def enough(self) -> bool:
        return self.cycles >= MIN_CYCLES

    def words(self, unit: str = "tokens/s") -> str:
        """'486 tokens/s (95% CI 470–501; 12 cycles, 2 seeds)', or the median with 'too few for an
        interval'; '—' when nothing was measured. unit "" leaves the unit to a table's header."""
        if self.median is None:
            return "—"
        sample = f"{self.cycles} cycle{'s' * (self.cycles != 1)}" + (
            f", {self.seeds} seeds" if self.seeds > 1 else ""
        )
        figure = f"{_num(self.median)} {unit}".rstrip()
        if not self.enough:
            return f"{figure} ({sample}: too few for an interval)"
        return f"{figure} (95% CI {_num(self.low)}–{_num(self.high)}; {sample})"


def median_interval(groups: Sequence[Sequence[float]], confidence: float = CONFIDENCE) -> Estimate:
    """The median over every group's readings (one group per seed) and its bootstrap interval,
    resampling within each group (module doc)."""
    samples = _groups(groups)
    cycles = sum(a.size for a in samples)
    if not cycles:
        return Estimate(None, None, None, 0, 0)
    pooled = np.concatenate(samples)
    middle = float(np.median(pooled))
    if cycles < MIN_CYCLES:
        return Estimate(middle, None, None, cycles, len(samples))
    if np.all(pooled == pooled[0]):
        return Estimate(middle, middle, middle, cycles, len(samples))
    low, high = _bootstrap(samples, _pooled_median, confidence)
    return Estimate(middle, low, high, cycles, len(samples))


@dataclass(frozen=True)
class Ratio:
    """A ratio of two medians (numerator over denominator) with its interval; value None where either
    side measured nothing, low and high None where either side has fewer than MIN_CYCLES cycles."""

    value: float | None
    low: float | None
    high: float | None
    cycles: tuple[int, int]  # (numerator's, denominator's)

    @property
    def enough(self) -> bool:
        return min(self.cycles) >= MIN_CYCLES

    @property
    def clear(self) -> bool:
        """Whether the interval excludes 1: the two sides differ beyond what their cycles' spread explains."""
        return self.low is not None and self.high is not None and not self.low <= 1 <= self.high

    def words(self) -> str:
        """'1.66× (95% CI 1.40–1.93×)', 'no clear difference (95% CI 0.85–1.21×)', 'too few cycles to
        compare (1 and 1 cycles)'; '—' when a side measured nothing."""
        if self.value is None:
            return "—"
        if not self.enough:
            return f"{TOO_FEW} ({self.cycles[0]} and {self.cycles[1]} cycles)"
        interval = f"95% CI {self.low:.2f}–{self.high:.2f}×"
        return f"{self.value:.2f}× ({interval})" if self.clear else f"{NO_CLEAR} ({interval})"


def ratio_interval(
    numerator: Sequence[Sequence[float]],
    denominator: Sequence[Sequence[float]],
    confidence: float = CONFIDENCE,
) -> Ratio:
    """median(numerator) / median(denominator), each side's readings grouped by seed, with its bootstrap
    interval: both sides resampled independently, within each seed (module doc)."""
    top, bottom = _groups(numerator), _groups(denominator)
    cycles = (sum(a.size for a in top), sum(a.size for a in bottom))
    if not all(cycles):
        return Ratio(None, None, None, cycles)
    below = float(np.median(np.concatenate(bottom)))
    if below <= 0:
        return Ratio(None, None, None, cycles)
    value = float(np.median(np.concatenate(top))) / below
    if min(cycles) < MIN_CYCLES:
        return Ratio(value, None, None, cycles)
    split = len(top)

    def ratio(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        return _pooled_median(*samples[:split], axis=axis) / _pooled_median(*samples[split:], axis=axis)

    if all(np.all(a == a[0]) for a in (np.concatenate(top), np.concatenate(bottom))):
        return Ratio(value, value, value, cycles)
    low, high = _bootstrap([*top, *bottom], ratio, confidence)
    return Ratio(value, low, high, cycles)


@dataclass(frozen=True)
class MemoryRatio:
    """One peak over another, with the range the run-to-run spread of each allows (module doc)."""

    value: float | None
    low: float | None
    high: float | None
    runs: tuple[int, int]  # peaks measured on each side (numerator's, denominator's)

    @property
    def clear(self) -> bool:
        """Whether the range excludes 1: the peaks differ beyond what a rerun moves them by."""
        return self.low is not None and self.high is not None and not self.low <= 1 <= self.high

    def words(self) -> str:
        """'0.62× (spread 0.59–0.65×)', 'no clear difference (spread 0.97–1.07×)'; '—' without a peak."""
        if self.value is None:
            return "—"
        spread = f"spread {self.low:.2f}–{self.high:.2f}×"
        return f"{self.value:.2f}× ({spread})" if self.clear else f"{NO_CLEAR} ({spread})"


def peak_spread(peaks: Sequence[float]) -> float:
    """The relative run-to-run spread of one configuration's peaks: (max - min) / mean of its repeats,
    never below TIGHT_SPREAD (two or three repeats can agree by chance)."""
    values = [p for p in peaks if p is not None and math.isfinite(p)]
    if len(values) < 2:
        return TIGHT_SPREAD
    return max(TIGHT_SPREAD, (max(values) - min(values)) / (sum(values) / len(values)))


def memory_ratio_interval(numerator: Sequence[float], denominator: Sequence[float]) -> MemoryRatio:
    """max(numerator) / max(denominator), the peaks of each side's repeats (the peak a configuration is
    reported with is its highest), and the range when each may move by its peak_spread either way."""
    top = [p for p in numerator if p is not None and math.isfinite(p)]
    bottom = [p for p in denominator if p is not None and math.isfinite(p)]
    runs = (len(top), len(bottom))
    if not top or not bottom or max(bottom) <= 0:
        return MemoryRatio(None, None, None, runs)
    a, b = max(top), max(bottom)
    sa, sb = peak_spread(top), peak_spread(bottom)
    return MemoryRatio(a / b, a * (1 - sa) / (b * (1 + sb)), a * (1 + sa) / (b * (1 - sb)), runs)


@dataclass(frozen=True)
class Margin:
    """A peak against its budget: gib = budget - peak (negative: over), pct = gib / budget x 100,
    spread_gib = the run-to-run spread expected of that peak (TIGHT_SPREAD x peak)."""

    gib: float
    pct: float
    spread_gib: float

    @property
    def tight(self) -> bool:
        """Fits, by less than the run-to-run spread of its peak."""
        return 0 <= self.gib < self.spread_gib

    def words(self) -> str:
        """'tight: 0.02 GiB (0.25%) to spare', '2.00 GiB (25%) to spare', 'over by 0.50 GiB (6.2%)'."""
        amount = f"{abs(self.gib):.2f} GiB ({abs(self.pct):.2g}%)"
        if self.gib < 0:
            return f"over by {amount}"
        return f"{TIGHT}: {amount} to spare" if self.tight else f"{amount} to spare"


def margin(peak_gib: float | None, budget_gib: float | None) -> Margin | None:
    """The peak's margin to the budget; None without either (or a budget of 0)."""
    if peak_gib is None or not budget_gib or not math.isfinite(peak_gib) or not math.isfinite(budget_gib):
        return None
    gib = budget_gib - peak_gib
    return Margin(gib, gib / budget_gib * 100, TIGHT_SPREAD * peak_gib)


def tie_ranks(estimates: Sequence[Estimate]) -> list[int | None]:
    """Ranks for estimates listed fastest first: an estimate whose interval overlaps that of the first of
    the current group shares its rank (a tie); the next one that does not starts a new rank, its place
    among the ranked (1-based). None for an estimate without an interval: nothing ranks it."""
    ranks: list[int | None] = []
    leader: Estimate | None = None
    rank = place = 0
    for estimate in estimates:
        if estimate.low is None or estimate.high is None:
            ranks.append(None)
            continue
        place += 1
        if leader is None or not (estimate.high >= leader.low and estimate.low <= leader.high):
            leader, rank = estimate, place
        ranks.append(rank)
    return ranks


def _num(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"
