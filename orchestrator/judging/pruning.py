"""Pruning of configurations that must run out of memory.

Memory dominance: trial `a` dominates trial `b` when both are the same trial except for
knobs in which memory only grows, and `a` is >= `b` in each of them. Then `a` needs at least as much
memory as `b`: if `b` ran out of memory, `a` will too, and need not run.

Knobs that grow memory (each compared with >=), `DOMINANCE_KNOBS`:
  num_generations, batch_size, micro_batch_size (effective: default B x K), max_prompt_length,
  max_completion_length, lora_r (the sizes of a step), and two more:
  max_steps (a longer run has more chances to meet the longest completion that a shorter run never
  sampled) and probe_steps (probes force max-length completions, the worst case).
Knobs that do not change memory and are ignored, `IGNORED_KNOBS`:
  seed (the same shapes; with probe steps the same worst case), learning_rate and lora_alpha (values,
  not sizes), and the bookkeeping fields trial_key, sweep, output_dir, events_path, model_cache_dir.
Every other knob must be equal, including any knob added to TrialSpec later: stack, mode,
model, task, task_args, quantization, dtype, beta (a reference forward pass), num_iterations, temperature
(completion lengths of a real model), gradient_checkpointing, lora_dropout, loss_type,
memory_budget_gib (another budget, another verdict), evaluation settings, fast_inference,
gpu_memory_utilization, num_threads.

Multi-GPU wait policy (`should_wait`, `pick_next`): a pending candidate that dominates a trial still
running waits for it, because if that trial ends `oom` the candidate is pruned without running.
The scheduler starts the first pending candidate (in plan order: smallest first) that waits for
nobody; when every pending candidate waits, the free GPU stays idle until a running trial ends.
The idle time is at most the remaining run time of the smaller trial; the saving is a whole
trial (and the larger one's run-up to its out-of-memory point) whenever the smaller one fails.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from orchestrator.judging.memory import DOES_NOT_FIT, Forecast
from orchestrator.words.outcome import FINAL_STATUSES, OOM
from orchestrator.words.storage import RemotePath, is_remote
from trainers.record import finite_or_none, peak_memory
from trainers.trial import BOOKKEEPING, EXECUTION

DOMINANCE_KNOBS = (
    "num_generations",
    "batch_size",
    "micro_batch_size",
    "max_prompt_length",
    "max_completion_length",
    "lora_r",
    "max_steps",
    "probe_steps",
)
# Bookkeeping and execution knobs (trainers.trial roles) are ignored, except num_threads: a trial's
# thread count sizes per-thread buffers (RSS), so trials differing in it are compared as different.
IGNORED_KNOBS = frozenset(
    {"seed", "learning_rate", "lora_alpha", *BOOKKEEPING, *(k for k in EXECUTION if k != "num_threads")}
)


def _as_dict(config: Any) -> dict[str, Any]:
    """A TrialSpec, or any mapping of its fields, as a plain dict."""
    if isinstance(config, Mapping):
        return dict(config)
    if hasattr(config, "to_dict"):
        return config.to_dict()
    raise TypeError(f"expected a TrialSpec or a dict of its fields, got {type(config).__name__}")


def _knob(config: Mapping[str, Any], name: str) -> Any:
    if name == "micro_batch_size":
        # unset means one forward/backward over all B x K completions
        return config.get("micro_batch_size") or config["batch_size"] * config["num_generations"]
    return config.get(name)


def _fields(config: Any) -> Mapping[str, Any]:
    """A TrialSpec's fields (read in place, not copied: dominates only reads them), or the mapping."""
    if isinstance(config, Mapping):
        return config
    if dataclasses.is_dataclass(config):
        return vars(config)
    return _as_dict(config)


def dominates(a: Any, b: Any) -> bool:
    """True when `a` needs at least as much memory as `b` (see the module docstring). Reflexive:
    two trials that differ only in ignored knobs (seeds) dominate each other."""
    a, b = _fields(a), _fields(b)
    for name in a.keys() | b.keys():
        if name in IGNORED_KNOBS or name in DOMINANCE_KNOBS:
            continue
        if a.get(name) != b.get(name):
            return False
    for name in DOMINANCE_KNOBS:
        va, vb = _knob(a, name), _knob(b, name)
        if va is None or vb is None:
            if va != vb:
                return False
        elif va < vb:
            return False
    return True


@dataclass(frozen=True)
class OomVerdict:
    trial_key: str
    config: dict[str, Any]
    reading: str | None  # short, e.g. "RSS 1.52 GiB, budget 1.00 GiB" (BudgetBreach.reading)


