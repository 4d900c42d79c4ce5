import pytest
import torch

from trainers.events import is_oom

REAL_OOM_TEXTS = [
    # torch.OutOfMemoryError on CUDA (torch 2.x wording)
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which "
    "1.06 GiB is free. Including non-PyTorch memory, this process has 14.63 GiB memory in use.",
    "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported",
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 137438953472 bytes. Error code 12 (Cannot allocate memory)",
    "bitsandbytes: cudaMalloc failed in paged allocation: out of memory (error 2)",
    "cudaErrorMemoryAllocation: out of memory",
]
NOT_OOM = [
    "ValueError: generation_batch_size (3) must be divisible by num_generations (2).",
    "RuntimeError: CUDA error: device-side assert triggered",
    "KeyError: 'answer'",
    "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x8 and 16x4)",
]


@pytest.mark.parametrize("text", REAL_OOM_TEXTS)
def test_real_oom_texts_are_oom(text):
    assert is_oom(text)
    assert is_oom(RuntimeError(text))


@pytest.mark.parametrize("text", NOT_OOM)
def test_other_failures_are_not_oom(text):
    assert not is_oom(text)
    assert not is_oom(RuntimeError(text))


def test_exception_types_are_oom():
    assert is_oom(torch.OutOfMemoryError("anything"))
    assert is_oom(MemoryError())


def test_real_cpu_allocation_failure_is_oom():
    # A real allocator failure on this machine: 2**50 floats cannot be allocated.
    with pytest.raises(RuntimeError) as info:
        torch.empty(2**50)
    assert is_oom(info.value)
