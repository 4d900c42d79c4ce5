"""The memory model's interval: where a trial's peak lies, at RATE, around its predicted peak.

A family with measured trials: the interval reaches q x predicted either side, plus, for the GiB predicted
beyond the family's measured trials (extrapolated_gib), from half to twice them (reaches), where q is
calibrated on held-out errors (split-conformal):
each measured trial of a family of the same stack left out in turn and predicted from its family's other
trials, its score the part of its error that such a half-width with q = 0 would not cover, over its
prediction; q is the ceil((n + 1) x RATE)-th smallest of the n scores (at least TIGHT_SPREAD, the
run-to-run spread of a peak), so a new trial exchangeable with them falls inside with probability at
least RATE. Below RATE's fewest scores (9 at 90%) q is LOO_FACTOR times the largest. The coefficients'
covariance (Z predictive standard deviations: the prior's spreads where the family's trials say
nothing) bounds the half-width from below. A family without a measured trial has that covariance's
interval alone: the prior's spreads, wide.

Extrapolation: the held-out errors of trials inside the measured range say little of one beyond it
(Unsloth 3B at completion 2048 predicted from trials up to 1024 came out 17% under: its peak grew
1.9 times what the terms gave from 1024 to 2048; TRL 3B at 256 from trials at 128, 12% over: 0.73
times; docs/benchmarks.md), so the GiB a prediction adds beyond the largest measured size of each term
(or takes off below the smallest: Unsloth 3B at 128 from trials at 512-2048 came out 10-14% under) may
be from half to twice what the terms give (EXTRAPOLATION = 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from orchestrator.judging.intervals import TIGHT_SPREAD

RATE = 0.9  # the interval's stated rate: the share of peaks it holds
Z = 2.0  # the covariance's part: predictive standard deviations either side
LOO_FACTOR = 1.5  # below the scores RATE needs: this many times the largest
EXTRAPOLATION = 1.0  # the GiB predicted beyond the measured range, as a share of themselves


def conformal_quantile(scores: Sequence[float], rate: float = RATE) -> float | None:
    """The ceil((n + 1) x rate)-th smallest of n held-out scores (split-conformal: a new score exchangeable
    with them is at most it with probability at least rate); None where that rank is past n (too few)."""
    n = len(scores)
    rank = math.ceil((n + 1) * rate - 1e-9)
    if n == 0 or rank > n:
        return None
    return float(sorted(scores)[rank - 1])


def calibrated_share(scores: Sequence[float], rate: float = RATE) -> float | None:
    """q of the module doc: the conformal quantile of the scores, LOO_FACTOR times the largest where too
    few for it, at least TIGHT_SPREAD; None without a score."""
    if not scores:
        return None
    q = conformal_quantile(scores, rate)
    return max(TIGHT_SPREAD, q if q is not None else LOO_FACTOR * max(scores))


def extrapolated_gib(
    sizes: np.ndarray, coefficients: np.ndarray, smallest: np.ndarray, largest: np.ndarray
) -> tuple[float, float]:
    """(above, below): the GiB a prediction counts beyond the measured range: each term's size above the
    largest measured, and below the smallest, times its coefficient."""
    weights = np.maximum(coefficients, 0.0)
    return float(np.maximum(sizes - largest, 0.0) @ weights), float(
        np.maximum(smallest - sizes, 0.0) @ weights
    )


def reaches(extrapolated: tuple[float, float]) -> tuple[float, float]:
    """(below, above): the GiB the interval reaches below and above the prediction for what it
    extrapolates: the GiB added beyond the largest measured sizes (or taken off below the smallest) may be
    from 1 / (1 + EXTRAPOLATION) to 1 + EXTRAPOLATION times what the terms give (half to twice)."""
    up, down = extrapolated
    short = EXTRAPOLATION / (1 + EXTRAPOLATION)
    return up * short + down * EXTRAPOLATION, up * EXTRAPOLATION + down * short


def score(peak: float, predicted: float, extrapolated: tuple[float, float]) -> float:
    """A held-out trial's score: the part of its error that its extrapolation's reach (reaches) does not
    cover, over its prediction (interval() with this share holds it exactly)."""
    below, above = reaches(extrapolated)
    over = predicted - peak
    return max(0.0, over - below if over > 0 else -over - above) / predicted


def interval(
    peak: float, covariance_half: float, share: float | None, extrapolated: tuple[float, float] | None
) -> tuple[float, float]:
    """(low, high) GiB: peak -+ covariance_half where the family has no measured trial (extrapolated
    None), else reaching as far as the larger of covariance_half and share x peak plus the
    extrapolation's reach (share TIGHT_SPREAD where no held-out score exists yet) either way."""
    if extrapolated is None:
        return max(peak - covariance_half, 0.0), peak + covariance_half
    below, above = reaches(extrapolated)
    calibrated = (share if share is not None else TIGHT_SPREAD) * peak
    low = peak - max(covariance_half, calibrated + below)
    return max(low, 0.0), peak + max(covariance_half, calibrated + above)


