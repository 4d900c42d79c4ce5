"""Trainer child entry point: `python -m trainers <trial-spec.json>`.

Runs one trial and ends its event stream with exactly one of finished / oom / error, so the
supervisor can tell an out-of-memory verdict from a crash without parsing library output.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import NoReturn

from trainers import stacks
from trainers.distributed import die_with_parent, dump_stack_on_signal, rank, rank_events_path, world_size
from trainers.events import ERROR, OOM, EventWriter, oom_cause
from trainers.generation import hide_vllm_unless_used
from trainers.runtime import RefusedError, UnavailableError
from trainers.startup import mark
from trainers.trial import TrialSpec


def main(argv: list[str]) -> int:
    mark("main")
    if len(argv) != 1:
        print("usage: python -m trainers <trial-spec.json>", file=sys.stderr)
        return 2
    if world_size() > 1:
        die_with_parent()  # a rank: out of the launcher's process group, so it goes when the launcher does
    spec = TrialSpec.load(argv[0])
    if world_size() > 1:
        dump_stack_on_signal(spec.events_path, rank())  # read at a timeout: where this rank hung
    events = EventWriter(rank_events_path(spec.events_path, rank()))
    try:
        spec.validate()  # an unregistered framework stops here, named with the registered ones
        stack = stacks.load(spec.framework)
        available, why = stack.availability()
        if not available:
            raise UnavailableError(f"framework {stack.name}: {why}")
        stack.run(spec, events)
        return 0
    except BaseException as exc:  # noqa: BLE001 - every ending must reach the event stream
        refused = isinstance(exc, RefusedError)  # a setting that does not fit: its message says it all
        if not refused:
            traceback.print_exc()
        cause = oom_cause(exc)
        if cause is not None:
            # A wrapped out-of-memory error (a library re-raised it) reports the original first.
            message = str(cause) if cause is exc else f"{cause} (re-raised as {type(exc).__name__}: {exc})"
            events.emit(OOM, type=type(cause).__name__, message=message[:2000])
            return 3
        events.emit(
            ERROR,
            type=type(exc).__name__,
            message=str(exc)[:2000],
            unavailable=type(exc).__name__ == "UnavailableError",
            refused=refused,
            traceback=None if refused else traceback.format_exc()[-4000:],
        )
        return 1
    finally:
        events.close()


def run(argv: list[str]) -> NoReturn:
    """The trial's own process, to its end: `python -m trainers`, or a child the fork server forked
    (trainers/forkserver.py). Tests call main() in-process instead."""
    # vLLM only where the trial generates with it. A spec that does not load is main()'s to report.
    with contextlib.suppress(Exception):
        hide_vllm_unless_used(TrialSpec.load(argv[0]))
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
