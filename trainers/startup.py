"""Where a trainer's start-up went: wall-clock marks (time.time(), the clock of the step events) taken
as the trainer passes each part of its start, sent with its `started` event as `startup`.

The parts (bench/cost/startup.py reads them against the launch and exit the supervisor sees):
`main` (the entry reached: the interpreter and trainers' light modules, or the fork server's fork),
`imports` (torch, transformers, TRL, PEFT and the stack's own imported), `model` (the model built or
loaded, quantized where asked), `trainer` (the measured trainer assembled). The `started` event's own
time follows; the first step's t_start ends the start.
"""

from __future__ import annotations

import time

_marks: dict[str, float] = {}


def mark(name: str) -> None:
    """Note the first time the trainer passes `name` (a later pass keeps the first)."""
    _marks.setdefault(name, time.time())


def marks() -> dict[str, float]:
    """Each part's mark so far, in the order they were taken."""
    return dict(_marks)


def reset() -> None:
    """Forget every mark: a forked trainer starts its own count (the fork server never marks)."""
    _marks.clear()