class Pruner:
    """The out-of-memory verdicts of a sweep, and which configurations they rule out.

    The orchestrator records every `oom` trial and asks `pruned_by` before starting one; it persists
    the state with `save` next to the sweep's outputs and `load`s it on resume.
    """

    def __init__(self, verdicts: Iterable[OomVerdict] = (), *, enabled: bool = True):
        self.verdicts: list[OomVerdict] = list(verdicts)
        self.enabled = enabled

    def record_oom(self, trial_key: str, config: Any, reading: str | None = None) -> None:
        """Remember that `config` ran out of memory; recording a trial_key again replaces it."""
        self.verdicts = [v for v in self.verdicts if v.trial_key != trial_key]
        self.verdicts.append(OomVerdict(trial_key, _as_dict(config), reading))

    def pruned_by(self, config: Any) -> tuple[str, str] | None:
        """(trial_key, status_detail) of the first recorded out-of-memory trial that `config`
        dominates, or None when it must run (or pruning is off). A trial is never pruned by itself."""
        if not self.enabled:
            return None
        config = _as_dict(config)
        for verdict in self.verdicts:
            if verdict.trial_key != config.get("trial_key") and dominates(config, verdict.config):
                at = f" (oom at {verdict.reading})" if verdict.reading else " (oom)"
                return verdict.trial_key, f"dominated by {verdict.trial_key}{at}"
        return None

    def to_json(self) -> str:
        return json.dumps({"enabled": self.enabled, "verdicts": [asdict(v) for v in self.verdicts]}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Pruner:
        data = json.loads(text)
        return cls((OomVerdict(**v) for v in data["verdicts"]), enabled=data["enabled"])

    def save(self, path: str | Path | RemotePath) -> None:
        """Write atomically (temp file in the same folder, then rename): a crash leaves the old state."""
        if is_remote(path):  # an object store shows an upload whole or not at all
            path.parent.mkdir()
            path.write_text(self.to_json())
            return
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            f.write(self.to_json())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path | RemotePath, *, enabled: bool = True) -> Pruner:
        """The saved state, or an empty pruner when there is none; `enabled` is the current sweep's
        setting (oom.prune_dominated), which wins over the saved one."""
        path = path if is_remote(path) else Path(path)
        pruner = cls.from_json(path.read_text()) if path.exists() else cls()
        pruner.enabled = enabled
        return pruner


def group_ranks(specs: Sequence[Any], group: Callable[[Any], str] | None, current: str | None) -> list[int]:
    """Each spec's group's rank: the `current` group (the last one run) first, then the others in the
    order of their first trial; all 0 without `group`."""
    if group is None:
        return [0] * len(specs)
    keys = [group(s) for s in specs]
    first = {k: i for i, k in reversed(list(enumerate(keys)))}
    return [-1 if k == current else first[k] for k in keys]


def grouped(
    specs: Sequence[Any], group: Callable[[Any], str] | None, current: str | None = None
) -> list[Any]:
    """`specs` with each group's together (group_ranks: the current group first), each group's trials
    in their given order; as given without `group`. No trial dominates one of another group (a session's
    trials differ from another's beyond the size knobs), so pruning decides the same."""
    ranks = group_ranks(specs, group, current)
    return [s for _, _, s in sorted(zip(ranks, range(len(ranks)), specs, strict=True))]


_GUARD_DETAIL = re.compile(
    r"guard: (?P<source>.+?) (?P<reading>[\d.]+ GiB) passed budget (?P<budget>[\d.]+ GiB)"
)


def oom_reading(row: Mapping[str, Any]) -> str | None:
    """The memory reading that ended an `oom` trial, from its trials.parquet row, short enough for a
    pruning detail: the guard's own words ('RSS 1.52 GiB, budget 1.00 GiB', as BudgetBreach.reading),
    else the trial's measured peak (the record's precedence: trainers.record.peak_memory) and its
    budget, else None."""
    found = _GUARD_DETAIL.search(row.get("status_detail") or "")
    if found:
        return f"{found['source']} {found['reading']}, budget {found['budget']}"
    budget = finite_or_none(row.get("memory_budget_gib"))
    suffix = f", budget {budget:.2f} GiB" if budget is not None else ""
    peak, kind = peak_memory(row)
    return None if peak is None else f"{kind} peak {peak:.2f} GiB{suffix}"


def should_wait(candidate: Any, running_configs: Iterable[Any]) -> bool:
    """True when `candidate` dominates a running trial: should that trial end `oom`, the candidate
    is pruned, so a scheduler with a free GPU may hold it back (module docstring: the policy)."""
    return any(dominates(candidate, running) for running in running_configs)


def pick_next(pending: list[Any], running_configs: Iterable[Any]) -> int | None:
    """Index of the first pending candidate that waits for no running trial, or None (keep the
    free GPU idle until a running trial ends)."""
    running = list(running_configs)
    for index, candidate in enumerate(pending):
        if not should_wait(candidate, running):
            return index
    return None


# --- the sweep's decision hook ---------------------------------------------------------------------

RUN, HOLD = "run", "hold"


class Ledger(Protocol):
    """What OomGate reads of orchestrator.recording.sinks.TrialsTable (trials.parquet)."""

    rows: dict[str, dict[str, Any]]

    def done(self, key: str) -> bool: ...


