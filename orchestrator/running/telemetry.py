"""Memory telemetry of one trainer process, sampled from the supervisor (never inside the trainer).

`MemorySampler(pid)` runs a background thread that reads, `hz` times a second:

- always: the trainer's RSS (plus its children's, e.g. dataloader or vLLM workers), the kernel's
  high-water mark VmHWM of the trainer (/proc/<pid>/status) and the host's available memory;
- with NVML (nvidia-ml-py's `pynvml`, when a driver is present and CUDA_VISIBLE_DEVICES names a
  GPU): the device's used memory, the trainer's own used memory where NVML lists its processes
  (containers often list host PIDs only: then the device's used memory stands in), utilization and
  power. Utilization is the trainer's own where NVML reports it per process
  (nvmlDeviceGetProcessUtilization: the SM utilisation of the trainer's PIDs), else the whole GPU's
  (nvmlDeviceGetUtilizationRates, which counts every process's kernels: the neighbours' too when trials
  share the GPU); each step says which (gpu_util_source), and splits it between generation
  (gen_t_start to gen_t_end, the trainer's wall times) and the rest of the step. Without a driver (or with CUDA_VISIBLE_DEVICES hiding every GPU) the GPU fields are None,
  never 0; a GPU that is there but cannot be found from CUDA_VISIBLE_DEVICES is a sampler error,
  not a silent switch to RSS.

Samples carry wall-clock time (`time.time()`), the same clock as the trainer's step events, so the
supervisor asks `peak_between(t_start, t_end)` for each step and `peak()` for the whole trial.

The budget guard: with `budget_gib` set, every sample's guard reading (NVML process memory, else
NVML device memory less what was in use before the trial, on GPU; RSS on CPU) is compared with
budget + margin; the first time it passes, `on_budget_exceeded(BudgetBreach)` is called once, from the
sampler thread. The supervisor kills the trainer there and records status `oom` with `breach.detail`.

The margin is 0 by default on GPU and CPU (`DEFAULT_GUARD_MARGIN_GIB`): a card of `budget_gib` holds
the CUDA context, torch's caching allocator and everything else the process allocates in that much
memory, and the trainer child caps torch at the budget less its measured context
(trainers/device.py), so a configuration that fits the emulated card stays under the budget as NVML
counts it. A margin (`memory.margin_gib`) lets a user tolerate readings above the budget, e.g. to
compare with runs from before the context was charged; any margin makes the emulated card larger.

Where NVML does not list the trainer's PID (a container with its own PID namespace: NVML reports
host PIDs), the GPU figures are the device's used memory less the reading of the first sample, taken
before the trainer created its CUDA context, so memory other processes and the driver held before the
trial is not charged to it; `peak()["gpu_memory_source"]` says which source the figures came from.
That holds only for a trial alone on its GPU. Packed trials (`per_process=True`: memory-phase trials
sharing a GPU, which the driver packs only where NVML lists each process) read their own process
memory alone: a PID NVML does not list (before the trainer creates its CUDA context, seconds for TRL
and tens of seconds for Unsloth) holds 0 GiB there, for the peaks and the guard; the device's used
memory would charge the trial with its neighbours'.

A trainer forked from the fork server (orchestrator/running/launcher.py) is read as a cold one: it
holds the same modules and has the server's resident library pages mapped again (trainers/forkserver.py),
so its RSS and VmHWM mean what a cold trainer's do.

Sampling stops when the trainer exits: an exited trainer not yet reaped (a zombie, whose memory psutil
reads as 0 without raising) ends it as a vanished one does.

A sampler failure (an exception while reading, the trainer gone) never raises into the caller: the
thread records it (`error`, `stopped_because`) and stops.

A kernel OOM kill is told from another SIGKILL by orchestrator/running/kernel_oom.py.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from orchestrator.words.settings import DEFAULT_GUARD_MARGIN_GIB, DEFAULT_HZ
from trainers.nvml import (
    NvmlUnavailable,
    import_pynvml,
    open_visible_device,
    process_used_bytes,
    text,
)
from trainers.record import SAMPLER_FIELDS
from trainers.record import STEP as F  # the step record's field names
from trainers.units import GIB

# How often the list of the trainer's child processes, and their unique memory, is refreshed: scanning
# /proc for children takes ~5 ms, and a child's unique set size (the kernel walks its page tables for
# /proc/<pid>/smaps) ~30 ms for a forked copy of a trainer: at DEFAULT_HZ that alone would keep most of a
# core busy beside the trainers. Children come and go rarely; a forked scorer's memory moves slowly.
CHILDREN_REFRESH_S = 1.0


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading. GiB throughout; None where the machine cannot measure the value."""

    t: float  # wall clock, time.time()
    rss_gib: float  # trainer + its children
    hwm_gib: float | None  # kernel high-water mark of the trainer's RSS (VmHWM)
    host_available_gib: float
    device_used_gib: float | None = None  # whole device, NVML
    process_used_gib: float | None = None  # the trainer (and children) as NVML lists them
    gpu_util_pct: float | None = None  # the whole GPU's (nvmlDeviceGetUtilizationRates)
    power_w: float | None = None
    device_baseline_gib: float | None = None  # device memory in use before the trial (first sample)
    process_util_pct: float | None = None  # the trainer's own SM utilisation (per-process NVML)

    @property
    def util_source(self) -> str | None:
        """Where util_pct comes from: "process", "device" or None (not measured)."""
        if self.process_util_pct is not None:
            return "process"
        return "device" if self.gpu_util_pct is not None else None

    @property
    def util_pct(self) -> float | None:
        """The trainer's utilisation where NVML reports it per process, else the whole GPU's."""
        return self.process_util_pct if self.process_util_pct is not None else self.gpu_util_pct

    @property
    def gpu_source(self) -> str | None:
        """Where gpu_gib comes from: "process" (NVML lists the trainer), "device" or None (no NVML)."""
        if self.process_used_gib is not None:
            return "process"
        return "device" if self.device_used_gib is not None else None

    @property
    def gpu_gib(self) -> float | None:
        """The trial's GPU memory: its own where NVML lists it, else the device's used memory less what
        was in use before the trial."""
        if self.process_used_gib is not None:
            return self.process_used_gib
        if self.device_used_gib is None:
            return None
        return self.device_used_gib - (self.device_baseline_gib or 0.0)


