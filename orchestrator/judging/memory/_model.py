"""MemoryModel: per family, the analytical terms (orchestrator/judging/memory/_terms.py) times coefficients
fitted on the trials measured so far (orchestrator/judging/memory/_fit.py); Prediction: one trial's predicted
peak with its interval, or the reason there is none."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator.judging.memory._architecture import UnknownArchitecture
from orchestrator.judging.memory._explain import TermLine, formulas
from orchestrator.judging.memory._family import (  # noqa: F401 - family_label, spec_of: the package's face
    FAMILY,
    SIMULATED,
    _row_spec,
    family_label,
    family_of,
    spec_of,
    superseded_dropped,
)
from orchestrator.judging.memory._fit import fit as fit_coefficients
from orchestrator.judging.memory._fit import predictive_sd
from orchestrator.judging.memory._interval import (
    Z,
    architecture,
    calibrated_share,
    extrapolated_gib,
    interval,
    score,
    simulated_interval,
)
from orchestrator.judging.memory._terms import (
    PARTS,
    TERMS,
    Shape,
    device_of,
    face,
    prior,
    terms,
    unsized_vllm_pool,
)
from orchestrator.words.outcome import COMPLETED, GPU, OOM, PEAK_SOURCES, RSS, TIMEOUT, TORCH, peak_memory
from trainers.models import bundled_models, model_config, nearest_twin
from trainers.record import finite_or_none
from trainers.trial import TrialSpec

MEASURES = tuple(kind for kind, _, _ in PEAK_SOURCES)
MEASURE_COLUMNS = {kind: column for kind, column, _ in PEAK_SOURCES}
PRIOR, FITTED = "prior", "fitted"
FITS, DOES_NOT_FIT, UNCERTAIN, UNKNOWN = "fits", "does not fit", "uncertain", "unknown"
# The interval (orchestrator/judging/memory/_interval.py): at RATE, calibrated on the held-out errors of
# the measured trials of the spec's stack, widened by what it extrapolates, at least the coefficients'
# covariance's Z standard deviations. The worst leave-one-out error is reported from LOO_FROM trials.
LOO_FROM = 3
# A family of more trials than this takes its worst leave-one-out error over this many of them, evenly
# spaced in its order (all of them up to here): each one left out is a fit of its own, and a sweep refits
# after every trial, so leaving out every one of n trials cost n fits per trial, n^2 over a sweep.
LOO_MAX = 40
# Colocated vLLM without a budget reserves vllm_gpu_memory_utilization of a card (or node) the model
# does not know: no term sizes its pool, so such a family is predicted only from this many measured
# trials of its own.
FAST_INFERENCE_TRIALS = 2
# MemoryModel.calibrate calibrates a term where the rows pin it: its coefficient's standard deviation after
# the pooled fit at most this fraction of its face spread (round 1's H100 rows: the baseline 0.28, TRL's
# logits 0.13, Unsloth's logit chunk 0.36; the weights, LoRA, KV cache and activations 0.84 or more); the
# others are held at their face values by a spread of HELD_SPREAD.
PINNED = 0.5
HELD_SPREAD = 1e-6


@dataclass(frozen=True)
class Prediction:
    """A trial's predicted peak (GiB) of `measure` with its interval, or `unknown` with the reason."""

    peak_gib: float | None
    low_gib: float | None
    high_gib: float | None
    measure: str
    n_fitted: int
    basis: str  # "prior" | "fitted" | "simulated"
    unknown: str | None = None
    terms: dict[str, float] = field(default_factory=dict)  # GiB of static, generation, training
    # GiB of the prediction beyond its family's measured range (above the largest, below the smallest
    # measured size of each term: _interval.extrapolated_gib); None where the family measured no trial
    beyond_gib: float | None = None

    def verdict(self, budget_gib: float | None) -> str:
        """fits (the whole interval within the budget), does not fit (its lower bound above it),
        uncertain (the interval crosses it, or no budget), unknown (no prediction)."""
        if self.unknown is not None:
            return UNKNOWN
        if budget_gib is None:
            return UNCERTAIN
        if self.low_gib > budget_gib:
            return DOES_NOT_FIT
        if self.high_gib <= budget_gib:
            return FITS
        return UNCERTAIN

    def describe(self) -> str:
        """'predicted 17.9 GiB (16.8-19.0)', or 'unknown: <reason>'."""
        if self.unknown is not None:
            return f"unknown: {self.unknown}"
        said = SIMULATED if self.basis == SIMULATED else "predicted"
        return f"{said} {gib(self.peak_gib)} GiB ({gib(self.low_gib)}-{gib(self.high_gib)})"


