"""The kernel's OOM killer: `oom_kill_counts()` before and after a trainer died, and
`classify_kernel_oom()` to tell a kernel OOM kill from another SIGKILL."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil

from orchestrator.running.telemetry import Sample
from trainers.units import GIB


def oom_kill_counts(pid: int | str = "self") -> dict[str, int]:
    """The kernel's OOM-kill counters visible for `pid`: 'cgroup' (cgroup v2 memory.events or v1
    memory.oom_control of its memory cgroup) and 'host' (/proc/vmstat oom_kill). Read them before
    starting a trainer and after it died; missing files leave a key out."""
    counts: dict[str, int] = {}
    for path in _cgroup_oom_files(pid):
        value = _read_counter(path, "oom_kill")
        if value is not None:
            counts["cgroup"] = value
            break
    value = _read_counter(Path("/proc/vmstat"), "oom_kill")
    if value is not None:
        counts["host"] = value
    return counts


def _cgroup_oom_files(pid: int | str) -> list[Path]:
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return []
    root = Path("/sys/fs/cgroup")
    files = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2
            files += [root / rel / "memory.events", root / "memory.events"]
        elif "memory" in controllers.split(","):  # cgroup v1
            files += [root / "memory" / rel / "memory.oom_control", root / "memory" / "memory.oom_control"]
    return files


def _read_counter(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def cgroup_memory_limit_gib(pid: int | str = "self") -> float | None:
    """The memory limit of `pid`'s cgroup (v2 memory.max, v1 memory.limit_in_bytes), None if unlimited."""
    for path in _cgroup_oom_files(pid):
        name = "memory.max" if path.name == "memory.events" else "memory.limit_in_bytes"
        try:
            text = (path.parent / name).read_text().strip()
        except OSError:
            continue
        if text == "max" or int(text) >= 2**62:  # v1 writes "unlimited" as a huge number
            return None
        return int(text) / GIB
    return None


def classify_kernel_oom(
    returncode: int | None,
    *,
    last_sample: Sample | None = None,
    counts_before: dict[str, int] | None = None,
    counts_after: dict[str, int] | None = None,
    host_total_gib: float | None = None,
    limit_gib: float | None = None,
    near_fraction: float = 0.9,
) -> str | None:
    """A status detail when a trainer killed by SIGKILL was most likely killed by the kernel's OOM
    killer, else None (not SIGKILL, or nothing points at memory: someone else killed it).

    Evidence, strongest first: an OOM-kill counter rose between `counts_before` and `counts_after`
    (see oom_kill_counts); or the last sample had the trainer's RSS at >= near_fraction of the
    memory it may use (its cgroup limit, else the host's total) or the host's available memory
    below 1 - near_fraction of it.
    """
    if returncode not in (-signal.SIGKILL, 128 + signal.SIGKILL):
        return None
    reading = ""
    if last_sample is not None:
        reading = (
            f"; last reading RSS {last_sample.rss_gib:.2f} GiB, "
            f"host available {last_sample.host_available_gib:.2f} GiB"
        )
    before, after = counts_before or {}, counts_after or {}
    for key, label in (("cgroup", "its cgroup's"), ("host", "the host's")):
        if key in before and key in after and after[key] > before[key]:
            return (
                f"killed by the kernel's OOM killer (SIGKILL; {label} oom_kill count "
                f"{before[key]} -> {after[key]}){reading}"
            )
    if last_sample is None:
        return None
    total = host_total_gib if host_total_gib is not None else psutil.virtual_memory().total / GIB
    allowed = min(total, limit_gib) if limit_gib is not None else total
    rss_near = last_sample.rss_gib >= near_fraction * allowed
    host_low = last_sample.host_available_gib <= (1 - near_fraction) * total
    if rss_near or host_low:
        return (
            f"likely killed by the kernel's OOM killer (SIGKILL while memory was near the limit: "
            f"RSS {last_sample.rss_gib:.2f} GiB of {allowed:.2f} GiB allowed, "
            f"host available {last_sample.host_available_gib:.2f} of {total:.2f} GiB)"
        )
    return None
