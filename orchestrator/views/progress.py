"""Live progress of a sweep: a line when a trial starts and when it ends, and each running trial's step,
speed, memory and ETA. A recorder sink (orchestrator/recording/recorder.py).

On a terminal a rich Live table of the running trials redraws in place under those lines, and goes
when the sweep ends. Elsewhere (CI logs, `submit`, a file) a heartbeat line per running trial takes its
place every HEARTBEAT_S seconds (RLSWEEP_HEARTBEAT_S overrides it): elapsed time, steps done, ETA.
The counts by status are not repeated here: the command prints them once at the end.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import Counter
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from orchestrator.words.outcome import peak_memory
from orchestrator.words.text import duration
from trainers.record import STEP
from trainers.trial import TrialSpec

HEARTBEAT_S = 60.0


def heartbeat_s() -> float:
    return float(os.environ.get("RLSWEEP_HEARTBEAT_S") or HEARTBEAT_S)


def _fmt(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def eta(info: dict[str, Any]) -> str:
    """Steps left times the median step time so far; unknown before the first step."""
    step_times = info.get(STEP.step_s) or []
    if not step_times or not info.get("max_steps"):
        return "unknown (no step yet)"
    left = max(info["max_steps"] - (info.get("step") or 0), 0)
    return duration(left * statistics.median(step_times))


class Progress:
    def __init__(
        self,
        total: int,
        console: Console | None = None,
        done: dict[str, str] | None = None,
        heartbeat: float | None = None,
    ):
        self.console = console or Console(stderr=True)
        self.total = total
        self.status: dict[str, str] = dict(done or {})  # trial_key -> status of finished trials
        self.running: dict[str, dict[str, Any]] = {}
        self.live: Live | None = None
        self.t0 = time.monotonic()
        self.heartbeat = heartbeat_s() if heartbeat is None else heartbeat
        self.lock = threading.Lock()  # the heartbeat thread reads what Tune's callbacks write
        self.stopped = threading.Event()
        self.beater: threading.Thread | None = None
        # The phase the lines count within (begin); None: the sweep's trials, those resumed included.
        self.phase: str | None = None
        self.phase_total = self.phase_started = self.phase_finished = 0

    def __enter__(self) -> Progress:
        self.stopped.clear()
        if self.console.is_terminal:
            self.live = Live(self.render(), console=self.console, refresh_per_second=2, transient=True)
            self.live.__enter__()
        else:
            self.beater = threading.Thread(target=self._beat, name="rlsweep-heartbeat", daemon=True)
            self.beater.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        if self.beater is not None:
            self.beater.join()
            self.beater = None
        if self.live is not None:
            self.live.__exit__(*exc)
            self.live = None

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self.render())

    def _beat(self) -> None:
        while not self.stopped.wait(self.heartbeat):
            for line in self.heartbeat_lines():
                self.console.print(line, markup=False, highlight=False)

    def heartbeat_lines(self) -> list[str]:
        """A line per trial running for at least one heartbeat interval."""
        now = time.monotonic()
        with self.lock:
            running = [(key, dict(info)) for key, info in self.running.items()]
        return [
            f"  {key}: running {duration(now - info['t0'])}, "
            + (
                f"step {info['step']}/{info.get('max_steps') or '?'}, ETA {eta(info)}"
                if info.get("step")
                else "no step yet (starting the trainer: model build, first generation)"
            )
            for key, info in running
            if now - info["t0"] >= self.heartbeat
        ]

    def begin(self, phase: str | None, trials: int) -> None:
        """A phase of `trials` trials starts (None: the sweep runs in one go): its lines count within it,
        `[speed 1/4]`, since the speed phase starts again trials the memory phase finished."""
        with self.lock:
            self.phase, self.phase_total = phase, trials
            self.phase_started = self.phase_finished = 0

    def _position(self, count: int) -> str:
        if self.phase is None:
            return f"[{count}/{self.total}]"
        return f"[{self.phase} {count}/{self.phase_total}]"

    def on_start(self, spec: TrialSpec) -> None:
        with self.lock:
            self.status.pop(spec.trial_key, None)  # running again: a speed phase after its memory phase
            self.running[spec.trial_key] = {"max_steps": spec.max_steps, "step": 0, "t0": time.monotonic()}
            self.phase_started += 1
            where = self._position(self.phase_started if self.phase else len(self.status) + len(self.running))
        self.console.print(f"start {where} {spec.trial_key}", markup=False, highlight=False)
        self._refresh()

    def on_step(self, spec: TrialSpec, row: dict[str, Any]) -> None:
        with self.lock:
            info = self.running.setdefault(
                spec.trial_key, {"max_steps": spec.max_steps, "t0": time.monotonic()}
            )
            peak, kind = peak_memory(row)
            info.update(
                step=row.get("step"), tokens_per_s=row.get(STEP.tokens_per_s), peak_gib=peak, peak_kind=kind
            )
            if row.get(STEP.step_s) is not None and not row.get("probe"):
                info.setdefault(STEP.step_s, []).append(row[STEP.step_s])
        self._refresh()

    def on_end(self, spec: TrialSpec, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        key, status, detail = spec.trial_key, row["status"], row.get("status_detail") or ""
        with self.lock:
            self.running.pop(key, None)
            self.status[key] = status
            self.phase_finished += 1
            where = self._position(self.phase_finished if self.phase else len(self.status))
        first_line = detail.splitlines()[0][:160] if detail else ""
        self.console.print(f"{where} {key}: {status} {first_line}".rstrip(), markup=False)
        self._refresh()

    def counts(self) -> dict[str, int]:
        return dict(Counter(self.status.values()))

    def render(self) -> Table:
        with self.lock:
            running = [(key, dict(info)) for key, info in self.running.items()]
            finished = len(self.status)
        pending = self.total - finished - len(running)
        table = Table(
            title=f"{len(running)} running, {finished} finished, {pending} pending "
            f"({duration(time.monotonic() - self.t0)})",
            title_justify="left",
        )
        for column in ("running trial", "step", "tokens/s", "peak GiB (what was measured)", "ETA"):
            table.add_column(column)
        for key, info in running:
            table.add_row(
                key,
                f"{info.get('step') or 0}/{info.get('max_steps') or '?'}",
                _fmt(info.get(STEP.tokens_per_s), ".0f"),
                _fmt(info.get("peak_gib")) + (f" {info['peak_kind']}" if info.get("peak_kind") else ""),
                eta(info),
            )
        return table


def estimate_durations(trials: list[TrialSpec], output_dir: Any) -> dict[str, tuple[float | None, str]]:
    """trial_key -> (seconds, basis) for planned trials, from the completed trials recorded in
    output_dir/trials.parquet: their start-up time (wall time less the steps) plus max_steps times their
    step time per completion scaled to the trial's B x K, over recorded trials of the same stack and
    model where there are some, else all of them. A trial already recorded gets its own wall time; with
    nothing recorded, (None, "unknown")."""
    from orchestrator.recording.sinks import TrialsTable
    from orchestrator.words.outcome import COMPLETED
    from orchestrator.words.storage import is_remote

    path = None if is_remote(output_dir) else output_dir / "trials.parquet"
    rows = list(TrialsTable(path).rows.values()) if path is not None and path.exists() else []
    done = [
        r for r in rows
        if r["status"] == COMPLETED and r.get("median_step_s") and r.get("wall_s") and r.get("steps_completed")
    ]  # fmt: skip
    by_key = {r["trial_key"]: r for r in rows}
    estimates: dict[str, tuple[float | None, str]] = {}
    # (stack, model) -> (start-up s, s per completion, trials it is from), or None: nothing recorded.
    # Worked out once per pair: a large plan has many trials of one pair.
    rates: dict[tuple[str, str], tuple[float, float, int] | None] = {}
    for spec in trials:
        if spec.trial_key in by_key and by_key[spec.trial_key].get("wall_s") is not None:
            estimates[spec.trial_key] = (
                by_key[spec.trial_key]["wall_s"],
                f"ran: {by_key[spec.trial_key]['status']}",
            )
            continue
        pair = (spec.stack, spec.model)
        if pair not in rates:
            alike = [r for r in done if (r["stack"], r["model"]) == pair] or done
            rates[pair] = (
                statistics.median(r["wall_s"] - r["steps_completed"] * r["median_step_s"] for r in alike),
                statistics.median(r["median_step_s"] / (r["batch_size"] * r["num_generations"]) for r in alike),
                len(alike),
            ) if alike else None  # fmt: skip
        rate = rates[pair]
        if rate is None:
            estimates[spec.trial_key] = (None, "unknown")
            continue
        startup, per_completion, n = rate
        seconds = max(startup, 0.0) + spec.max_steps * per_completion * spec.batch_size * spec.num_generations
        estimates[spec.trial_key] = (seconds, f"from {n} recorded")
    return estimates
