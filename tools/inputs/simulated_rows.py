"""The H100 rows with their steps simulated (bench/data/simulated-h100.csv) and how `rlsweep fits` judges
each of them: the simulator's error ranges per stack and family, and every row judged at its budget and on
every smaller card. Read by bench/accuracy/false_fits.py and tests/unit/test_simulated_intervals.py."""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIMULATED_ROWS = ROOT / "bench" / "data" / "simulated-h100.csv"
# The H100's usable GiB, the budget of a row run without one (gpu_total_gib of every H100 trial)
H100_GIB = 79.1787109375


def load(path: Path = SIMULATED_ROWS) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def ratios(rows: Iterable[dict]) -> dict[tuple[str, str], tuple[list[float], list[float]]]:
    """Per (stack, family), over every completed row that measured NVML: (lows, highs), the measured over
    the least the simulated step runs in (its capped replay's `needed` + context), from below and from
    above. The true least a trial ran in lies between its live tensors (torch's allocated peak, where
    measured, else NVML) and its NVML peak (reserved holds cached blocks a cap would release), each +
    the context: so lows take the allocated peak, highs NVML, and a range of them holds the true need's."""
    found: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    for row in rows:
        if row["status"] == "completed" and row["peak_nvml_gib"]:
            context = float(row["context_gib"])
            simulated = float(row["simulated_needed_gib"]) + context
            nvml = float(row["peak_nvml_gib"])
            live = (
                float(row["peak_torch_allocated_gib"]) + context if row["peak_torch_allocated_gib"] else nvml
            )
            lows, highs = found.setdefault((row["stack"], row["family"]), ([], []))
            lows.append(live / simulated)
            highs.append(nvml / simulated)
    return found


def error_ranges(rows: Iterable[dict]) -> dict[str, tuple[tuple[str, float, float, int], ...]]:
    """StackMemory.simulated_error as the rows give it: per stack, (family, low, high, rows), low
    rounded down and high up to the hundredth."""
    import math

    out: dict[str, list] = {}
    for (stack, family), (lows, highs) in sorted(ratios(rows).items()):
        low, high = math.floor(min(lows) * 100) / 100, math.ceil(max(highs) * 100) / 100
        out.setdefault(stack, []).append((family, low, high, len(highs)))
    return {stack: tuple(found) for stack, found in out.items()}


def coverage(rows: Iterable[dict]) -> dict[str, dict[str, int]]:
    """Per stack: the GPU rows of each family (completed and out of memory)."""
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        families = out.setdefault(row["stack"], {})
        families[row["family"]] = families.get(row["family"], 0) + 1
    return out


def _spec(row: dict):
    from trainers.trial import TrialSpec

    r = int(row["lora_r"])
    return TrialSpec(
        model=row["model"].removeprefix("random:"), stack=row["stack"], num_generations=int(row["K"]),
        batch_size=int(row["B"]), max_prompt_length=int(row["max_prompt"]),
        max_completion_length=int(row["max_completion"]), num_iterations=int(row["num_iterations"]),
        quantization=row["quantization"], lora_r=r, lora_alpha=2 * r, lora_dropout=0.05, learning_rate=2e-4,
    )  # fmt: skip


def _step(row: dict):
    from trainers.simulate import SimulatedStep

    allocated = float(row["simulated_allocated_gib"])
    return SimulatedStep(
        allocated_gib=allocated, reserved_gib=float(row["simulated_reserved_gib"]), phase="training",
        phase_gib={"training": allocated}, resting_gib=0.0, seconds=0.0,
        needed_gib=float(row["simulated_needed_gib"]),
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Judged:
    stack: str
    family: str
    row: str  # the row in words
    budget_gib: float
    verdict: str
    fitted: bool  # what the row says of this budget

    @property
    def false_fit(self) -> bool:
        return self.verdict == "fits" and not self.fitted

    @property
    def false_no_fit(self) -> bool:
        return self.verdict == "does not fit" and self.fitted


def judged(rows: list[dict], leave_family_out: bool = False) -> list[Judged]:
    """Every row judged at its budget and on every smaller card (module doc)."""
    from orchestrator.judging.answer import judged as answer
    from orchestrator.judging.cards import CARDS
    from orchestrator.judging.memory._interval import UNCHECKED_ERROR, simulated_error, unseen_error

    ranges = error_ranges(rows)
    out = []
    for row in rows:
        spec, step = _spec(row), _step(row)
        own = float(row["budget_gib"]) if row["budget_gib"] else H100_GIB
        error = None
        if leave_family_out:
            others = [(low, high) for f, low, high, _ in ranges.get(row["stack"], ()) if f != row["family"]]
            across = unseen_error(others)
            error = (*(across or UNCHECKED_ERROR), "left out")
        else:
            error = simulated_error(row["stack"], row["family"])
        peak = float(row["peak_nvml_gib"]) if row["peak_nvml_gib"] else None
        said = f"round {row['round']} {row['model'].removeprefix('random:')} K={row['K']} B={row['B']} {row['max_completion']} tokens"
        budgets = [own, *sorted({c.usable_gib for c in CARDS.values() if c.usable_gib < own})]
        for budget in budgets:
            fitted = row["status"] == "completed" and (budget == own or (peak is not None and peak <= budget))
            verdict = answer(dataclasses.replace(spec, memory_budget_gib=budget), step, budget, error).verdict
            out.append(Judged(row["stack"], row["family"], said, budget, verdict, fitted))
    return out
