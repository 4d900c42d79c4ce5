"""Simulated rows: where a family has no measured trial, its stack's own training step simulated on meta
tensors (trainers.simulate) at a handful of shapes stands in for measurements. Each becomes a row the
MemoryModel fits as it fits a measured one (the memory model's terms are affine in completions x length,
so a few shapes pin a family's coefficients), marked `simulated`, so a prediction drawn from them says
so (basis "simulated", between measured and predicted) and carries the simulator's own error on GPU rows
rather than the fit's.

    rows += simulated_rows(specs, rows, progress=print)    # nothing where a family has measured rows
    MemoryModel.fit(rows, GPU).predict(spec).basis          # "simulated"

What a simulated row holds: torch's reserved peak replayed through the caching allocator, and NVML as
the least the step runs in under a card's cap (the replay's `needed`, the figure the simulator's error
is measured on) plus what the trial's processes hold outside torch's allocator, term by term from the
stack (trainers/simulate/_outside.py: the trainer's CUDA context as measured on the H100, the one card it
was measured on; terms no GPU row has measured are not counted, their bound is kept beside it), and with
generation: vllm what vLLM holds beside it (_vllm.py).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from orchestrator.judging.memory._family import SIMULATED, family_label, family_of, measured_families
from orchestrator.words.outcome import COMPLETED, GPU, TORCH
from trainers.trial import TrialSpec

# `RLSWEEP_SIMULATE=0` (or a verb's --no-simulate): answer from the memory model's prior instead.
ENV = "RLSWEEP_SIMULATE"
# A family asked about at this many shapes or fewer has each simulated itself; more, a design of them.
DIRECT_UP_TO = 6


def enabled(asked: bool | None = None) -> bool:
    """Whether to simulate: a verb's --simulate/--no-simulate, else RLSWEEP_SIMULATE (default on)."""
    return (
        asked if asked is not None else os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no")
    )


def _middle(values: list[int]) -> int:
    """The value nearest the geometric middle of the sorted `values`."""
    target = math.sqrt(values[0] * values[-1])
    return min(values, key=lambda v: abs(math.log(v / target)))


def _near_budget(spec: TrialSpec, lengths: tuple[int, int], budget: float) -> int:
    """The completion length in `lengths` where the memory model's prior puts `spec` at `budget` GiB (the
    shape whose simulation teaches the fit most about the boundary), by bisection on the prior."""
    from orchestrator.judging.memory._model import MemoryModel

    prior = MemoryModel.fit([], GPU)
    low, high = lengths
    for _ in range(12):
        if high - low <= 64:
            break
        middle = (low + high) // 2
        peak = prior.predict(dataclasses.replace(spec, max_completion_length=middle)).peak_gib
        low, high = (middle, high) if peak is not None and peak <= budget else (low, middle)
    return max(lengths[0], min(lengths[1], low // 64 * 64 or lengths[0]))


def design(specs: list[TrialSpec], budget: float | None = None) -> list[TrialSpec]:
    """The shapes to simulate for one family asked about at `specs`: each of them where few, else, at
    the smallest, middle and largest K with the smallest and largest B, the completion length where the
    prior puts the budget (where the answer turns), or where no budget is asked, the middle length."""
    unique = list({s.to_json(): s for s in specs}.values())
    if len(unique) <= DIRECT_UP_TO:
        return unique
    ks = sorted({s.num_generations for s in unique})
    bs = sorted({s.batch_size for s in unique})
    lengths = sorted({s.max_completion_length for s in unique})
    base = unique[0]
    out = []
    for k in dict.fromkeys((ks[0], _middle(ks), ks[-1])):
        for b in dict.fromkeys((bs[0], bs[-1])):
            shape = dataclasses.replace(base, num_generations=k, batch_size=b)
            if budget is None:
                length = _middle(lengths)
            else:
                length = _near_budget(shape, (lengths[0], lengths[-1]), budget)
            shape = dataclasses.replace(shape, max_completion_length=length)
            if not shape.problems():
                out.append(shape)
    return out


def row(spec: TrialSpec, step: Any, index: int, budget: float | None = None) -> dict[str, Any]:
    """A simulated step as a trials row: the columns a MemoryModel reads, marked simulated."""
    from orchestrator.judging.memory._model import MEASURE_COLUMNS
    from orchestrator.judging.memory._vllm import beside_vllm
    from trainers.simulate._outside import counted_gib, outside, possible_gib

    terms = outside(spec)
    context = counted_gib(terms)
    # NVML as the least the step runs in under a cap (the figure its error is measured on), vLLM's beside
    least = beside_vllm(spec, step, spec.memory_budget_gib or budget or 0.0, context).least(context)
    return {
        "trial_key": f"simulated-{index}", "config": spec.to_json(), "status": COMPLETED, "basis": SIMULATED,
        MEASURE_COLUMNS[GPU]: least, MEASURE_COLUMNS[TORCH]: step.reserved_gib,
        "peak_torch_allocated_gib": step.allocated_gib, "simulated_phase": step.phase,
        # outside torch's allocator: what NVML's figure counts, and the most the unmeasured terms allow
        "simulated_outside_gib": counted_gib(terms), "simulated_outside_possible_gib": possible_gib(terms),
        "simulated_outside_unmeasured": "; ".join(t.name for t in terms if t.gib is None) or None,
    }  # fmt: skip


def simulated_rows(
    specs: Iterable[TrialSpec],
    rows: Iterable[Mapping[str, Any]] = (),
    measure: str = GPU,
    progress: Callable[[str], None] | None = None,
    budget: float | None = None,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(rows, not simulated): simulated rows for every family of `specs` that `rows` measured no trial
    of, and per family label that could not be simulated, why (the prediction then falls back to the
    prior, and says so). Only GPU memory is simulated (`measure` GPU or torch). budget: the GiB the
    question is about (design() simulates near it)."""
    from orchestrator.judging.memory._family import _row_spec
    from trainers.simulate import CannotSimulate, simulate, simulate_each

    if measure not in (GPU, TORCH):
        return [], {}
    measured = measured_families(rows)
    families: dict[tuple, list[TrialSpec]] = {}
    for spec in specs:
        if family_of(spec) not in measured:
            families.setdefault(family_of(spec), []).append(spec)
    out: list[dict[str, Any]] = []
    why_not: dict[str, str] = {}
    designed = {family: design(members, budget) for family, members in families.items()}
    if progress is not None and len(families) > 1:
        progress(f"simulating {sum(map(len, designed.values()))} shape(s) side by side...")
    simulate_each([shape for shapes in designed.values() for shape in shapes])  # in worker processes
    for family, members in families.items():
        shapes = designed[family]
        label = family_label(members[0])
        for i, shape in enumerate(shapes, 1):
            started = time.perf_counter()
            try:
                step = simulate(shape)
            except CannotSimulate as exc:
                why_not[label] = str(exc)
                out = [r for r in out if family_of(_row_spec(r)) != family_of(shape)]
                break
            if progress is not None:
                cached = " (kept from before)" if step.simulated.get("cached") else ""
                # a step simulated for this question (here or by a worker): its simulation's seconds
                seconds = time.perf_counter() - started if cached else step.seconds
                progress(
                    f"simulated {label}: {i}/{len(shapes)} K={shape.num_generations} B={shape.batch_size} "
                    f"{shape.max_completion_length} tokens: {step.reserved_gib:.1f} GiB reserved, "
                    f"{seconds:.1f} s{cached}"
                )
            out.append(row(shape, step, len(out), budget))
    return out, why_not
