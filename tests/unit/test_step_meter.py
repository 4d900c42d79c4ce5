"""StepMeter's memory columns with a scripted CUDA allocator: per-step peaks and the running peak."""

from types import SimpleNamespace

import pytest
import torch

from trainers.measure import StepMeter
from trainers.units import GIB


class FakeAllocator:
    """torch.cuda's peak counter: `touch` allocates up to a level, reset_peak drops the peak to now."""

    def __init__(self):
        self.now = 1 * GIB
        self.peak = self.now

    def touch(self, level_gib: float) -> None:
        self.peak = max(self.peak, level_gib * GIB)

    def reset_peak(self, *a) -> None:
        self.peak = self.now


class Events:
    def __init__(self):
        self.rows = []

    def emit(self, event, **row):
        self.rows.append(row)


def test_running_peak_keeps_what_happened_between_steps_and_per_step_peaks_reset(monkeypatch):
    cuda = FakeAllocator()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", cuda.reset_peak)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: cuda.peak)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: cuda.now)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: cuda.now)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: cuda.peak)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    events = Events()
    meter = StepMeter(events, max_prompt_length=96)
    args = SimpleNamespace(max_completion_length=8, num_generations=4, per_device_train_batch_size=2)
    state = SimpleNamespace(global_step=0, max_steps=3)

    cuda.touch(9)  # model loading, before training began: not part of the original's peak
    meter.on_train_begin(args, state, None)
    for during_step, after_step in ((3, 5), (2, 1), (4, 1)):  # GiB inside the step, then between steps
        meter.on_step_begin(args, state, None)
        cuda.touch(during_step)
        state.global_step += 1
        meter.on_step_end(args, state, None)
        meter.on_log(args, state, None, logs={"loss": 0.0})
        cuda.touch(after_step)  # e.g. logging or evaluation between steps

    per_step = [r["torch_peak_allocated_gib"] for r in events.rows]
    running = [r["torch_peak_allocated_since_start_gib"] for r in events.rows]
    assert per_step == [3, 2, 4]
    assert running == [3, 5, 5]  # step 1's 3, then the 5 between steps 1 and 2, never the 9 before
    assert {r["estimated_tokens_per_step"] for r in events.rows} == {(96 + 8) * 4 * 2}


def test_running_peak_is_null_on_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    events = Events()
    meter = StepMeter(events, max_prompt_length=16)
    args = SimpleNamespace(max_completion_length=8, num_generations=2, per_device_train_batch_size=1)
    state = SimpleNamespace(global_step=0, max_steps=1)
    meter.on_train_begin(args, state, None)
    meter.on_step_begin(args, state, None)
    state.global_step = 1
    meter.on_step_end(args, state, None)
    meter.on_log(args, state, None, logs={})
    (row,) = events.rows
    assert row["torch_peak_allocated_since_start_gib"] is None and row["torch_allocated_gib"] is None


def test_step_time_on_a_gpu_waits_for_the_work_queued_on_the_device_and_not_for_earlier_work(monkeypatch):
    import trainers.measure as measure

    clock = SimpleNamespace(now=100.0, queued=0.0)  # seconds of kernels queued on the device, not yet run

    def synchronize(*a):
        clock.now, clock.queued = clock.now + clock.queued, 0.0

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    for name in ("reset_peak_memory_stats", "max_memory_allocated", "memory_allocated", "memory_reserved"):
        monkeypatch.setattr(torch.cuda, name, lambda *a: 0)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: 0)
    monkeypatch.setattr(measure, "_alloc_counters", lambda: None)
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock.now)
    events = Events()
    meter = StepMeter(events, max_prompt_length=16)
    args = SimpleNamespace(max_completion_length=8, num_generations=2, per_device_train_batch_size=1)
    state = SimpleNamespace(global_step=0, max_steps=1)
    meter.on_train_begin(args, state, None)
    clock.queued = 0.25  # logging between steps left 0.25 s of kernels: not the step's
    meter.on_step_begin(args, state, None)
    clock.now += 0.125  # the step's Python returns after 0.125 s ...
    clock.queued = 0.5  # ... leaving 0.5 s of its kernels to run
    state.global_step = 1
    meter.on_step_end(args, state, None)
    meter.on_log(args, state, None, logs={})
    assert events.rows[0]["step_s"] == 0.125 + 0.5


def test_the_trainer_measures_a_steps_update_against_the_weights_before_it():
    from types import SimpleNamespace

    import torch

    from trainers.measure import trainable_snapshot, update_ratio

    a, b = (
        torch.nn.Parameter(torch.tensor([3.0, 4.0])),
        torch.nn.Parameter(torch.zeros(2), requires_grad=False),
    )
    trainer = SimpleNamespace(model=SimpleNamespace(parameters=lambda: [a, b]))
    before = trainable_snapshot(trainer)  # only what trains: a, norm 5
    with torch.no_grad():
        a += torch.tensor([0.3, 0.4])  # a change of norm 0.5
    assert update_ratio(before, trainer) == pytest.approx(0.1, rel=1e-6)
    assert update_ratio(None, trainer) is None and trainable_snapshot(SimpleNamespace(model=None)) is None
