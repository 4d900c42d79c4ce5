"""The trainer → supervisor event protocol: newline-delimited JSON, one object per line.

Events go to a file (or inherited descriptor) named in the TrialSpec, never stdout, so library
chatter cannot corrupt them. Order: `started`, then one `step` per optimizer step (held-out
evaluation results ride on the step they follow, as eval_* fields), then exactly one of
`finished`, `oom`, `error`.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any, TextIO

STARTED, STEP, FINISHED, OOM, ERROR = "started", "step", "finished", "oom", "error"
FINAL_EVENTS = (FINISHED, OOM, ERROR)


def _clean(value: Any) -> Any:
    # JSON has no NaN/inf: an unmeasurable or undefined number is null, never 0.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class EventWriter:
    """Appends events to a path, or to a numbered descriptor given as 'fd:N'."""

    def __init__(self, target: str):
        self._file: TextIO | None = None
        if target.startswith("fd:"):
            self._file = os.fdopen(int(target[3:]), "a", buffering=1)
        elif target:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(target, "a", buffering=1)  # noqa: SIM115 - lives as long as the trainer

    def emit(self, event: str, **payload: Any) -> dict[str, Any]:
        record = {"event": event, "time": time.time(), **_clean(payload)}
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()
        return record

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_events(path: str | Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Complete events from byte `offset` on, and the offset after the last complete line.

    A line still being written (no newline yet) is left for the next call.
    """
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    events = []
    for line in data[: end + 1].splitlines():
        if line.strip():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn line from a killed writer carries nothing we can trust
    return events, offset + end + 1


# Every text an out-of-memory failure has been seen to produce, on CUDA and on CPU.
_OOM_PATTERNS = re.compile(
    r"out of memory|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED|"
    r"can't allocate memory|DefaultCPUAllocator|cudaErrorMemoryAllocation|"
    r"Tried to allocate|not enough memory|std::bad_alloc|MemoryError|"
    r"bitsandbytes.*alloc|CUDNN_STATUS_ALLOC_FAILED|NVML_ERROR_MEMORY|"
    # cuBLAS creates its handle (and workspace) at the first matmul: on a full device that fails as
    # NOT_INITIALIZED, the allocation failure behind it unnamed.
    r"CUBLAS_STATUS_NOT_INITIALIZED when calling .?cublas(Lt)?Create",
    re.IGNORECASE,
)


def is_oom(error: BaseException | str) -> bool:
    """True when an exception (or its text) is an out-of-memory failure of any backend, also when it
    is wrapped: the exception chain (__cause__, __context__) is followed, since libraries re-raise
    (transformers turns a failure inside 4-bit loading into a generic RuntimeError)."""
    if not isinstance(error, BaseException):
        return bool(_OOM_PATTERNS.search(error))
    return oom_cause(error) is not None


def oom_cause(error: BaseException) -> BaseException | None:
    """The first out-of-memory exception in error's chain (error itself first), or None."""
    return next((exc for exc in exception_chain(error) if _is_oom_exception(exc)), None)


def exception_chain(error: BaseException) -> list[BaseException]:
    """error, then what it was raised from or during (__cause__, else __context__), each once."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _is_oom_exception(error: BaseException) -> bool:
    if isinstance(error, MemoryError):
        return True
    oom_type = getattr(getattr(_torch(), "cuda", None), "OutOfMemoryError", None)
    if oom_type is not None and isinstance(error, oom_type):
        return True
    return bool(_OOM_PATTERNS.search(f"{type(error).__name__}: {error}"))


def _torch():
    import sys

    return sys.modules.get("torch")
