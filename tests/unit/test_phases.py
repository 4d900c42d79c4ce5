"""The two phases and the settled stop without Ray: the settle arithmetic on synthetic step series, the
packing arithmetic, the sweep's new sections, the trainer's channel, and the supervisor holding and
stopping a stand-in trainer."""

import os
import statistics
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from orchestrator.judging.intervals import MIN_CYCLES
from orchestrator.recording.recorder import Recorder, StepsFiles, TrialsFile
from orchestrator.recording.sinks import TrialsTable, steps_path
from orchestrator.running.phases import (
    MEMORY,
    SPEED,
    TrialPhases,
    memory_phase_steps,
    packing,
    speed_pending,
    stages,
)
from orchestrator.running.settle import SettleSettings, median_half_width, settled, steps_without_growth
from orchestrator.running.supervisor import run_trial
from orchestrator.spec.load import parse_sweep
from orchestrator.spec.sweep import SweepError
from orchestrator.words.outcome import COMPLETED, STOPPED, TrialResult
from trainers.control import CONTINUE, STOP, SupervisorChannel, closes_steady_cycle, holds_here
from trainers.trial import TrialSpec

FAKE = [sys.executable, str(Path(__file__).parents[2] / "tools" / "inputs" / "fake_trainer.py")]


def series(peaks: list[float], speeds: list[float | None], probe_steps: int = 0) -> list[dict]:
    return [
        {"step": n, "probe": n <= probe_steps, "rss_gib": peak, "tokens_per_s": speed}
        for n, (peak, speed) in enumerate(zip(peaks, speeds, strict=True), start=1)
    ]


# --- settle arithmetic -------------------------------------------------------------------------------
def test_steps_without_growth_counts_from_the_last_rise_over_the_highest_earlier_peak():
    rows = series([1.0, 1.2, 1.1, 1.2, 1.5, 1.5, 1.4, 1.505], [None] * 8)
    # The rises: step 1 (first reading), 2 (1.2 > 1.0), 5 (1.5 > 1.2); 1.505 is within 1% of 1.5.
    assert steps_without_growth(rows, tolerance=0.01) == 3
    assert steps_without_growth(rows, tolerance=0.0) == 0  # 1.505 > 1.5 is a rise without tolerance


def test_a_constant_speed_has_a_zero_half_width_and_fewer_than_the_report_minimum_of_cycles_have_none():
    assert median_half_width([250.0] * MIN_CYCLES, 0.9) == 0.0
    assert median_half_width([250.0] * (MIN_CYCLES - 1), 0.9) is None  # the report's "too few cycles"


def test_the_median_half_width_lies_within_the_spread_of_the_readings():
    values = [100.0, 103.0, 98.0, 101.0, 99.0, 102.0, 100.0]
    width = median_half_width(values, 0.9)
    middle = statistics.median(values)
    # A percentile interval of resampled medians lies between the smallest and largest reading.
    assert 0 < width <= (max(values) - min(values)) / 2 / middle
    assert median_half_width(values, 0.5) <= width  # a lower confidence never widens it


def test_a_trial_settles_once_memory_is_flat_for_n_steps_and_the_median_speed_is_tight():
    settings = SettleSettings(steps=3, half_width=0.05, confidence=0.9)
    peaks = [2.0, 1.0, 1.1, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2]  # step 1 a probe; growth until step 4
    speeds = [50.0, 100.0, 101.0, 99.0, 100.0, 102.0, 100.0, 101.0, 100.0]
    rows = series(peaks, speeds, probe_steps=1)
    first = next(n for n in range(1, len(rows) + 1) if settled(rows[:n], settings, probe_steps=1))
    assert first == 7  # the last rise at step 4, then steps 5, 6, 7 without growth


def test_a_noisy_speed_never_settles():
    settings = SettleSettings(steps=2, half_width=0.05, confidence=0.9)
    rows = series([1.0] * 12, [100.0, 300.0, 50.0, 200.0] * 3)
    assert not settled(rows, settings, probe_steps=0)


