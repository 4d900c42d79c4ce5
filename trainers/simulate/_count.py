"""What a piece of torch code allocates, counted as CUDA's caching allocator counts `allocated`, on any
device, meta included: every storage an op creates is allocated (rounded up to the allocator's 512-byte
granule) until its last reference dies. A TorchDispatchMode sees each op's outputs; a weak reference to
each new storage sees it freed. So it counts what the code holds, whatever the device keeps.

Storages made before the counter started (the model's weights, the optimizer's state) are not seen by
it: `hold(tensors)` adds them, once, so the peak counts them as a GPU's allocated does.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

GRANULE = 512  # CUDA's caching allocator rounds every block up to a multiple of 512 bytes


def rounded(nbytes: int) -> int:
    return -(-nbytes // GRANULE) * GRANULE if nbytes else 0


class AllocationCounter(TorchDispatchMode):
    """The live bytes of the storages the code under it creates, their peak, and the peak per phase."""

    def __init__(self, trace: bool = False):
        super().__init__()
        # ("a", key, bytes) / ("f", key) in order, and ("mark",) where the step begins: for the
        # allocator's replay (trainers/simulate/_allocator.py)
        self.trace: list[tuple] | None = [] if trace else None
        self.live_bytes = 0
        self.peak_bytes = 0
        self.phase_peaks: dict[str, int] = {}
        self.current: str | None = None
        self.resting_bytes = 0  # what was live once the storages made before were held
        self._seen: dict[int, int] = {}

    def phase(self, name: str) -> None:
        """From now on the peak also counts towards `name` (which starts at the bytes live now)."""
        self.current = name
        self.phase_peaks[name] = max(self.phase_peaks.get(name, 0), self.live_bytes)

    def hold(self, tensors) -> int:
        """Count storages made before the counter (weights, optimizer state); the bytes added."""
        added = sum(self._track(t) for t in tensors if isinstance(t, torch.Tensor))
        self.resting_bytes = self.live_bytes
        if self.trace is not None:
            self.trace.append(("mark",))
        return added

    def _track(self, t: torch.Tensor) -> int:
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self._seen:
            return 0
        size = rounded(storage.nbytes())
        self._seen[key] = size
        if self.trace is not None:
            self.trace.append(("a", key, storage.nbytes()))
        self.live_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        if self.current is not None:
            self.phase_peaks[self.current] = max(self.phase_peaks.get(self.current, 0), self.live_bytes)
        weakref.finalize(storage, self._free, key)
        return size

    def _free(self, key: int) -> None:
        self.live_bytes -= self._seen.pop(key, 0)
        if self.trace is not None:
            self.trace.append(("f", key))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                self._track(t)
        return out
