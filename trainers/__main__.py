"""Trainer child entry point: `python -m trainers <trial-spec.json>`.

Runs one trial and ends its event stream with exactly one of finished / oom / error, so the
supervisor can tell an out-of-memory verdict from a crash without parsing library output. With
`--session` it runs a probe session's shapes instead, each ended the same way (trainers/_session.py).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn

from trainers import stacks
from trainers._session import ended, serve
from trainers.distributed import die_with_parent, dump_stack_on_signal, rank, rank_events_path, world_size
from trainers.events import EventWriter
from trainers.generation import hide_vllm_unless_used
from trainers.runtime import UnavailableError
from trainers.session import SESSION_FLAG
from trainers.startup import mark
from trainers.trial import TrialSpec


def main(argv: list[str]) -> int:
    mark("main")
    if len(argv) == 2 and argv[0] == SESSION_FLAG:
        return serve(argv[1])  # a probe session: load once, then run shapes (trainers/_session.py)
    if len(argv) != 1:
        print("usage: python -m trainers [--session] <trial-spec.json>", file=sys.stderr)
        return 2
    if world_size() > 1:
        die_with_parent()  # a rank: out of the launcher's process group, so it goes when the launcher does
    spec = TrialSpec.load(argv[0])
    if world_size() > 1:
        dump_stack_on_signal(spec.events_path, rank())  # read at a timeout: where this rank hung
    events = EventWriter(rank_events_path(spec.events_path, rank()))

    def trial() -> None:
        spec.validate()  # an unregistered stack stops here, named with the registered ones
        stack = stacks.load(spec.stack)
        available, why = stack.availability()
        if not available:
            raise UnavailableError(f"stack {stack.name}: {why}")
        stack.run(spec, events)

    try:
        return ended(events, trial)
    finally:
        events.close()


def run(argv: list[str]) -> NoReturn:
    """The trial's own process, to its end: `python -m trainers`, or a child the fork server forked
    (trainers/forkserver.py). Tests call main() in-process instead."""
    # vLLM only where the trial generates with it. A spec that does not load is main()'s to report.
    with contextlib.suppress(Exception):
        hide_vllm_unless_used(TrialSpec.load(argv[-1]))
    code = main(argv)
    # The event stream is whole and closed: skip the interpreter's teardown (freeing every module and
    # tensor one by one, multiprocessing joining the scorer worker: ~3 s of a tiny trial on a CPU, all
    # of it after the trial's end). The kernel frees the process at once; the scorer worker ends when
    # its pipe closes, and the supervisor removes whatever else is left in the trainer's process group.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run(sys.argv[1:])
