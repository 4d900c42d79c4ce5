"""The trainer child's side of a probe session (trainers/session.py): load once, then run shapes.

`serve(path)` sets the process up and builds the first shape's trainer once (the model loaded,
quantized and wrapped in its adapters: the session's start-up, held by `held`/`hold` for the stacks to
reuse), then reads shape spec paths from stdin and runs each exactly as `python -m trainers` runs a
trial (its own events, its own ending: finished, oom or error). Between shapes the memory of the one
that ended is released (the trainer dropped, the garbage collected, glibc's free pages returned, on a
GPU torch's cache emptied) and the peak marks are reset (the RSS high-water mark, torch's peak
statistics), so each shape's peak is its own. The memory budget's allocator cap, set once with the
process, caps every shape: an out-of-memory error ends that shape `oom` and the next one runs. A CUDA
error that leaves the context unusable ends the session (POISONED): the supervisor starts another.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import random
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainers.events import ERROR, OOM, EventWriter, oom_cause
from trainers.session import POISONED, READY, session_key

# The loaded model a session's stacks reuse, by session key; None outside a session (hold keeps nothing).
_held: dict[str, Any] | None = None


def held(spec: Any) -> Any:
    """What a stack held for this spec's session (hold), or None: load it."""
    return None if _held is None else _held.get(session_key(spec))


def hold(spec: Any, loaded: Any) -> None:
    """Keep `loaded` (the model as the trainer holds it, adapters included) for the session's next
    shapes; outside a session nothing is kept."""
    if _held is not None:
        _held[session_key(spec)] = loaded


def ended(events: EventWriter, body: Callable[[], None]) -> int:
    """Run body and end the event stream with exactly one of its endings: 0 (body emitted `finished`),
    3 (`oom`: an out-of-memory error, reported by its original cause) or 1 (`error`)."""
    from trainers.runtime import RefusedError

    try:
        body()
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


def serve(path: str, fd: int | None = None) -> int:
    """The session: start-up on the spec at `path` (its events path is the session's stream), then one
    shape per spec path read from `fd` (stdin) until it ends. Returns the process's exit code."""
    global _held
    from trainers import stacks
    from trainers.device import setup_process
    from trainers.runtime import UnavailableError
    from trainers.startup import marks
    from trainers.trial import TrialSpec

    first = TrialSpec.load(path)
    stream = EventWriter(first.events_path)
    _held = {}
    state: dict[str, Any] = {}

    def start() -> None:
        first.validate()
        state["stack"] = stack = stacks.load(first.stack)
        available, why = stack.availability()
        if not available:
            raise UnavailableError(f"stack {stack.name}: {why}")
        setup_process(first)  # threads, seeds and the budget's allocator cap: once, for every shape
        stack.build(first, EventWriter(""))  # the model loaded and held; the trainer built around it dropped

    try:
        if ended(stream, start) != 0:
            return 1
        stack = state.pop("stack")
        release()
        stream.emit(READY, startup=marks())
        for line in _lines(sys.stdin.fileno() if fd is None else fd):
            if not line.endswith(".json"):
                continue  # a supervisor's word that came after its shape had ended
            shape = TrialSpec.load(line)
            _run_shape(stack, shape)
            poisoned = release()
            if poisoned:
                stream.emit(POISONED, message=poisoned[:2000])
                return 1
            stream.emit(READY, shape=shape.trial_key)
        return 0
    finally:
        stream.close()


def _run_shape(stack: Any, shape: Any) -> None:
    """One shape, as `python -m trainers` runs a trial, on the session's loaded model."""
    import torch

    from trainers import startup
    from trainers.trial import TrialSpec

    startup.reset()  # the shape's own start: its marks, not the session's
    startup.mark("main")
    events = EventWriter(shape.events_path)
    key = session_key(shape)

    def body() -> None:
        shape.validate()
        if key not in (_held or {}):
            raise ValueError(
                f"session: this shape's settings differ from its session's beyond {TrialSpec.__name__}'s "
                "shape fields (trainers/session.py SHAPE_FIELDS); run it in a session of its own"
            )
        random.seed(shape.seed)
        torch.manual_seed(shape.seed)
        stack.run(shape, events, setup=False)

    try:
        ended(events, body)
    finally:
        events.close()


def release() -> str | None:
    """Free what the last shape left and reset the peak marks; on a GPU, a CUDA error that says the
    context is unusable (the session must end), else None."""
    import torch

    sys.last_value = sys.last_traceback = None  # a shape's exception holds its frames, and their tensors
    gc.collect()
    if torch.cuda.is_available():
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        except RuntimeError as exc:  # an illegal access or a device-side assert: the context is poisoned
            return f"{type(exc).__name__}: {exc}"
    _malloc_trim()
    reset_vm_hwm()
    return None


def reset_vm_hwm() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the RSS now, by writing 5 to clear_refs (Linux >=
    4.0): a peak per step, or per shape; False where the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _malloc_trim() -> None:
    """Give glibc's free pages back to the kernel: a larger shape's freed heap would otherwise stay in
    the RSS of the next, smaller one."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _lines(fd: int):
    """The lines written to `fd`, each as it arrives, until end of file."""
    pending = b""
    while True:
        data = os.read(fd, 4096)
        if not data:
            return
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            yield line.decode("utf-8", "replace").strip()
