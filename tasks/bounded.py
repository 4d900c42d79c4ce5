"""Scoring under a hard time limit: every score runs in a forked worker process, killed when a call
overruns; that call scores 0 and is counted.

Why a process: some reasoning-gym scorers run sympy or hand-written parsers whose cost explodes on
short answers (`(x+1)**64*(x+2)**64*(x+3)**64*(x+4)**64*(x+5)**63` keeps simple_integration's
simplify() busy for minutes). A thread cannot be stopped, and a signal is not handled while C code (big
integer arithmetic) runs; a process can always be killed. Why one persistent worker rather than a fork
per call: a round trip to a warm worker costs well under a millisecond, a fork per call costs more and
grows with the memory of the process that forks (bench/cost/rewards.py measures both; figures in
docs/benchmarks.md). The worker is forked on first use from the process that scores (so it holds every
score registered before it), again when a score registered later is asked for, and after every kill.

Fork-safety: the worker runs only score functions (pure Python and sympy), never torch or CUDA, so
torch's threads and CUDA state in the trainer process do not matter to it; CPython re-creates its
import lock and the GIL in a forked child. The worker shares its parent's process group (the
supervisor's group kill ends it with the trainer) and exits when its pipe closes.
"""

from __future__ import annotations

import math
import multiprocessing
import threading
from collections.abc import Callable

Score = Callable[[str, dict], float]

DEFAULT_TIMEOUT_S = 1.0
MAX_TIMEOUT_S = 600.0

_SCORES: list[Score] = []  # a worker knows the scores registered before it was forked
_LOCK = threading.Lock()


class ScoringCounter:
    """Since the last reset (the step meter's): scoring calls and the ones killed at their time limit;
    training completions a sandboxing task (the code task) scored, the ones whose run its sandbox
    killed, and why (reason -> count)."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.timeouts = 0
        self.sandboxed = 0
        self.sandbox_kills = 0
        self.kill_reasons: dict[str, int] = {}

    def count_kills(self, reasons) -> None:
        """Count each reason a sandbox gave for a kill (None: not killed), up to 8 distinct reasons."""
        for reason in reasons:
            if reason is not None and (reason in self.kill_reasons or len(self.kill_reasons) < 8):
                self.kill_reasons[reason] = self.kill_reasons.get(reason, 0) + 1


SCORING = ScoringCounter()


def timeout_problems(value) -> list[str]:
    """Why a `reward_timeout_s` setting is invalid, as 'task_args.reward_timeout_s: ...' lines."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return []  # the type check reports it
    if not (0 < value <= MAX_TIMEOUT_S) or math.isnan(value):
        return [
            f"task_args.reward_timeout_s: must be seconds in (0, {MAX_TIMEOUT_S:g}], got {value!r}; "
            f"give e.g. {DEFAULT_TIMEOUT_S} (the default) or leave it out"
        ]
    return []


def _serve(conn, parent_end) -> None:
    parent_end.close()  # else the pipe never reads as closed when the parent dies
    while True:
        try:
            index, items = conn.recv()
        except (EOFError, OSError):
            return
        for text, row in items:
            try:
                value = float(_SCORES[index](text, row))
            except Exception:  # untrusted text: any failure scores 0
                value = 0.0
            conn.send(value if value == value else 0.0)  # NaN -> 0


class _Worker:
    def __init__(self):
        context = multiprocessing.get_context("fork")
        self.conn, child_end = context.Pipe()
        self.process = context.Process(target=_serve, args=(child_end, self.conn), daemon=True)
        self.process.start()
        child_end.close()
        self.known = len(_SCORES)

    def stop(self) -> None:
        # Not joined: tearing down a large forked address space takes milliseconds that the call over
        # its limit need not wait for; multiprocessing reaps the process when it starts the next one.
        self.process.kill()
        self.conn.close()


_worker: _Worker | None = None


def _score_in_worker(index: int, items: list[tuple[str, dict]], timeout_s: float) -> list[float]:
    global _worker
    scores: list[float] = []
    with _LOCK:
        while len(scores) < len(items):
            if _worker is None or index >= _worker.known or not _worker.process.is_alive():
                if _worker is not None:
                    _worker.stop()
                _worker = _Worker()
            pending = items[len(scores) :]
            try:
                _worker.conn.send((index, pending))
                for _ in pending:
                    SCORING.calls += 1
                    if not _worker.conn.poll(timeout_s):
                        SCORING.timeouts += 1
                        raise TimeoutError
                    scores.append(_worker.conn.recv())
            except (TimeoutError, EOFError, OSError):  # over its limit, or the worker died: kill, score 0
                _worker.stop()
                _worker = None
                scores.append(0.0)
    return scores


class BoundedScore:
    """score(text, row) run in the worker under `timeout_s` seconds per call; over it, 0."""

    def __init__(self, score: Score, timeout_s: float = DEFAULT_TIMEOUT_S):
        with _LOCK:
            self.index = len(_SCORES)
            _SCORES.append(score)
        self.timeout_s = timeout_s

    def many(self, items: list[tuple[str, dict]]) -> list[float]:
        return _score_in_worker(self.index, items, self.timeout_s)

    def __call__(self, text: str, row: dict) -> float:
        return self.many([(text, row)])[0]
