"""How long a GPU sweep will take, said before it starts: an H100 estimate from measured step times.

A trial's time on an H100 is
    start-up + first-step extra + generations x decode steps x ms per token + steps x train s per step,
with, per stack and model, the medians of the H100 rows of 2026-11-26 (bench/data/h100-2026-11-26/
trials.csv, `derive_times`): ms per generated token (a generation's wall time over its decode steps,
which probes force to max_completion_length), train seconds per step (grown in proportion to the
completions' tokens beyond the largest step measured), the first step's extra (warm-up; Unsloth's
compile) and start-up (the trial's wall time less its steps: process, imports, model build). The
figures live in h100_times.json beside this module; bench/bench_duration.py writes it from the rows,
and tests/unit/test_duration.py checks that they agree. Decoding is latency-bound there (ms per token
barely moves from 2 to 16 sequences), so a generation's time grows with its length, not with K x B.

Two totals, one trial at a time (`estimate_sweep`):
- worst case: every trial runs (probed);
- expected: the memory phase as the frontier search would run it were the memory model's verdicts
  right (`expected_probes`): sure OOMs pruned by prediction (oom.predict), and of the rest, probed in
  bisection order, a predicted fit implies what it dominates and a predicted OOM prunes what dominates
  it; only the probed trials take time.
A trial of a stack or model with no H100 row gets no estimate (said so); a CPU sweep gets none.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.judging.pruning import dominates

TIMES_FILE = Path(__file__).with_name("h100_times.json")
SOURCE = "bench/data/h100-2026-11-26/trials.csv"
# A row's steady figures need a step after the first (round 2's 1-step probes have only the first).
STEADY_FROM_STEPS = 3


def _hub(model: str) -> str:
    return model.removeprefix("random:")


def _num(value: str) -> float | None:
    return float(value) if value not in ("", None) else None


def derive_times(trials_csv: str | Path) -> dict[str, Any]:
    """The per-(stack, model) figures of h100_times.json from the H100 rows: completed rows with a step
    after the first (STEADY_FROM_STEPS), medians over them (module docstring)."""
    with open(trials_csv, newline="") as f:
        rows = [
            r
            for r in csv.DictReader(f)
            if r["status"] == "completed" and int(r["steps"]) >= STEADY_FROM_STEPS
        ]
    groups: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        groups.setdefault(f"{row['stack']}|{_hub(row['model'])}", []).append(row)
    times: dict[str, Any] = {}
    for key, group in sorted(groups.items()):
        gen = [float(r["median_gen_s"]) for r in group]
        train = [float(r["median_train_s"]) for r in group]
        first = [float(r["first_step_s"]) for r in group]
        startup = [
            float(r["wall_s"]) - float(r["first_step_s"]) - (int(r["steps"]) - 1) * float(r["median_train_s"])
            - (math.ceil(int(r["steps"]) / int(r["num_iterations"])) - 1) * float(r["median_gen_s"])
            for r in group if _num(r["wall_s"]) is not None
        ]  # fmt: skip
        times[key] = {
            "ms_per_token": round(statistics.median(g / int(r["max_completion"]) * 1000 for g, r in zip(gen, group, strict=True)), 1),
            "train_s": round(statistics.median(train), 2),
            "train_completion_tokens": max(int(r["completions_per_step"]) * int(r["max_completion"]) for r in group),
            "first_step_extra_s": round(statistics.median(f - g - t for f, g, t in zip(first, gen, train, strict=True)), 1),
            "startup_s": round(statistics.median(startup), 1) if startup else None,
            "rows": len(group),
        }  # fmt: skip
    # A stack's start-up where its rows of a model lack wall times: the stack's other models'.
    for key, figures in times.items():
        if figures["startup_s"] is None:
            stack = key.split("|")[0]
            known = [f["startup_s"] for k, f in times.items() if k.startswith(stack + "|") and f["startup_s"]]
            figures["startup_s"] = round(statistics.median(known), 1) if known else 0.0
    return {"source": SOURCE, "card": "H100 80GB HBM3", "times": times}


def load_times(path: Path = TIMES_FILE) -> dict[str, Any]:
    return json.loads(path.read_text())


def steps_run(spec: Any, phases: Sequence[str]) -> int:
    """Steps a trial runs: max_steps with a speed phase; else its memory phase (probe steps, then one
    steady generation cycle), at most max_steps."""
    if "speed" in phases:
        return spec.max_steps
    return min(spec.max_steps, spec.probe_steps + (spec.num_iterations or 1))


def trial_seconds(spec: Any, steps: int, times: dict[str, Any]) -> float | None:
    """The trial's H100 seconds for `steps` steps at worst-case length (every generation runs to
    max_completion_length), or None without an H100 row of its stack and model."""
    figures = times["times"].get(f"{spec.framework}|{_hub(spec.model)}")
    if figures is None:
        return None
    generations = math.ceil(steps / (spec.num_iterations or 1))
    completions = spec.batch_size * spec.num_generations
    grow = max(1.0, completions * spec.max_completion_length / figures["train_completion_tokens"])
    return (
        figures["startup_s"] + figures["first_step_extra_s"]
        + generations * spec.max_completion_length * figures["ms_per_token"] / 1000
        + steps * figures["train_s"] * grow
    )  # fmt: skip


@dataclass
class Search:
    """What the memory phase does with each trial were the memory model right: trial_key -> probed,
    pruned (predicted or dominating a predicted OOM) or implied."""

    outcome: dict[str, str] = field(default_factory=dict)

    def count(self, what: str) -> int:
        return sum(1 for v in self.outcome.values() if v == what)


def expected_probes(
    specs: Sequence[Any],
    fits: Callable[[Any], bool | None],
    frontier: bool = True,
    prune_dominated: bool = True,
) -> Search:
    """The frontier search (orchestrator/judging/frontier.py) played out with `fits` as the oracle: fits(spec)
    True (fits), False (OOM) or None (a sure OOM by prediction: pruned without a probe). The next probe
    is the undecided trial with the largest min(up, down) (ties: larger up, then plan order), as
    bisection_order scores it before the model is fitted; without `frontier`, plan order and no
    implied fits."""
    search = Search()
    verdict = {s.trial_key: fits(s) for s in specs}
    undecided = []
    for s in specs:
        if verdict[s.trial_key] is None:
            search.outcome[s.trial_key] = "pruned"
        else:
            undecided.append(s)
    n = len(undecided)
    dom = [[i != j and dominates(undecided[i], undecided[j]) for j in range(n)] for i in range(n)]
    left = set(range(n))
    while left:
        if frontier:

            def score(i: int, left: set[int] = left) -> tuple:
                down = sum(dom[i][j] for j in left)
                up = sum(dom[j][i] for j in left)
                return (-min(up, down), -up, i)

            pick = min(left, key=score)
        else:
            pick = min(left)
        left.discard(pick)
        search.outcome[undecided[pick].trial_key] = "probed"
        if verdict[undecided[pick].trial_key]:
            decided = {j for j in left if dom[pick][j]} if frontier else set()
            what = "implied"
        else:
            decided = {j for j in left if dom[j][pick]} if prune_dominated else set()
            what = "pruned"
        for j in decided:
            search.outcome[undecided[j].trial_key] = what
        left -= decided
    return search


@dataclass
class Estimate:
    """A sweep's H100 estimate: seconds per trial (None: no H100 row), the worst case and the expected."""

    seconds: dict[str, float | None]
    worst_s: float
    expected_s: float
    search: Search
    missing: list[str]
    times: dict[str, Any]
    used: set[str] = field(default_factory=set)  # the stack|model keys of h100_times.json the sweep uses

    def lines(self) -> list[str]:
        from orchestrator.words.text import duration

        known = sum(1 for s in self.seconds.values() if s is not None)
        n = len(self.seconds)
        probed, implied = self.search.count("probed"), self.search.count("implied")
        pruned = self.search.count("pruned")
        lines = [
            f"estimated time on an {self.times['card']}, one trial at a time ({known} of {n} trials; "
            f"figures from {self.times['source']}):",
            f"  worst case, every trial run: {duration(self.worst_s)}",
            f"  expected, were the memory model's verdicts right: {duration(self.expected_s)} "
            f"({probed} probed, {implied} implied by a fit, {pruned} pruned as OOM)",
            "  what scales it: generation is completion length x ms per token ("
            + ", ".join(
                f"{k.split('|')[0]} {k.split('|')[1].split('/')[-1]} {v['ms_per_token']:g} ms"
                for k, v in self.times["times"].items()
                if k in self.used
            )  # fmt: skip
            + "); a slower card or a bigger model decodes slower, a GPU that packs memory-phase trials "
            "runs several at once",
        ]
        if self.missing:
            lines.append(
                f"  no H100 row for {', '.join(sorted(set(self.missing)))}: those trials are not counted"
            )
        return lines


