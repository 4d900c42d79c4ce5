"""What a step reads from the device and the process, for trainers/measure.py: the memory peak so far,
the RSS high-water mark, torch's allocator counters, and waiting for queued GPU work."""

from __future__ import annotations

from pathlib import Path

import psutil

from trainers.record import STEP as F  # the step record's field names, defined once


def _peak_so_far() -> int:
    """The step's memory peak so far: torch's peak allocated on a GPU (reset at the step's start), else the
    process's RSS high-water mark (reset at the step's start where the kernel allows)."""
    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated())
    return _vm_hwm_bytes() or psutil.Process().memory_info().rss


def _vm_hwm_bytes() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# torch's allocator counters, per step: a cudaMalloc that failed and was retried after freeing the
# cache, and an OutOfMemoryError raised (a library that catches it and falls back shows here).
ALLOC_COUNTERS = {"num_alloc_retries": F.alloc_retries, "num_ooms": F.alloc_ooms}


def _alloc_counters() -> dict[str, int] | None:
    import torch

    if not torch.cuda.is_available():
        return None
    stats = torch.cuda.memory_stats()
    return {key: int(stats.get(key, 0)) for key in ALLOC_COUNTERS}


def wait_for_device() -> None:
    """Block until the GPU has run what was queued on it. CUDA kernels run asynchronously: a step's
    clock read without this can stop before its work is done, and the next step is charged with it.
    On a CPU there is nothing to wait for."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