def gib(value: float) -> str:
    """A GiB figure with three significant digits where they matter: 17.9, 0.84, 141."""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


@dataclass(frozen=True)
class FamilyFit:
    """One family's fit: its knobs, the measured (and oom) trials it saw, its coefficients per term,
    and the GiB of each part at its largest measured trial (where the memory goes)."""

    family: dict[str, Any]
    label: str
    n_fitted: int
    n_censored: int
    coefficients: dict[str, float]
    terms: dict[str, float]
    loo_worst: float | None  # worst leave-one-out error, fraction of the peak (from LOO_FROM trials)


def loo_indices(n: int) -> list[int]:
    """The trials a family of n leaves out one at a time: all of them up to LOO_MAX, else LOO_MAX
    evenly spaced (the first and the last among them)."""
    if n <= LOO_MAX:
        return list(range(n))
    return sorted({round(i * (n - 1) / (LOO_MAX - 1)) for i in range(LOO_MAX)})


def model_shape(model: str) -> tuple[Shape | None, str | None]:
    """(the model's Shape, None), or (None, why there is none). The architecture a bundled hub id's
    `random:` twin builds is the hub model's own; another hub id's config.json is read from the HF cache
    or fetched alone (trainers.models.model_config)."""
    try:
        found = model_config(model)
    except ValueError as exc:  # ConfigUnavailable among them: what was tried and the fetch command
        return None, str(exc)
    config = found.config
    try:
        return Shape.from_config(config), None
    except UnknownArchitecture as exc:
        return None, f"model: {model!r}'s {exc}{_stand_in(model, config)}"
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"model: {model!r}'s config lacks a decoder-only transformer's field {exc}"


def _stand_in(model: str, config: dict) -> str:
    """A bundled model to predict in its place, chosen by size (trainers/_twin.py), in words."""
    try:
        twin, why = nearest_twin(config, model, bundled_models())
    except (ValueError, KeyError, TypeError):
        return ""
    return f"; a stand-in that is described: --model {twin} ({why})"


def prompt_key(spec: TrialSpec) -> tuple:
    """What a prompt's length in tokens depends on: the task, its settings and the model's tokenizer."""
    return spec.task, json.dumps(spec.task_args, sort_keys=True, default=str), spec.model


