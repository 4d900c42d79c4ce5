"""What a piece of torch code allocates, counted as CUDA's caching allocator counts `allocated`, on any
device, meta included: every storage an op creates is allocated (rounded up to the allocator's 512-byte
granule) until its last reference dies. A TorchDispatchMode sees each op's outputs; a weak reference to
each new storage sees it freed. So it counts what the code holds, whatever the device keeps.

Storages made before the counter started (the model's weights, the optimizer's state) are not seen by
it: `hold(tensors)` adds them, once, so the peak counts them as a GPU's allocated does.

On meta an op's outputs are a function of its inputs' shapes, strides and dtypes and its other
arguments, nothing else: the counter keeps each new storage-making op's outputs by those (as torch's
FakeTensorMode caches its dispatches), and a later call with the same makes them again with
`empty_strided` in place of running the op's meta kernel (most of them Python: an elementwise `mul`
costs 0.3 ms through torch._refs; a step runs thousands, most of them repeats, layer after layer).
Kept only what the kernel was checked to make: new storages, none an input's (`_unsafe_view` declares
no alias but returns its input's storage), each the size `empty_strided` makes; or, for an op in place
on its first argument alone (`addmm_`, `mul_`; not those that move a tensor's view or storage: `t_`,
`set_`, `resize_`), that argument returned as it was. So the counts, the trace and the peaks are the
same as with every kernel run (tests/unit/test_simulate_count.py, tests/integration/test_simulated_step.py);
a step costs about half the CPU (docs/benchmarks.md, "First answers").
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

GRANULE = 512  # CUDA's caching allocator rounds every block up to a multiple of 512 bytes
_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)
# How each op's calls may be kept (module docstring), decided once per op from its schema and tags: NEW
# (it makes new storages), SELF (it writes into its first argument, in place, and returns it) or None;
# withdrawn where a call did otherwise. Seeded ops are kept: on meta there are no values to draw.
NEW, SELF = "new", "self"
_KEEPABLE: dict = {}
_NOT_KEPT = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output, torch.Tag.inplace_view)
# In place, but what they write is the tensor's storage or view, which a call that left it as it was
# does not show another would leave too (set_ to another tensor's storage of the same shape).
_RESTORAGE = ("aten::set_", "aten::resize_", "aten::resize_as_", "aten::swap_", "aten::_set_")


def _keepable(func) -> str | None:
    known = _KEEPABLE.get(func, False)
    if known is False:
        schema = func._schema
        returns, arguments = schema.returns, schema.arguments
        known = None
        if (
            not returns
            or any(str(r.type) != "Tensor" for r in returns)
            or any(t in func.tags for t in _NOT_KEPT)
            or schema.name.startswith(_RESTORAGE)
        ):
            pass
        elif not schema.is_mutable and all(r.alias_info is None for r in returns):
            known = NEW
        elif (
            len(returns) == 1
            and returns[0].alias_info is not None
            and returns[0].alias_info.is_write
            and arguments[0].alias_info is not None
            and arguments[0].alias_info.is_write
            and all(a.alias_info is None for a in arguments[1:])
        ):
            known = SELF
        _KEEPABLE[func] = known
    return known


def _described(value):
    """What an op's output can depend on, on meta, hashable; TypeError for anything else (a tensor not on
    meta or not strided, a subclass other than a parameter, an object): that call is run, not kept."""
    if isinstance(value, torch.Tensor):
        if (
            not (type(value) is torch.Tensor or isinstance(value, torch.nn.Parameter))
            or not value.is_meta
            or value.layout != torch.strided
        ):
            raise TypeError
        return (tuple(value.shape), value.stride(), value.dtype, value.storage_offset())
    if isinstance(value, _PLAIN):
        return (type(value), value)
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(_described(v) for v in value))
    raise TypeError


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _layout(t) -> tuple | None:
    """What an op in place must leave as it was to be kept: its storage, that storage's size, the view."""
    if not isinstance(t, torch.Tensor):
        return None
    return (_storage(t), t.untyped_storage().nbytes(), tuple(t.shape), t.stride(), t.storage_offset())


def rounded(nbytes: int) -> int:
    return -(-nbytes // GRANULE) * GRANULE if nbytes else 0


class AllocationCounter(TorchDispatchMode):
    """The live bytes of the storages the code under it creates, their peak, and the peak per phase."""

    def __init__(self, trace: bool = False, keep: bool = True):
        super().__init__()
        # an op's outputs' (shape, stride, dtype) by its inputs' (module docstring); None: every op runs
        self._kept: dict | None = {} if keep else None
        self.reused = 0  # the calls answered from kept outputs
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
        kwargs = kwargs or {}
        key = self._key(func, args, kwargs)
        made = self._kept.get(key) if key is not None else None
        if made is not None:
            self.reused += 1
            if made == SELF:  # written in place: nothing made, the same tensor returned
                self._track(args[0])
                return args[0]
            outs = [
                torch.empty_strided(shape, stride, dtype=dtype, device="meta")
                for shape, stride, dtype in made
            ]
            for t in outs:
                self._track(t)
            return outs[0] if len(outs) == 1 else tuple(outs)
        before = _layout(args[0]) if key is not None and _keepable(func) == SELF else None
        out = func(*args, **kwargs)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                self._track(t)
        if before is not None:
            if out is args[0] and _layout(out) == before:
                self._kept[key] = SELF
        elif key is not None:
            self._keep(key, func, args, kwargs, out)
        return out

    def _kept_ops(self) -> set:
        """The ops with outputs kept (tests)."""
        return {key[0] for key in self._kept or {}}

    def _key(self, func, args, kwargs):
        if self._kept is None or not _keepable(func):
            return None
        try:
            return (func, _described(args), _described(tuple(sorted(kwargs.items()))))
        except TypeError:
            return None

    def _keep(self, key, func, args, kwargs, out) -> None:
        """`out` kept for `key` where it is what empty_strided would make again (module docstring)."""
        outs = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (tuple, list)) else []
        if not outs or not all(
            isinstance(t, torch.Tensor) and type(t) is torch.Tensor and t.is_meta for t in outs
        ):
            return
        inputs = {_storage(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        if any(_storage(t) in inputs for t in outs):
            _KEEPABLE[func] = None  # an alias its schema does not declare: never kept
            return
        made = tuple((tuple(t.shape), t.stride(), t.dtype) for t in outs)
        fresh = [
            torch.empty_strided(shape, stride, dtype=dtype, device="meta") for shape, stride, dtype in made
        ]
        if len({_storage(t) for t in outs}) == len(outs) and all(
            t.storage_offset() == 0 and t.untyped_storage().nbytes() == f.untyped_storage().nbytes()
            for t, f in zip(outs, fresh, strict=True)
        ):
            self._kept[key] = made
