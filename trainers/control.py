"""The supervisor's words to a running trainer: one a line on the trainer's stdin.

After each optimizer step's `step` event the trainer reads what has arrived, without waiting:
`stop` ends training cleanly (the trainer finishes the step it is in, emits `finished`, and every row
stays whole). At its hold step (holds_here: from TrialSpec.hold_at_step on, where a steady generation cycle
ends) it waits for the word instead: `continue` goes
on to max_steps, anything else (`stop`, or the end of stdin: the supervisor is gone) ends there.
A trainer started without a pipe (stdin at end of file) hears nothing and runs to max_steps.
"""

from __future__ import annotations

import os
import select
import sys

CONTINUE, STOP = "continue", "stop"


def holds_here(step: int, closes_steady_cycle: bool, hold_at_step: int | None) -> bool:
    """Whether the memory phase ends at this step: the first step from hold_at_step on that closes a
    steady generation cycle (one whose completions were not forced long). The phase then holds a whole
    probe cycle and a whole steady one, however many steps num_iterations and steps_per_generation make
    a cycle, so no steady step after it trains on completions the phase never saw generated. The trainer
    and the supervisor decide it from the same step row."""
    return hold_at_step is not None and step >= hold_at_step and closes_steady_cycle


def closes_steady_cycle(row: dict) -> bool:
    """A step row that ends a generation cycle (cycle_steps set) not forced long (probe false). A row
    without cycle bookkeeping counts as one generation per step."""
    return ("cycle_steps" not in row or row["cycle_steps"] is not None) and not row.get("probe")


class SupervisorChannel:
    """Reads the supervisor's words from a file descriptor (the trainer's stdin)."""

    def __init__(self, hold_at_step: int | None, fd: int | None = None):
        self.hold_at_step = hold_at_step
        self.fd = sys.stdin.fileno() if fd is None else fd
        self.closed = False  # end of file seen: nothing more can arrive
        self.pending = b""

    def _line(self, wait: bool) -> str | None:
        """The next whole line, or None (nothing yet without `wait`; end of file)."""
        while b"\n" not in self.pending:
            if self.closed:
                return None
            ready, _, _ = select.select([self.fd], [], [], None if wait else 0)
            if not ready:
                return None
            data = os.read(self.fd, 4096)
            if not data:
                self.closed = True
                continue
            self.pending += data
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode("utf-8", "replace").strip()

    def stop_after(self, step: int, closes_steady_cycle: bool = True) -> bool:
        """Whether training ends after `step` (its event already written). closes_steady_cycle: the step
        ends a generation cycle whose completions were not forced long (holds_here). A trial over several
        ranks shares one stdin: rank 0 alone reads it and every rank follows its word, so all of them stop
        at the same step (one stopping alone would leave the others waiting in a collective)."""
        from trainers.distributed import rank, shared_word, world_size

        if world_size() == 1:
            return self._decide(step, closes_steady_cycle)
        return shared_word(self._decide(step, closes_steady_cycle) if rank() == 0 else None)

    def _decide(self, step: int, closes_steady_cycle: bool) -> bool:
        if holds_here(step, closes_steady_cycle, self.hold_at_step):
            self.hold_at_step = None  # one hold a run
            return self._line(wait=True) != CONTINUE
        while True:
            line = self._line(wait=False)
            if line is None:
                return False
            if line == STOP:
                return True
