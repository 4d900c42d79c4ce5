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
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

import trainers
from orchestrator.running.kernel_oom import cgroup_memory_limit_gib, classify_kernel_oom, oom_kill_counts
from orchestrator.running.launcher import ForkedChild, start_trainer
from orchestrator.running.settle import settled, warm_up
from orchestrator.running.telemetry import MemorySampler, RankSamplers, Sample
from orchestrator.running.vllm_server import run_served
from orchestrator.words.outcome import COMPLETED, FAILED, OOM, STOPPED, TIMEOUT, UNAVAILABLE, TrialResult
from orchestrator.words.phases import MEMORY, SPEED, SPEED_ONLY, TrialPhases
from orchestrator.words.settings import GuardSettings
from trainers.control import CONTINUE, STOP, closes_steady_cycle, holds_here
from trainers.distributed import (
    STACK_SIGNAL,
    die_with_parent,
    launch_command,
    rank_events_path,
    stack_path,
    strategy_unavailable,
)
from trainers.events import ERROR, FINISHED, STARTED, STEP, is_oom, read_events
from trainers.events import OOM as OOM_EVENT
from trainers.models import cache_home
from trainers.nvml import CUDA_DEVICE_ORDER
from trainers.record import STEP as F  # the step record's field names
from trainers.spec import TrialSpec

POLL_S = 0.1
# A rank that ended without finishing: how long the launcher has to end the other ranks itself (torch's
# elastic agent notices within a tenth of a second) before the supervisor ends them.
RANK_FAILURE_GRACE_S = 2.0
TERM_GRACE_S = 5.0
STDERR_TAIL_CHARS = 2000
PROJECT_ROOT = str(Path(trainers.__file__).resolve().parent.parent)

# torch's caching allocator setting for both stacks. Unsloth sets expandable_segments:True in its own
# process at import (unsloth_zoo/__init__.py: PYTORCH_ALLOC_CONF on torch >= 2.10, else
# PYTORCH_CUDA_ALLOC_CONF), unless the variable is already set; it changes reserved memory and what
# NVML reads. Set before the child starts, both stacks run with it; a user's own setting wins.
ALLOC_CONF = "expandable_segments:True"

# The compilers' caches, shared by every trial on the host (a sweep's, gpu-check's, `rlsweep trial`'s)
# under <rlsweep cache>/compile/: each variable and its folder there. On an H100 Unsloth compiled each
# decoder block at the first step, 50-54 s of every trial. Unsloth (unsloth_zoo/compiler.py) writes the
# source of its patched modules into UNSLOTH_COMPILE_LOCATION, by default `unsloth_compiled_cache`
# relative to the working directory: the trial's own folder, so no trial saw another's. It regenerates
# that source in every process and rewrites a file only when its bytes differ (a header names the
# unsloth, unsloth_zoo, transformers and TRL versions), under a per-file lock (filelock), and imports the
# bytes it verified under the same lock: trials sharing the folder are safe. The compiling itself
# (Dynamo, AOTAutograd, Inductor, Triton) is torch's: Dynamo traces in every process; Inductor's FX graph
# and AOTAutograd caches (TORCHINDUCTOR_CACHE_DIR, default /tmp/torchinductor_<user>) and Triton's
# kernels (TRITON_CACHE_DIR) are reused across processes and written atomically (a temporary file, then a
# rename), so concurrent trials share them too; here they outlive /tmp and move with RLSWEEP_CACHE.
COMPILE_CACHES = (
    ("UNSLOTH_COMPILE_LOCATION", "unsloth"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ("TRITON_CACHE_DIR", "triton"),
)


def compile_cache_env() -> dict[str, str]:
    """Each compile cache's variable and its folder under rlsweep's cache (RLSWEEP_CACHE)."""
    return {name: str(cache_home() / "compile" / folder) for name, folder in COMPILE_CACHES}


def child_env(cuda_visible_devices: str | None, cpus: int | None) -> dict[str, str]:
    env = dict(os.environ)
    # torch >= 2.10 reads PYTORCH_ALLOC_CONF, older torch PYTORCH_CUDA_ALLOC_CONF: one value in both.
    alloc_conf = env.get("PYTORCH_ALLOC_CONF") or env.get("PYTORCH_CUDA_ALLOC_CONF") or ALLOC_CONF
    env["PYTORCH_ALLOC_CONF"] = env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PROJECT_ROOT, env.get("PYTHONPATH", "")) if p)
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    env.update(CUDA_DEVICE_ORDER)  # an index means the GPU NVML (the sampler) means by it
    if cpus:
        # Two busy torch threads per process on a 2-core host stall for seconds.
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(cpus)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # The trainer reports to no tracker (report_to "none"; the driver logs to MLflow): without this, TRL
    # imports mlflow anyway because it is installed (trl.extras.profiling), ~2 s of every trial's start.
    env["DISABLE_MLFLOW_INTEGRATION"] = "TRUE"
    # Unsloth's from_pretrained otherwise checks for a network and downloads a statistics repo (up to
    # 120 s) on every model load (unsloth/models/_utils.py get_statistics: any value switches it off).
    env["UNSLOTH_DISABLE_STATISTICS"] = "1"
    # One value per host (the fork server is keyed by the environment): a user's own folder wins.
    for name, folder in compile_cache_env().items():
        env.setdefault(name, folder)
    return env


