"""The trainer child's memory budget on a GPU, with a fake card: NVML is a fake pynvml module and
torch.cuda's functions are monkeypatched (this host has no GPU). Every figure is checked against the
card's own arithmetic: a budget of B GiB behaves like a card of B GiB holding context and allocator."""

from __future__ import annotations

import os
import re
import sys
import warnings
from types import SimpleNamespace

import pytest
import torch

from tests.helpers.nvml import FakeNvml, fake_gpu
from trainers import device, runtime
from trainers.device import budget_mem_get_info, device_info, real_card, setup_process
from trainers.events import EventWriter, is_oom
from trainers.generation import pool_utilization
from trainers.measure import StepMeter
from trainers.trial import TrialSpec
from trainers.units import GIB

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
        self.fractions: list[float] = []  # every cap set, in order
        self.reserved = 0  # torch's caching allocator (part of what NVML lists for the process)
        self.emptied = 0  # torch.cuda.empty_cache calls
        monkeypatch.setitem(sys.modules, "pynvml", self.nvml)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
        for name, value in {
            "is_available": lambda: True,
            "mem_get_info": self.mem_get_info,
            "memory_reserved": lambda device=None: self.reserved,
            "empty_cache": self.empty_cache,
            "current_device": lambda: 0,
            "get_device_properties": lambda device=None: SimpleNamespace(
                name="Fake H100", total_memory=80 * GIB
            ),
            "set_per_process_memory_fraction": self.set_fraction,
            "get_per_process_memory_fraction": self.get_fraction,
        }.items():
            monkeypatch.setattr(torch.cuda, name, value)
        monkeypatch.setattr(torch.cuda.memory, "mem_get_info", self.mem_get_info)
        monkeypatch.setattr(torch.cuda.memory, "get_per_process_memory_fraction", self.get_fraction)
        monkeypatch.setattr(device, "_context", None)
        monkeypatch.setattr(device, "_real", {})
        monkeypatch.setattr(device, "_cap", None)

    def create_context(self) -> None:
        if not self.has_context:
            self.has_context = True
            self.device["used"] += self.context
            self.device["processes"] = [(self.pid, self.context)]

    def allocate(self, gib: float) -> None:
        """This process takes gib more of the device, outside torch's allocator (a library's own)."""
        self.device["used"] += int(gib * GIB)
        self.device["processes"] = [(self.pid, self.device["processes"][0][1] + int(gib * GIB))]

    def neighbour_allocates(self, gib: float) -> None:
        """Another trial sharing the card takes gib more."""
        self.device["used"] += int(gib * GIB)

    def mem_get_info(self, device=None):
        self.create_context()
        return self.device["total"] - self.device["used"], self.device["total"]

    def set_fraction(self, fraction, device=None):
        self.fraction = fraction
        self.fractions.append(fraction)

    def empty_cache(self) -> None:
        self.emptied += 1

    def torch_reserves(self, gib: float) -> None:
        self.allocate(gib)
        self.reserved += int(gib * GIB)

    def get_fraction(self, device=None):
        return 1.0 if self.fraction is None else self.fraction


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


def _step_begin(monkeypatch, meter: StepMeter) -> None:
    """StepMeter.on_step_begin on the fake card (its peak and counter reads are not under test here)."""
    for name in ("reset_peak_memory_stats", "synchronize", "max_memory_allocated"):
        monkeypatch.setattr(torch.cuda, name, lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: {})
    meter.on_step_begin(None, SimpleNamespace(global_step=0, max_steps=3), None)


def test_the_allocator_cap_gives_up_what_libraries_load_outside_torch_after_start_up(monkeypatch):
    card = FakeCard(monkeypatch, used_before=1.0, context=0.5)
    setup_process(_spec())  # budget 16 GiB: torch may have 16 - 0.5
    card.torch_reserves(10.0)  # the model and its first activations, inside torch
    card.allocate(0.75)  # cuBLAS's handle and kernels at the first matmul: outside torch
    _step_begin(monkeypatch, StepMeter(EventWriter(""), max_prompt_length=16))
    assert card.fractions == [(16 - 0.5) / 80, (16 - 1.25) / 80] and card.emptied == 0
    card.allocate(5.0)  # Triton's kernels and bitsandbytes' buffers: 6.25 GiB outside torch now
    device.refresh_allocator_cap()
    # torch's 10 GiB of cache no longer fits beside them: a real card would free it, so does torch here.
    assert card.fractions[-1] == (16 - 6.25) / 80 and card.emptied == 1