@dataclass(frozen=True)
class BudgetBreach:
    """The reading that passed the budget: what the supervisor records for an `oom` guard kill."""

    source: str  # "RSS", "GPU process memory" or "GPU device memory"
    reading_gib: float
    budget_gib: float
    margin_gib: float
    baseline_gib: float  # memory in use before the trial, not charged to it (device source only)
    t: float

    @property
    def _reading_text(self) -> str:
        # The guard fires on the first sample over the limit, often within 0.01 GiB of it: show a
        # third decimal rather than "0.80 GiB passed budget 0.80 GiB".
        text = f"{self.reading_gib:.2f}"
        return f"{self.reading_gib:.3f}" if text == f"{self.budget_gib + self.margin_gib:.2f}" else text

    @property
    def reading(self) -> str:
        """Short form for pruning details: 'RSS 1.52 GiB, budget 1.00 GiB'."""
        return f"{self.source} {self._reading_text} GiB, budget {self.budget_gib:.2f} GiB"

    @property
    def detail(self) -> str:
        extra = f"+{self.margin_gib:.2f} GiB margin"
        if self.baseline_gib:
            extra += f", +{self.baseline_gib:.2f} GiB in use before the trial"
        return (
            f"guard: {self.source} {self._reading_text} GiB passed budget {self.budget_gib:.2f} GiB ({extra})"
        )


