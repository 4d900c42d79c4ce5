"""A step's figures from the samples within its window (telemetry.py): energy, utilisation, peaks."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from orchestrator.running._readers import Sample
from trainers.record import SAMPLER_FIELDS
from trainers.record import STEP as F  # the step record's field names

# --- windows --------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def energy_between(samples: Sequence[Sample], t0: float, t1: float) -> tuple[float | None, float]:
    """Energy in joules over [t0, t1] from the power samples (trapezoids, linear interpolation at
    the window's edges; no extrapolation beyond the first or last sample) and the seconds covered."""
    points = [(s.t, s.power_w) for s in samples if s.power_w is not None]
    if not points:
        return None, 0.0
    lo, hi = max(t0, points[0][0]), min(t1, points[-1][0])
    if hi < lo:
        return None, 0.0
    times = [t for t, _ in points]

    def power_at(t: float) -> float:
        i = bisect.bisect_left(times, t)
        if i < len(times) and times[i] == t:
            return points[i][1]
        (ta, pa), (tb, pb) = points[i - 1], points[i]
        return pa + (pb - pa) * (t - ta) / (tb - ta)

    knots = [(lo, power_at(lo))] + [p for p in points if lo < p[0] < hi] + [(hi, power_at(hi))]
    energy = sum((tb - ta) * (pa + pb) / 2 for (ta, pa), (tb, pb) in zip(knots, knots[1:], strict=False))
    return energy, hi - lo


def utilisation(inside: Sequence[Sample], gen: tuple[float, float] | None = None) -> dict[str, Any]:
    """A step's utilisation from its samples: the trainer's own where any sample has it, else the
    whole GPU's; split between the samples within generation `gen` = (start, end) and the rest. A
    figure no sample measured is None, never 0."""
    process = [s for s in inside if s.process_util_pct is not None]
    chosen = process or [s for s in inside if s.gpu_util_pct is not None]
    values = [(s.t, s.util_pct if process else s.gpu_util_pct) for s in chosen]
    in_gen = [v for t, v in values if gen is not None and gen[0] <= t <= gen[1]]
    rest = [v for t, v in values if gen is None or not gen[0] <= t <= gen[1]]
    return {
        F.gpu_util_pct: _mean([v for _, v in values]),
        F.gen_util_pct: _mean(in_gen),
        F.train_util_pct: _mean(rest),
        F.gpu_util_source: ("process" if process else "device") if chosen else None,
    }


_UNSPLIT = {F.gen_util_pct: None, F.train_util_pct: None}


def summarize_window(
    samples: Sequence[Sample], t0: float, t1: float, gen: tuple[float, float] | None = None
) -> dict[str, Any]:
    """Per-step figures for [t0, t1] from time-ordered samples; `gen`, the step's generation's wall
    times, splits its utilisation (utilisation).

    A window with no sample in it (a step shorter than the sampling interval) reports the latest
    sample before t1: the state the step ended in. The trainer's VmHWM counts too: when it rose
    during the window, the trainer reached that RSS inside it, even if no sample caught the moment.
    """
    inside = [s for s in samples if t0 <= s.t <= t1]
    before = [s for s in samples if s.t < t0]
    if not inside:
        inside = [s for s in samples if s.t <= t1][-1:]
    if not inside:
        return {key: None for key in SAMPLER_FIELDS} | {F.samples: 0}
    last = inside[-1]
    rss_peak = max(s.rss_gib for s in inside)
    hwm_start = before[-1].hwm_gib if before else None
    if last.hwm_gib is not None and (hwm_start is None or last.hwm_gib > hwm_start):
        rss_peak = max(rss_peak, last.hwm_gib)
    gpu = [s.gpu_gib for s in inside if s.gpu_gib is not None]
    energy, covered = energy_between(samples, t0, t1)
    powers = [s.power_w for s in inside if s.power_w is not None]
    return {
        F.device_used_gib: last.gpu_gib,
        F.device_peak_gib: max(gpu) if gpu else None,
        F.rss_gib: last.rss_gib,
        F.rss_peak_gib: rss_peak,
        F.rank_device_peak_gib: None,  # one process: RankSamplers fills these for a trial over ranks
        F.rank_rss_peak_gib: None,
        # a window without a sample of its own: the state it ended in, not split by phase
        **(utilisation(inside, gen) if inside[0].t >= t0 else utilisation(inside) | _UNSPLIT),
        # time-weighted where the window is covered by power samples, else their plain mean
        F.power_w: energy / covered if energy is not None and covered > 0 else _mean(powers),
        F.energy_j: energy,
        F.samples: sum(1 for s in samples if t0 <= s.t <= t1),
    }


# --- the sampler ----------------------------------------------------------------------------------
