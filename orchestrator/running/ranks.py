"""A trial over several ranks (accelerate's launcher; trainers/distributed.py): the ranks' rendezvous
port and program, the watch over the ranks the launcher started (RankWatch: which rank ended first and
why, which is to blame), and their memory read as one sampler (RankSamplers: one MemorySampler per rank
on its own GPU).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from orchestrator.running.process_group import POLL_S, TERM_GRACE_S
from orchestrator.running.telemetry import MemorySampler, Sample, _max, _mean
from orchestrator.words.outcome import FAILED, OOM, UNAVAILABLE
from orchestrator.words.settings import GuardSettings
from trainers.distributed import STACK_SIGNAL, rank_events_path, stack_path
from trainers.events import ERROR, FINISHED, STEP, is_oom, read_events
from trainers.events import OOM as OOM_EVENT
from trainers.record import STEP as F  # the step record's field names
from trainers.trial import TrialSpec

# A rank that ended without finishing: how long the launcher has to end the other ranks itself (torch's
# elastic agent notices within a tenth of a second) before the supervisor ends them.
RANK_FAILURE_GRACE_S = 2.0


def is_unavailable(event: dict[str, Any]) -> bool:
    """A final event that says the trial cannot run here (a missing package, no GPU): `unavailable`."""
    return bool(event.get("unavailable")) or event.get("type") in ("UnavailableError", "Unavailable")


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
            if is_unavailable(final):  # every rank finds the same: the trial cannot run here
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
    """A factory of RankSamplers (above): one MemorySampler per rank on the
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


class RankSamplers:
    """One MemorySampler per rank of a trial run through accelerate's launcher, read as one sampler.

    The supervisor hands each rank's PID over as it finds it (`add`); `make(pid, rank)` builds the
    rank's sampler (its own GPU, the budget guard naming the rank). A step's figures are each rank's
    peak within the step (`rank_device_peak_gib`, `rank_rss_peak_gib`: lists by rank, null where a rank
    was not sampled) and their max (device_peak_gib, rss_peak_gib: the per-GPU figure the budget is held
    to); power and energy are the ranks' sum, utilisation their mean."""

    def __init__(self, ranks: int, make: Callable[[int, int], MemorySampler]):
        self.ranks = ranks
        self.make = make
        self.samplers: dict[int, MemorySampler] = {}
        self._lock = threading.Lock()

    def add(self, rank: int, pid: int) -> None:
        with self._lock:
            if rank in self.samplers:
                return
            self.samplers[rank] = self.make(pid, rank).start()

    def start(self) -> RankSamplers:
        return self  # each rank's sampler starts when its PID is known (add)

    def stop(self) -> None:
        for sampler in self._each():
            sampler.stop()

    def _each(self) -> list[MemorySampler]:
        with self._lock:
            return [self.samplers[r] for r in sorted(self.samplers)]

    def _by_rank(self, read: Callable[[MemorySampler], dict[str, Any]]) -> list[dict[str, Any] | None]:
        with self._lock:
            samplers = dict(self.samplers)
        return [read(samplers[r]) if r in samplers else None for r in range(self.ranks)]

    def peak_between(self, t0: float, t1: float, gen: tuple[float, float] | None = None) -> dict[str, Any]:
        return combine_ranks(
            self._by_rank(lambda s: s.peak_between(t0, t1, gen)), "device_peak_gib", "rss_peak_gib"
        )

    def peak(self) -> dict[str, Any]:
        per_rank = self._by_rank(lambda s: s.peak())
        combined = combine_ranks(per_rank, "device_peak_gib", "rss_peak_gib")
        first = next((p for p in per_rank if p), {})
        for key in ("gpu_name", "gpu_total_gib", "gpu_memory_source", "backend"):
            combined[key] = first.get(key)
        combined["hwm_gib"] = _max(None, *(p.get("hwm_gib") for p in per_rank if p))
        errors = [f"rank {r}: {p['error']}" for r, p in enumerate(per_rank) if p and p.get("error")]
        combined["error"] = "; ".join(errors) or None
        return combined

    def latest(self) -> Sample | None:
        """The latest reading of the rank holding the most host memory (what a kernel OOM kill reads)."""
        readings = [s for s in (sampler.latest() for sampler in self._each()) if s is not None]
        return max(readings, key=lambda s: s.rss_gib, default=None)


def combine_ranks(per_rank: list[dict[str, Any] | None], device_key: str, rss_key: str) -> dict[str, Any]:
    """Figures of several ranks as one row: the per-rank peaks as JSON lists by rank, their max in the
    trial's own columns; energy and power summed; utilisation averaged; used and RSS the max."""
    present = [p for p in per_rank if p]

    def values(key: str) -> list[float]:
        return [p[key] for p in present if p.get(key) is not None]

    def by_rank(key: str) -> str | None:
        listed = [p.get(key) if p else None for p in per_rank]
        return json.dumps(listed) if any(v is not None for v in listed) else None

    def total(key: str) -> float | None:
        found = values(key)
        return sum(found) if found else None

    return {
        "device_used_gib": _max(None, *values("device_used_gib")),
        device_key: _max(None, *values(device_key)),
        "rss_gib": _max(None, *values("rss_gib")),
        rss_key: _max(None, *values(rss_key)),
        "rank_device_peak_gib": by_rank(device_key),
        "rank_rss_peak_gib": by_rank(rss_key),
        "gpu_util_pct": _mean(values("gpu_util_pct")),
        "gen_util_pct": _mean(values("gen_util_pct")),
        "train_util_pct": _mean(values("train_util_pct")),
        "gpu_util_source": next((p["gpu_util_source"] for p in present if p.get("gpu_util_source")), None),
        "power_w": total("power_w"),
        "energy_j": total("energy_j"),
        "samples": sum(p.get("samples") or 0 for p in present),
    }
