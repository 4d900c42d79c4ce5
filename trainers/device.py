"""The trial's device: whether torch can use the GPU NVML sees, the CUDA context, the budget card (a
smaller card emulated so an over-budget configuration fails as it would on that card, and libraries that
size themselves from the card see it), the allocator cap kept at the budget as the trial runs, and what
the `started` event reports of the device."""

from __future__ import annotations

import contextlib
import os
import random
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainers.distributed import world_size
from trainers.nvml import NvmlUnavailable, import_pynvml, open_visible_device, process_used_bytes, text
from trainers.runtime import UnavailableError
from trainers.units import GIB

if TYPE_CHECKING:
    from trainers.trial import TrialSpec


@dataclass(frozen=True)
class CudaContext:
    """This process's CUDA context, measured right after it was created (bytes)."""

    bytes: int | None  # None: NVML could not see it
    source: str | None  # "process": NVML's figure for this PID; "device": device used after - before
    free_after: int  # cudaMemGetInfo right after the context was created
    total: int


# What setup_process learned about the GPU (reported by device_info() in the `started` event) and
# torch.cuda's own functions where setup_process replaced them with the budget card's.
_context: CudaContext | None = None
_real: dict[str, Any] = {}
# The torch modules each emulated function is read from (Unsloth calls them as torch.cuda.<name>).
_EMULATED_IN = {
    "mem_get_info": ("torch.cuda", "torch.cuda.memory"),
    "get_per_process_memory_fraction": ("torch.cuda", "torch.cuda.memory"),
    "get_device_properties": ("torch.cuda",),
}