def kill_group(proc: subprocess.Popen | ForkedChild, grace_s: float = TERM_GRACE_S) -> None:
    """SIGTERM the child's whole process group, then SIGKILL what is still there after grace_s."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            kill_leftovers(proc)
            break
        except subprocess.TimeoutExpired:
            continue


def kill_leftovers(proc: subprocess.Popen | ForkedChild) -> None:
    """The leader has exited: SIGKILL any helper it left in its process group (a scorer, a compile
    worker)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _tail(path: Path, chars: int = STDERR_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - chars))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _is_unavailable(event: dict[str, Any]) -> bool:
    return bool(event.get("unavailable")) or event.get("type") in ("UnavailableError", "Unavailable")


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
        if _is_unavailable(final):
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


# ------------------------------------------------------------------------------------------------
# A trial over several ranks (accelerate's launcher; trainers/distributed.py)
# ------------------------------------------------------------------------------------------------
def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for the ranks' rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rank_program(trainer_cmd: list[str] | None) -> tuple[str, ...]:
    """What each rank runs under the launcher: `-m trainers`, or a python trainer_cmd's script (tests'
    stand-in trainers: [python, script])."""
    if trainer_cmd is None:
        return ("--module", "trainers")
    if len(trainer_cmd) != 2 or trainer_cmd[0] != sys.executable:
        raise ValueError(
            f"a trial over several ranks runs a python script under accelerate: got {trainer_cmd}"
        )
    return (trainer_cmd[1],)