def test_the_allocator_cap_ignores_jitter_and_follows_the_device_where_nvml_cannot_see_the_pid(monkeypatch):
    card = FakeCard(monkeypatch, used_before=3.0, context=0.75, pid_visible=False)
    setup_process(_spec())
    card.allocate(1 / 128)  # 8 MiB: under the 16 MiB the cap moves for
    device.refresh_allocator_cap()
    card.allocate(
        0.5 - 1 / 128
    )  # the device grew by 0.75 + 0.5 GiB since before the context, torch holds none
    device.refresh_allocator_cap()
    assert card.fractions == [(16 - 0.75) / 80, (16 - 1.25) / 80]


def test_memory_outside_torch_filling_the_budget_is_out_of_memory(monkeypatch):
    card = FakeCard(monkeypatch, used_before=0.0, context=0.5)
    setup_process(_spec(memory_budget_gib=2.0))
    card.allocate(1.5)
    with pytest.raises(
        MemoryError, match=r"memory_budget_gib: 2 GiB leaves nothing .* \(2.00 GiB: .* above 2.00"
    ) as err:
        device.refresh_allocator_cap()
    assert is_oom(err.value)


# --- mem_get_info under a budget ------------------------------------------------------------------


def test_mem_get_info_answers_as_a_card_of_the_budget_size(monkeypatch):
    card = FakeCard(monkeypatch, used_before=1.0, context=0.5)
    setup_process(_spec())
    assert torch.cuda.mem_get_info() == (int((16 - 0.5) * GIB), 16 * GIB)
    card.torch_reserves(4.0)  # torch (or anything in this process) takes 4 GiB
    assert torch.cuda.mem_get_info(0) == (int((16 - 0.5 - 4) * GIB), 16 * GIB)
    assert torch.cuda.memory.mem_get_info(0)[1] == 16 * GIB  # the module Unsloth may import from
    card.torch_reserves(12.0)  # past the budget: nothing left, never negative
    assert torch.cuda.mem_get_info() == (0, 16 * GIB)


def test_trials_sharing_the_card_do_not_shrink_each_other_s_free_memory(monkeypatch):
    card = FakeCard(monkeypatch, used_before=1.0, context=0.5)
    setup_process(_spec())
    card.torch_reserves(2.0)
    card.neighbour_allocates(30.0)  # another trial's 30 GiB counts against its own budget
    assert torch.cuda.mem_get_info(0) == (int((16 - 0.5 - 2) * GIB), 16 * GIB)


