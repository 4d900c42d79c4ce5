"""Stopping what a test started, by PID: the process trees under the processes the test itself spawned."""

import re
from pathlib import Path

import psutil

# orchestrator.running.ray_env.private_ray_temp_dir's <private>/ray, as Ray's services name it on their command lines
PRIVATE_RAY_DIR = re.compile(r"(/[^\s=]*?/rls-ray-[^/\s]+)/ray(?:/|$)")


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


def private_ray_dirs(processes: list[psutil.Process]) -> set[Path]:
    """The private temp folders of the local Ray these processes belong to (read from their command
    lines, so call it while they run): a driver killed with SIGKILL cannot remove its own."""
    found = set()
    for proc in processes:
        try:
            args = proc.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for arg in args:
            match = PRIVATE_RAY_DIR.search(arg)
            if match:
                found.add(Path(match.group(1)))
    return found