# --- packing -----------------------------------------------------------------------------------------
def test_packing_fits_as_many_budgets_with_headroom_as_the_card_holds():
    packed = packing(16, 80, 1.0, per_process=True, asked=None)
    assert packed.per_gpu == 80 // 17


def test_packing_more_than_the_card_holds_is_refused_with_the_numbers():
    with pytest.raises(ValueError) as info:
        packing(16, 80, 1.0, per_process=True, asked=5)
    assert str(info.value) == (
        "resources.memory_phase_per_gpu: 5 trials x (16 GiB budget + 1 GiB headroom) = 85 GiB, over the "
        "card's 80 GiB; give at most 4, or leave it unset to pack as many as fit"
    )


def test_a_sweep_packing_more_than_its_stated_card_holds_is_refused_before_it_runs():
    raw = {**RAW, "memory": {"budget_gib": 2}, "resources": {"gpu_memory_gib": 5, "memory_phase_per_gpu": 3}}
    with pytest.raises(SweepError) as info:
        parse_sweep(raw)
    assert info.value.errors == [
        "resources.memory_phase_per_gpu: 3 trials x (2 GiB budget + 1 GiB headroom) = 9 GiB, over the "
        "card's 5 GiB; give at most 1, or leave it unset to pack as many as fit"
    ]


def test_without_per_process_readings_memory_phase_trials_do_not_share_a_gpu():
    packed = packing(16, 80, 1.0, per_process=False, asked=None)
    assert packed.per_gpu == 1 and "device-wide" in packed.reason


RAW = {"name": "p", "fixed": {"model": "tiny", "max_steps": 10}, "oom": {"probe_steps": 2}}


def test_the_stages_of_a_packed_sweep_on_a_cpu_host_with_fake_gpus():
    sweep = parse_sweep(
        {
            **RAW,
            "memory": {"budget_gib": 2},
            "resources": {"gpu_memory_gib": 5, "memory_phase_headroom_gib": 0.5},
        }
    )
    (memory, memory_gpus), (speed, speed_gpus) = [
        (r.phases, r.gpus) for r in stages(sweep, True, lambda _: None)
    ]
    assert memory == TrialPhases(hold_at_step=3, then_speed=False, shared_gpu=True) and memory_gpus == 0.5
    assert speed == TrialPhases() and speed_gpus == 1


def test_the_stages_without_a_gpu_and_without_a_budget():
    sweep = parse_sweep({**RAW, "memory": {"budget_gib": 2}, "stop": {"when_settled": True}})
    memory, leftover = stages(sweep, False)
    phases = memory.phases
    assert phases.hold_at_step == 3 and phases.then_speed and phases.settle == SettleSettings()
    # A memory-phase row from an earlier run (packed, or phases: [memory]) gets its speed phase after.
    assert leftover.which is speed_pending and leftover.phases == TrialPhases(settle=SettleSettings())
    [only] = stages(parse_sweep(RAW), False)
    assert only.phases == TrialPhases()


@pytest.mark.parametrize(
    ("stop", "field"),
    [
        ({"settle_steps": 0}, "stop.settle_steps"),
        ({"settle_half_width": 1.5}, "stop.settle_half_width"),
        ({"settle_confidence": 1.0}, "stop.settle_confidence"),
        ({"settle_growth_tolerance": -0.1}, "stop.settle_growth_tolerance"),
    ],
)
def test_settle_thresholds_out_of_range_are_errors_naming_the_field(stop, field):
    with pytest.raises(SweepError) as info:
        parse_sweep({**RAW, "stop": {"when_settled": True, **stop}})
    assert info.value.errors[0].startswith(f"{field}: input should be")


