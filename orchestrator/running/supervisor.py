"""Run one trial as a child process (`python -m trainers spec.json`) and turn what happens into a status.

No Ray here: the Ray trainable (driver.py), `rlsweep trial` and gpu-check call `run_trial` with the
trial's GuardSettings (orchestrator/words/settings.py). It hands each event to `on_event(kind, row)` as a clean
row (`step_row`: the one place an event's payload becomes a row). The child runs in
its own process group so a kill reaches everything it started; it also gets PR_SET_PDEATHSIG, so if the
supervisor's process dies (SIGKILL of a Ray worker, or of the whole driver) the kernel kills the
trainer and no orphan keeps a GPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.running.child_env import child_env
from orchestrator.running.kernel_oom import cgroup_memory_limit_gib, classify_kernel_oom, oom_kill_counts
from orchestrator.running.launcher import ForkedChild, start_trainer
from orchestrator.running.process_group import POLL_S, kill_group, kill_leftovers
from orchestrator.running.ranks import (
    RankWatch,
    free_port,
    is_unavailable,
    rank_program,
    rank_sampler_factory,
)
from orchestrator.running.settle import settled, warm_up
from orchestrator.running.telemetry import MemorySampler, Sample
from orchestrator.running.vllm_server import run_served
from orchestrator.words.outcome import COMPLETED, FAILED, OOM, STOPPED, TIMEOUT, UNAVAILABLE, TrialResult
from orchestrator.words.phases import MEMORY, SPEED, SPEED_ONLY, TrialPhases
from orchestrator.words.settings import GuardSettings
from trainers.control import CONTINUE, STOP, closes_steady_cycle, holds_here
from trainers.distributed import (
    die_with_parent,
    launch_command,
    strategy_unavailable,
)
from trainers.events import ERROR, FINISHED, STARTED, STEP, is_oom, read_events
from trainers.events import OOM as OOM_EVENT
from trainers.record import STEP as F  # the step record's field names
from trainers.trial import TrialSpec

STDERR_TAIL_CHARS = 2000


def _tail(path: Path, chars: int = STDERR_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - chars))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def step_row(event: dict[str, Any], sampler: Any = None) -> dict[str, Any]:
    """An event's payload as a row: without the event's kind and write time; a step's with the sampler's
    peaks between its wall times overlaid."""
    row = {k: v for k, v in event.items() if k not in ("event", "time")}
    return merge_sampler(row, sampler) if event.get("event") == STEP else row


def merge_sampler(row: dict[str, Any], sampler: Any) -> dict[str, Any]:
    """Overlay the sampler's peak between the step's wall times; NVML sees what torch cannot. Where the
    step generated, its utilisation is split at its generation's wall times."""
    t0, t1 = row.get(F.t_start), row.get(F.t_end)
    if sampler is None or t0 is None or t1 is None:
        return row
    g0, g1 = row.get(F.gen_t_start), row.get(F.gen_t_end)
    try:
        if g0 is not None and g1 is not None:
            peaks = sampler.peak_between(t0, t1, gen=(g0, g1)) or {}
        else:
            peaks = sampler.peak_between(t0, t1) or {}
    except Exception:  # a sampler failure never kills a trial
        return row
    for key, value in peaks.items():
        if value is not None:
            row[key] = value
    return row


