"""The sampler against real child processes (psutil backend): RSS, peaks, VmHWM, step windows,
children's memory, the budget guard killing a child, and a child that exits under it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from orchestrator.running.kernel_oom import classify_kernel_oom, oom_kill_counts
from orchestrator.running.telemetry import MemorySampler, read_vm_hwm_gib
from trainers.units import GIB

pytestmark = pytest.mark.slow
MIB = 1024**2

# Allocates (and touches: bytes * n writes every page) 300 MiB, then frees it, one step per line on
# stdin, saying what it did on stdout.
STEPS_CHILD = textwrap.dedent(
    """
    import sys
    def step(word):
        print(word, flush=True)
        if not sys.stdin.readline():
            sys.exit(0)
    step("ready")
    block = b"\\x01" * (300 * 2**20)
    step("allocated")
    del block
    step("freed")
    """
)


def spawn(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def wait_for_sample_after(sampler: MemorySampler, t: float, timeout: float = 10.0) -> None:
    """Block until the sampler has a reading taken after wall-clock time t."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        latest = sampler.latest()
        if latest is not None and latest.t > t:
            return
        time.sleep(0.01)
    raise AssertionError(
        f"no sample after {t} within {timeout} s: {sampler.error or sampler.stopped_because}"
    )


def advance(child: subprocess.Popen, expected: str) -> None:
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == expected


def test_sampler_reads_a_real_childs_rss_peak_and_vmhwm_per_window():
    child = spawn(STEPS_CHILD)
    sampler = MemorySampler(child.pid, backend="psutil", hz=50)
    try:
        assert child.stdout.readline().strip() == "ready"
        sampler.start()
        assert sampler.backend == "psutil" and sampler.running

        t_alloc = time.time()
        advance(child, "allocated")
        wait_for_sample_after(sampler, time.time())
        t_allocated = time.time()
        advance(child, "freed")
        t_freed = time.time()
        wait_for_sample_after(sampler, t_freed)
        wait_for_sample_after(sampler, time.time())
        t_end = time.time()

        hwm = read_vm_hwm_gib(child.pid)
        alloc_window = sampler.peak_between(t_alloc, t_allocated)
        freed_window = sampler.peak_between(t_freed, t_end)
        overall = sampler.peak()
        child.stdin.close()
        child.wait(30)
        # the child exited: the sampler stops on its own, an ending rather than an error
        deadline = time.monotonic() + 10
        while sampler.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not sampler.running
        assert sampler.stopped_because == f"trainer process {child.pid} exited" and sampler.error is None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        sampler.stop()

    assert alloc_window["rss_peak_gib"] >= 250 * MIB / GIB
    assert alloc_window["samples"] >= 1
    # after the free: RSS back down, and the window does not inherit the earlier high-water mark
    assert freed_window["rss_gib"] < alloc_window["rss_peak_gib"] - 200 * MIB / GIB
    assert freed_window["rss_peak_gib"] < alloc_window["rss_peak_gib"] - 200 * MIB / GIB
    # the kernel's high-water mark saw the whole block, and no sample exceeded it
    assert hwm >= 300 * MIB / GIB
    assert max(s.rss_gib for s in sampler.samples()) <= hwm + 1 * MIB / GIB
    assert overall["rss_peak_gib"] >= hwm
    for window in (alloc_window, freed_window):
        assert window["device_peak_gib"] is None and window["gpu_util_pct"] is None
        assert window["power_w"] is None and window["energy_j"] is None


def test_sampler_counts_the_trainers_children():
    # the child itself stays small; its own child (a dataloader worker, say) holds 200 MiB
    code = textwrap.dedent(
        """
        import subprocess, sys
        grandchild = subprocess.Popen([sys.executable, "-c",
            "import sys; b = b'\\\\x01' * (200 * 2**20); print('held', flush=True); sys.stdin.readline()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        print(grandchild.stdout.readline().strip(), flush=True)
        sys.stdin.readline()
        grandchild.stdin.close()
        grandchild.wait()
        """
    )
    child = spawn(code)
    sampler = MemorySampler(child.pid, backend="psutil", hz=20)
    try:
        assert child.stdout.readline().strip() == "held"
        sampler.start()
        own_rss = sampler.latest().hwm_gib  # the child's own high-water mark: small
        # the list of children is refreshed about once a second: wait for a sample that has it
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sampler.latest().rss_gib < 200 * MIB / GIB:
            time.sleep(0.05)
        family_rss = sampler.latest().rss_gib
    finally:
        child.stdin.close()
        child.wait(30)
        sampler.stop()
    assert own_rss < 100 * MIB / GIB
    assert family_rss >= 200 * MIB / GIB


# Holds 300 MiB, then forks a helper (as the trainer forks its reward worker) and says `forked`; a line
# on stdin ends both.
FORKING_CHILD = textwrap.dedent(
    """
    import os, sys, time
    held = b'\\x01' * (300 * 2**20)
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    print('forked', flush=True)
    sys.stdin.readline()
    os.kill(pid, 9)
    """
)


