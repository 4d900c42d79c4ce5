"""A fixture for the budget guard on a real GPU: with this folder first on PYTHONPATH and
RLSWEEP_OUTSIDE_ALLOC_GIB=N set, a process that has imported torch and created its CUDA context (the
trainer child; the supervisor never touches CUDA) allocates N GiB with cudaMalloc through CuPy,
outside torch's allocator and its cap, RLSWEEP_OUTSIDE_ALLOC_AFTER_S seconds after start (default 60).
Only the guard's NVML sampling can see it: the trial must end `oom` from the guard.

    PYTHONPATH=bench/gpu/outside_alloc_hook:$PYTHONPATH RLSWEEP_OUTSIDE_ALLOC_GIB=20 \
        python -m orchestrator.cli trial ... --memory-budget-gib 16
"""

import os
import sys
import threading
import time


def _allocate_later(gib: float, after_s: float) -> None:
    time.sleep(after_s)
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    import cupy

    pointer = cupy.cuda.runtime.malloc(int(gib * 2**30))
    cupy.cuda.runtime.memset(pointer, 1, int(gib * 2**30))  # touch it: the pages are really held
    print(f"outside-alloc: {gib:g} GiB held outside torch (pid {os.getpid()})", file=sys.stderr, flush=True)


if os.environ.get("RLSWEEP_OUTSIDE_ALLOC_GIB"):
    threading.Thread(
        target=_allocate_later,
        args=(
            float(os.environ["RLSWEEP_OUTSIDE_ALLOC_GIB"]),
            float(os.environ.get("RLSWEEP_OUTSIDE_ALLOC_AFTER_S", "60")),
        ),
        daemon=True,
    ).start()