def cuda_usable(torch) -> bool:
    """Whether this trial trains on its GPU: True where torch can use CUDA; False where the trial has
    no GPU (no NVIDIA driver, or CUDA_VISIBLE_DEVICES hiding every device: a CPU trial). Raises
    UnavailableError where NVML finds the trial's GPU but torch cannot use it, rather than let the
    trial run on the CPU and be recorded as the GPU's figures; the message says why (a CPU-only torch
    wheel, a driver older than the wheel's CUDA, torch's own CUDA initialization warning)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if torch.cuda.is_available():
            return True
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        nvml = import_pynvml()
        handle = open_visible_device(nvml, visible)
    except NvmlUnavailable as exc:
        if exc.no_gpu:
            return False
        gpu, driver_cuda, reasons = "a GPU", None, [f"NVML: {exc}"]
    else:
        try:
            gpu, reasons = text(nvml.nvmlDeviceGetName(handle)), []
            driver_cuda = nvml.nvmlSystemGetCudaDriverVersion()  # 12040 for CUDA 12.4
        except nvml.NVMLError:
            driver_cuda = None
        finally:
            nvml.nvmlShutdown()
    built = torch.version.cuda
    if built is None:
        reasons.append(
            f"torch {torch.__version__} is a CPU-only build; install a CUDA build of torch (a wheel from "
            "download.pytorch.org/whl/cu<version>) the driver supports"
        )
    elif driver_cuda is not None:
        driver = (driver_cuda // 1000, driver_cuda % 1000 // 10)
        if tuple(int(part) for part in built.split(".")[:2]) > driver:
            shown = f"{driver[0]}.{driver[1]}"
            reasons.append(
                f"the NVIDIA driver supports CUDA {shown}, older than torch {torch.__version__}'s CUDA "
                f"{built}; update the driver, or install a torch wheel built for CUDA {shown} or older"
            )
    reasons += [str(w.message) for w in caught if "CUDA" in str(w.message)]
    raise UnavailableError(
        f"{gpu} (CUDA_VISIBLE_DEVICES={visible!r}) is visible to NVML but torch cannot use it, and the "
        f"trial will not run on the CPU instead: {'; '.join(reasons) or 'torch sees no CUDA device'}"
    )


def device_used_before_cuda() -> int | None:
    """NVML's used memory of this trial's device (first CUDA_VISIBLE_DEVICES entry), or None without
    NVML. Read it before anything creates a CUDA context (Unsloth's import may), for setup_process."""
    try:
        nvml = import_pynvml()
        handle = open_visible_device(nvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except NvmlUnavailable:
        return None
    try:
        return nvml.nvmlDeviceGetMemoryInfo(handle).used
    except nvml.NVMLError:
        return None
    finally:
        nvml.nvmlShutdown()


def measure_cuda_context(torch, nvml: Any, handle: Any, device_used_before: int | None) -> CudaContext:
    """Create the CUDA context of device 0 and measure what it holds outside torch's allocator.

    NVML's figure for this PID where it lists it (minus what torch's allocator reserved, normally 0
    here), else the device's used memory after minus before (a container with its own PID namespace).
    """
    free, total = torch.cuda.mem_get_info(0)  # cudaMemGetInfo needs a context: this creates it
    reserved = torch.cuda.memory_reserved(0)
    if handle is None:
        return CudaContext(None, None, free, total)
    try:
        own = process_used_bytes(nvml, handle, {os.getpid()})
        if own is not None:
            return CudaContext(max(0, own - reserved), "process", free, total)
        if device_used_before is not None:
            after = nvml.nvmlDeviceGetMemoryInfo(handle).used
            return CudaContext(max(0, after - device_used_before - reserved), "device", free, total)
    except nvml.NVMLError:
        pass
    return CudaContext(None, None, free, total)


# The allocator cap moves only when what the process holds outside torch changed by more than this: a
# few MiB of jitter in NVML's figure would otherwise reset the cap at every look.
CAP_STEP_BYTES = 16 * 1024**2


class AllocatorCap:
    """torch's allocator cap on device 0, kept at the budget less what this process holds outside
    torch as the trial runs.

    The first cap charges the CUDA context measured at start-up. Libraries that load later grow the
    process outside torch's allocator (cuBLAS's handle and kernels at the first matmul, bitsandbytes,
    Triton's compiled kernels): by hundreds of MiB, which a cap fixed at start-up would leave for the
    guard to find over the budget. A real card of the budget's size would have freed torch's cache to
    make room; `refresh()` re-measures (NVML's used memory of this process less torch's reserved) and
    moves the cap, releasing torch's unused cache when it now holds more than the new cap allows.

    used_bytes(): this process's memory on the device as NVML reads it, None when it cannot."""

    def __init__(
        self, torch, budget_bytes: int, total: int, outside: int, used_bytes: Callable[[], int | None]
    ):
        self.torch = torch
        self.budget_bytes = budget_bytes
        self.total = total
        self.used_bytes = used_bytes
        self.outside = outside  # bytes held outside torch, as the cap last counted them
        self.fraction = self._apply(outside)

    def refresh(self) -> None:
        """Re-measure what the process holds outside torch and move the cap if that changed. Raises
        MemoryError (the trial ends `oom`) when it alone fills the budget, as on a card that small."""
        used = self.used_bytes()
        if used is None:
            return
        outside = max(0, used - self.torch.cuda.memory_reserved(0))
        if abs(outside - self.outside) < CAP_STEP_BYTES:
            return
        self.outside = outside
        self.fraction = self._apply(outside)
        if self.torch.cuda.memory_reserved(0) > self.fraction * self.total:
            self.torch.cuda.empty_cache()  # the cache a real card would have freed on its next cudaMalloc

    def _apply(self, outside: int) -> float:
        usable = self.budget_bytes - outside
        if usable <= 0:
            raise MemoryError(
                f"memory_budget_gib: {self.budget_bytes / GIB:g} GiB leaves nothing for torch once what "
                f"this process holds outside it ({outside / GIB:.2f} GiB: CUDA context, libraries' "
                f"kernels and workspaces) is counted; set memory_budget_gib above {outside / GIB:.2f}"
            )
        fraction = min(1.0, usable / self.total)
        self.torch.cuda.set_per_process_memory_fraction(fraction, 0)
        return fraction


_cap: AllocatorCap | None = None


def keep_allocator_cap(
    torch, budget_gib: float, context: CudaContext, device_used_before: int | None
) -> None:
    """Cap torch's allocator at the budget less the context (AllocatorCap), re-measured by
    refresh_allocator_cap() while the trial runs where NVML can read this process's memory."""
    global _cap
    used_bytes = _own_device_bytes(context, device_used_before)
    _cap = AllocatorCap(torch, int(budget_gib * GIB), context.total, context.bytes or 0, used_bytes)


def _own_device_bytes(context: CudaContext, device_used_before: int | None) -> Callable[[], int | None]:
    """A reader of this process's memory on its device, as the context was measured: NVML's figure
    for its PID, else (a container with its own PID namespace) the device's growth since before the
    context. It answers None where NVML cannot say (then the start-up cap stays)."""
    try:
        nvml = import_pynvml()
        handle = open_visible_device(nvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except NvmlUnavailable:
        return lambda: None
    if context.source is None or (context.source == "device" and device_used_before is None):
        nvml.nvmlShutdown()
        return lambda: None
    pid = os.getpid()

    def used_bytes() -> int | None:
        try:
            if context.source == "process":
                return process_used_bytes(nvml, handle, {pid})
            return nvml.nvmlDeviceGetMemoryInfo(handle).used - device_used_before
        except nvml.NVMLError:
            return None

    return used_bytes


def refresh_allocator_cap() -> None:
    """AllocatorCap.refresh() of this trial's cap; nothing without a budget on a GPU. StepMeter calls
    it before and after each step and after each generation."""
    if _cap is not None:
        _cap.refresh()


def budget_mem_get_info(real, device_index, reserved, budget_bytes: int, context: CudaContext):
    """torch.cuda.mem_get_info as a card of budget_bytes would answer it on device 0: total = the
    budget, free = the budget less what this process holds (its context plus what torch's allocator
    reserved). Trials sharing the GPU hold their own budgets, so their memory is not subtracted.
    Other devices: real."""

    def mem_get_info(device=None):
        index = device_index(device)
        if index != 0:
            return real(device)
        return max(0, budget_bytes - (context.bytes or 0) - reserved(index)), budget_bytes

    return mem_get_info


def budget_memory_fraction(real, device_index, budget_bytes: int, card_total: int):
    """torch.cuda.get_per_process_memory_fraction relative to the budget's card on device 0: the same
    allocator cap in bytes (torch applies the fraction to the real card), over the budget. Callers
    multiply it by mem_get_info's total, which is the budget (Unsloth's usable_cuda_bytes)."""

    def get_per_process_memory_fraction(device=None):
        fraction = real(device)
        if device_index(device) != 0:
            return fraction
        return min(1.0, fraction * card_total / budget_bytes)

    return get_per_process_memory_fraction


class BudgetCardProperties:
    """The real card's device properties with total_memory the budget's."""

    def __init__(self, properties, total_memory: int):
        self._properties = properties
        self.total_memory = total_memory

    def __getattr__(self, name):
        return getattr(self._properties, name)

    def __repr__(self) -> str:
        return f"BudgetCardProperties(total_memory={self.total_memory}, card={self._properties!r})"


def budget_device_properties(real, device_index, budget_bytes: int):
    """torch.cuda.get_device_properties with device 0's total_memory the budget (Unsloth picks its
    fused-loss route by the card's size: a card up to 24.5 GiB takes another)."""

    def get_device_properties(device=None):
        properties = real(device)
        if device_index(device) != 0:
            return properties
        return BudgetCardProperties(properties, budget_bytes)

    return get_device_properties


def _install(functions: dict[str, Any]) -> None:
    for name, function in functions.items():
        for module in _EMULATED_IN[name]:
            setattr(sys.modules[module], name, function)


def _device_index(torch):
    from torch.cuda._utils import _get_device_index

    def index(device) -> int:
        found = _get_device_index(device, optional=True) if device is not None else None
        return torch.cuda.current_device() if found is None else found

    return index


def setup_process(spec: TrialSpec) -> None:
    """Threads, seeds and the memory budget, before any model is built and before Unsloth is
    imported (it sizes itself from the card it sees at import and caches some of what it reads)."""
    import torch

    global _context
    # Two busy threads per process on a 2-core host stall steps for seconds.
    threads = spec.num_threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads:
        torch.set_num_threads(max(1, threads // world_size()))  # the trial's CPUs shared by its ranks
    random.seed(spec.seed)
    torch.manual_seed(spec.seed)
    if not cuda_usable(torch):
        return
    if world_size() > 1:
        # Each rank trains on the device accelerate picks by its LOCAL_RANK, not device 0: the budget
        # is held per GPU by the supervisor's guard alone (no allocator cap, no card emulation).
        return
    device_used_before = device_used_before_cuda()
    try:
        nvml = import_pynvml()
        handle = open_visible_device(nvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except NvmlUnavailable:
        nvml = handle = None
    try:
        _context = measure_cuda_context(torch, nvml, handle, device_used_before)
    finally:
        if handle is not None:
            nvml.nvmlShutdown()
    if spec.memory_budget_gib:
        # Emulate a card of the budget's size: the caching allocator refuses to grow past the budget
        # less the context (which a real card holds in the same memory), so an over-budget
        # configuration fails with the same OutOfMemoryError it would on that card. Libraries that
        # size themselves from the card see that card throughout: its total (mem_get_info and the
        # device properties), the allocator fraction relative to it, and free memory that only this
        # process's own holdings reduce (docs/oom.md, "Unsloth under a budget").
        keep_allocator_cap(torch, spec.memory_budget_gib, _context, device_used_before)
        budget_bytes = int(spec.memory_budget_gib * GIB)
        index = _device_index(torch)
        _real.update({name: getattr(torch.cuda, name) for name in _EMULATED_IN})
        _install(
            {
                "mem_get_info": budget_mem_get_info(
                    _real["mem_get_info"], index, torch.cuda.memory_reserved, budget_bytes, _context
                ),
                "get_per_process_memory_fraction": budget_memory_fraction(
                    _real["get_per_process_memory_fraction"], index, budget_bytes, _context.total
                ),
                "get_device_properties": budget_device_properties(
                    _real["get_device_properties"], index, budget_bytes
                ),
            }
        )


@contextlib.contextmanager
def real_card():
    """torch.cuda answers for the real card inside the block (setup_process's budget emulation is
    lifted), for a caller that scales to the budget itself (generation.pool_utilization) or reports
    the card (device_info)."""
    import torch

    if not _real:
        yield
        return
    emulated = {name: getattr(torch.cuda, name) for name in _EMULATED_IN}
    _install(_real)
    try:
        yield
    finally:
        _install(emulated)


def card_total_bytes() -> int | None:
    """The real card's memory (the budget's emulation lifted), None without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    with real_card():
        return torch.cuda.get_device_properties(0).total_memory


def device_info() -> dict[str, Any]:
    import torch

    alloc_conf = os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if torch.cuda.is_available():
        with real_card():
            props = torch.cuda.get_device_properties(0)
        context = _context
        return {
            "device": "cuda",
            "gpu_name": props.name,
            "gpu_total_gib": props.total_memory / GIB,
            "context_gib": context.bytes / GIB if context and context.bytes is not None else None,
            "context_source": context.source if context else None,
            "alloc_conf": alloc_conf,
        }
    return {
        "device": "cpu",
        "gpu_name": None,
        "gpu_total_gib": None,
        "context_gib": None,
        "context_source": None,
        "alloc_conf": alloc_conf,
    }