# --- host side (psutil + /proc) -------------------------------------------------------------------


def read_vm_hwm_gib(pid: int) -> float | None:
    """The kernel's high-water mark of `pid`'s RSS (VmHWM), or None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024 / GIB  # the kernel writes kB
    except OSError:
        return None
    return None  # a zombie's status has no Vm* lines


class _HostReader:
    def __init__(self, pid: int):
        self.pid = pid
        self.process = psutil.Process(pid)
        self._children: list[psutil.Process] = []
        self._children_uss = 0  # bytes, as of the last refresh
        self._children_at = float("-inf")

    def family(self) -> list[psutil.Process]:
        self._refresh_children()
        return [self.process, *self._children]

    def _refresh_children(self) -> None:
        now = time.monotonic()
        if now - self._children_at >= CHILDREN_REFRESH_S:
            with contextlib.suppress(psutil.Error):
                self._children = self.process.children(recursive=True)
            # A child counts by its unique set: a forked helper (the reward worker) shares the
            # trainer's pages, and adding its RSS would count them twice.
            uss = 0
            for child in self._children:
                with contextlib.suppress(psutil.Error):
                    uss += child.memory_full_info().uss
            self._children_uss, self._children_at = uss, now

    def read(self) -> tuple[float, float | None, float]:
        # The trainer itself must be readable (NoSuchProcess ends sampling); a child may be gone.
        # An exited trainer not yet reaped reads as 0 bytes: it has exited all the same.
        if self.process.status() == psutil.STATUS_ZOMBIE:
            raise psutil.ZombieProcess(self.pid)
        rss = self.process.memory_info().rss
        if rss == 0:
            # Between the status look and this read the trainer reached its exit: its memory is released
            # before it turns zombie. A running process always holds pages, so 0 bytes is an exit.
            raise psutil.ZombieProcess(self.pid)
        self._refresh_children()
        rss += self._children_uss
        return rss / GIB, read_vm_hwm_gib(self.pid), psutil.virtual_memory().available / GIB


# --- GPU side (NVML) ------------------------------------------------------------------------------


class _NvmlReader:
    def __init__(self, nvml: Any, cuda_visible_devices: str | None):
        self.nvml = nvml
        self.handle = open_visible_device(nvml, cuda_visible_devices)
        try:
            self.name = text(nvml.nvmlDeviceGetName(self.handle))
            self.total_gib = nvml.nvmlDeviceGetMemoryInfo(self.handle).total / GIB
        except BaseException:
            nvml.nvmlShutdown()
            raise
        # Utilization and power are unsupported on MIG instances and some boards: ask once, then
        # leave them None instead of paying a failing call 20 times a second.
        self.unsupported: set[str] = set()
        self._util_seen = 0  # NVML's timestamp (us) of the newest per-process utilisation sample read
        self._own_util: float | None = None  # the pids' latest per-process utilisation
        self._listed = False  # NVML's per-process utilisation has listed the pids once

    def _optional(self, name: str, call: Callable[[], float]) -> float | None:
        if name in self.unsupported:
            return None
        try:
            return call()
        except self.nvml.NVMLError:
            self.unsupported.add(name)
            return None

    def process_util(self, pids: set[int]) -> float | None:
        """The pids' SM utilisation (summed over them, mean over NVML's samples since the last call);
        None where NVML cannot say it per process or has never listed them (a container's own PID
        namespace), so the device's figure stands in. Once listed, a pid absent from NVML's new
        samples ran no kernel in them: 0."""
        if "process_utilization" in self.unsupported:
            return None
        nvml = self.nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(self.handle, self._util_seen)
        except nvml.NVMLError as exc:
            if isinstance(exc, getattr(nvml, "NVMLError_NotFound", ())):
                return self._own_util  # no sample newer than the last read: the last one holds
            self.unsupported.add("process_utilization")
            return None
        if not samples:
            return self._own_util
        self._util_seen = max(self._util_seen, *(int(s.timeStamp) for s in samples))
        by_time: dict[int, float] = {}
        for s in samples:
            if s.pid in pids:
                by_time[int(s.timeStamp)] = by_time.get(int(s.timeStamp), 0.0) + float(s.smUtil)
        if by_time:
            self._listed = True
            self._own_util = sum(by_time.values()) / len(by_time)
        elif self._listed:
            self._own_util = 0.0
        return self._own_util

    def read(
        self, pids: set[int], per_process: bool
    ) -> tuple[float, float | None, float | None, float | None, float | None]:
        """(device used, the pids' own, the device's utilization, power, the pids' own utilization).
        per_process: the pids' own memory is always read (an NVML failure raises) and a PID NVML does
        not list holds 0."""
        nvml, handle = self.nvml, self.handle
        used = nvml.nvmlDeviceGetMemoryInfo(handle).used / GIB
        if per_process:
            own = (process_used_bytes(nvml, handle, pids) or 0) / GIB
        else:
            own = self._optional("processes", lambda: _gib(process_used_bytes(nvml, handle, pids)))
        util = self._optional("utilization", lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
        power = self._optional("power", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)  # mW
        return used, own, util, power, self.process_util(pids)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()


def _gib(value: int | None) -> float | None:
    return value / GIB if value is not None else None


# --- windows --------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def energy_between(samples: Sequence[Sample], t0: float, t1: float) -> tuple[float | None, float]:
    """Energy in joules over [t0, t1] from the power samples (trapezoids, linear interpolation at
    the window's edges; no extrapolation beyond the first or last sample) and the seconds covered."""
    points = [(s.t, s.power_w) for s in samples if s.power_w is not None]
    if not points:
        return None, 0.0
    lo, hi = max(t0, points[0][0]), min(t1, points[-1][0])
    if hi < lo:
        return None, 0.0
    times = [t for t, _ in points]

    def power_at(t: float) -> float:
        i = bisect.bisect_left(times, t)
        if i < len(times) and times[i] == t:
            return points[i][1]
        (ta, pa), (tb, pb) = points[i - 1], points[i]
        return pa + (pb - pa) * (t - ta) / (tb - ta)

    knots = [(lo, power_at(lo))] + [p for p in points if lo < p[0] < hi] + [(hi, power_at(hi))]
    energy = sum((tb - ta) * (pa + pb) / 2 for (ta, pa), (tb, pb) in zip(knots, knots[1:], strict=False))
    return energy, hi - lo


def utilisation(inside: Sequence[Sample], gen: tuple[float, float] | None = None) -> dict[str, Any]:
    """A step's utilisation from its samples: the trainer's own where any sample has it, else the
    whole GPU's; split between the samples within generation `gen` = (start, end) and the rest. A
    figure no sample measured is None, never 0."""
    process = [s for s in inside if s.process_util_pct is not None]
    chosen = process or [s for s in inside if s.gpu_util_pct is not None]
    values = [(s.t, s.util_pct if process else s.gpu_util_pct) for s in chosen]
    in_gen = [v for t, v in values if gen is not None and gen[0] <= t <= gen[1]]
    rest = [v for t, v in values if gen is None or not gen[0] <= t <= gen[1]]
    return {
        F.gpu_util_pct: _mean([v for _, v in values]),
        F.gen_util_pct: _mean(in_gen),
        F.train_util_pct: _mean(rest),
        F.gpu_util_source: ("process" if process else "device") if chosen else None,
    }


_UNSPLIT = {F.gen_util_pct: None, F.train_util_pct: None}


def summarize_window(
    samples: Sequence[Sample], t0: float, t1: float, gen: tuple[float, float] | None = None
) -> dict[str, Any]:
    """Per-step figures for [t0, t1] from time-ordered samples; `gen`, the step's generation's wall
    times, splits its utilisation (utilisation).

    A window with no sample in it (a step shorter than the sampling interval) reports the latest
    sample before t1: the state the step ended in. The trainer's VmHWM counts too: when it rose
    during the window, the trainer reached that RSS inside it, even if no sample caught the moment.
    """
    inside = [s for s in samples if t0 <= s.t <= t1]
    before = [s for s in samples if s.t < t0]
    if not inside:
        inside = [s for s in samples if s.t <= t1][-1:]
    if not inside:
        return {key: None for key in SAMPLER_FIELDS} | {F.samples: 0}
    last = inside[-1]
    rss_peak = max(s.rss_gib for s in inside)
    hwm_start = before[-1].hwm_gib if before else None
    if last.hwm_gib is not None and (hwm_start is None or last.hwm_gib > hwm_start):
        rss_peak = max(rss_peak, last.hwm_gib)
    gpu = [s.gpu_gib for s in inside if s.gpu_gib is not None]
    energy, covered = energy_between(samples, t0, t1)
    powers = [s.power_w for s in inside if s.power_w is not None]
    return {
        F.device_used_gib: last.gpu_gib,
        F.device_peak_gib: max(gpu) if gpu else None,
        F.rss_gib: last.rss_gib,
        F.rss_peak_gib: rss_peak,
        F.rank_device_peak_gib: None,  # one process: RankSamplers fills these for a trial over ranks
        F.rank_rss_peak_gib: None,
        # a window without a sample of its own: the state it ended in, not split by phase
        **(utilisation(inside, gen) if inside[0].t >= t0 else utilisation(inside) | _UNSPLIT),
        # time-weighted where the window is covered by power samples, else their plain mean
        F.power_w: energy / covered if energy is not None and covered > 0 else _mean(powers),
        F.energy_j: energy,
        F.samples: sum(1 for s in samples if t0 <= s.t <= t1),
    }


# --- the sampler ----------------------------------------------------------------------------------


class MemorySampler:
    """Samples one trainer process (and its GPU) in a background thread. See the module docstring.

    backend: "auto" (NVML when it can sample the trial's GPU, else psutil), "nvml" or "psutil".
    nvml: the pynvml module to use (tests inject a fake); default imports nvidia-ml-py's pynvml.
    retention_s: samples older than this are dropped (the overall peak and energy are kept apart).
    per_process: the trial shares its GPU (packed): its GPU figures and guard are its own NVML process
    memory only, 0 while NVML does not list it; never the device's used memory.
    """

    def __init__(
        self,
        pid: int,
        *,
        hz: float = DEFAULT_HZ,
        cuda_visible_devices: str | None = None,
        backend: str = "auto",
        budget_gib: float | None = None,
        margin_gib: float | None = None,
        on_budget_exceeded: Callable[[BudgetBreach], None] | None = None,
        on_sample: Callable[[Sample], None] | None = None,
        retention_s: float = 900.0,
        nvml: Any = None,
        per_process: bool = False,
    ):
        if hz <= 0:
            raise ValueError(f"hz: must be > 0, got {hz!r}; the default is {DEFAULT_HZ}")
        if backend not in ("auto", "nvml", "psutil"):
            raise ValueError(f"backend: unknown value {backend!r}; available: auto, nvml, psutil")
        self.pid = pid
        self.hz = hz
        self.budget_gib = budget_gib
        self.on_budget_exceeded = on_budget_exceeded
        self.on_sample = on_sample
        self.per_process = per_process
        self._cvd = (
            cuda_visible_devices
            if cuda_visible_devices is not None
            else os.environ.get("CUDA_VISIBLE_DEVICES")
        )
        self._requested_backend = backend
        self._nvml_module = nvml
        self._margin_override = margin_gib
        self._samples: deque[Sample] = deque(maxlen=max(16, int(retention_s * hz)))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._host: _HostReader | None = None
        self._gpu: _NvmlReader | None = None
        self._device_baseline_gib: float | None = None
        self._facts: tuple[str | None, float | None] = (None, None)  # GPU name, total GiB
        self._breach: BudgetBreach | None = None
        self._peak: dict[str, float | None] = {"device_peak_gib": None, "rss_peak_gib": None}
        self._gpu_sources: set[str] = set()
        self._energy_j: float | None = None
        self._last_power: tuple[float, float] | None = None
        self._count = 0
        self.backend: str | None = None  # "nvml" or "psutil" once started
        self.notes: list[str] = []  # why NVML was not used, which readings the device lacks
        self.error: str | None = None  # an unexpected failure that stopped sampling
        self.stopped_because: str | None = None  # why sampling ended on its own

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> MemorySampler:
        """Open the backends, take a first sample and start the thread. Never raises."""
        try:
            self._open()
            self.sample_once()
        except Exception as exc:
            self._fail(exc)
            return self
        self._thread = threading.Thread(target=self._run, name=f"memory-sampler-{self.pid}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and release NVML; idempotent. The samples stay readable."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self._gpu is not None:
            self._gpu.close()
            self._gpu = None

    def __enter__(self) -> MemorySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- facts about the device ---------------------------------------------------------------

    @property
    def gpu_name(self) -> str | None:
        return self._facts[0]

    @property
    def gpu_total_gib(self) -> float | None:
        return self._facts[1]

    @property
    def margin_gib(self) -> float:
        return self._margin_override if self._margin_override is not None else DEFAULT_GUARD_MARGIN_GIB

    # -- reading ------------------------------------------------------------------------------

    def sample_once(self) -> Sample:
        """Take one sample now (the thread calls this; so may tests). Raises on a read failure."""
        assert self._host is not None, "start() opens the backends"
        t = time.time()
        rss, hwm, available = self._host.read()
        fields: dict[str, Any] = {}
        if self._gpu is not None:
            pids = {p.pid for p in self._host.family()}
            used, own, util, power, own_util = self._gpu.read(pids, self.per_process)
            if self._device_baseline_gib is None and not self.per_process:
                self._device_baseline_gib = used
            fields = {
                "device_used_gib": used,
                "process_used_gib": own,
                "gpu_util_pct": util,
                "power_w": power,
                "device_baseline_gib": self._device_baseline_gib,
                "process_util_pct": own_util,
            }
        sample = Sample(t=t, rss_gib=rss, hwm_gib=hwm, host_available_gib=available, **fields)
        self._record(sample)
        return sample

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def latest(self) -> Sample | None:
        with self._lock:
            return self._samples[-1] if self._samples else None

    def peak_between(self, t0: float, t1: float, gen: tuple[float, float] | None = None) -> dict[str, Any]:
        """Figures for one step window [t0, t1] (wall clock), its generation within gen: see
        summarize_window."""
        return summarize_window(self.samples(), t0, t1, gen)

    def peak(self) -> dict[str, Any]:
        """The trial's figures so far: peaks over every sample, VmHWM included, and total energy."""
        last = self.latest()
        with self._lock:
            peak = dict(self._peak)
            energy = self._energy_j
        return {
            **peak,
            "device_used_gib": last.gpu_gib if last else None,
            "rss_gib": last.rss_gib if last else None,
            "hwm_gib": last.hwm_gib if last else None,
            "energy_j": energy,
            "samples": self._count,
            "gpu_name": self.gpu_name,
            "gpu_total_gib": self.gpu_total_gib,
            "gpu_memory_source": self.gpu_memory_source,
            "backend": self.backend,
            "error": self.error,
        }

    @property
    def gpu_memory_source(self) -> str | None:
        """ "process" when NVML listed the trainer in any sample (its steps run after the CUDA context
        exists, so their figures are its own), "device" when it never did, None without NVML."""
        with self._lock:
            sources = set(self._gpu_sources)
        return "process" if "process" in sources else ("device" if sources else None)

    @property
    def breach(self) -> BudgetBreach | None:
        return self._breach

    # -- internals ----------------------------------------------------------------------------

    def _open(self) -> None:
        self._host = _HostReader(self.pid)
        if self._requested_backend != "psutil":
            try:
                nvml = self._nvml_module or import_pynvml()
                self._gpu = _NvmlReader(nvml, self._cvd)
                self._facts = (self._gpu.name, self._gpu.total_gib)
            except NvmlUnavailable as exc:
                # Only a host without a GPU for this trial falls back to RSS: a GPU that cannot be
                # found must not have its budget silently compared with host memory.
                if self._requested_backend == "nvml" or not exc.no_gpu:
                    raise
                self.notes.append(f"NVML not used: {exc}")
        self.backend = "nvml" if self._gpu is not None else "psutil"

    def _record(self, sample: Sample) -> None:
        with self._lock:
            self._samples.append(sample)
            self._count += 1
            self._peak["rss_peak_gib"] = _max(self._peak["rss_peak_gib"], sample.rss_gib, sample.hwm_gib)
            self._peak["device_peak_gib"] = _max(self._peak["device_peak_gib"], sample.gpu_gib)
            if sample.gpu_source is not None:
                self._gpu_sources.add(sample.gpu_source)
            if sample.power_w is not None:
                if self._last_power is not None:
                    t, p = self._last_power
                    self._energy_j = (self._energy_j or 0.0) + (sample.t - t) * (p + sample.power_w) / 2
                self._last_power = (sample.t, sample.power_w)
        self._check_budget(sample)
        if self.on_sample is not None:
            self._call(self.on_sample, sample)

    def _guard_reading(self, sample: Sample) -> tuple[str, float, float] | None:
        if self.backend == "nvml":
            if sample.process_used_gib is not None:
                return "GPU process memory", sample.process_used_gib, 0.0
            if sample.device_used_gib is not None:
                return "GPU device memory", sample.device_used_gib, self._device_baseline_gib or 0.0
            return None
        return "RSS", sample.rss_gib, 0.0

    def _check_budget(self, sample: Sample) -> None:
        if self.budget_gib is None or self._breach is not None:
            return
        reading = self._guard_reading(sample)
        if reading is None:
            return
        source, value, baseline = reading
        if value > self.budget_gib + self.margin_gib + baseline:
            self._breach = BudgetBreach(source, value, self.budget_gib, self.margin_gib, baseline, sample.t)
            if self.on_budget_exceeded is not None:
                self._call(self.on_budget_exceeded, self._breach)

    def _call(self, callback: Callable[[Any], None], arg: Any) -> None:
        try:
            callback(arg)
        except Exception as exc:  # a listener's bug must not stop the sampling
            self.notes.append(f"callback {getattr(callback, '__name__', callback)!r} raised {exc!r}")

    def _run(self) -> None:
        interval = 1.0 / self.hz
        deadline = time.monotonic()
        while True:
            # A fixed schedule rather than sleep(interval) keeps the rate at hz however long a read
            # takes; after a stall (a busy machine) it restarts from now instead of bursting.
            deadline = max(deadline + interval, time.monotonic())
            if self._stop.wait(deadline - time.monotonic()):
                return
            try:
                self.sample_once()
            except Exception as exc:
                self._fail(exc)
                return

    def _fail(self, exc: BaseException) -> None:
        if isinstance(exc, psutil.NoSuchProcess):
            self.stopped_because = f"trainer process {self.pid} exited"
        else:
            self.error = f"{type(exc).__name__}: {exc}"
            self.stopped_because = "sampler error"
        self._stop.set()


def _max(current: float | None, *values: float | None) -> float | None:
    present = [v for v in (current, *values) if v is not None]
    return max(present) if present else None


# --- a trial over several ranks -------------------------------------------------------------------


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