def estimate_sweep(
    sweep: Any, specs: Sequence[Any], rows: Sequence[dict] = (), times: dict | None = None
) -> Estimate | None:
    """The sweep's H100 estimate (module docstring), or None when no trial has an H100 row (a CPU
    sweep). rows: the trials.parquet rows already in its output dir (the memory model fits on them; the
    trials they finished take no time)."""
    from orchestrator.judging.memory import DOES_NOT_FIT, MemoryModel
    from orchestrator.words.outcome import FINAL_STATUSES
    from trainers.record import GPU

    times = times or load_times()
    phases = sweep.phases_to_run()
    done = {r["trial_key"] for r in rows if r.get("status") in FINAL_STATUSES}
    seconds = {s.trial_key: trial_seconds(s, steps_run(s, phases), times) for s in specs}
    if all(v is None for v in seconds.values()):
        return None
    missing = [f"{s.framework} {_hub(s.model)}" for s in specs if seconds[s.trial_key] is None]
    used = {f"{s.framework}|{_hub(s.model)}" for s in specs} & set(times["times"])
    todo = [s for s in specs if s.trial_key not in done]
    worst = sum(seconds[s.trial_key] or 0.0 for s in todo)
    budget = sweep.memory.budget_gib
    if budget is None or "memory" not in phases:
        return Estimate(
            seconds, worst, worst, Search({s.trial_key: "probed" for s in todo}), missing, times, used
        )
    model = MemoryModel.fit(list(rows), None if rows else GPU, unmeasured=GPU)

    def fits(spec: Any) -> bool | None:
        prediction = model.predict(spec)
        if prediction.unknown is not None:
            return True
        if sweep.oom.predict and prediction.verdict(budget) == DOES_NOT_FIT:
            return None
        return prediction.peak_gib <= budget

    search = expected_probes(todo, fits, sweep.oom.frontier, sweep.oom.prune_dominated)
    memory_steps = {s.trial_key: trial_seconds(s, steps_run(s, ("memory",)), times) or 0.0 for s in todo}
    # With a speed phase every fit (probed or implied) runs its full steps, its memory phase included.
    fit_keys = {s.trial_key for s in todo if fits(s)} if "speed" in phases else set()
    expected = sum(memory_steps[k] for k, v in search.outcome.items() if v == "probed" and k not in fit_keys)
    expected += sum(seconds[k] or 0.0 for k in fit_keys)
    return Estimate(seconds, worst, expected, search, missing, times, used)
