"""Probe shapes run in a session: one trainer child loads the model once and runs shape after shape
(trainers/session.py, the protocol; trainers/_session.py, the child's side).

`ProbeSession.run(spec, ...)` answers what `run_trial(spec, ...)` answers, a TrialResult per shape, so a
caller that runs probes one after another (calibrate, solve, a search choosing the next shape from the
verdicts so far) swaps one for the other. The first shape of a (model, stack, quantization, adapter,
dtype, ...) starts a child (forked from the fork server where the trial can be); the next shapes with the
same session_key run in it, each with:

- its own events, spec.json and trial folder, classified as a trial is (supervisor.classify);
- its own seconds (wall_s, started_at: from the moment its spec was sent), the session's start-up
  recorded once, on the first shape's result (session_startup_s);
- its own peak: the sampler's readings between its start and its end (the child resets the RSS
  high-water mark and torch's peak statistics, and empties the allocator's cache, before it says it is
  ready for the next), each figure the larger of that and the session's start-up peak, which a fresh
  process's peak includes too;
- the budget guard and the timeout as a trial has them: a breach or a timeout kills the child, ends
  that shape (`oom`, `timeout`), and the next shape starts a new session and says why. So does a child
  that died, or one that reported its CUDA context poisoned.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.running.child_env import child_env
from orchestrator.running.launcher import start_trainer
from orchestrator.running.process_group import POLL_S, kill_group, kill_leftovers
from orchestrator.running.supervisor import _Run, classify, default_sampler_factory, run_trial
from orchestrator.words.outcome import TrialResult
from orchestrator.words.phases import SPEED_ONLY, TrialPhases
from orchestrator.words.settings import GuardSettings
from trainers.control import STOP
from trainers.distributed import die_with_parent
from trainers.events import FINAL_EVENTS, read_events
from trainers.session import POISONED, READY, SESSION_FLAG, session_key
from trainers.trial import TrialSpec

READY_S = 120.0  # after a shape's end, its memory released; a child that takes longer is ended


class _Child:
    """One session's trainer child: its process, sampler, stream and start-up."""

    def __init__(
        self, spec: TrialSpec, folder: Path, guard: GuardSettings | None, cpus, cuda_visible_devices
    ):
        self.key = session_key(spec)
        self.id = folder.name
        folder.mkdir(parents=True, exist_ok=True)
        first = TrialSpec.from_dict(spec.to_dict())
        first.output_dir, first.events_path = str(folder), str(folder / "events.jsonl")
        first.hold_at_step = None
        self.stream, self.offset = folder / "events.jsonl", 0
        self.stream.unlink(missing_ok=True)
        path = folder / "spec.json"
        path.write_text(json.dumps(first.to_dict(), indent=2, sort_keys=True))
        self.log_path = folder / "trainer.log"
        self.run: _Run | None = None  # the shape running now: the budget guard's breach goes to it
        self.t0 = time.time()
        self.proc = self._launch(first, path, cpus or spec.num_threads, cuda_visible_devices)
        self.sampler = None
        if guard is not None:
            try:
                factory = default_sampler_factory(guard, cuda_visible_devices)
                self.sampler = factory(self.proc.pid, on_exceed=self._exceeded)
                self.sampler.start()
            except Exception as exc:  # a sampler failure never kills a trial
                print(f"warning: memory sampler failed to start: {exc}", file=sys.stderr)
                self.sampler = None
        self.startup_s: float | None = None  # from launch to the model loaded and its memory released
        self.startup_peak: dict[str, float | None] = {}
        self.breach: str | None = None  # a budget breach outside any shape (the start-up's)

    def _launch(self, first: TrialSpec, path: Path, threads, cuda_visible_devices):
        """The child, started from a thread of its own that lives until end(): a cold child dies with the
        thread that started it (PR_SET_PDEATHSIG), and the shapes come from threads that end with their
        trial (a Tune trial's, on a worker Tune reuses)."""
        started: dict[str, Any] = {}
        launched = threading.Event()

        def keep() -> None:
            try:
                with open(self.log_path, "ab") as log:
                    started["proc"] = start_trainer(
                        first,
                        [sys.executable, "-m", "trainers", SESSION_FLAG, str(path)],
                        env=child_env(cuda_visible_devices, threads),
                        cwd=str(path.parent),
                        log=log,
                        forkable=first.num_processes == 1,
                        preexec_fn=die_with_parent,
                    )
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                started["error"] = exc
            finally:
                launched.set()
            self.released.wait()

        self.released = threading.Event()
        threading.Thread(target=keep, name=f"probe-session {self.id}", daemon=True).start()
        launched.wait()
        if "error" in started:
            raise started["error"]
        return started["proc"]

    def _exceeded(self, detail: str) -> None:
        if self.run is not None:
            self.run.on_exceed(detail)
        elif self.proc.poll() is None:
            self.breach = detail

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, deadline: float | None) -> dict[str, Any]:
        """The stream's next READY, or its ending (an error, an OOM, POISONED) or the child's own, as
        an event; {"event": "timeout"} past the deadline and {"event": "budget"} on a breach."""
        while True:
            events, self.offset = read_events(self.stream, self.offset)
            for event in events:
                if event.get("event") in (READY, POISONED, *FINAL_EVENTS):
                    return event
            if self.breach:
                return {"event": "budget", "message": self.breach}
            if not self.alive():
                return {
                    "event": "exit",
                    "message": f"the session's trainer exited with code {self.proc.poll()}",
                }
            if deadline is not None and time.monotonic() > deadline:
                return {"event": "timeout", "message": "the session's trainer did not get ready in time"}
            time.sleep(POLL_S)

    def window_peak(self, t0: float, t1: float) -> dict[str, float | None]:
        """The sampler's peaks in [t0, t1]: RSS (with the child's high-water mark) and NVML's."""
        samples = [s for s in self.sampler.samples() if t0 <= s.t <= t1] if self.sampler else []
        rss = [v for s in samples for v in (s.rss_gib, s.hwm_gib) if v is not None]
        gpu = [s.gpu_gib for s in samples if s.gpu_gib is not None]
        return {"rss_peak_gib": max(rss, default=None), "device_peak_gib": max(gpu, default=None)}

    def send(self, line: str) -> None:
        """A line to the child: a shape's spec path, or a supervisor's word to the shape running."""
        self.proc.stdin.write(f"{line}\n".encode())
        self.proc.stdin.flush()

    def end(self) -> None:
        """Close its stdin (the session ends after the shape in hand), then end its process group."""
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=10)
        if self.alive():
            kill_group(self.proc)
        else:
            kill_leftovers(self.proc)
        self.released.set()  # the thread that started it ends
        if self.sampler is not None:
            with contextlib.suppress(Exception):
                self.sampler.stop()