def test_a_forked_helper_adds_only_what_it_does_not_share_with_the_trainer():
    # The trainer holds 300 MiB, then forks a helper (as the reward worker is): the pages they share
    # are the trainer's once, not twice.
    child = spawn(FORKING_CHILD)
    sampler = MemorySampler(child.pid, backend="psutil", hz=20)
    try:
        assert child.stdout.readline().strip() == "forked"
        sampler.start()
        time.sleep(2.5)  # past a refresh of the list of children
        family_rss = sampler.latest().rss_gib
        own_rss = psutil.Process(child.pid).memory_info().rss / GIB
        helpers = psutil.Process(child.pid).children()
    finally:
        child.stdin.close()
        child.wait(30)
        sampler.stop()
    assert len(helpers) == 1 and own_rss >= 300 * MIB / GIB
    assert own_rss <= family_rss < own_rss + 100 * MIB / GIB  # not 2 x 300 MiB


def test_a_helpers_unique_memory_is_read_once_per_refresh_not_at_every_sample(monkeypatch):
    # Its unique set costs ~30 ms a read for a trainer-sized process (the kernel walks its page tables):
    # at 20 samples a second that would keep most of a core busy beside the trainers.
    reads = []
    full_info = psutil.Process.memory_full_info
    monkeypatch.setattr(
        psutil.Process, "memory_full_info", lambda self: reads.append(self.pid) or full_info(self)
    )
    child = spawn(FORKING_CHILD)
    sampler = MemorySampler(child.pid, backend="psutil", hz=20)
    try:
        assert child.stdout.readline().strip() == "forked"
        sampler.start()
        time.sleep(3.2)
        samples = len(sampler.samples())
    finally:
        child.stdin.close()
        child.wait(30)
        sampler.stop()
    assert samples >= 30  # 20 a second, less what a loaded host drops
    assert 1 <= len(reads) <= 5  # about one a second (CHILDREN_REFRESH_S), for the one helper


# Holds 200 MiB, forks a helper, rewrites its 200 MiB (the helper's copy becomes the helper's own: its
# unique set), then reaches a new high (300 MiB more) and holds it until stdin closes.
HIGH_AFTER_FORK_CHILD = textwrap.dedent(
    """
    import os, sys, time
    held = bytearray(b"\\x01" * (200 * 2**20))
    print("ready", flush=True)
    sys.stdin.readline()
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    for i in range(0, len(held), 4096):
        held[i] = 2
    more = b"\\x01" * (300 * 2**20)
    print("high", flush=True)
    sys.stdin.readline()
    os.kill(pid, 9)
    """
)


def test_a_new_high_of_the_trainer_reads_its_children_at_once(monkeypatch):
    # The reward worker is forked at the first scoring, often under a second before the step's peak: a
    # peak that paired the trainer's high with the children read up to CHILDREN_REFRESH_S before left
    # the worker out in some trials and not in others. Here the periodic refresh never comes again
    # after the first reading, so only the new high can bring the helper into the peak.
    from orchestrator.running import _readers

    monkeypatch.setattr(_readers, "CHILDREN_REFRESH_S", 3600.0)
    child = spawn(HIGH_AFTER_FORK_CHILD)
    sampler = MemorySampler(child.pid, backend="psutil", hz=20)
    try:
        assert child.stdout.readline().strip() == "ready"
        sampler.start()
        wait_for_sample_after(sampler, time.time())  # the children read once, before the fork: none
        child.stdin.write("fork\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "high"
        wait_for_sample_after(sampler, time.time() + 0.3)
        own = psutil.Process(child.pid).memory_info().rss / GIB
        peak = sampler.peak()["rss_peak_gib"]
    finally:
        child.stdin.close()
        child.wait(30)
        sampler.stop()
    assert own >= 480 * MIB / GIB
    assert peak >= own + 150 * MIB / GIB, (peak, own)  # the helper's 200 MiB of its own, counted


GROWING_CHILD = textwrap.dedent(
    """
    import time
    held = []
    while len(held) < 48:  # 48 x 32 MiB = 1.5 GiB at most, should the guard not act
        held.append(b"\\x01" * (32 * 2**20))
        time.sleep(0.02)
    time.sleep(60)
    """
)


def test_the_guard_fires_once_for_a_real_child_passing_its_budget_and_the_callback_kills_it():
    child = subprocess.Popen([sys.executable, "-c", GROWING_CHILD])
    breaches = []

    def kill(breach):
        breaches.append(breach)
        os.kill(child.pid, signal.SIGKILL)

    before = oom_kill_counts(child.pid)
    sampler = MemorySampler(child.pid, backend="psutil", hz=20, budget_gib=0.25, on_budget_exceeded=kill)
    try:
        sampler.start()
        returncode = child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        sampler.stop()
    after = oom_kill_counts()

    assert returncode == -signal.SIGKILL
    assert len(breaches) == 1 and sampler.breach is breaches[0]
    breach = breaches[0]
    assert breach.source == "RSS" and 0.25 < breach.reading_gib < 1.5
    # a reading that rounds to the budget shows a third decimal (0.250 GiB passed 0.25 GiB)
    shown = (
        f"{breach.reading_gib:.2f}" if f"{breach.reading_gib:.2f}" != "0.25" else f"{breach.reading_gib:.3f}"
    )
    assert breach.detail == f"guard: RSS {shown} GiB passed budget 0.25 GiB (+0.00 GiB margin)"
    # our own SIGKILL while memory was far from the host's limit is not the kernel's OOM killer
    cgroup_only = ({k: v for k, v in c.items() if k == "cgroup"} for c in (before, after))
    assert (
        classify_kernel_oom(
            returncode,
            last_sample=sampler.latest(),
            counts_before=next(cgroup_only),
            counts_after=next(cgroup_only),
        )
        is None
    )