class _Run:
    """The state of one supervised child; `run_trial` is its only user."""

    def __init__(
        self,
        spec: TrialSpec,
        trial_dir: Path,
        on_event,
        stop_event,
        timeout_s,
        stop_check=None,
        phases: TrialPhases = SPEED_ONLY,
    ):
        self.spec = spec
        self.phases = phases
        self.tell: Callable[[str], None] = lambda word: None  # a word to the trainer (trainers/control.py)
        self.stop_check = stop_check  # None once the child has exited: nothing is left to end early
        self.early_end: str | None = None  # why stop_check ended the trial
        self.trial_dir = trial_dir
        self.on_event = on_event
        self.stop_event = stop_event
        self.timeout_s = timeout_s
        self.result = TrialResult(
            status=FAILED, status_detail="", phase=MEMORY if phases.hold_at_step else SPEED
        )
        self.final: dict[str, Any] | None = None
        self.offset = 0
        self.killed_for: str | None = None  # why we killed the child, if we did
        self.guard_detail: str | None = None
        self.sampler: Any = None
        self.proc: subprocess.Popen | ForkedChild | None = None
        self.oom_counts_before: dict[str, int] = {}  # kernel OOM-kill counters before the child started
        self.ranks: RankWatch | None = None  # a trial over several ranks: the launcher's ranks
        self.hang = ""  # a trial over several ranks that timed out: which rank hung, and where

    def drain(self) -> None:
        events, self.offset = read_events(self.spec.events_path, self.offset)
        for event in events:
            kind = event.get("event")
            row = step_row(event, self.sampler)
            if kind == STARTED:
                self.result.started = row
            elif kind == STEP:
                self.result.steps.append(row)
                self.pace(row)
                if self.stop_check is not None and self.early_end is None:
                    self.early_end = self.stop_check(self.result.steps)
                    self.killed_for = self.killed_for or ("verdict" if self.early_end else None)
            elif kind in (FINISHED, OOM_EVENT, ERROR):
                self.final = event
            if self.on_event is not None:
                self.on_event(kind, row)

    def pace(self, row: dict[str, Any]) -> None:
        """The phases' word after a step row: at the hold step (trainers.control.holds_here), go on into
        the speed phase or stop; in the speed phase, stop once settled (orchestrator/running/settle.py)."""
        result, phases = self.result, self.phases
        step = int(row.get(F.step) or 0)
        if result.phase == MEMORY and holds_here(step, closes_steady_cycle(row), phases.hold_at_step):
            if phases.then_speed:
                result.phase = SPEED
            self.tell(CONTINUE if phases.then_speed else STOP)
        elif (
            result.phase == SPEED
            and phases.settle is not None
            and result.settled_step is None
            and settled(result.steps, phases.settle, self.spec.probe_steps)
        ):
            result.settled_step = step
            self.tell(STOP)

    def on_exceed(self, detail: str) -> None:
        """Budget guard callback (called from the sampler's thread). A reading taken as the trainer
        exited is not its memory: the breach counts only while it runs."""
        if self.proc is not None and self.proc.poll() is not None:
            return
        self.guard_detail = detail
        self.killed_for = "budget"

    def why_stop(self, deadline: float | None) -> str | None:
        if self.killed_for:
            return self.killed_for
        if self.ranks is not None and self.ranks.watch(self.sampler) is not None and self.ranks.settled():
            return "rank"
        if self.stop_event is not None and self.stop_event.is_set():
            return "stop"
        if deadline is not None and time.monotonic() > deadline:
            return "timeout"
        return None


def run_trial(spec: TrialSpec, **kwargs: Any) -> TrialResult:
    """Run `spec` (see _run_trainer); in vLLM server mode with its server beside it
    (orchestrator/running/vllm_server.py: the server on the trial's last GPU, the trainer on the others)."""
    if spec.generation == "vllm" and spec.vllm_mode == "server":
        launch = {"env": child_env(None, kwargs.get("cpus") or spec.num_threads), "stop": kill_group,
                  "preexec_fn": die_with_parent}  # fmt: skip
        return run_served(spec, _run_trainer, launch, **kwargs)
    return _run_trainer(spec, **kwargs)


