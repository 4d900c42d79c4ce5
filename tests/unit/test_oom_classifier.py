import pytest
import torch

from trainers.events import is_oom, oom_cause

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


def _raise_wrapped(error: BaseException, *, explicit: bool) -> None:
    """Re-raise `error` as transformers does a failure inside 4-bit loading: a generic RuntimeError."""
    try:
        raise error
    except BaseException as inner:
        if explicit:
            raise RuntimeError("Error(s) in loading state_dict for Qwen2ForCausalLM") from inner
        raise RuntimeError("Error(s) in loading state_dict for Qwen2ForCausalLM")  # noqa: B904 - implicit chain


@pytest.mark.parametrize("explicit", [True, False], ids=["raise-from", "raised-during"])
def test_an_out_of_memory_error_wrapped_in_a_runtime_error_is_oom(explicit):
    with pytest.raises(RuntimeError) as info:
        _raise_wrapped(
            torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB."), explicit=explicit
        )
    assert not is_oom(str(info.value))  # the wrapper's own text says nothing of memory
    assert is_oom(info.value)
    assert oom_cause(info.value) is (info.value.__cause__ or info.value.__context__)


def test_a_wrapped_failure_that_is_not_memory_is_not_oom():
    with pytest.raises(RuntimeError) as info:
        _raise_wrapped(KeyError("model.layers.0.mlp"), explicit=True)
    assert not is_oom(info.value) and oom_cause(info.value) is None


def test_the_trainer_child_reports_a_wrapped_out_of_memory_error_as_an_oom_event(tmp_path, monkeypatch):
    import json

    from trainers import stacks
    from trainers.__main__ import main
    from trainers.trial import TrialSpec

    def run(spec, events):  # the TRL stack's run, failing as a library re-raising an OOM does
        _raise_wrapped(
            torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB."), explicit=True
        )

    monkeypatch.setattr(stacks.load("trl"), "run", run)
    events = tmp_path / "events.jsonl"
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(TrialSpec(events_path=str(events)).to_json())
    assert main([str(spec_path)]) == 3
    final = json.loads(events.read_text().splitlines()[-1])
    assert final["event"] == "oom" and final["type"] == "OutOfMemoryError"
    assert final["message"] == (
        "CUDA out of memory. Tried to allocate 2.00 GiB. (re-raised as RuntimeError: "
        "Error(s) in loading state_dict for Qwen2ForCausalLM)"
    )


def test_cublas_failing_to_create_its_handle_on_a_full_device_is_oom():
    # torch's wording (aten/src/ATen/cuda/CublasHandlePool.cpp) when cublasCreate finds no memory left.
    text = "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`"
    assert is_oom(text) and is_oom(RuntimeError(text))
    # The same status from another call is a setup fault, not memory.
    assert not is_oom(
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasSgemm( handle)`"
    )