# A figure drawn from steps simulated on meta (_simulated.py) carries its stack's error on the GPU rows of
# its architecture family that checked it (trainers.stacks' StackMemory.simulated_error); a family no GPU
# row of the stack measured, the error across the families measured, one left out (unseen_error); with
# fewer than two families measured, this low end and no upper bound (the answer can then be "does not
# fit" or "uncertain", never "fits").
UNCHECKED_ERROR = (0.85, math.inf)


def architecture(model: str) -> str | None:
    """A model's architecture family, the family simulated errors are kept by: its config's model_type;
    None where no config.json is found here."""
    from trainers.models import model_config

    try:
        return model_config(model).config.get("model_type")
    except ValueError:
        return None


def unseen_error(ranges: Sequence[tuple[float, float]], rate: float = RATE) -> tuple[float, float] | None:
    """(low, high): the measured over simulated peak to expect of a family no GPU row measured, from the
    families that were measured (`ranges`: each one's (low, high) over its rows), leaving one family out:
    each family's score is how far its range reaches past the others' together; the union of every range
    is widened by q either way, q the scores' conformal quantile (conformal_quantile: a family
    exchangeable with them falls inside with probability at least `rate`), LOO_FACTOR times the largest
    score where too few for it (from 2 to 8 families at 90%: not a 90% range). None below two families:
    one family says nothing of another."""
    if len(ranges) < 2:
        return None
    scores = []
    for i, (low, high) in enumerate(ranges):
        others = ranges[:i] + ranges[i + 1 :]
        scores.append(max(0.0, min(o[0] for o in others) - low, high - max(o[1] for o in others)))
    q = conformal_quantile(scores, rate)
    q = LOO_FACTOR * max(scores) if q is None else q
    return min(r[0] for r in ranges) - q, max(r[1] for r in ranges) + q


def simulated_error(stack: str, family: str | None) -> tuple[float, float, str]:
    """(low, high, what it is): the measured peak over the simulated one to expect of `stack`'s step on
    a model of `family` (architecture()), and the words that name that range."""
    from trainers.stacks import STACKS

    entry = STACKS.get(stack)
    seen = {f: (low, high, n) for f, low, high, n in (entry.memory.simulated_error if entry else ())}
    if family in seen:
        low, high, n = seen[family]
        return low, high, f"the simulator's error on {n} {family} GPU rows"
    unseen = unseen_error([(low, high) for low, high, _ in seen.values()])
    if unseen is not None:
        return (
            *unseen,
            f"no {family or 'such'} GPU row: the simulator's error across {len(seen)} families, one left out",
        )
    measured = ", ".join(seen) or "none"
    return (
        *UNCHECKED_ERROR,
        f"no {family or 'such'} GPU row, too few families measured to bound it (measured: {measured})",
    )


def simulated_interval(
    stack: str, peak: float, residual: float, family: str | None = None
) -> tuple[float, float]:
    """(low, high) GiB of a figure drawn from simulated steps: the simulator's error range on GPU rows
    (simulated_error), widened by how far the family's fit missed its own simulated shapes (`residual`,
    a share of them)."""
    low, high, _ = simulated_error(stack, family)
    return max(peak * (low - residual), 0.0), peak * (high + residual)