def test_phases_out_of_order_or_memory_without_a_budget_are_errors():
    with pytest.raises(SweepError) as info:
        parse_sweep({**RAW, "phases": ["speed", "memory"]})
    assert "give each phase once, in the order memory, speed" in info.value.errors[0]
    with pytest.raises(SweepError) as info:
        parse_sweep({**RAW, "phases": ["memory"]})
    assert "[memory] needs memory.budget_gib" in info.value.errors[0]


# --- the trainer's channel ---------------------------------------------------------------------------
def test_the_channel_waits_at_its_hold_step_and_hears_stop_between_steps():
    read, write = os.pipe()
    channel = SupervisorChannel(hold_at_step=2, fd=read)
    assert channel.stop_after(1) is False  # nothing said: go on
    os.write(write, f"{CONTINUE}\n".encode())
    assert channel.stop_after(2) is False  # told to continue at the hold step
    os.write(write, f"{STOP}\n".encode())
    assert channel.stop_after(3) is True
    os.close(write)
    assert channel.stop_after(4) is False  # the end of stdin between steps says nothing


def _cycle_rows(probe_steps: int, steps_per_cycle: int, steps: int) -> list[dict]:
    """Step rows as the trainer writes them when each generation serves steps_per_cycle optimizer steps
    (num_iterations x steps_per_generation): a cycle's rows carry its probe flag, its last one cycle_steps."""
    rows = []
    for step in range(1, steps + 1):
        first = step - (step - 1) % steps_per_cycle  # the step that generated this cycle's completions
        closes = step % steps_per_cycle == 0
        rows.append(
            {"step": step, "probe": first <= probe_steps, "cycle_steps": steps_per_cycle if closes else None}
        )
    return rows


@pytest.mark.parametrize(
    ("probe_steps", "steps_per_cycle", "expected"),
    [(2, 1, 3), (2, 2, 4), (1, 2, 4), (2, 4, 8), (0, 3, 3)],
)
def test_the_memory_phase_ends_where_its_first_steady_generation_cycle_ends(
    probe_steps, steps_per_cycle, expected
):
    hold = memory_phase_steps(probe_steps)
    rows = _cycle_rows(probe_steps, steps_per_cycle, 12)
    holds = [r["step"] for r in rows if holds_here(r["step"], closes_steady_cycle(r), hold)]
    assert holds[0] == expected
    # every step up to the hold trained on completions the phase saw generated: no later step starts a
    # cycle whose generation came before the hold
    steady_generations = [
        r["step"] for r in rows if not r["probe"] and (r["step"] - 1) % steps_per_cycle == 0
    ]
    assert steady_generations[0] <= expected


def test_the_channel_holds_once_where_a_steady_cycle_closes():
    read, write = os.pipe()
    channel = SupervisorChannel(hold_at_step=3, fd=read)
    assert channel.stop_after(3, closes_steady_cycle=False) is False  # mid-cycle: no wait, go on
    os.write(write, f"{CONTINUE}\n".encode())
    assert channel.stop_after(4, closes_steady_cycle=True) is False  # held, told to continue
    assert channel.stop_after(6, closes_steady_cycle=True) is False  # no second hold: nothing to wait for
    os.close(write)


def test_the_end_of_stdin_at_the_hold_step_stops_the_trainer():
    read, write = os.pipe()
    os.close(write)
    assert SupervisorChannel(hold_at_step=1, fd=read).stop_after(1) is True


# --- the supervisor with a stand-in trainer ----------------------------------------------------------
def fake(max_steps: int, probe_steps: int = 0) -> TrialSpec:
    return TrialSpec(
        max_steps=max_steps, probe_steps=probe_steps, trial_key="fake", task_args={"fake": "finish"}
    )


