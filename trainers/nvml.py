"""Finding the trial's GPU in NVML, shared by the trainer child (its CUDA context) and the supervisor's
memory sampler (orchestrator/running/telemetry.py), so both read the same device.

The trial's device is the first entry of CUDA_VISIBLE_DEVICES (torch's device 0). NVML ignores
CUDA_VISIBLE_DEVICES, so the entry (an index, GPU-<uuid> or MIG-<uuid>) is looked up here.
"""

from __future__ import annotations

import os
from typing import Any

# CUDA numbers devices fastest-first unless told otherwise, NVML by PCI bus: set in the environment of
# every process that touches CUDA (the trainer child, the packing probe) so an index names one GPU in both.
CUDA_DEVICE_ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


class NvmlUnavailable(RuntimeError):
    """NVML cannot sample this trial's GPU. `no_gpu`: the trial has no GPU to sample (no driver,
    no nvidia-ml-py, CUDA_VISIBLE_DEVICES hides every device), so RSS is the right reading; else
    a GPU is there but cannot be found (a bad CUDA_VISIBLE_DEVICES entry)."""

    def __init__(self, message: str, *, no_gpu: bool = False):
        super().__init__(message)
        self.no_gpu = no_gpu


def first_visible_device(cuda_visible_devices: str | None) -> str | None:
    """The device the trial uses: the first entry of CUDA_VISIBLE_DEVICES; '0' when unset; None when
    CUDA sees no device ('' or a negative index)."""
    if cuda_visible_devices is None:
        return "0"
    first = cuda_visible_devices.split(",")[0].strip()
    if not first or first.startswith("-"):
        return None
    return first


def resolve_nvml_handle(nvml: Any, device: str) -> Any:
    """The NVML handle for one CUDA_VISIBLE_DEVICES entry: an index, 'GPU-<uuid>' or 'MIG-<uuid>'
    (CUDA also accepts a unique UUID prefix, so does this).

    NVML numbers devices in PCI bus order, CUDA by default fastest-first: the two agree on machines
    with identical GPUs (ties go by PCI bus id), and always under CUDA_DEVICE_ORDER=PCI_BUS_ID.
    """
    if device.isdigit():
        count = nvml.nvmlDeviceGetCount()
        if int(device) >= count:
            raise NvmlUnavailable(
                f"CUDA_VISIBLE_DEVICES: index {device} but NVML sees {count} device(s) (0..{count - 1})"
            )
        return nvml.nvmlDeviceGetHandleByIndex(int(device))
    if device.startswith(("GPU-", "MIG-")):
        try:
            return nvml.nvmlDeviceGetHandleByUUID(device)
        except nvml.NVMLError:
            pass  # maybe a prefix: look it up among the full GPUs below
        matches = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            if text(nvml.nvmlDeviceGetUUID(handle)).startswith(device):
                matches.append(handle)
        if len(matches) == 1:
            return matches[0]
        raise NvmlUnavailable(
            f"CUDA_VISIBLE_DEVICES: {device!r} matches {len(matches)} NVML devices; give the full UUID "
            "as `nvidia-smi -L` prints it"
        )
    raise NvmlUnavailable(
        f"CUDA_VISIBLE_DEVICES: cannot read {device!r}; expected an index, GPU-<uuid> or MIG-<uuid>"
    )


def text(value: Any) -> str:
    """NVML strings: bytes in older pynvml, str in newer."""
    return value.decode() if isinstance(value, bytes) else str(value)


# nvmlInit errors that mean "no NVIDIA driver on this host" (the trial runs on CPU), not a fault.
_NO_DRIVER_ERRORS = ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")


def import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(
            "nvidia-ml-py is not installed (pip install nvidia-ml-py)", no_gpu=True
        ) from exc
    return pynvml


def open_visible_device(nvml: Any, cuda_visible_devices: str | None) -> Any:
    """nvmlInit and the handle of the trial's device; NvmlUnavailable when NVML cannot give it (the
    caller owns one nvmlShutdown after success)."""
    device = first_visible_device(cuda_visible_devices)
    if device is None:
        raise NvmlUnavailable(f"CUDA_VISIBLE_DEVICES={cuda_visible_devices!r} hides every GPU", no_gpu=True)
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        no_driver = tuple(
            getattr(nvml, name) for name in _NO_DRIVER_ERRORS if isinstance(getattr(nvml, name, None), type)
        )
        raise NvmlUnavailable(f"{type(exc).__name__}: {exc}", no_gpu=isinstance(exc, no_driver)) from exc
    try:
        return resolve_nvml_handle(nvml, device)
    except BaseException:
        nvml.nvmlShutdown()
        raise


def process_used_bytes(nvml: Any, handle: Any, pids: set[int]) -> int | None:
    """GPU memory NVML lists for these processes on the device; None when it lists none of them
    (containers with their own PID namespace: NVML reports host PIDs)."""
    listed = [
        p.usedGpuMemory
        for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        if p.pid in pids and p.usedGpuMemory is not None
    ]
    return sum(listed) if listed else None


def local_gpus() -> int:
    """The GPUs a local Ray (and the memory model's default measure) would see: CUDA_VISIBLE_DEVICES
    when set, else what NVML counts (0 without it)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver, no library: no GPU Ray could use
        return 0
