"""A fake of the slice of pynvml rlsweep calls, over a list of fake devices (no driver on CI)."""

from __future__ import annotations

from types import SimpleNamespace

from trainers.units import GIB


class FakeNvml:
    """The slice of pynvml the sampler calls, over a list of fake devices."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
        pass

    class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
        pass

    class NVMLError_NotFound(NVMLError):  # noqa: N801
        pass

    def __init__(self, devices: list[dict], cuda_driver_version: int = 12080):
        self.devices = devices
        self.cuda_driver_version = cuda_driver_version  # the CUDA version the driver supports, 12080 = 12.8
        self.calls: dict[str, int] = {}
        self.initialized = 0

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def nvmlInit(self):
        if not self.devices:
            raise self.NVMLError_LibraryNotFound("NVML Shared Library Not Found")
        self.initialized += 1

    def nvmlShutdown(self):
        self.initialized -= 1

    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda_driver_version

    def nvmlDeviceGetCount(self):
        return sum(1 for d in self.devices if not d["uuid"].startswith("MIG-"))

    def nvmlDeviceGetHandleByIndex(self, index):
        return [d for d in self.devices if not d["uuid"].startswith("MIG-")][index]

    def nvmlDeviceGetHandleByUUID(self, uuid):
        for d in self.devices:
            if d["uuid"] == uuid:
                return d
        raise self.NVMLError("Not Found")

    def nvmlDeviceGetUUID(self, handle):
        return handle["uuid"]

    def nvmlDeviceGetName(self, handle):
        return handle["name"].encode()  # older pynvml returns bytes

    def nvmlDeviceGetMemoryInfo(self, handle):
        self._count("memory")
        if handle.get("memory_fails"):
            raise self.NVMLError("Unknown Error")
        return SimpleNamespace(
            used=handle["used"], total=handle["total"], free=handle["total"] - handle["used"]
        )

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        self._count("processes")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in handle.get("processes", [])]

    def nvmlDeviceGetUtilizationRates(self, handle):
        self._count("utilization")
        if "util" not in handle:
            raise self.NVMLError_NotSupported("Not Supported")
        return SimpleNamespace(gpu=handle["util"], memory=0)

    def nvmlDeviceGetProcessUtilization(self, handle, last_seen_us):
        """handle["process_util"]: a list of (pid, SM %, timestamp in us); samples newer than last_seen_us
        come back, none raise NotFound (as NVML does); no such key: not supported."""
        self._count("process_utilization")
        if "process_util" not in handle:
            raise self.NVMLError_NotSupported("Not Supported")
        newer = [
            SimpleNamespace(pid=pid, smUtil=sm, memUtil=0, encUtil=0, decUtil=0, timeStamp=t)
            for pid, sm, t in handle["process_util"]
            if t > last_seen_us
        ]
        if not newer:
            raise self.NVMLError_NotFound("Not Found")
        return newer

    def nvmlDeviceGetPowerUsage(self, handle):
        self._count("power")
        if "power_mw" not in handle:
            raise self.NVMLError_NotSupported("Not Supported")
        return handle["power_mw"]


def fake_gpu(index: int, **extra) -> dict:
    return {
        "uuid": f"GPU-{index}aaaaaaa-1111-2222-3333-44444444444{index}",
        "name": f"Fake H100 #{index}",
        "total": 80 * GIB,
        "used": (index + 1) * GIB,
        "util": 50 + index,
        "power_mw": 100_000 * (index + 1),
        **extra,
    }
