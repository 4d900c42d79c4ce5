"""The kernel's OOM killer told from another SIGKILL: its counters before and after, else memory near the
host's or the cgroup's limit at the last sample."""

import os
import signal
import time

import pytest

from orchestrator.running.kernel_oom import cgroup_memory_limit_gib, classify_kernel_oom, oom_kill_counts
from orchestrator.running.telemetry import Sample


def test_oom_kill_counts_reads_this_hosts_counters():
    counts = oom_kill_counts()
    if not os.path.exists("/proc/vmstat"):
        pytest.skip("no /proc/vmstat")
    assert isinstance(counts["host"], int)  # every Linux >= 4.13 has it
    assert all(isinstance(v, int) and v >= 0 for v in counts.values())
    limit = cgroup_memory_limit_gib()  # None: unlimited (v1 writes that as a huge number)
    assert limit is None or 0 < limit < 2**40


def test_classify_kernel_oom():
    sigkill = -signal.SIGKILL
    near = Sample(t=time.time(), rss_gib=7.5, hwm_gib=7.5, host_available_gib=0.3)
    calm = Sample(t=time.time(), rss_gib=1.0, hwm_gib=1.0, host_available_gib=6.0)
    # a counter rose: the strongest evidence
    detail = classify_kernel_oom(
        sigkill,
        last_sample=calm,
        counts_before={"cgroup": 2, "host": 5},
        counts_after={"cgroup": 3, "host": 5},
    )
    assert detail.startswith(
        "killed by the kernel's OOM killer (SIGKILL; its cgroup's oom_kill count 2 -> 3)"
    )
    assert "RSS 1.00 GiB" in detail
    # no counter, but memory was near the host's total
    detail = classify_kernel_oom(sigkill, last_sample=near, host_total_gib=8.0)
    assert (
        detail.startswith("likely killed by the kernel's OOM killer") and "RSS 7.50 GiB of 8.00 GiB" in detail
    )
    # near a cgroup limit smaller than the host
    assert classify_kernel_oom(128 + signal.SIGKILL, last_sample=calm, host_total_gib=64.0, limit_gib=1.05)
    # SIGKILL with memory calm: someone else killed it; and other exits are not kernel OOM kills
    assert classify_kernel_oom(sigkill, last_sample=calm, host_total_gib=8.0) is None
    assert classify_kernel_oom(sigkill) is None
    assert classify_kernel_oom(1, last_sample=near, host_total_gib=8.0) is None
    assert classify_kernel_oom(-signal.SIGTERM, counts_before={"host": 1}, counts_after={"host": 2}) is None