class RankWatch:
    """The ranks accelerate's launcher started: the launcher's children with RANK in their environment
    (torch's elastic agent runs inside the launcher and starts each rank in a session of its own). It
    hands each rank to the sampler as it appears, notes the first rank to end without its `finished`
    event (the trial fails there, naming it; the others are stopped at once), and kills every rank's
    process group at the end."""

    def __init__(self, spec: TrialSpec, events_path: Path):
        self.n = spec.num_processes
        self.events_path = str(events_path)
        self.launcher: psutil.Process | None = None
        self.pids: dict[int, int] = {}
        self.failed: int | None = None  # the first rank that ended without finishing
        self.failed_at = 0.0

    def attach(self, launcher_pid: int) -> None:
        with contextlib.suppress(psutil.Error):
            self.launcher = psutil.Process(launcher_pid)

    def _discover(self, sampler: Any) -> None:
        if self.launcher is None or len(self.pids) == self.n:
            return
        with contextlib.suppress(psutil.Error):
            for child in self.launcher.children():
                with contextlib.suppress(psutil.Error):
                    rank = child.environ().get("RANK")
                    if rank is not None and int(rank) not in self.pids:
                        self.pids[int(rank)] = child.pid
                        if isinstance(sampler, RankSamplers):
                            sampler.add(int(rank), child.pid)

    def watch(self, sampler: Any = None) -> int | None:
        """The rank that ended first without finishing (once one has), else None; finds new ranks
        first. Ranks found gone in the same look: one that ran out of memory, then one killed without a
        final event, then one that raised (a rank whose peer died raises in its collective), lowest
        first."""
        self._discover(sampler)
        if self.failed is None:
            gone = [r for r, pid in sorted(self.pids.items()) if not _running(pid) and not self._finished(r)]
            if gone:
                self.failed = min(gone, key=self._blame_order)
                self.failed_at = time.monotonic()
        return self.failed

    def _finished(self, rank: int) -> bool:
        final = self.final(rank)
        return final is not None and final.get("event") == FINISHED

    def _blame_order(self, rank: int) -> tuple[int, int]:
        final = self.final(rank)
        kind = final.get("event") if final else None
        return ({OOM_EVENT: 0, None: 1}.get(kind, 2), rank)

    def settled(self, grace_s: float = RANK_FAILURE_GRACE_S) -> bool:
        """A rank failed grace_s ago: the launcher had its time to end the others itself."""
        return self.failed is not None and time.monotonic() - self.failed_at >= grace_s

    def events(self, rank: int) -> list[dict[str, Any]]:
        events, _ = read_events(rank_events_path(self.events_path, rank))
        return events

    def final(self, rank: int) -> dict[str, Any] | None:
        return next((e for e in self.events(rank) if e.get("event") in (FINISHED, OOM_EVENT, ERROR)), None)

    def blamed(self) -> int | None:
        """The rank the trial's end is put on: a rank that ran out of memory where one did, even when a
        peer was found gone first (a rank whose peer died raises in its collective and can exit before
        the rank that ran out of memory is seen gone); else the first rank found ended (watch)."""
        oom = [r for r in sorted(self.pids) if (self.final(r) or {}).get("event") == OOM_EVENT]
        return oom[0] if oom and self.failed is not None else self.failed

    def failure(self) -> tuple[str, str]:
        """(status, detail) of a trial ended by its blamed rank: its own final event when it wrote one."""
        rank = self.blamed()
        pid = self.pids.get(rank)
        final = self.final(rank)
        others = "the other ranks were stopped"
        if final is not None and final.get("event") == OOM_EVENT:
            return OOM, f"rank {rank}: {final.get('type', 'Error')}: {final.get('message', '')}; {others}"
        if final is not None:
            message = f"{final.get('type', 'Error')}: {final.get('message', '')}".strip()
            if _is_unavailable(final):  # every rank finds the same: the trial cannot run here
                return UNAVAILABLE, str(final.get("message", ""))
            if is_oom(message):
                return OOM, f"rank {rank}: {message}; {others}"
            return FAILED, f"rank {rank} failed: {message}; {others}"
        return FAILED, f"rank {rank} (pid {pid}) ended without a final event (killed or crashed); {others}"

    def behind(self) -> str:
        """Which rank hung, for a timeout's detail: each rank's Python stack (STACK_SIGNAL, written by
        faulthandler even inside a collective) says whether it waits in torch.distributed; a rank that
        does not, while others do, is the one they wait for. Each rank's last reported step too."""
        steps = {r: max((e.get(F.step) or 0 for e in self.events(r) if e.get("event") == STEP), default=0)
                 for r in range(self.n)}  # fmt: skip
        listed = ", ".join(f"rank {r} step {step}" for r, step in steps.items())
        where = self.stacks()
        waiting = [r for r, frames in where.items() if any("torch/distributed" in f for f in frames)]
        hung = [r for r, frames in where.items() if frames and r not in waiting]
        if waiting and hung:
            ranks = ", ".join(f"rank {r} (at {where[r][0]})" for r in hung)
            return (
                f"; {ranks} hung outside the collective rank(s) {', '.join(map(str, waiting))} waited in "
                f"(last steps: {listed})"
            )
        lowest = min(steps.values())
        if lowest == max(steps.values()):
            return f"; no rank named: every rank at step {lowest}"
        behind = [r for r, step in steps.items() if step == lowest]
        return f"; rank(s) {', '.join(map(str, behind))} behind the others (last steps: {listed})"

    def stacks(self, wait_s: float = 1.0) -> dict[int, list[str]]:
        """Each running rank's innermost-first Python frames ('file:line in function'), by rank."""
        signum = getattr(signal, STACK_SIGNAL)
        for pid in self.pids.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
        time.sleep(wait_s)  # faulthandler writes at once; a rank's scheduler slot may not come at once
        out: dict[int, list[str]] = {}
        for rank in self.pids:
            try:
                text = Path(stack_path(self.events_path, rank)).read_text()
            except OSError:
                continue
            out[rank] = [
                line.strip().removeprefix('File "').replace('", line ', ":")
                for line in text.splitlines()
                if line.strip().startswith("File ")
            ]
        return out

    def kill(self, grace_s: float = TERM_GRACE_S) -> None:
        """SIGTERM each rank's process group, SIGKILL what is left after grace_s."""
        groups = list(self.pids.values())
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(_running(pid) for pid in groups) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def rank_sampler_factory(guard: GuardSettings, cuda_visible_devices: str | None, ranks: int):
    """A factory of RankSamplers (orchestrator/running/telemetry.py): one MemorySampler per rank on the
    rank's own GPU (its LOCAL_RANK's entry of cuda_visible_devices), the per-GPU budget guard naming
    the rank whose reading passed it."""

    def factory(pid: int, on_exceed):
        devices = cuda_visible_devices.split(",") if cuda_visible_devices else None

        def make(rank_pid: int, rank: int) -> MemorySampler:
            return MemorySampler(
                rank_pid,
                hz=guard.sample_hz,
                cuda_visible_devices=devices[rank] if devices else cuda_visible_devices,
                budget_gib=guard.budget_gib,
                margin_gib=guard.margin_gib,
                on_budget_exceeded=lambda breach: on_exceed(f"rank {rank}: {breach.detail}"),
            )

        return RankSamplers(ranks, make)

    return factory
