"""Checks that only mean something on an NVIDIA GPU: NVML sampling, torch memory, the budget cap.

Skipped on hosts without one (CI has none); run on a GPU host with `make test PYTEST_ARGS=tests/gpu`.
"""

import pytest
import torch

from orchestrator.running.supervisor import run_trial
from orchestrator.words.settings import GuardSettings
from trainers.trial import TrialSpec

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)"
    ),
]


def _spec(tmp_path, **overrides) -> TrialSpec:
    settings = dict(
        model="random:Qwen/Qwen2.5-0.5B-Instruct", quantization="nf4", num_generations=4, batch_size=2,
        max_completion_length=64, max_steps=3, probe_steps=1, trial_key="gpu-check",
        model_cache_dir=str(tmp_path / "models"),
    )  # fmt: skip
    return TrialSpec(**(settings | overrides))


def test_qlora_trial_on_gpu_measures_nvml_and_torch_memory(tmp_path):
    result = run_trial(_spec(tmp_path), trial_dir=tmp_path / "t", guard=GuardSettings())
    assert result.status == "completed", result.status_detail
    assert result.started["gpu_name"] and result.started["gpu_total_gib"] > 0
    for step in result.steps:
        assert step["torch_peak_reserved_gib"] > 0 and step["torch_peak_allocated_gib"] > 0
        assert (
            step["device_peak_gib"] is not None
            and step["device_peak_gib"] >= step["torch_peak_allocated_gib"]
        )
    assert result.steps[0]["probe"] and result.steps[0]["completion_len_mean"] == 64


def test_tiny_budget_ends_oom_not_failed(tmp_path):
    # 0.3 GiB cannot hold the 0.5B model's 4-bit weights, CUDA context and activations.
    spec = _spec(tmp_path, memory_budget_gib=0.3)
    result = run_trial(spec, trial_dir=tmp_path / "t", guard=GuardSettings(budget_gib=0.3))
    assert result.status == "oom", result.status_detail


def test_a_budget_holds_the_cuda_context_and_the_allocator_within_it(tmp_path):
    budget = 6.0
    result = run_trial(
        _spec(tmp_path, memory_budget_gib=budget),
        trial_dir=tmp_path / "t",
        guard=GuardSettings(budget_gib=budget),
    )
    assert result.status == "completed", result.status_detail
    started = result.started
    assert 0.05 < started["context_gib"] < 2.0 and started["context_source"] in ("process", "device")
    assert started["alloc_conf"] == "expandable_segments:True"
    assert result.peak["gpu_memory_source"] in ("process", "device")
    for step in result.steps:
        # context + allocator within the budget, as on a card of that size
        assert step["torch_peak_reserved_gib"] <= budget - started["context_gib"] + 1e-6
        assert step["device_peak_gib"] <= budget
        assert step["alloc_retries"] is not None and step["alloc_ooms"] is not None
