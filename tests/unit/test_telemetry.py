"""MemorySampler units: NVML handle mapping, process/device fallback, window arithmetic, guard, and
failure handling. NVML is faked (no driver here); the host side reads this very test process."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from orchestrator.running.telemetry import (
    BudgetBreach,
    MemorySampler,
    Sample,
    energy_between,
    summarize_window,
)
from tests.helpers.nvml import FakeNvml, fake_gpu
from trainers.nvml import NvmlUnavailable, first_visible_device, resolve_nvml_handle
from trainers.units import GIB

MIG = {
    "uuid": "MIG-5c1b2f3e-aaaa-bbbb-cccc-000000000001",
    "name": "Fake H100 MIG 1g.10gb",
    "total": 10 * GIB,
    "used": GIB,
}


@pytest.fixture
def nvml():
    return FakeNvml([fake_gpu(0), fake_gpu(1), MIG])


# --- handle mapping ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cvd", "expected"),
    [
        (None, "0"),
        ("1", "1"),
        ("1,0", "1"),
        (" 2 , 3", "2"),
        ("", None),
        ("-1", None),
        ("GPU-abc,GPU-def", "GPU-abc"),
    ],
)
def test_first_visible_device(cvd, expected):
    assert first_visible_device(cvd) == expected


def test_resolve_by_index_uuid_prefix_and_mig(nvml):
    gpu0, gpu1 = nvml.devices[0], nvml.devices[1]
    assert resolve_nvml_handle(nvml, "1") is gpu1
    assert resolve_nvml_handle(nvml, gpu0["uuid"]) is gpu0
    assert resolve_nvml_handle(nvml, gpu1["uuid"][:10]) is gpu1  # CUDA accepts unique prefixes
    assert resolve_nvml_handle(nvml, MIG["uuid"]) is nvml.devices[2]


def test_resolve_rejects_with_a_fix(nvml):
    with pytest.raises(NvmlUnavailable, match=r"index 7 but NVML sees 2 device\(s\)"):
        resolve_nvml_handle(nvml, "7")
    with pytest.raises(NvmlUnavailable, match="matches 2 NVML devices; give the full UUID"):
        resolve_nvml_handle(nvml, "GPU-")
    with pytest.raises(NvmlUnavailable, match="expected an index, GPU-<uuid> or MIG-<uuid>"):
        resolve_nvml_handle(nvml, "cuda:0")


def test_sampler_maps_cuda_visible_devices_to_the_rightfake_gpu(nvml):
    sampler = MemorySampler(os.getpid(), cuda_visible_devices=nvml.devices[1]["uuid"] + ",0", nvml=nvml)
    sampler._open()
    sample = sampler.sample_once()
    assert sampler.backend == "nvml"
    assert sampler.gpu_name == "Fake H100 #1"
    assert sampler.gpu_total_gib == 80
    assert sample.device_used_gib == 2  # device 1's used memory
    assert sample.gpu_util_pct == 51 and sample.power_w == 200


def test_mig_instance_without_utilization_or_power_reads_none_and_stops_asking(nvml):
    sampler = MemorySampler(os.getpid(), cuda_visible_devices=MIG["uuid"], nvml=nvml)
    sampler._open()
    first, second = sampler.sample_once(), sampler.sample_once()
    assert first.device_used_gib == 1 and first.gpu_util_pct is None and first.power_w is None
    assert second.power_w is None
    assert nvml.calls["power"] == 1 and nvml.calls["utilization"] == 1  # unsupported: asked once


# --- process memory vs device fallback ------------------------------------------------------------


def test_process_memory_where_nvml_lists_the_pid_else_device_used_less_what_was_there_before(nvml):
    me = os.getpid()
    nvml.devices[0]["processes"] = [(me, 3 * GIB), (999_999, 20 * GIB)]  # another process: not ours
    sampler = MemorySampler(me, cuda_visible_devices="0", nvml=nvml)
    sampler._open()
    listed = sampler.sample_once()  # also the device baseline: 1 GiB in use before the trial
    assert listed.process_used_gib == 3 and listed.gpu_gib == 3 and listed.gpu_source == "process"

    nvml.devices[0]["processes"] = [(999_999, 20 * GIB)]  # a container lists host PIDs only
    nvml.devices[0]["used"] = int(3.5 * GIB)
    fallback = sampler.sample_once()
    assert fallback.process_used_gib is None and fallback.gpu_source == "device"
    assert fallback.gpu_gib == 3.5 - 1

    nvml.devices[0]["processes"] = [(me, None)]  # NVML_VALUE_NOT_AVAILABLE
    assert sampler.sample_once().gpu_gib == 3.5 - 1


def test_a_trial_nvml_never_lists_reports_device_figures_less_the_baseline_and_says_so(nvml):
    nvml.devices[0]["processes"] = [(999_999, 20 * GIB)]  # host PIDs only
    sampler = MemorySampler(os.getpid(), cuda_visible_devices="0", nvml=nvml)
    sampler._open()
    sampler.sample_once()  # 1 GiB in use before the trial
    nvml.devices[0]["used"] = 7 * GIB
    sampler.sample_once()
    nvml.devices[0]["used"] = 4 * GIB
    sampler.sample_once()
    peak = sampler.peak()
    assert peak["device_peak_gib"] == 7 - 1 and peak["device_used_gib"] == 4 - 1
    assert peak["gpu_memory_source"] == "device"


def test_gpu_memory_source_is_process_once_nvml_lists_the_trainer_and_null_without_nvml(nvml):
    me = os.getpid()
    sampler = MemorySampler(me, cuda_visible_devices="0", nvml=nvml)
    sampler._open()
    sampler.sample_once()  # before the trainer's CUDA context: not listed yet
    nvml.devices[0]["processes"] = [(me, 2 * GIB)]
    sampler.sample_once()
    assert sampler.peak()["gpu_memory_source"] == "process"
    cpu = MemorySampler(me, backend="psutil")
    cpu._open()
    cpu.sample_once()
    assert cpu.peak()["gpu_memory_source"] is None


# --- window arithmetic -----------------------------------------------------------------------------


def _s(t, rss=1.0, hwm=None, power=None, gpu=None, util=None) -> Sample:
    return Sample(
        t=t,
        rss_gib=rss,
        hwm_gib=hwm,
        host_available_gib=10.0,
        device_used_gib=gpu,
        power_w=power,
        gpu_util_pct=util,
    )


def test_energy_integrates_power_with_interpolated_edges():
    samples = [_s(0, power=100), _s(1, power=100), _s(2, power=300), _s(3, power=300)]
    assert energy_between(samples, 0, 3) == (100 + 200 + 300, 3)
    # [0.5, 2.5]: 0.5 s at 100 W, then 100->300 W over 1 s (200 J), then 0.5 s at 300 W
    energy, covered = energy_between(samples, 0.5, 2.5)
    assert energy == pytest.approx(50 + 200 + 150) and covered == 2
    # no extrapolation beyond the sampled span
    assert energy_between(samples, -5, 1) == (100, 1)
    assert energy_between([_s(0), _s(1)], 0, 1) == (None, 0.0)


def test_window_summary_peaks_means_and_last_values():
    samples = [
        _s(0.0, rss=1.0, gpu=2.0, power=100, util=10),
        _s(1.0, rss=3.0, gpu=6.0, power=100, util=30),
        _s(2.0, rss=2.0, gpu=4.0, power=300, util=50),
        _s(3.0, rss=1.5, gpu=3.0, power=300, util=70),
    ]
    w = summarize_window(samples, 0.5, 2.0)
    assert w["samples"] == 2
    assert w["rss_peak_gib"] == 3.0 and w["rss_gib"] == 2.0
    assert w["device_peak_gib"] == 6.0 and w["device_used_gib"] == 4.0
    assert w["gpu_util_pct"] == 40
    assert w["energy_j"] == pytest.approx(50 + 200)
    assert w["power_w"] == pytest.approx(250 / 1.5)


def test_window_uses_vmhwm_only_when_it_rose_inside_the_window():
    # VmHWM jumps to 5 GiB between t=1 and t=2: a spike no sample caught
    samples = [_s(0, rss=1, hwm=1), _s(1, rss=1, hwm=1), _s(2, rss=1, hwm=5), _s(3, rss=1, hwm=5)]
    assert summarize_window(samples, 1.5, 2.5)["rss_peak_gib"] == 5
    assert summarize_window(samples, 2.5, 3.5)["rss_peak_gib"] == 1  # an earlier step's peak


def test_window_without_a_sample_reports_the_state_at_its_end_and_gpu_fields_none_on_cpu():
    samples = [_s(0, rss=1.0, hwm=1.0), _s(1, rss=2.0, hwm=2.0)]
    w = summarize_window(samples, 1.01, 1.02)
    assert w["samples"] == 0 and w["rss_gib"] == 2.0 and w["rss_peak_gib"] == 2.0
    assert w["device_peak_gib"] is None and w["gpu_util_pct"] is None and w["power_w"] is None
    assert w["energy_j"] is None
    assert summarize_window(samples, -2, -1)["rss_gib"] is None


def test_overall_peak_and_energy_and_bounded_buffer(nvml):
    sampler = MemorySampler(os.getpid(), cuda_visible_devices="0", nvml=nvml, retention_s=1, hz=16)
    sampler._open()
    for used in (1, 5, 2):
        nvml.devices[0]["used"] = used * GIB
        sampler.sample_once()
    for _ in range(40):
        sampler.sample_once()
    peak = sampler.peak()
    assert peak["device_peak_gib"] == 5 - 1 and peak["samples"] == 43  # less the 1 GiB baseline
    assert peak["energy_j"] is not None and peak["energy_j"] >= 0
    assert peak["rss_peak_gib"] >= peak["rss_gib"] > 0
    assert len(sampler.samples()) == 16  # retention_s x hz


# --- guard -----------------------------------------------------------------------------------------


def test_guard_fires_once_when_process_memory_passes_the_budget_itself(nvml):
    me = os.getpid()
    breaches = []
    sampler = MemorySampler(
        me, cuda_visible_devices="0", nvml=nvml, budget_gib=4, on_budget_exceeded=breaches.append
    )
    sampler._open()
    nvml.devices[0]["processes"] = [(me, 4 * GIB)]  # exactly a full 4 GiB card: fits
    sampler.sample_once()
    assert breaches == []
    nvml.devices[0]["processes"] = [(me, int(4.1 * GIB))]  # over the card, no margin on GPU
    sampler.sample_once()
    sampler.sample_once()
    assert len(breaches) == 1
    assert (
        breaches[0].detail == "guard: GPU process memory 4.10 GiB passed budget 4.00 GiB (+0.00 GiB margin)"
    )
    assert breaches[0].reading == "GPU process memory 4.10 GiB, budget 4.00 GiB"


def test_guard_on_device_memory_does_not_charge_memory_in_use_before_the_trial(nvml):
    breaches = []
    sampler = MemorySampler(
        os.getpid(),
        cuda_visible_devices="0",
        nvml=nvml,
        budget_gib=4,
        margin_gib=0.5,
        on_budget_exceeded=breaches.append,
    )
    sampler._open()
    sampler.sample_once()  # baseline: 1 GiB in use before the trainer made its context
    nvml.devices[0]["used"] = int(5.4 * GIB)
    sampler.sample_once()
    assert breaches == []
    nvml.devices[0]["used"] = int(5.6 * GIB)
    sampler.sample_once()
    assert breaches[0].detail == (
        "guard: GPU device memory 5.60 GiB passed budget 4.00 GiB (+0.50 GiB margin, +1.00 GiB in use before the trial)"
    )


def test_a_failing_callback_is_noted_and_sampling_goes_on():
    def broken(_):
        raise RuntimeError("listener bug")

    sampler = MemorySampler(os.getpid(), backend="psutil", on_sample=broken)
    sampler._open()
    sampler.sample_once()
    sampler.sample_once()
    assert sampler.peak()["samples"] == 2
    assert any("listener bug" in note for note in sampler.notes)


# --- failures never raise -------------------------------------------------------------------------


def test_without_a_driver_auto_falls_back_to_psutil_and_says_why():
    import pynvml

    sampler = MemorySampler(os.getpid(), cuda_visible_devices="0").start()
    try:
        if sampler.backend == "nvml":
            pytest.skip("a GPU driver is present: this test is about hosts without one")
        with pytest.raises(pynvml.NVMLError):
            pynvml.nvmlInit()
        assert sampler.backend == "psutil" and sampler.gpu_name is None and sampler.gpu_total_gib is None
        assert any("NVML not used" in n for n in sampler.notes)
        latest = sampler.latest()
        assert latest.device_used_gib is None and latest.power_w is None and latest.rss_gib > 0
        assert sampler.peak()["device_peak_gib"] is None and sampler.peak()["energy_j"] is None
    finally:
        sampler.stop()


def test_only_a_host_without_a_gpu_for_the_trial_falls_back_to_rss(nvml):
    no_driver = MemorySampler(os.getpid(), cuda_visible_devices="0", nvml=FakeNvml([])).start()
    hidden = MemorySampler(os.getpid(), cuda_visible_devices="", nvml=nvml).start()
    lost = MemorySampler(os.getpid(), cuda_visible_devices="GPU-ffffffff", nvml=nvml).start()
    try:
        assert no_driver.backend == "psutil" and no_driver.running
        assert no_driver.notes == ["NVML not used: NVMLError_LibraryNotFound: NVML Shared Library Not Found"]
        assert hidden.backend == "psutil" and "hides every GPU" in hidden.notes[0]
        # a GPU is there but the trial's entry matches none: an error, not RSS against a GPU budget
        assert not lost.running and lost.backend is None
        assert "'GPU-ffffffff' matches 0 NVML devices" in lost.error
    finally:
        for sampler in (no_driver, hidden, lost):
            sampler.stop()
    assert nvml.initialized == 0


def test_a_failing_nvml_call_stops_the_sampler_without_raising(nvml):
    sampler = MemorySampler(os.getpid(), cuda_visible_devices="0", nvml=nvml, hz=200).start()
    assert sampler.running
    first = sampler.samples()
    nvml.devices[0]["memory_fails"] = True
    sampler._thread.join(5)
    assert not sampler.running
    assert sampler.error == "NVMLError: Unknown Error" and sampler.stopped_because == "sampler error"
    assert sampler.samples()[: len(first)] == first  # what was sampled stays readable
    sampler.stop()
    assert nvml.initialized == 0  # NVML released


def test_nvml_failing_at_start_is_recorded_not_raised(nvml):
    nvml.devices[0]["memory_fails"] = True
    sampler = MemorySampler(os.getpid(), cuda_visible_devices="0", nvml=nvml, backend="nvml").start()
    assert not sampler.running and sampler.error == "NVMLError: Unknown Error"
    assert sampler.peak()["samples"] == 0
    sampler.stop()


def test_a_pid_that_does_not_exist_is_recorded_not_raised():
    sampler = MemorySampler(2**22 + 12345, backend="psutil").start()
    assert not sampler.running and "exited" in sampler.stopped_because and sampler.error is None


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="hz: must be > 0"):
        MemorySampler(1, hz=0)
    with pytest.raises(ValueError, match="backend: unknown value 'gpu'; available: auto, nvml, psutil"):
        MemorySampler(1, backend="gpu")


def test_breach_shows_a_third_decimal_only_when_two_would_equal_the_limit():
    close = BudgetBreach("RSS", 0.8031, 0.8, 0.0, 0.0, time.time())
    assert close.detail == "guard: RSS 0.803 GiB passed budget 0.80 GiB (+0.00 GiB margin)"
    assert close.reading == "RSS 0.803 GiB, budget 0.80 GiB"
    assert BudgetBreach("RSS", 0.82, 0.8, 0.0, 0.0, time.time()).reading == "RSS 0.82 GiB, budget 0.80 GiB"


# --- packed trials and the trainer's exit ---------------------------------------------------------


def test_a_packed_trial_nvml_does_not_list_yet_holds_0_not_its_neighbours_memory(nvml):
    me, neighbour = os.getpid(), 999_999
    gpu = nvml.devices[0]
    gpu["used"], gpu["processes"] = 30 * GIB, [(neighbour, 29 * GIB)]
    breaches = []
    sampler = MemorySampler(
        me,
        cuda_visible_devices="0",
        nvml=nvml,
        budget_gib=4,
        on_budget_exceeded=breaches.append,
        per_process=True,
    )
    sampler._open()
    waiting = sampler.sample_once()  # the trainer still importing: no CUDA context, not listed
    assert (waiting.process_used_gib, waiting.gpu_gib, waiting.device_baseline_gib) == (0.0, 0.0, None)
    gpu["used"], gpu["processes"] = 40 * GIB, [(neighbour, 39 * GIB)]  # the neighbour grows by 10 GiB
    assert sampler.sample_once().gpu_gib == 0.0 and breaches == []
    gpu["used"], gpu["processes"] = 43 * GIB, [(neighbour, 39 * GIB), (me, 3 * GIB)]
    assert sampler.sample_once().gpu_gib == 3.0
    gpu["processes"] = [(neighbour, 42 * GIB)]  # the trainer gone from NVML's list (exiting)
    assert sampler.sample_once().gpu_gib == 0.0
    peak = sampler.peak()
    assert (peak["device_peak_gib"], peak["gpu_memory_source"], breaches) == (3.0, "process", [])


def test_a_packed_trial_whose_process_list_fails_stops_sampling_rather_than_read_the_device(nvml):
    def failing(handle):
        raise nvml.NVMLError("Unknown Error")

    nvml.nvmlDeviceGetComputeRunningProcesses = failing
    sampler = MemorySampler(os.getpid(), cuda_visible_devices="0", nvml=nvml, per_process=True).start()
    sampler.stop()
    assert (sampler.samples(), sampler.error, sampler.stopped_because) == (
        [],
        "NVMLError: Unknown Error",
        "sampler error",
    )


def test_sampling_stops_when_the_trainer_exits_before_it_is_reaped():
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"])
    try:
        sampler = MemorySampler(child.pid, hz=50, backend="psutil").start()
        deadline = time.monotonic() + 10
        while sampler.running and time.monotonic() < deadline:  # never reaped while it samples
            time.sleep(0.05)
        assert not sampler.running, "the sampler went on sampling an exited trainer"
        assert sampler.stopped_because == f"trainer process {child.pid} exited" and sampler.error is None
        assert min(s.rss_gib for s in sampler.samples()) > 0  # no 0-byte reading of the zombie
    finally:
        child.wait()


def test_a_trainer_read_at_zero_bytes_has_exited_even_before_it_turns_zombie(monkeypatch):
    # The race behind a flaky run: the status look says running, then the exiting process has released
    # its memory and reads 0 bytes. That is its exit, never a 0-byte sample.
    from orchestrator.running import telemetry

    reader = telemetry._HostReader(os.getpid())
    monkeypatch.setattr(reader.process, "status", lambda: psutil.STATUS_RUNNING)
    monkeypatch.setattr(reader.process, "memory_info", lambda: type("Mem", (), {"rss": 0})())
    with pytest.raises(psutil.NoSuchProcess):
        reader.read()