def _run_trainer(
    spec: TrialSpec,
    *,
    trial_dir: str | Path | None = None,
    guard: GuardSettings | None = None,
    on_event: Callable[[str, dict[str, Any]], None] | None = None,
    sampler_factory: Callable[..., Any] | None = None,
    cuda_visible_devices: str | None = None,
    cpus: int | None = None,
    stop_event: threading.Event | None = None,
    trainer_cmd: list[str] | None = None,
    stop_check: Callable[[list[dict[str, Any]]], str | None] | None = None,
    phases: TrialPhases = SPEED_ONLY,
) -> TrialResult:
    """Run `spec` in a child process and classify the outcome (never raises for a trial's failure).

    guard: the budget, margin, sampling rate and timeout; None: no memory sampler and no time limit.
    on_event(kind, row): each event of the trainer ("started", "step", ...) as a clean row.
    sampler_factory(pid, on_exceed=callback) -> sampler with start()/stop()/peak_between(t0, t1)/peak();
    default: the guard's MemorySampler (orchestrator/running/telemetry.py). It calls on_exceed(detail) when the
    budget is passed; the child is then killed and the trial ends `oom` with that detail.
    stop_check(steps) -> why to end now, or None: asked after each step row (orchestrator.judging.verdict.stop_check);
    a reason stops the child and the trial ends `completed`, its detail saying it ended early and why.
    phases: the memory phase's hold step and what follows it, and the settled stop (orchestrator/running/phases.py);
    the trainer hears them on its stdin and ends cleanly, with its `finished` event.
    """
    timeout_s = guard.timeout_s if guard else None
    if sampler_factory is None and guard is not None and spec.num_processes > 1:
        sampler_factory = rank_sampler_factory(guard, cuda_visible_devices, spec.num_processes)
    elif sampler_factory is None and guard is not None:
        sampler_factory = default_sampler_factory(guard, cuda_visible_devices, per_process=phases.shared_gpu)
    trial_dir = Path(trial_dir or spec.output_dir or ".").resolve()
    trial_dir.mkdir(parents=True, exist_ok=True)
    if not spec.output_dir:
        spec.output_dir = str(trial_dir)
    events_path = trial_dir / "events.jsonl"
    events_path.unlink(missing_ok=True)  # a re-run must not read a previous attempt's events
    spec.events_path = str(events_path)
    phases = phases.for_trial(spec.max_steps)
    spec.hold_at_step = phases.hold_at_step
    spec_path = trial_dir / "spec.json"
    spec_path.write_text(json.dumps(spec.to_dict(), indent=2, sort_keys=True))
    log_path = trial_dir / "trainer.log"

    if phases.settle is not None:
        warm_up()
    run = _Run(spec, trial_dir, on_event, stop_event, timeout_s, stop_check, phases)
    result = run.result
    result.started_at = time.time()
    t0 = time.monotonic()
    deadline = t0 + timeout_s if timeout_s else None
    threads = cpus or spec.num_threads
    if spec.num_processes > 1:
        unavailable = strategy_unavailable(spec)
        if unavailable:
            result.status, result.status_detail = UNAVAILABLE, unavailable
            result.ended_at = time.time()
            return result
        command = launch_command(spec, spec_path, free_port(), rank_program(trainer_cmd))
        threads = max(1, threads // spec.num_processes) if threads else None
        run.ranks = RankWatch(spec, events_path)
    else:
        command = [*(trainer_cmd or [sys.executable, "-m", "trainers"]), str(spec_path)]
    # The child inherits our cgroup: its OOM kills move the counters we can read here.
    run.oom_counts_before = oom_kill_counts()
    with open(log_path, "wb") as log:
        # Forked from a fork server where the trial can be (orchestrator/running/launcher.py), else cold.
        proc = start_trainer(
            spec,
            command,
            env=child_env(cuda_visible_devices, threads),
            cwd=str(trial_dir),
            log=log,
            forkable=trainer_cmd is None and spec.num_processes == 1,
            preexec_fn=die_with_parent,
        )
    run.proc = proc
    if run.ranks is not None:
        run.ranks.attach(proc.pid)
    run.tell = lambda word: _tell(proc, word)
    result.pid = proc.pid
    result.cuda_visible_devices = cuda_visible_devices
    (trial_dir / "trainer.pid").write_text(str(proc.pid))
    if sampler_factory is not None:
        try:
            run.sampler = sampler_factory(proc.pid, on_exceed=run.on_exceed)
            run.sampler.start()
        except Exception as exc:  # a sampler failure never kills a trial
            print(f"warning: memory sampler failed to start: {exc}", file=sys.stderr)
            run.sampler = None
    interrupted: BaseException | None = None
    try:
        while proc.poll() is None:
            run.drain()
            reason = run.why_stop(deadline)
            if reason:
                run.killed_for = reason
                if reason == "timeout" and run.ranks is not None:
                    run.hang = run.ranks.behind()  # before the ranks are stopped: their stacks
                kill_group(proc)
                break
            time.sleep(POLL_S)
    except BaseException as exc:  # KeyboardInterrupt, a failing on_event: never leave the child behind
        interrupted = exc
        run.killed_for = run.killed_for or "stop"
        kill_group(proc)
    finally:
        if proc.poll() is None:
            kill_group(proc)
        else:  # it ended on its own (skipping its teardown: trainers/__main__.py)
            kill_leftovers(proc)
        if run.ranks is not None:  # ranks live in sessions of their own, out of the launcher's group
            run.ranks.kill()
        if run.sampler is not None:
            with contextlib.suppress(Exception):
                run.sampler.stop()
                result.peak = run.sampler.peak() or {}
    run.stop_check = None
    with contextlib.suppress(BaseException):
        run.drain()
    with contextlib.suppress(OSError):
        proc.stdin.close()
    result.exit_code = proc.returncode
    result.wall_s = time.monotonic() - t0
    result.ended_at = time.time()
    result.status, result.status_detail = classify(run, log_path)
    if interrupted is not None and not isinstance(interrupted, (KeyboardInterrupt, SystemExit)):
        result.status_detail += f" (supervisor error: {type(interrupted).__name__}: {interrupted})"
    if isinstance(interrupted, (KeyboardInterrupt, SystemExit)):
        raise interrupted
    return result


def _tell(proc: subprocess.Popen | ForkedChild, word: str) -> None:
    """One word to the trainer's stdin; a trainer already gone cannot hear it (its end says why)."""
    with contextlib.suppress(OSError, ValueError):
        proc.stdin.write(f"{word}\n".encode())
        proc.stdin.flush()


def classify(run: _Run, log_path: Path) -> tuple[str, str]:
    """(status, status_detail) from the final event, why we killed the child and its exit code."""
    final, rc = run.final, run.result.exit_code
    finished = final is not None and final.get("event") == FINISHED
    # A breach read after the trainer's `finished` event (its teardown, or a neighbour's growth on a
    # shared device) does not undo a trial that finished.
    if run.killed_for == "budget" and not finished:
        return OOM, run.guard_detail or "killed by the memory budget guard"
    if run.killed_for == "timeout":
        return TIMEOUT, timeout_detail(run)
    if run.ranks is not None and run.killed_for in (None, "rank") and run.ranks.watch() is not None:
        return run.ranks.failure()
    if run.killed_for == "verdict" and not finished:
        last = run.result.steps[-1].get(F.step) if run.result.steps else 0
        return COMPLETED, f"{len(run.result.steps)} steps; ended early at step {last}: {run.early_end}"
    if run.killed_for == "stop" and not finished:
        return STOPPED, "stopped before the trainer finished (interrupted; a resumed sweep runs it again)"
    if final is not None:
        kind = final.get("event")
        message = f"{final.get('type', 'Error')}: {final.get('message', '')}".strip()
        if kind == FINISHED:
            if run.result.phase == MEMORY:
                return COMPLETED, f"fits: {len(run.result.steps)} memory-phase steps"
            settled_step = run.result.settled_step
            tail = f"; settled at step {settled_step}" if settled_step else ""
            return COMPLETED, f"{len(run.result.steps)} steps{tail}"
        if kind == OOM_EVENT:
            return OOM, message
        if is_unavailable(final):
            return UNAVAILABLE, final.get("message") or message
        if is_oom(message):
            return OOM, message
        if final.get("refused"):  # the trainer refused the settings: its message names the fix
            return FAILED, str(final.get("message", ""))
        tail = _tail(log_path)
        return FAILED, message + (f"\n--- trainer output (tail) ---\n{tail}" if tail else "")
    tail = _tail(log_path)
    if rc is not None and rc < 0:
        sig = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        why = f"trainer killed by {sig} without a final event"
        kernel = _kernel_oom_detail(run)
        if kernel:
            return OOM, f"{why}: {kernel}"
        if is_oom(tail):
            return OOM, f"{why} after an out-of-memory error:\n{tail}"
        return FAILED, why + (f"\n--- trainer output (tail) ---\n{tail}" if tail else "")
    if is_oom(tail):
        return OOM, f"trainer exited with code {rc} after an out-of-memory error:\n{tail}"
    return FAILED, f"trainer exited with code {rc} without a final event" + (
        f"\n--- trainer output (tail) ---\n{tail}" if tail else ""
    )


def timeout_detail(run: _Run) -> str:
    """A trial killed at its wall-clock limit: the limit, the steps it measured (kept: its row and steps
    file hold them) and the fix."""
    measured = len(run.result.steps)
    return (
        f"killed at the wall-clock limit of {run.timeout_s:g} s with {measured} of {run.spec.max_steps} steps "
        f"measured (kept){run.hang}; to finish, raise the limit (timeout_s in the sweep, --timeout-s for "
        "`rlsweep trial`, --timeout for gpu-check) or run fewer steps (max_steps)"
    )


def _kernel_oom_detail(run: _Run) -> str | None:
    """The kernel OOM killer's verdict on a SIGKILLed child: an OOM-kill counter of our cgroup or the
    host rose while it ran, or its last sampled memory was near its cgroup limit / the host's total."""
    latest = getattr(run.sampler, "latest", None)
    last_sample = None
    with contextlib.suppress(Exception):  # a sampler failure never changes a verdict into a crash
        last_sample = latest() if latest else None
    return classify_kernel_oom(
        run.result.exit_code,
        last_sample=last_sample if isinstance(last_sample, Sample) else None,
        counts_before=run.oom_counts_before,
        counts_after=oom_kill_counts(),
        limit_gib=cgroup_memory_limit_gib(),
    )


def default_sampler_factory(
    guard: GuardSettings, cuda_visible_devices: str | None = None, per_process: bool = False
):
    """A factory for orchestrator/running/telemetry.py's MemorySampler with the budget guard wired to
    `on_exceed`; per_process: the trial shares its GPU (MemorySampler's per_process)."""

    def factory(pid: int, on_exceed):
        return MemorySampler(
            pid,
            hz=guard.sample_hz,
            cuda_visible_devices=cuda_visible_devices,
            budget_gib=guard.budget_gib,
            margin_gib=guard.margin_gib,
            on_budget_exceeded=lambda breach: on_exceed(breach.detail),
            per_process=per_process,
        )

    return factory