def longest_prompt(row: Mapping[str, Any]) -> int | None:
    """The longest prompt in tokens a trial's task held (effective_config's longest_prompt_tokens,
    trainers/stacks/_base.py), or None where the row does not say."""
    config = row.get("effective_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return None
    value = finite_or_none(config.get("longest_prompt_tokens")) if isinstance(config, Mapping) else None
    return int(value) if value is not None and value > 0 else None


def measured_peak(row: Mapping[str, Any], measure: str) -> float | None:
    """The row's peak of `measure`; RSS counts only for a CPU run (on a GPU run it is host memory)."""
    if measure == RSS:
        peak, kind = peak_memory(row)
        return peak if kind == RSS else None
    return finite_or_none(row.get(MEASURE_COLUMNS[measure]))


def oom_budget(row: Mapping[str, Any], measure: str) -> float | None:
    """What an `oom` trial's peak was at least: its budget, else (on a GPU) the card's total."""
    for column in ("memory_budget_gib", *(("gpu_total_gib",) if measure in (GPU, TORCH) else ())):
        value = finite_or_none(row.get(column))
        if value is not None and value > 0:
            return value
    return None


@dataclass
class _Family:
    specs: list[TrialSpec] = field(default_factory=list)
    peaks: list[float] = field(default_factory=list)
    oom_specs: list[TrialSpec] = field(default_factory=list)  # censored: oom and timeout trials
    budgets: list[float] = field(default_factory=list)  # their lower bounds
    coefficients: np.ndarray | None = None
    covariance: np.ndarray | None = None
    loo_worst: float | None = None
    simulated: int = 0  # of its peaks, those of steps simulated on meta (_simulated.py), not measured
    residual: float = 0.0  # where all are simulated, the fit's largest miss on them, a share of each
    # each term's smallest and largest size over the measured trials (the range held-out errors speak for)
    smallest: np.ndarray | None = None
    largest: np.ndarray | None = None
    scores: list[float] = field(default_factory=list)  # held-out scores (_interval.score)


class MemoryModel:
    """Predicts a trial's peak of one measure (MEASURES: GPU, torch reserved, RSS) per family."""

    def __init__(self, measure: str, prior_values: Mapping[str, tuple[float, float]] | None = None):
        if measure not in MEASURES:
            raise ValueError(f"measure: unknown {measure!r}; one of {', '.join(MEASURES)}")
        self.measure = measure
        self.device = device_of(measure)
        self._families: dict[tuple, _Family] = {}
        self._prior = dict(prior_values) if prior_values is not None else prior(self.device)
        # (task, its settings, model) -> the longest prompt its trials measured, in tokens (prompt_key)
        self._prompts: dict[tuple, int] = {}
        # stack -> the interval's calibrated share (_interval.calibrated_share) over its families' scores
        self._shares: dict[str, float | None] = {}

    @classmethod
    def calibrate(cls, rows: Iterable[Mapping[str, Any]], measure: str) -> dict[str, tuple[float, float]]:
        """A prior calibrated on measured rows of every family at once: one coefficient a term fitted
        on all of them (as a family's fit, pulled towards the terms' face values, _terms.FACE), each
        with its face value's spread. Only the terms the rows pin are calibrated: those whose
        coefficient's standard deviation after the pooled fit is at most PINNED of its face spread;
        the others keep their face values (rows of one quantization say nothing of another's weights,
        rows of one generation length little of the KV cache), and the pinned ones are refitted with
        them held there. _terms.CALIBRATED holds the GPU prior this gives on round 1's H100 trials
        (bench/accuracy/gpu_memory.py)."""
        pooled = cls(measure, face(device_of(measure)))
        family = _Family()
        fitted = cls.fit(rows, measure, prior_values=pooled._prior)
        pooled._prompts = fitted._prompts
        for one in fitted._families.values():
            shape, _ = model_shape((one.specs or one.oom_specs)[0].model)
            if shape is None:
                continue
            family.specs.append(pooled._design(one.specs, shape))
            family.oom_specs.append(pooled._design(one.oom_specs, shape))
            family.peaks.extend(one.peaks)
            family.budgets.extend(one.budgets)
        if not family.peaks:
            return pooled._prior
        data = (
            np.vstack(family.specs),
            np.array(family.peaks),
            np.vstack(family.oom_specs),
            np.array(family.budgets),
        )
        _, covariance = pooled._solve(*data)
        spreads = np.array([spread for _, spread in pooled._prior.values()])
        pinned = np.sqrt(np.diag(covariance)) <= PINNED * spreads
        held = cls(measure, {
            name: (value, spread if pin else HELD_SPREAD)
            for (name, (value, spread)), pin in zip(pooled._prior.items(), pinned, strict=True)
        })  # fmt: skip
        coefficients, _ = held._solve(*data)
        return {
            name: (float(c), spread)
            for c, (name, (_, spread)) in zip(coefficients, pooled._prior.items(), strict=True)
        }

    @classmethod
    def fit(
        cls,
        rows: Iterable[Mapping[str, Any]],
        measure: str | None = None,
        unmeasured: str | None = None,
        prior_values: Mapping[str, tuple[float, float]] | None = None,
    ) -> MemoryModel:
        """Fit on trials.parquet rows: completed rows with a peak of `measure` are measurements,
        `oom` rows with a budget are censored (peak at least the budget), and so are `timeout` rows with
        a peak of `measure` (peak at least the one measured before the limit); others are ignored.
        measure: default the kind most completed rows measured (outcome.peak_memory), else
        `unmeasured` where given (the measure the caller's question is about), else RSS on a host
        without a GPU and GPU on one with. prior_values: the prior the families start from (default
        _terms.prior: the calibrated one on a GPU)."""
        rows = superseded_dropped(list(rows))  # a family's simulated rows count only until it measured one
        measure = measure or _default_measure(rows, unmeasured)
        model = cls(measure, prior_values)
        for row in rows:
            longest = longest_prompt(row)
            if longest is not None:
                key = prompt_key(_row_spec(row))
                model._prompts[key] = max(model._prompts.get(key, 0), longest)
        for row in rows:
            if row.get("status") == COMPLETED:
                peak = measured_peak(row, measure)
                if peak is not None:
                    spec = _row_spec(row)
                    family = model._families.setdefault(family_of(spec), _Family())
                    family.specs.append(spec)
                    family.peaks.append(peak)
                    family.simulated += row.get("basis") == SIMULATED
            elif row.get("status") in (OOM, TIMEOUT):
                # a timeout was killed at its time limit: the peak it measured is a lower bound
                budget = oom_budget(row, measure) if row["status"] == OOM else measured_peak(row, measure)
                if budget is not None:
                    spec = _row_spec(row)
                    family = model._families.setdefault(family_of(spec), _Family())
                    family.oom_specs.append(spec)
                    family.budgets.append(budget)
        for family in model._families.values():
            model._fit_family(family)
        pooled: dict[str, list[float]] = {}
        for key, family in model._families.items():
            pooled.setdefault(key[0], []).extend(family.scores)
        model._shares = {stack: calibrated_share(scores) for stack, scores in pooled.items()}
        return model

    def counted(self, spec: TrialSpec) -> TrialSpec:
        """The spec as the terms count it: its prompts at the longest one its task's trials measured on
        its model (the trainers pad a batch's prompts to its longest, not to max_prompt_length, which
        only bounds them: round 1's arithmetic prompts were 34 tokens under a max_prompt_length of 256);
        at max_prompt_length before any trial of the task measured one."""
        longest = self._prompts.get(prompt_key(spec))
        if longest is None or longest >= spec.max_prompt_length:
            return spec
        return dataclasses.replace(spec, max_prompt_length=longest)

    def _design(self, specs: list[TrialSpec], shape: Shape) -> np.ndarray:
        return np.array([list(terms(self.counted(s), shape, self.device).values()) for s in specs]).reshape(
            -1, len(TERMS)
        )

    def _solve(self, measured, peaks, censored, budgets) -> tuple[np.ndarray, np.ndarray]:
        coefficient, spread = (np.array(v) for v in zip(*self._prior.values(), strict=True))
        return fit_coefficients(measured, peaks, censored, budgets, coefficient, spread)

    def _fit_family(self, family: _Family) -> None:
        shape, _ = model_shape((family.specs or family.oom_specs)[0].model)
        if shape is None:
            return  # no config: predict() says why
        measured, censored = self._design(family.specs, shape), self._design(family.oom_specs, shape)
        peaks, budgets = np.array(family.peaks), np.array(family.budgets)
        family.coefficients, family.covariance = self._solve(measured, peaks, censored, budgets)
        if len(peaks):
            family.smallest, family.largest = measured.min(axis=0), measured.max(axis=0)
        if family.simulated == len(peaks) > 0:
            family.residual = float((np.abs(measured @ family.coefficients - peaks) / peaks).max())
        errors = []
        for i in loo_indices(len(peaks)) if len(peaks) >= 2 else []:
            keep = np.arange(len(peaks)) != i
            c, _ = self._solve(measured[keep], peaks[keep], censored, budgets)
            predicted = float(measured[i] @ c)
            errors.append(abs(predicted - peaks[i]) / peaks[i])
            if predicted > 0:
                rest = measured[keep]
                beyond = extrapolated_gib(measured[i], c, rest.min(axis=0), rest.max(axis=0))
                family.scores.append(score(peaks[i], predicted, beyond))
        if len(peaks) >= LOO_FROM:
            family.loo_worst = float(max(errors))

    def predict(self, spec: TrialSpec) -> Prediction:
        """The spec's predicted peak of this model's measure, from its family's fit (the prior when the
        family has no trials), or unknown with the reason."""
        family = self._families.get(family_of(spec), _Family())
        n = len(family.peaks)
        basis = FITTED if n else PRIOR
        shape, why = model_shape(spec.model)
        if shape is None:
            return Prediction(None, None, None, self.measure, n, basis, unknown=why)
        if unsized_vllm_pool(spec) and n < FAST_INFERENCE_TRIALS:
            return Prediction(
                None, None, None, self.measure, n, basis,
                unknown=f"generation: vllm reserves vllm_gpu_memory_utilization ({spec.vllm_gpu_memory_utilization:g}) "
                f"of the card up front and no memory_budget_gib sizes it; set memory_budget_gib (the pool is "
                f"then that share of it) or measure {FAST_INFERENCE_TRIALS} trials of this family first ({n} so far)",
            )  # fmt: skip
        sizes = terms(self.counted(spec), shape, self.device)
        coefficients = self._coefficients(family)
        parts = dict.fromkeys(PARTS, 0.0)
        for name, part in TERMS.items():
            parts[part] += coefficients[name] * sizes[name]
        peak = sum(parts.values())
        vector = np.array(list(sizes.values()))
        beyond = None
        if family.largest is not None:
            beyond = extrapolated_gib(vector, family.coefficients, family.smallest, family.largest)
        low, high = self._interval(family, spec.stack, vector, peak, beyond)
        if family.simulated == n > 0:  # drawn from simulated steps: the simulator's error, not the fit's
            architecture_family = architecture(spec.model)
            basis, (low, high) = (
                SIMULATED,
                simulated_interval(spec.stack, peak, family.residual, architecture_family),
            )
        return Prediction(
            peak, low, high, self.measure, n, basis, None, parts, None if beyond is None else sum(beyond)
        )

    def explain(self, spec: TrialSpec) -> list[TermLine]:
        """Each term of the spec's prediction: its size, its family's coefficient (the prior's when the
        family has no trials) and its bytes in words; empty where the prediction is unknown."""
        shape, _ = model_shape(spec.model)
        if shape is None or self.predict(spec).unknown is not None:
            return []
        coefficients = self._coefficients(self._families.get(family_of(spec), _Family()))
        counted = self.counted(spec)
        sizes, words = terms(counted, shape, self.device), formulas(counted, shape, self.device)
        return [
            TermLine(name, part, words[name], sizes[name], coefficients[name]) for name, part in TERMS.items()
        ]

    def _coefficients(self, family: _Family) -> dict[str, float]:
        if family.coefficients is None:
            return {name: value for name, (value, _) in self._prior.items()}
        return dict(zip(TERMS, (float(c) for c in family.coefficients), strict=True))

    def _interval(
        self,
        family: _Family,
        stack: str,
        sizes: np.ndarray,
        peak: float,
        beyond: tuple[float, float] | None,
    ) -> tuple[float, float]:
        covariance = family.covariance
        if covariance is None:
            covariance = np.diag([spread**2 for _, spread in self._prior.values()])
        covariance_half = Z * predictive_sd(sizes, covariance, peak)
        return interval(peak, covariance_half, self._shares.get(stack), beyond)

    def families(self) -> list[FamilyFit]:
        """Each family with trials: its fit and where its memory goes (at its largest measured trial,
        else its largest oom trial)."""
        out = []
        for family in self._families.values():
            specs = family.specs or family.oom_specs
            peaks = family.peaks or family.budgets
            largest = specs[int(np.argmax(peaks))]
            first = specs[0]
            out.append(
                FamilyFit(
                    family={k: v for k, v in zip(FAMILY, family_of(first), strict=True)},
                    label=family_label(first),
                    n_fitted=len(family.peaks),
                    n_censored=len(family.budgets),
                    coefficients=self._coefficients(family),
                    terms=self.predict(largest).terms,
                    loo_worst=family.loo_worst,
                )
            )
        return out


def _default_measure(rows: list[Mapping[str, Any]], unmeasured: str | None) -> str:
    kinds = [peak_memory(r)[1] for r in rows if r.get("status") == COMPLETED]
    kinds = [k for k in kinds if k is not None]
    if kinds:
        return max(MEASURES, key=kinds.count)
    if unmeasured is not None:
        return unmeasured
    from trainers.nvml import local_gpus

    return GPU if local_gpus() else RSS
