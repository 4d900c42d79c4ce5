"""The trainer child's memory budget on a GPU, with a fake card: NVML is a fake pynvml module and
torch.cuda's functions are monkeypatched (this host has no GPU). Every figure is checked against the
card's own arithmetic: a budget of B GiB behaves like a card of B GiB holding context and allocator."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest
import torch

from tests.helpers.nvml import FakeNvml, fake_gpu
from trainers import runtime
from trainers.events import EventWriter, is_oom
from trainers.measure import StepMeter
from trainers.runtime import (
    GIB,
    budget_mem_get_info,
    card_mem_get_info,
    device_info,
    setup_process,
    vllm_gpu_memory_utilization,
)
from trainers.spec import TrialSpec

OTHER_PID = 999_999


class FakeCard:
    """One 80 GiB GPU as torch.cuda and NVML see it. Creating the CUDA context (the first
    cudaMemGetInfo) puts `context` bytes on the device; NVML lists this PID unless `pid_visible` is
    False (a container with its own PID namespace)."""

    def __init__(self, monkeypatch, *, used_before: float, context: float, pid_visible: bool = True):
        self.nvml = FakeNvml([fake_gpu(0, used=int(used_before * GIB), total=80 * GIB)])
        self.device = self.nvml.devices[0]
        self.context = int(context * GIB)
        self.pid = os.getpid() if pid_visible else OTHER_PID
        self.has_context = False
        self.fraction: float | None = None
        monkeypatch.setitem(sys.modules, "pynvml", self.nvml)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
        for name, value in {
            "is_available": lambda: True,
            "mem_get_info": self.mem_get_info,
            "memory_reserved": lambda device=None: 0,
            "current_device": lambda: 0,
            "get_device_properties": lambda device=None: SimpleNamespace(
                name="Fake H100", total_memory=80 * GIB
            ),
            "set_per_process_memory_fraction": self.set_fraction,
        }.items():
            monkeypatch.setattr(torch.cuda, name, value)
        monkeypatch.setattr(torch.cuda.memory, "mem_get_info", self.mem_get_info)
        monkeypatch.setattr(runtime, "_context", None)
        monkeypatch.setattr(runtime, "_real_mem_get_info", None)

    def create_context(self) -> None:
        if not self.has_context:
            self.has_context = True
            self.device["used"] += self.context
            self.device["processes"] = [(self.pid, self.context)]

    def allocate(self, gib: float) -> None:
        self.device["used"] += int(gib * GIB)
        self.device["processes"] = [(self.pid, self.device["processes"][0][1] + int(gib * GIB))]

    def mem_get_info(self, device=None):
        self.create_context()
        return self.device["total"] - self.device["used"], self.device["total"]

    def set_fraction(self, fraction, device=None):
        self.fraction = fraction


def _spec(**knobs) -> TrialSpec:
    return TrialSpec(**{"memory_budget_gib": 16.0, **knobs})


# --- the context and the allocator cap ------------------------------------------------------------


def test_the_allocator_cap_is_the_budget_less_the_context_nvml_lists_for_the_trainer(monkeypatch):
    card = FakeCard(monkeypatch, used_before=1.0, context=0.5)  # 1 GiB: another process
    setup_process(_spec())
    assert card.fraction == pytest.approx((16 - 0.5) / 80)
    info = device_info()
    assert info["context_gib"] == pytest.approx(0.5) and info["context_source"] == "process"


def test_where_nvml_cannot_see_the_pid_the_context_is_device_memory_after_minus_before(monkeypatch):
    card = FakeCard(monkeypatch, used_before=3.0, context=0.75, pid_visible=False)
    setup_process(_spec())
    assert card.fraction == pytest.approx((16 - 0.75) / 80)
    assert device_info()["context_gib"] == pytest.approx(0.75)
    assert device_info()["context_source"] == "device"


def test_a_reading_taken_before_a_library_made_the_context_still_measures_it(monkeypatch):
    # Unsloth's import may create the context before setup_process: the reading from before counts.
    card = FakeCard(monkeypatch, used_before=2.0, context=0.6, pid_visible=False)
    before = runtime.device_used_before_cuda()
    card.create_context()
    setup_process(_spec(framework="unsloth"), before)
    assert device_info()["context_gib"] == pytest.approx(0.6)
    assert card.fraction == pytest.approx((16 - 0.6) / 80)


def test_a_budget_no_larger_than_the_context_is_out_of_memory(monkeypatch):
    FakeCard(monkeypatch, used_before=0.0, context=0.5)
    with pytest.raises(MemoryError, match=r"memory_budget_gib: 0.4 GiB leaves nothing .* above 0.50") as err:
        setup_process(_spec(memory_budget_gib=0.4))
    assert is_oom(err.value)


def test_without_a_budget_the_context_is_still_recorded_and_nothing_is_capped(monkeypatch):
    card = FakeCard(monkeypatch, used_before=0.0, context=0.4)
    setup_process(_spec(memory_budget_gib=None))
    assert card.fraction is None and torch.cuda.mem_get_info() == card.mem_get_info()
    assert device_info()["context_gib"] == pytest.approx(0.4)


# --- mem_get_info under a budget ------------------------------------------------------------------


def test_mem_get_info_answers_as_a_card_of_the_budget_size(monkeypatch):
    card = FakeCard(monkeypatch, used_before=1.0, context=0.5)
    setup_process(_spec())
    assert torch.cuda.mem_get_info() == (int((16 - 0.5) * GIB), 16 * GIB)
    card.allocate(4.0)  # torch (or anything in this process) takes 4 GiB
    assert torch.cuda.mem_get_info(0) == (int((16 - 0.5 - 4) * GIB), 16 * GIB)
    assert torch.cuda.memory.mem_get_info(0)[1] == 16 * GIB  # the module Unsloth may import from
    card.allocate(12.0)  # past the budget: nothing left, never negative
    assert torch.cuda.mem_get_info() == (0, 16 * GIB)


def test_mem_get_info_never_reports_more_free_than_the_real_card_has():
    real = lambda device=None: (3 * GIB, 80 * GIB)  # noqa: E731 - the real card, nearly full
    context = runtime.CudaContext(GIB // 2, "process", free_after=3 * GIB, total=80 * GIB)
    emulated = budget_mem_get_info(real, lambda device: 0, 16 * GIB, context)
    assert emulated() == (3 * GIB, 16 * GIB)
    other = budget_mem_get_info(real, lambda device: 1, 16 * GIB, context)
    assert other(1) == (3 * GIB, 80 * GIB)  # another device is not the emulated card


def test_the_card_s_own_mem_get_info_answers_inside_card_mem_get_info(monkeypatch):
    card = FakeCard(monkeypatch, used_before=1.0, context=0.5)
    setup_process(_spec())
    with card_mem_get_info():
        assert torch.cuda.mem_get_info() == (int((80 - 1.5) * GIB), 80 * GIB)
    assert torch.cuda.mem_get_info()[1] == 16 * GIB
    assert card.fraction is not None


# --- vLLM's share ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "budget_gib", "card_gib", "effective"),
    [
        (0.5, 16.0, 80.0, 0.1),  # half of 16 GiB is 8 GiB = 0.1 of 80 GiB
        (0.6, 24.0, 80.0, 0.18),
        (0.5, None, 80.0, 0.5),  # no budget: the whole card
        (0.5, 100.0, 80.0, 0.5),  # a budget beyond the card is the card
    ],
)
def test_vllm_s_share_is_scaled_to_the_budget(requested, budget_gib, card_gib, effective):
    got = vllm_gpu_memory_utilization(requested, budget_gib, int(card_gib * GIB))
    assert got == pytest.approx(effective)
    assert got * card_gib == pytest.approx(requested * min(budget_gib or card_gib, card_gib))


# --- allocator counters per step ------------------------------------------------------------------


# What StepMeter reads of GRPOConfig for the original benchmark's token estimate.
TRL_ARGS = SimpleNamespace(max_completion_length=8, num_generations=2, per_device_train_batch_size=2)


def test_steps_record_the_allocator_s_retries_and_caught_ooms_as_deltas(monkeypatch):
    stats = {"num_alloc_retries": 5, "num_ooms": 1}  # before this step: not this step's
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        monkeypatch.setattr(torch.cuda, name, lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: dict(stats))
    meter = StepMeter(EventWriter(""), max_prompt_length=16)
    state = SimpleNamespace(global_step=0, max_steps=3)
    meter.on_step_begin(None, state, None)
    stats.update(num_alloc_retries=8, num_ooms=2)  # a library caught one OOM and retried thrice
    state.global_step = 1
    meter.on_step_end(TRL_ARGS, state, None)
    assert meter.pending["alloc_retries"] == 3 and meter.pending["alloc_ooms"] == 1


def test_allocator_counters_are_null_on_cpu():
    meter = StepMeter(EventWriter(""), max_prompt_length=16)
    state = SimpleNamespace(global_step=0, max_steps=1)
    meter.on_step_begin(None, state, None)
    state.global_step = 1
    meter.on_step_end(TRL_ARGS, state, None)
    assert meter.pending["alloc_retries"] is None and meter.pending["alloc_ooms"] is None


# --- per trial ------------------------------------------------------------------------------------


def test_the_started_event_names_the_allocator_setting_the_child_ran_with(monkeypatch):
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    info = device_info()  # CPU here: no context, but the setting is the child's all the same
    assert info["alloc_conf"] == "expandable_segments:True" and info["context_gib"] is None


def test_a_trial_row_carries_the_context_the_allocator_setting_and_the_gpu_figures_source():
    from orchestrator.recording.outcome import COMPLETED, TrialResult
    from orchestrator.recording.sinks import TRIAL_SCHEMA, trial_row

    result = TrialResult(status=COMPLETED, status_detail="")
    result.started = {
        "context_gib": 0.52,
        "context_source": "device",
        "alloc_conf": "expandable_segments:True",
    }
    result.peak = {"gpu_memory_source": "device", "device_peak_gib": 3.0}
    row = trial_row(TrialSpec(trial_key="k"), result, [])
    assert (row["context_gib"], row["context_source"]) == (0.52, "device")
    assert row["alloc_conf"] == "expandable_segments:True" and row["gpu_memory_source"] == "device"
    assert {"context_gib", "context_source", "alloc_conf", "gpu_memory_source"} <= set(TRIAL_SCHEMA.names)