class OomGate:
    """The default `decide`: prune a trial that dominates a recorded out-of-memory trial; with
    `wait_for_smaller`, hold one that dominates a trial still in flight (should that one end `oom`,
    this one is pruned without running). Holding happens only when a slot is free (Tune asks the
    searcher only then) and only while pruning is on: otherwise waiting cannot save a run.

    With a `forecast` (orchestrator.judging.memory.Forecast), every trial's memory is predicted first, from
    the trials finished so far (its row records the prediction); with `predict` (oom.predict), a trial
    whose predicted interval lies wholly above its memory budget is pruned (`predict_verdict`)."""

    def __init__(
        self,
        pruner: Pruner,
        path: Path,
        ledger: Ledger,
        wait_for_smaller: bool = True,
        forecast: Forecast | None = None,
        predict: bool = False,
    ):
        self.pruner = pruner
        self.path = path
        self.ledger = ledger
        self.wait_for_smaller = wait_for_smaller
        # a trial's probe session (trainers.session.session_key), set where oom.session is on: the
        # searcher asks about one session's trials before the next's; None: as given
        self.group: Callable[[Any], str] | None = None
        self.current: str | None = None  # the group of the trial that ran last
        self.forecast = forecast
        self.predict = predict
        self.launched: dict[str, Any] = {}

    @classmethod
    def load(
        cls,
        path: Path,
        ledger: Ledger,
        enabled: bool = True,
        wait_for_smaller: bool = True,
        forecast: Forecast | None = None,
        predict: bool = False,
    ) -> OomGate:
        """The saved verdicts (pruning.json), plus any `oom` row of the ledger they lack (a crash
        between writing the verdict and the row). `enabled`: oom.prune_dominated."""
        pruner = Pruner.load(path, enabled=enabled)
        known = {v.trial_key for v in pruner.verdicts}
        for key, row in ledger.rows.items():
            if row["status"] == OOM and key not in known and row.get("config"):
                pruner.record_oom(key, json.loads(row["config"]), oom_reading(row))
        return cls(pruner, path, ledger, wait_for_smaller, forecast, predict)

    def in_flight(self) -> list[Any]:
        return [spec for key, spec in self.launched.items() if not self.ledger.done(key)]

    def __call__(self, spec: Any) -> str:
        # The prediction a trial's row keeps is the one made when it runs or is skipped; one held back
        # is asked again later, so a hold without oom.predict makes none (a sweep whose trials wait for
        # their siblings asks this of every waiting trial each time a slot frees).
        predict = (lambda: self.forecast.before(spec)) if self.forecast else (lambda: None)
        pruned = self.pruner.pruned_by(spec)
        if pruned:
            predict()
            return pruned[1]
        asked = [predict()] if self.predict else []

        def prediction() -> Any:  # made once, and only where a verdict needs it
            if not asked:
                asked.append(predict())
            return asked[0]

        if asked and asked[0] is not None:
            skip = predict_verdict(asked[0], spec.memory_budget_gib)
            if skip:
                return skip
        implied = self.implied(spec, prediction)
        if implied:
            return implied
        if self.waits(spec):
            return HOLD
        prediction()
        self.launched[spec.trial_key] = spec
        self.current = self.group(spec) if self.group else None
        return RUN

    def implied(self, spec: Any, prediction: Callable[[], Any]) -> str | None:
        """The skip verdict of a trial whose fit another trial's implies; none here
        (orchestrator.judging.frontier.FrontierGate implies them). prediction(): the trial's memory
        prediction, made on the first call."""
        return None

    def waits(self, spec: Any) -> bool:
        """Hold `spec` while a trial it dominates is in flight (wait_for_smaller, pruning on)."""
        return self.wait_for_smaller and self.pruner.enabled and should_wait(spec, self.in_flight())

    def order(self, specs: list[Any]) -> list[Any]:
        """The order in which the searcher asks about `specs`: as given (plan order, or
        informative_order with oom.predict), one probe session's after another where `group` is set."""
        return grouped(specs, self.group, self.current)

    def record(self, spec: Any, row: dict[str, Any]) -> None:
        """Called with every finished trial's row: an `oom` one becomes a verdict, saved at once. A
        trial that ended for good is no longer in flight (`launched` holds only those that may be)."""
        if row["status"] in FINAL_STATUSES:
            self.launched.pop(spec.trial_key, None)
        if row["status"] == OOM:
            self.pruner.record_oom(spec.trial_key, spec, oom_reading(row))
            self.pruner.save(self.path)


def predict_verdict(prediction: Any, budget_gib: float | None) -> str | None:
    """The pruning detail for a trial whose predicted interval lies wholly above the budget
    ('predicted 17.9 GiB (16.8-19.0) > budget 16 GiB'); None when it may fit (its interval crosses or
    is under the budget), when there is no budget, or when its memory is unknown."""
    if budget_gib is None or prediction.verdict(budget_gib) != DOES_NOT_FIT:
        return None
    return f"{prediction.describe()} > budget {budget_gib:g} GiB"
