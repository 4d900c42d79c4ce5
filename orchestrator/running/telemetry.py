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

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

# The readings and the window figures are part of this module's face (kernel_oom.py, the vLLM server, tests).
from orchestrator.running._readers import (  # noqa: F401
    CHILDREN_REFRESH_S,
    Sample,
    _HostReader,
    _NvmlReader,
    read_vm_hwm_gib,
)
from orchestrator.running._windows import _mean, energy_between, summarize_window, utilisation  # noqa: F401
from orchestrator.words.settings import DEFAULT_GUARD_MARGIN_GIB, DEFAULT_HZ
from trainers.nvml import (
    NvmlUnavailable,
    import_pynvml,
)


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