def test_a_memory_phase_alone_stops_at_its_hold_step_and_says_it_fits(tmp_path):
    result = run_trial(fake(5, 1), trial_dir=tmp_path, trainer_cmd=FAKE,
                       phases=TrialPhases(hold_at_step=2, then_speed=False))  # fmt: skip
    assert [r["step"] for r in result.steps] == [1, 2]
    assert (result.status, result.phase, result.status_detail) == (
        COMPLETED,
        MEMORY,
        "fits: 2 memory-phase steps",
    )


def test_a_memory_phase_that_goes_on_runs_its_speed_phase_in_the_same_process(tmp_path):
    result = run_trial(fake(5, 1), trial_dir=tmp_path, trainer_cmd=FAKE, phases=TrialPhases(hold_at_step=2))
    assert [r["step"] for r in result.steps] == [1, 2, 3, 4, 5]
    assert (result.status, result.phase) == (COMPLETED, SPEED)


def test_a_settled_speed_phase_ends_early_and_says_at_which_step(tmp_path):
    settle = SettleSettings(steps=3, half_width=0.05, confidence=0.9)
    result = run_trial(fake(60, 1), trial_dir=tmp_path, trainer_cmd=FAKE, phases=TrialPhases(settle=settle))
    # The stand-in reports a flat 0.5 GiB and 100-102 tokens/s: the first steady step (2) is the first
    # reading, steps 3, 4, 5 do not grow it; the median's interval needs MIN_CYCLES (5) speeds: steps 2-6.
    assert result.settled_step == 6
    assert result.status == COMPLETED and result.status_detail.endswith("; settled at step 6")
    assert 6 <= len(result.steps) < 60 and result.exit_code == 0


# --- resume keeps each phase's results ---------------------------------------------------------------
def test_an_interrupted_speed_phase_keeps_the_memory_phases_row_and_steps(tmp_path):
    spec = TrialSpec(max_steps=5, probe_steps=1, sweep="p", trial_key="t")
    table = TrialsTable(tmp_path / "trials.parquet")
    recorder = Recorder([spec], [StepsFiles(tmp_path), TrialsFile(table)])
    memory = TrialResult(status=COMPLETED, status_detail="fits: 2 memory-phase steps", phase=MEMORY,
                         steps=series([0.5, 0.5], [None, 100.0], probe_steps=1))  # fmt: skip
    recorder.start("t")
    for row in memory.steps:  # streamed, as the supervisor hands them on
        recorder.step("t", row)
    recorder.end("t", memory)
    recorder.start("t")
    recorder.stop_running("interrupted")
    row = TrialsTable(tmp_path / "trials.parquet").rows["t"]
    assert (row["status"], row["phase"], row["steps_completed"]) == (COMPLETED, MEMORY, 2)
    kept = pq.read_table(steps_path(tmp_path, spec)).to_pylist()
    assert [(r["trial_key"], r["step"], r["probe"], r["rss_gib"], r["tokens_per_s"]) for r in kept] == [
        ("t", 1, True, 0.5, None),
        ("t", 2, False, 0.5, 100.0),
    ]
    assert STOPPED not in {r["status"] for r in table.rows.values()}


def test_the_packing_probe_reads_the_gpu_the_driver_was_given_not_nvml_device_0(monkeypatch):
    import subprocess

    import trainers.nvml
    from orchestrator.running.phases import host_gpu
    from tests.helpers.nvml import FakeNvml, fake_gpu
    from trainers.units import GIB

    nvml = FakeNvml([fake_gpu(0, total=80 * GIB), fake_gpu(1, total=24 * GIB), fake_gpu(2)])
    monkeypatch.setattr(trainers.nvml, "import_pynvml", lambda: nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    children = []

    def probe(cmd, **kwargs):
        children.append(kwargs["env"])
        return subprocess.CompletedProcess(cmd, 0, stdout="True\n")

    monkeypatch.setattr(subprocess, "run", probe)
    assert host_gpu() == (24.0, True)
    assert children[0]["CUDA_VISIBLE_DEVICES"] == "1" and children[0]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert nvml.initialized == 0  # shut down again
