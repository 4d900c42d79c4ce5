"""What the memory sampler (telemetry.py) reads: one Sample, the host side (psutil and /proc) and the GPU's (NVML)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from trainers.nvml import (
    open_visible_device,
    process_used_bytes,
    text,
)
from trainers.units import GIB

# How often the list of the trainer's child processes, and their unique memory, is refreshed: scanning
# /proc for children takes ~5 ms, and a child's unique set size (the kernel walks its page tables for
# /proc/<pid>/smaps) ~30 ms for a forked copy of a trainer: at DEFAULT_HZ that alone would keep most of a
# core busy beside the trainers. Children come and go rarely; a forked scorer's memory moves slowly.
CHILDREN_REFRESH_S = 1.0
# ... except where the trainer's own RSS reaches a new high, by this share over its reading at the last
# refresh: then the children are read at once, so a peak never pairs the trainer's high with a list of
# children up to a second old. The reward worker is forked at the first scoring, often under a second
# before the step's peak: read a second late, it was in some peaks and not in others (tiny, 3 steps:
# 0.638 or 0.665 GiB, the worker's 0.027 GiB unique set counted or not, cold and forked alike).
CHILDREN_REFRESH_ON_HIGH = 0.01


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
        self._own_at_refresh = 0  # the trainer's RSS when the children were last read, bytes

    def family(self) -> list[psutil.Process]:
        self._refresh_children()
        return [self.process, *self._children]

    def _refresh_children(self, own: int = 0) -> None:
        now = time.monotonic()
        high = own > self._own_at_refresh * (1 + CHILDREN_REFRESH_ON_HIGH)
        if high or now - self._children_at >= CHILDREN_REFRESH_S:
            self._own_at_refresh = max(own, self._own_at_refresh)
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
        self._refresh_children(rss)
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
