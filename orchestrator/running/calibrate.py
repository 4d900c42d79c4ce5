"""`rlsweep calibrate`'s probes, run: each chosen (orchestrator/judging/calibrate.py) from the memory model
fitted on the output dir's trials measured before it, run through the same supervised path as `rlsweep
trial` (no Ray; the fork server makes the later ones cheap) under the budget's guard, and recorded like a
sweep's (trials.parquet, steps/, one folder per trial under trials/), so `rlsweep fitmap --trials OUT`
reads them and a second run on the same output dir measures no probe twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.judging.calibrate import ROLES, CalibrationError, Plan, Probe, choose
from orchestrator.judging.memory import MemoryModel, Prediction
from orchestrator.recording.recorder import Recorder, StepsFiles, TrialsFile
from orchestrator.recording.sinks import TrialsTable
from orchestrator.running.session import close_sessions, in_session
from orchestrator.running.solve import run_recorded
from orchestrator.running.supervisor import run_trial
from orchestrator.spec.plan import trial_key
from orchestrator.words.outcome import COMPLETED, MEMORY_LABELS, OOM, TIMEOUT, peak_memory
from orchestrator.words.runlock import output_dir_lock
from orchestrator.words.settings import GuardSettings
from trainers.trial import TrialSpec


@dataclass(frozen=True)
class Measured:
    """One probe's outcome: its role and configuration, the prediction made just before it ran, its
    status and measured peak (None where it measured none: a probe that did not run its step is no
    measurement, whatever its process's memory read), and its seconds (None: measured before)."""

    probe: Probe
    status: str
    detail: str
    peak_gib: float | None
    memory_kind: str | None
    seconds: float | None
    steps: int | None = None  # steps_completed of its row

    @property
    def ran(self) -> bool:
        """The probe ran its step: completed it, ran out of memory, or timed out after it."""
        return ran_its_step(self.status, self.steps)

    @property
    def error(self) -> float | None:
        """The prediction's error, a fraction of the measured peak (+: predicted above it)."""
        predicted, peak = self.probe.prediction.peak_gib, self.peak_gib
        if self.status != COMPLETED or predicted is None or not peak:
            return None
        return (predicted - peak) / peak

    def words(self) -> str:
        """'completed, 0.84 GiB RSS (CPU run) peak against predicted 0.81 GiB (0.60-1.02): -3.6%, within the interval'."""
        p = self.probe.prediction
        if not self.ran:
            return (
                f"did not run its step: {self.status} ({self.reason()}); not a measurement, not scored "
                f"against {p.describe()}"
            )
        if self.peak_gib is None:
            return f"{self.status} ({self.detail.strip().splitlines()[0] if self.detail.strip() else 'no detail'}), no peak measured; {p.describe()}"
        kind = f" {MEMORY_LABELS.get(self.memory_kind, self.memory_kind)}" if self.memory_kind else ""
        within = "within" if p.low_gib <= self.peak_gib <= p.high_gib else "outside"
        error = "" if self.error is None else f": {self.error:+.1%}"
        return (
            f"{self.status}, {self.peak_gib:.2f} GiB{kind} peak against {p.describe()}{error}, "
            f"{within} the interval"
        )

    def reason(self) -> str:
        """The first line of its status detail, or 'no detail'."""
        detail = self.detail.strip()
        return detail.splitlines()[0] if detail else "no detail"


def ran_its_step(status: str, steps: int | None) -> bool:
    """A probe ran its step where it completed, ran out of memory (its peak passed the budget), or timed out
    after a step; a failed, unavailable or stopped one (the model not loadable, no GPU for a GPU card, a
    crash, Ctrl-C) did not, and measured nothing, whatever its process's memory read."""
    return status in (COMPLETED, OOM) or (status == TIMEOUT and bool(steps))


@dataclass
class CalibrationRequest:
    base: TrialSpec  # the model, stack and every knob but K, B and the completion length
    budget_gib: float
    output_dir: Path
    guard: GuardSettings
    probes: int
    ks: list[int]
    b: int
    lengths: tuple[int, int]
    simulated: list[dict] = field(default_factory=list)  # rows of steps simulated on meta (memory._simulated)
    session: bool = True  # the probes in one probe session (orchestrator/running/session.py); False: alone


def plan_now(request: CalibrationRequest, rows) -> tuple[Plan, MemoryModel]:
    """The probes the model fitted on `rows` chooses (CalibrationError when none can run)."""
    model = MemoryModel.fit([*rows, *request.simulated])  # the simulated count until a probe measured
    plan = choose(
        request.base, model, request.budget_gib, request.probes, request.ks, request.b, request.lengths
    )
    for probe in plan.probes:
        probe.spec.sweep = request.output_dir.name
        probe.spec.trial_key = trial_key(probe.spec)
    return plan, model


def run_calibration(request: CalibrationRequest, *, say: Callable[[str], None] = print) -> list[Measured]:
    """Run the probes, one role at a time, each chosen again from the memory model fitted on the probes
    measured before it (the first plan, the prior's, is said up front); the output dir's lock is held
    throughout. A probe already in the
    output dir's trials.parquet is not run again. CalibrationError before the first probe when none can
    run; after it, the probes stop where none more can."""
    out = request.output_dir
    out.mkdir(parents=True, exist_ok=True)
    results: list[Measured] = []
    try:
        with output_dir_lock(out):
            _calibrate(request, results, say)
    finally:
        close_sessions()  # the session's trainer, by its process group
    return results


def _calibrate(request: CalibrationRequest, results: list[Measured], say: Callable[[str], None]) -> None:
    out = request.output_dir
    ledger = TrialsTable(out / "trials.parquet")
    # each probe is chosen from the rows of the probes before it alone (not the other trials in the
    # output dir), so a second run chooses the same probes and finds them measured
    before: list[dict] = []
    plan, model = plan_now(request, before)
    say(
        f"peak {model.measure} in {request.budget_gib:g} GiB; the probes as planned now (each is chosen "
        "again from the ones measured before it):"
    )
    for probe in plan.probes:
        say(f"  {probe.role}: {probe.words()}, {probe.prediction.describe()}; pins {probe.pins}")
    for note in plan.notes:
        say(f"  {note}")
    for number, role in enumerate(list(ROLES)[: request.probes], start=1):
        if number > 1:
            try:
                plan, model = plan_now(request, before)
            except CalibrationError as exc:
                say(f"[{number}] no more probes: {exc}")
                break
        probe = plan.role(role)
        if probe is None:
            note = next((n for n in plan.notes if n.startswith(role)), f"{role} left out")
            say(f"[{number}] {note}")
            continue
        measured = _measure(request, ledger, probe, number, say)
        results.append(measured)
        if not measured.ran:
            say(
                f"[{number}] no more probes: {probe.role} did not run its step, and the probes after it load "
                "the same model and stack; fix what stopped it and run the same command again (a probe that "
                "did not run is run again)"
            )
            break
        before.append(ledger.rows[probe.spec.trial_key])


def _measure(
    request: CalibrationRequest, ledger: TrialsTable, probe: Probe, number: int, say: Callable[[str], None]
) -> Measured:
    spec = probe.spec
    row = ledger.rows.get(spec.trial_key)
    if row is not None and ran_its_step(row.get("status"), row.get("steps_completed")):
        say(f"[{number}] {probe.role}: {probe.words()}, already measured ({spec.trial_key})")
        return _result(probe, row, None)
    say(f"[{number}] {probe.role}: {probe.words()}, {probe.prediction.describe()}; running {spec.trial_key}")
    predictions: dict[str, Prediction] = {spec.trial_key: probe.prediction}
    recorder = Recorder([spec], [StepsFiles(request.output_dir), TrialsFile(ledger)], predictions=predictions)
    started = time.monotonic()
    run_recorded(
        spec,
        recorder,
        request.output_dir,
        request.guard,
        "calibrate",
        in_session if request.session else run_trial,
    )
    measured = _result(probe, ledger.rows[spec.trial_key], time.monotonic() - started)
    say(f"    {measured.words()} ({measured.seconds:.0f} s)")
    return measured


def _result(probe: Probe, row, seconds: float | None) -> Measured:
    status, steps = str(row.get("status")), row.get("steps_completed")
    peak, kind = peak_memory(row) if ran_its_step(status, steps) else (None, None)
    return Measured(probe, status, row.get("status_detail") or "", peak, kind, seconds, steps)
