"""Several steps simulated at once, each in a worker process: a verb that asks for more than one step
(fits' stacks, a fit map's shapes) has them simulated side by side on the host's CPUs, and the answers
read back in the asking process as if it had simulated them itself (trainers.simulate's `fresh` memo).

    simulate_each(specs)    # then simulate(spec) returns each without simulating again

A worker is `python -m trainers.simulate._pool`: it reads one spec a line on stdin and writes one answer a
line on stdout (the step, or why it cannot be simulated), simulating with trainers.simulate.simulate as
the asking process would, the disk cache included. It is a process that only simulates, so TRL's optional
vLLM import is left out of it (TRL imports vLLM where it is installed, seconds of a first answer; no
simulated step runs vLLM's code: generation by vLLM is counted from its settings, not run). Each worker
takes the next spec as it finishes one, so it imports the libraries once for all the steps it simulates
(which it may take after which: _Board). A worker that dies leaves its steps to the asking process, which simulates
them itself (and says why where it cannot).

RLSWEEP_SIMULATE_WORKERS: how many workers (default: the CPUs this process may run on, at most one a
step); 0 simulates in the asking process, one step after another.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ENV = "RLSWEEP_SIMULATE_WORKERS"
ROOT = Path(__file__).resolve().parents[2]


def workers(todo: int) -> int:
    """How many worker processes simulate `todo` steps: RLSWEEP_SIMULATE_WORKERS, else the CPUs this
    process may run on; never more than the steps."""
    said = os.environ.get(ENV, "").strip()
    if said:
        try:
            wanted = int(said)
        except ValueError:
            raise ValueError(
                f"{ENV}={said!r}: a whole number of worker processes is needed (0: simulate in this "
                f"process); set e.g. {ENV}=2 or unset it"
            ) from None
    else:
        wanted = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(0, min(wanted, todo))


def run(jobs: list[dict[str, Any]], count: int) -> dict[int, dict[str, Any]]:
    """Each job ({"spec": TrialSpec.to_dict(), "prompt_tokens": int | None}) simulated by `count` worker
    processes; the answers by the job's index ({"step": SimulatedStep's fields} or {"cannot": why}). A
    job whose worker died has no answer."""
    from trainers import stacks

    board = _Board(jobs, {name: set(entry.packages) for name, entry in stacks.STACKS.items()})
    threads = [threading.Thread(target=_serve, args=(board,), daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return board.answers


class _Board:
    """The jobs left and the answers given, shared by the threads that feed the workers. A worker takes a
    job only where every stack package it has imported is one of the job's stack's own (StackEntry.packages):
    a stack whose import patches the libraries (Unsloth rewrites TRL's trainer as it imports) runs after
    the stacks it would patch or in a fresh worker, as in a process of its own. The jobs are taken in the
    order of their stacks' package counts (TRL's before those that add to it), so a worker's imports serve
    as many of them as they may."""

    def __init__(self, jobs: list[dict[str, Any]], packages: dict[str, set[str]]):
        self.jobs, self.packages = jobs, packages
        self.left = sorted(range(len(jobs)), key=lambda i: len(self._needs(i)))
        self.answers: dict[int, dict[str, Any]] = {}
        self.live = 0
        self.lock = threading.Lock()

    def _needs(self, index: int) -> set[str]:
        return self.packages.get(self.jobs[index]["spec"]["framework"], set())

    def take(self, imported: set[str]) -> int | None:
        """The first job left that a worker holding `imported` may run (None where none is left for it)."""
        with self.lock:
            for index in self.left:
                if imported <= self._needs(index):
                    self.left.remove(index)
                    return index
            return None

    def started(self) -> None:
        with self.lock:
            self.live += 1

    def ended(self) -> bool:
        """A worker ended for want of a job it may run: whether to start a fresh one for the jobs left,
        where more than one is left (a fresh start's imports pay) or no other worker is running."""
        with self.lock:
            self.live -= 1
            return len(self.left) > 1 or (bool(self.left) and self.live == 0)


def _serve(board: _Board) -> None:
    """Worker processes one after another: each takes the jobs it may run, the next starts fresh for the
    jobs left that its imports barred (board.ended), until none is left or a worker dies."""
    while True:
        board.started()
        lived = _one_worker(board)
        if not board.ended() or not lived:
            return


def _one_worker(board: _Board) -> bool:
    """One worker process through the jobs it may take; False where it died (its job unanswered)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
    }
    # what the libraries print is not the answer's: kept off the terminal
    with tempfile.TemporaryFile() as said:
        child = subprocess.Popen(
            [sys.executable, "-m", "trainers.simulate._pool"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=said, text=True, env=env, cwd=ROOT,
        )  # fmt: skip
        imported: set[str] = set()
        try:
            while (index := board.take(imported)) is not None:
                child.stdin.write(json.dumps(board.jobs[index]) + "\n")
                child.stdin.flush()
                line = child.stdout.readline()
                if not line:  # died: this job is left to the asking process
                    return False
                answer = json.loads(line)
                imported = set(answer.pop("imported", ()))
                board.answers[index] = answer
            return True
        except (OSError, ValueError):  # a broken pipe or a torn line: the worker died
            return False
        finally:
            with contextlib.suppress(OSError):
                child.stdin.close()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _without_vllm() -> None:
    """TRL told vLLM is not installed before it imports its generation code: the import (seconds) is left
    out, and nothing a simulated step runs reads vLLM."""
    import importlib

    importlib.import_module("trl.import_utils").is_vllm_available = lambda *args, **kwargs: False


def main() -> None:
    import dataclasses

    from trainers import stacks
    from trainers.simulate import CannotSimulate, simulate
    from trainers.trial import TrialSpec

    packages = {p for entry in stacks.STACKS.values() for p in entry.packages}
    _without_vllm()
    out = sys.stdout
    sys.stdout = sys.stderr  # what the libraries print goes with their warnings, not into the answers
    for line in sys.stdin:
        job = json.loads(line)
        try:
            step = simulate(TrialSpec.from_dict(job["spec"]), job.get("prompt_tokens"))
            answer: dict[str, Any] = {"step": dataclasses.asdict(step)}
        except CannotSimulate as exc:
            answer = {"cannot": str(exc)}
        answer["imported"] = sorted(p for p in packages if p in sys.modules)
        out.write(json.dumps(answer, default=str) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