def test_another_device_answers_for_itself():
    real = lambda device=None: (3 * GIB, 80 * GIB)  # noqa: E731
    context = device.CudaContext(GIB // 2, "process", free_after=3 * GIB, total=80 * GIB)
    other = budget_mem_get_info(real, lambda device: 1, lambda index: 0, 16 * GIB, context)
    assert other(1) == (3 * GIB, 80 * GIB)


def test_unsloth_s_usable_memory_on_a_budget_is_the_budget_less_context_and_allocations(monkeypatch):
    card = FakeCard(monkeypatch, used_before=1.0, context=0.5)
    setup_process(_spec())
    card.allocate(3.0)
    allocated = 2 * GIB  # of the 3 GiB reserved
    # unsloth/models/_utils.py usable_cuda_bytes, as written there: free plus the allocator's unused
    # blocks, capped by total x the per-process fraction.
    free, total = torch.cuda.mem_get_info(0)
    usable = free + torch.cuda.memory_reserved(0) - allocated
    usable = min(usable, int(total * torch.cuda.get_per_process_memory_fraction(0)) - allocated)
    # A real 16 GiB card holding a 0.5 GiB context and 2 GiB of tensors: 13.5 GiB (was 16 x 15.5/80 - 2).
    assert usable == pytest.approx((16 - 0.5 - 2) * GIB, abs=1)
    assert card.fraction == pytest.approx((16 - 0.5) / 80)  # torch's own cap is still on the real card


def test_the_device_properties_report_the_budget_s_card_and_device_info_the_real_one(monkeypatch):
    FakeCard(monkeypatch, used_before=1.0, context=0.5)
    setup_process(_spec())
    props = torch.cuda.get_device_properties(0)
    assert (props.total_memory, props.name) == (16 * GIB, "Fake H100")
    assert device_info()["gpu_total_gib"] == 80.0


def test_the_real_card_answers_inside_real_card(monkeypatch):
    card = FakeCard(monkeypatch, used_before=1.0, context=0.5)
    setup_process(_spec())
    with real_card():
        assert torch.cuda.mem_get_info() == (int((80 - 1.5) * GIB), 80 * GIB)
        assert torch.cuda.get_device_properties(0).total_memory == 80 * GIB
        assert torch.cuda.memory.get_per_process_memory_fraction(0) == pytest.approx((16 - 0.5) / 80)
    assert torch.cuda.mem_get_info()[1] == torch.cuda.get_device_properties(0).total_memory == 16 * GIB
    assert card.fraction == pytest.approx((16 - 0.5) / 80)  # the budget less the context, of the card


class _Imported(Exception):
    """Stops the Unsloth runner at Unsloth's import."""


def test_unsloth_is_imported_onto_the_budget_s_card(monkeypatch, tmp_path):
    from trainers import stacks
    from trainers.stacks import unsloth as unsloth_stack

    FakeCard(monkeypatch, used_before=1.0, context=0.5)
    seen = {}

    def import_unsloth():
        seen["total"] = torch.cuda.get_device_properties(0).total_memory
        seen["mem_get_info"] = torch.cuda.mem_get_info(0)
        raise _Imported

    monkeypatch.setattr(unsloth_stack, "import_unsloth", import_unsloth)
    with pytest.raises(_Imported):
        stacks.load("unsloth").run(_spec(stack="unsloth"), EventWriter(str(tmp_path / "events.jsonl")))
    assert seen == {"total": 16 * GIB, "mem_get_info": (int((16 - 0.5) * GIB), 16 * GIB)}


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
    got = pool_utilization(requested, budget_gib, int(card_gib * GIB))
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
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
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
    from orchestrator.recording.sinks import TRIAL_SCHEMA, trial_row
    from orchestrator.words.outcome import COMPLETED, TrialResult

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


# --- a GPU torch cannot use -----------------------------------------------------------------------


def _gpu_torch_cannot_use(monkeypatch, *, driver_cuda: int, wheel_cuda: str | None, warning: str | None):
    """NVML finds GPU 0; torch.cuda.is_available() is False, warning as torch does when cuInit fails."""
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([fake_gpu(0)], cuda_driver_version=driver_cuda))
    monkeypatch.setattr(torch.version, "cuda", wheel_cuda)

    def is_available():
        if warning:
            warnings.warn(warning, UserWarning, stacklevel=1)
        return False

    monkeypatch.setattr(torch.cuda, "is_available", is_available)


def test_a_driver_older_than_the_wheel_s_cuda_makes_the_trial_unavailable_not_a_cpu_run(monkeypatch):
    too_old = (
        "CUDA initialization: The NVIDIA driver on your system is too old (found version 12040). Please "
        "update your GPU driver by downloading and installing a new version from the URL: "
        "http://www.nvidia.com/Download/index.aspx"
    )
    _gpu_torch_cannot_use(monkeypatch, driver_cuda=12040, wheel_cuda="12.8", warning=too_old)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(runtime.UnavailableError) as err:
        setup_process(_spec())
    assert str(err.value) == (
        "Fake H100 #0 (CUDA_VISIBLE_DEVICES='0') is visible to NVML but torch cannot use it, and the trial "
        f"will not run on the CPU instead: the NVIDIA driver supports CUDA 12.4, older than torch "
        f"{torch.__version__}'s CUDA 12.8; update the driver, or install a torch wheel built for CUDA 12.4 "
        f"or older; {too_old}"
    )


def test_a_cpu_only_torch_wheel_on_a_gpu_host_makes_the_trial_unavailable(monkeypatch):
    _gpu_torch_cannot_use(monkeypatch, driver_cuda=12080, wheel_cuda=None, warning=None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(
        runtime.UnavailableError, match=rf"torch {re.escape(torch.__version__)} is a CPU-only build"
    ):
        setup_process(_spec())


def test_a_gpu_cuda_cannot_find_from_cuda_visible_devices_is_unavailable_but_a_cpu_trial_runs(monkeypatch):
    no_device = "CUDA initialization: CUDA driver initialization failed, you might not have a CUDA gpu."
    _gpu_torch_cannot_use(monkeypatch, driver_cuda=12080, wheel_cuda="12.8", warning=no_device)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0aaa")  # NVML takes the prefix
    with pytest.raises(runtime.UnavailableError) as err:
        setup_process(_spec())
    assert str(err.value).endswith(
        f"(CUDA_VISIBLE_DEVICES='GPU-0aaa') is visible to NVML but torch cannot use it, "
        f"and the trial will not run on the CPU instead: {no_device}"
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a CPU trial on a GPU host: the driver hides every GPU
    setup_process(_spec())
    assert device._context is None
