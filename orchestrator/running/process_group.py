"""Ending a trainer child: its whole process group, politely first (SIGTERM, then SIGKILL after a grace).
The supervisor's loop and the rank watch both poll at POLL_S."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.running.launcher import ForkedChild

POLL_S = 0.1
TERM_GRACE_S = 5.0


def kill_group(proc: subprocess.Popen | ForkedChild, grace_s: float = TERM_GRACE_S) -> None:
    """SIGTERM the child's whole process group, then SIGKILL what is still there after grace_s."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            kill_leftovers(proc)
            break
        except subprocess.TimeoutExpired:
            continue


def kill_leftovers(proc: subprocess.Popen | ForkedChild) -> None:
    """The leader has exited: SIGKILL any helper it left in its process group (a scorer, a compile
    worker)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