def _larger(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


class ProbeSession:
    """Shapes run one after another in sessions under `root` (one folder per session). Use it as a
    context manager: leaving it ends the child in hand."""

    def __init__(
        self,
        root: Path,
        guard: GuardSettings | None = None,
        *,
        cpus: int | None = None,
        cuda_visible_devices: str | None = None,
    ):
        self.root, self.guard, self.cpus, self.cvd = Path(root), guard, cpus, cuda_visible_devices
        self.child: _Child | None = None
        self.note = ""  # why the last session ended early: said on the next shape's detail
        self.started = 0  # sessions started

    def __enter__(self) -> ProbeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.child is not None:
            self.child.end()
            self.child = None

    def _drop(self, why: str) -> None:
        """End the child in hand; the next shape's session is a new one, and its detail says why."""
        self.close()
        self.note = f" (the previous session ended: {why}; this shape started a new one)"

    def run(
        self,
        spec: TrialSpec,
        *,
        trial_dir: str | Path,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        stop_event: Any = None,
        stop_check: Callable[[list[dict[str, Any]]], str | None] | None = None,
        phases: TrialPhases = SPEED_ONLY,
    ) -> TrialResult:
        """One shape, as run_trial runs a trial (never raises for the shape's failure); stop_check's
        reason ends the shape with the word `stop`, and the session goes on."""
        timeout_s = self.guard.timeout_s if self.guard else None
        note, self.note = self.note, ""
        key = session_key(spec)
        if self.child is not None and self.child.key != key:
            self.close()  # another model, stack or setting: its own session
        first = self.child is None
        if first:
            self.started += 1
            folder = self.root / f"session-{self.started}-{uuid.uuid4().hex[:8]}"
            self.child = _Child(spec, folder, self.guard, self.cpus, self.cvd)
            deadline = time.monotonic() + timeout_s if timeout_s else None
            ready = self.child.wait_ready(deadline)
            if ready.get("event") != READY:
                return self._failed_start(spec, ready)
            self.child.startup_s = ready["time"] - self.child.t0
            self.child.startup_peak = self.child.window_peak(self.child.t0, ready["time"])
        startup_s = self.child.startup_s
        result = self._shape(spec, Path(trial_dir), on_event, stop_event, stop_check, timeout_s, phases)
        if first:
            result.session_startup_s = startup_s  # once per session: its first shape carries it
            result.status_detail += note
        return result

    def _failed_start(self, spec: TrialSpec, ready: dict[str, Any]) -> TrialResult:
        """The session could not start: the shape it was started for ends with the start-up's outcome."""
        child = self.child
        run = _Run(spec, child.stream.parent, None, None, None)
        run.proc, run.sampler = child.proc, child.sampler
        kind = ready.get("event")
        if kind in FINAL_EVENTS:
            run.final = ready
        elif kind == "budget":
            run.killed_for, run.guard_detail = "budget", ready["message"]
        elif kind == "timeout":
            run.killed_for = "timeout"
        child.end()
        run.result.exit_code = child.proc.poll()
        run.result.started_at, run.result.ended_at = child.t0, time.time()
        run.result.status, run.result.status_detail = classify(run, child.log_path)
        if kind == "timeout":
            run.result.status_detail = f"the session's start-up: {ready['message']}"
        run.result.session = child.id
        run.result.peak = child.window_peak(child.t0, time.time())
        self.child = None
        return run.result

    def _shape(self, spec, trial_dir, on_event, stop_event, stop_check, timeout_s, phases) -> TrialResult:
        child = self.child
        trial_dir = trial_dir.resolve()
        trial_dir.mkdir(parents=True, exist_ok=True)
        spec.output_dir = spec.output_dir or str(trial_dir)
        events_path = trial_dir / "events.jsonl"
        events_path.unlink(missing_ok=True)
        spec.events_path = str(events_path)
        phases = phases.for_trial(spec.max_steps)
        spec.hold_at_step = phases.hold_at_step
        path = trial_dir / "spec.json"
        path.write_text(json.dumps(spec.to_dict(), indent=2, sort_keys=True))
        log = trial_dir / "trainer.log"  # the session's output, every shape's in turn
        log.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            log.symlink_to(child.log_path)
        run = _Run(spec, trial_dir, on_event, stop_event, timeout_s, stop_check, phases)
        run.proc, run.sampler = child.proc, child.sampler
        run.tell = lambda word: _tell(child, word)  # the hold step's word, as a trial hears it
        result = run.result
        result.pid, result.cuda_visible_devices = child.proc.pid, self.cvd
        result.started_at, t0 = time.time(), time.monotonic()
        deadline = t0 + timeout_s if timeout_s else None
        child.run = run
        child.send(str(path))
        try:
            told = False
            while run.final is None and child.alive():
                run.drain()
                reason = run.why_stop(deadline)
                # a verdict: the shape ends cleanly after its step, and the session goes on
                if reason == "verdict":
                    if not told:
                        run.tell(STOP)
                        told = True
                elif reason:
                    run.killed_for = reason
                    kill_group(child.proc)  # a breach, a timeout, a stop: now, not after the step
                    break
                time.sleep(POLL_S)
            run.drain()
        finally:
            child.run = None
        result.ended_at, result.wall_s = time.time(), time.monotonic() - t0
        if (run.killed_for and run.killed_for != "verdict") or not child.alive():
            self._drop(f"its shape was ended ({run.killed_for})" if run.killed_for else "its trainer died")
            result.exit_code = child.proc.poll()
        else:
            ready = child.wait_ready(time.monotonic() + READY_S)
            if ready.get("event") != READY:
                self._drop(ready.get("message") or str(ready.get("event")))
        result.status, result.status_detail = classify(run, child.log_path)
        window = child.window_peak(result.started_at, result.ended_at)
        facts = child.sampler.peak() if child.sampler else {}
        keep = ("gpu_name", "gpu_total_gib", "gpu_memory_source", "backend")
        result.peak = {k: facts.get(k) for k in keep} | {
            name: _larger(value, child.startup_peak.get(name)) for name, value in window.items()
        }
        result.session = child.id
        return result


def _tell(child: _Child, word: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        child.send(word)


# This process's session, as launcher.server_for keeps its fork servers: a Ray worker Tune reuses, or
# calibrate's loop, runs its next shape in it. One at a time: a session holds its model's memory.
_current: tuple[tuple, ProbeSession] | None = None


def in_session(
    spec: TrialSpec,
    *,
    trial_dir: str | Path,
    guard: GuardSettings | None = None,
    cuda_visible_devices: str | None = None,
    cpus: int | None = None,
    trainer_cmd: list[str] | None = None,
    **rest: Any,
) -> TrialResult:
    """run_trial's stand-in (the same keywords): the trial as a shape of this process's session, the
    sessions' folders beside the trials' (trial_dir's parent's parent, `sessions`). A trial a session
    cannot hold (several ranks, vLLM generation, a stand-in trainer_cmd) runs alone, as run_trial runs
    it."""
    global _current
    if trainer_cmd is not None or spec.num_processes > 1 or spec.generation == "vllm":
        return run_trial(spec, trial_dir=trial_dir, guard=guard, cuda_visible_devices=cuda_visible_devices,
                         cpus=cpus, trainer_cmd=trainer_cmd, **rest)  # fmt: skip
    root = Path(trial_dir).resolve().parent.parent / "sessions"
    key = (str(root), repr(guard), cuda_visible_devices, cpus)
    if _current is None or _current[0] != key:
        close_sessions()
        _current = (key, ProbeSession(root, guard, cpus=cpus, cuda_visible_devices=cuda_visible_devices))
    return _current[1].run(spec, trial_dir=trial_dir, **rest)


@atexit.register
def close_sessions() -> None:
    """End this process's session (its child, by its process group)."""
    global _current
    if _current is not None:
        _current[1].close()
        _current = None
