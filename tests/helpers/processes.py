"""Stopping what a test started, by PID: the process trees under the processes the test itself spawned."""

import psutil


def descendants(pid: int) -> list[psutil.Process]:
    """The processes `pid` has started, and theirs; empty once it is gone."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def kill_trees(processes: list[psutil.Process]) -> None:
    """Kill these processes and whatever they have started since; psutil refuses a PID reused by another."""
    tree = []
    for proc in processes:
        try:
            tree += [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    for proc in tree:
        try:
            proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    psutil.wait_procs(tree, timeout=10)
