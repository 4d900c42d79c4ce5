"""What the code sandbox's tests share (tests/unit/test_code_sandbox.py, test_code_acts.py): limits,
the double(x) tests, and the checks that a run left nothing behind."""

import os
import textwrap
import uuid
from pathlib import Path

import psutil
import pytest

from tasks.code import _sandbox
from tasks.code._sandbox import Limits

TIMEOUT_S = 1.0
LIMITS = Limits(timeout_s=TIMEOUT_S)
TESTS = ["assert double(3) == 6", "assert double(4) == 8", "assert double(0) == 0"]
SECRET = f"s3cr3t-{uuid.uuid4().hex}"
needs_cgroups = pytest.mark.skipif(
    not _sandbox.cgroups_available(), reason="no pids/memory cgroup can be made"
)


def fenced(code: str) -> str:
    return f"```python\n{textwrap.dedent(code).strip()}\n```"


def sandbox_processes() -> list[int]:
    """Processes in the cgroups of the sandboxes now open: the harness and its unshare parent per sandbox
    when nothing of a run is left."""
    pids = set()
    for sandbox in list(_sandbox._open):
        for procs in sandbox.cgroup.procs():
            pids.update(int(p) for p in Path(procs).read_text().split())
    return sorted(pids)


def sandbox_tree() -> list[psutil.Process]:
    """Every process of this process's sandboxes, found by their command line's owner tag."""
    return [p for p in psutil.process_iter(["cmdline"]) if _sandbox.owner_tag() in (p.info["cmdline"] or [])]


def assert_nothing_left(scored, marker: str | None = None) -> None:
    text = repr(scored)
    assert SECRET not in text
    assert sandbox_processes() == sorted(sandbox_processes())  # readable: the cgroups still exist
    assert len(sandbox_processes()) == 2, "a process of the run outlived it"
    if marker:
        for folder in ("/tmp", "/dev/shm", "/var/tmp", os.getcwd(), "/"):
            assert not Path(folder, marker).exists()
