"""Supervisor outcomes with a stand-in trainer (fast); the real trainer: tests/integration/test_trial_cli.py."""

import os
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from orchestrator.running.supervisor import default_sampler_factory, run_trial
from orchestrator.running.telemetry import Sample
from orchestrator.words.settings import GuardSettings
from trainers.trial import TrialSpec

FAKE = [sys.executable, str(Path(__file__).parents[2] / "tools" / "inputs" / "fake_trainer.py")]


def _run(tmp_path, behaviour, **kwargs):
    spec = TrialSpec(max_steps=3, trial_key="fake", task_args={"fake": behaviour})
    return run_trial(spec, trial_dir=tmp_path, trainer_cmd=FAKE, **kwargs)


def test_completed_with_steps_and_started_payload(tmp_path):
    seen = []
    result = _run(
        tmp_path, "finish", on_event=lambda kind, row: seen.append(kind), cuda_visible_devices="1", cpus=1
    )
    assert result.status == "completed"
    assert [r["step"] for r in result.steps] == [1, 2, 3]
    assert result.started["versions"] == {"fake": "1"}
    assert seen == ["started", "step", "step", "step", "finished"]
    assert result.exit_code == 0 and result.cuda_visible_devices == "1"


@pytest.mark.parametrize(
    ("behaviour", "status", "detail"),
    [
        ("crash", "failed", "RuntimeError: boom at the end"),
        ("exit", "failed", "exited with code 7 without a final event"),
        ("unavailable", "unavailable", "unsloth is not installed"),
        ("oom", "oom", "CUDA out of memory"),
    ],
)
def test_outcomes(tmp_path, behaviour, status, detail):
    result = _run(tmp_path, behaviour)
    assert result.status == status
    assert detail in result.status_detail


def test_failed_detail_carries_the_output_tail(tmp_path):
    result = _run(tmp_path, "exit")
    assert "dying without a final event" in result.status_detail


def test_a_refused_setting_fails_with_its_message_alone(tmp_path):
    result = _run(tmp_path, "refused")
    assert (result.status, result.status_detail) == ("failed", "max_prompt_length: 300 over 256; raise it")


def test_timeout_kills_the_child(tmp_path):
    result = _run(tmp_path, "hang", guard=GuardSettings(timeout_s=2))
    assert result.status == "timeout" and "wall-clock limit of 2 s" in result.status_detail
    assert not psutil.pid_exists(result.pid) or psutil.Process(result.pid).status() == psutil.STATUS_ZOMBIE


def test_a_trial_killed_at_its_wall_clock_limit_is_a_timeout_that_keeps_the_steps_it_measured(tmp_path):
    streamed = []
    spec = TrialSpec(max_steps=5, trial_key="fake", task_args={"fake": "stall", "at_step": 2})
    result = run_trial(
        spec, trial_dir=tmp_path, trainer_cmd=FAKE, guard=GuardSettings(timeout_s=3),
        on_event=lambda kind, row: streamed.append(row["step"]) if kind == "step" else None,
    )  # fmt: skip
    assert result.status == "timeout"
    assert [r["step"] for r in result.steps] == streamed == [1, 2]
    assert all(r["tokens_per_s"] > 0 for r in result.steps)
    assert result.status_detail == (
        "killed at the wall-clock limit of 3 s with 2 of 5 steps measured (kept); to finish, raise the limit "
        "(timeout_s in the sweep, --timeout-s for `rlsweep trial`, --timeout for gpu-check) or run fewer "
        "steps (max_steps)"
    )


def test_stop_event_stops_the_trial(tmp_path):
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    result = _run(tmp_path, "hang", stop_event=stop)
    assert result.status == "stopped"
    assert not psutil.pid_exists(result.pid)


def test_a_helper_the_trainer_leaves_behind_does_not_outlive_the_trial(tmp_path):
    # The real trainer skips its teardown once its events are closed; helpers of its group go with it.
    result = _run(tmp_path, "leave_helper")
    assert result.status == "completed", result.status_detail
    helper = int((tmp_path / "helper.pid").read_text())
    deadline = time.monotonic() + 10
    while psutil.pid_exists(helper) and psutil.Process(helper).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the helper outlived its trial"
        time.sleep(0.05)


class FakeSampler:
    """Stands in for orchestrator.running.telemetry.MemorySampler (NVML is absent here)."""

    def __init__(self, pid, on_exceed=None, exceed_after=None):
        self.pid, self.on_exceed, self.exceed_after = pid, on_exceed, exceed_after

    def start(self):
        if self.exceed_after is not None:
            threading.Timer(
                self.exceed_after, self.on_exceed, ["rss 9.0 GiB > budget 1.0 GiB + margin 0.5"]
            ).start()

    def stop(self):
        pass

    def peak_between(self, t0, t1):
        return {"device_peak_gib": 1.5, "gpu_util_pct": None, "rss_peak_gib": t1 - t0 + 1}

    def peak(self):
        return {"device_peak_gib": 1.5, "rss_peak_gib": 2.0}


def test_sampler_peaks_merge_into_steps(tmp_path):
    result = _run(tmp_path, "finish", sampler_factory=lambda pid, on_exceed: FakeSampler(pid, on_exceed))
    assert all(r["device_peak_gib"] == 1.5 for r in result.steps)
    assert all(r["rss_peak_gib"] > 1 for r in result.steps)
    assert result.peak["rss_peak_gib"] == 2.0


def test_budget_guard_kill_is_oom(tmp_path):
    factory = lambda pid, on_exceed: FakeSampler(pid, on_exceed, exceed_after=0.5)  # noqa: E731
    result = _run(tmp_path, "hang", sampler_factory=factory)
    assert result.status == "oom"
    assert "budget 1.0 GiB" in result.status_detail


def test_sigkill_with_calm_memory_is_failed(tmp_path):
    # A real sampler saw the fake trainer's small RSS: some other SIGKILL, not the kernel's OOM killer.
    result = _run(tmp_path, "sigkill", sampler_factory=default_sampler_factory(GuardSettings(sample_hz=50)))
    assert result.status == "failed"
    assert "killed by SIGKILL without a final event" in result.status_detail


class NearHostLimitSampler(FakeSampler):
    """The last reading a real sampler would give a trainer about to be OOM-killed (RSS ~ host RAM)."""

    def latest(self):
        total = psutil.virtual_memory().total / 2**30
        return Sample(t=time.time(), rss_gib=0.97 * total, hwm_gib=0.97 * total, host_available_gib=0.01)


def test_sigkill_near_host_limit_is_oom_by_kernel(tmp_path):
    result = _run(tmp_path, "sigkill", sampler_factory=NearHostLimitSampler)
    assert result.status == "oom"
    assert result.status_detail.startswith("trainer killed by SIGKILL without a final event: ")
    assert "kernel's OOM killer" in result.status_detail and "near the limit" in result.status_detail


def test_child_env(tmp_path):
    from orchestrator.running.child_env import child_env
    from orchestrator.words.storage import PROJECT_ROOT

    env = child_env("3", 2)
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env["OMP_NUM_THREADS"] == "2"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(PROJECT_ROOT)


def test_the_trainer_child_does_not_import_mlflow_which_it_never_reports_to():
    import subprocess

    from orchestrator.running.child_env import child_env

    # Without the switch TRL's profiling module imports mlflow (installed here): `python -X importtime`
    # shows it, 1.8 s of the trainer's start (docs/benchmarks.md).
    code = "import sys, trl.extras.profiling; print('mlflow' in sys.modules)"
    seen = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(None, 1)
    )
    assert seen.stdout.strip() == "False", seen.stderr[-2000:]


def test_the_trainer_child_has_unsloths_statistics_download_switched_off(monkeypatch):
    import importlib.util

    from orchestrator.running.child_env import child_env

    monkeypatch.delenv("UNSLOTH_DISABLE_STATISTICS", raising=False)
    env = child_env("0", 1)
    assert env["UNSLOTH_DISABLE_STATISTICS"] == "1"
    # The name Unsloth's get_statistics reads (its source, not imported: importing Unsloth takes minutes here).
    source = Path(importlib.util.find_spec("unsloth").origin).parent / "models" / "_utils.py"
    assert '"UNSLOTH_DISABLE_STATISTICS" in os.environ' in source.read_text()


COMPILE_CACHE_VARIABLES = {"UNSLOTH_COMPILE_LOCATION": "unsloth", "TORCHINDUCTOR_CACHE_DIR": "inductor",
                           "TRITON_CACHE_DIR": "triton"}  # fmt: skip


def test_every_trainer_child_shares_the_compile_caches_under_rlsweeps_cache(monkeypatch, tmp_path):
    from orchestrator.running.child_env import child_env

    monkeypatch.setenv("RLSWEEP_CACHE", str(tmp_path))
    for name in COMPILE_CACHE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    env = child_env("0", 1)
    assert {name: env[name] for name in COMPILE_CACHE_VARIABLES} == {
        name: str(tmp_path / "compile" / folder) for name, folder in COMPILE_CACHE_VARIABLES.items()
    }
    # The fork server is kept per environment: the next trial on the GPU gets the very same one.
    assert child_env("0", 1) == env


def test_a_users_own_compile_cache_folders_win(monkeypatch, tmp_path):
    from orchestrator.running.child_env import child_env

    monkeypatch.setenv("RLSWEEP_CACHE", str(tmp_path / "rlsweep"))
    for name in COMPILE_CACHE_VARIABLES:
        monkeypatch.setenv(name, str(tmp_path / f"mine-{name}"))
    env = child_env("0", 1)
    assert all(env[name] == str(tmp_path / f"mine-{name}") for name in COMPILE_CACHE_VARIABLES)


def test_the_compile_cache_variables_are_the_names_unsloth_and_torch_read():
    import importlib.util

    # Their sources, not imported (importing Unsloth takes minutes here); Triton ships with CUDA torch only.
    zoo = Path(importlib.util.find_spec("unsloth_zoo").origin).parent
    assert any('"UNSLOTH_COMPILE_LOCATION"' in f.read_text() for f in zoo.rglob("*.py"))
    inductor = Path(importlib.util.find_spec("torch").origin).parent / "_inductor"
    assert any('"TORCHINDUCTOR_CACHE_DIR"' in f.read_text() for f in inductor.rglob("*.py"))


def test_both_stacks_get_one_allocator_setting_before_torch_starts(monkeypatch):
    from orchestrator.running.child_env import child_env

    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    env = child_env("0", 1)
    # What Unsloth would set in its own process, now set for TRL too, under both names torch reads.
    assert env["PYTORCH_ALLOC_CONF"] == env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:0.8")
    env = child_env("0", 1)  # a user's own setting wins, for both stacks
    assert env["PYTORCH_ALLOC_CONF"] == env["PYTORCH_CUDA_ALLOC_CONF"] == "garbage_collection_threshold:0.8"


def test_keyboard_interrupt_kills_the_child(tmp_path):
    def interrupt(kind, row):
        if kind == "started":
            time.sleep(0.2)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "hang", on_event=interrupt)
    pid = int((tmp_path / "trainer.pid").read_text())
    assert not psutil.pid_exists(pid)


def test_a_stop_check_that_answers_ends_the_trial_early_as_completed_with_the_steps_so_far(tmp_path):
    spec = TrialSpec(max_steps=400, trial_key="fake", task_args={"fake": "finish"})
    asked = []

    def check(steps):
        asked.append(len(steps))
        return "no_signal: three flat steps" if len(steps) >= 3 else None

    result = run_trial(spec, trial_dir=tmp_path, trainer_cmd=FAKE, stop_check=check)
    steps = [r["step"] for r in result.steps]
    assert result.status == "completed"
    assert steps[:3] == [1, 2, 3] and len(steps) < 400  # 400 steps take 20 s: it was stopped
    assert (
        result.status_detail
        == f"{len(steps)} steps; ended early at step {steps[-1]}: no_signal: three flat steps"
    )
    assert asked == [1, 2, 3]  # asked after each step, and not again once it answered


def test_a_stop_check_that_never_answers_leaves_the_trial_as_it_was(tmp_path):
    result = _run(tmp_path, "finish", stop_check=lambda steps: None)
    assert result.status == "completed" and result.status_detail == "3 steps"


def test_the_trainer_child_numbers_gpus_in_pci_bus_order_as_nvml_does(monkeypatch):
    from orchestrator.running.child_env import child_env

    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")  # CUDA's default, spelled out
    assert child_env("1", 1)["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


class AfterFinishedSampler(FakeSampler):
    """Passes the budget once the trainer's `finished` event is written, while it is still tearing down
    (a neighbour's growth on a shared device reads so)."""

    def __init__(self, pid, on_exceed, events_path):
        super().__init__(pid, on_exceed)
        self.events_path, self.done = events_path, threading.Event()

    def start(self):
        def watch():
            while not self.done.wait(0.02):
                if self.events_path.exists() and '"finished"' in self.events_path.read_text():
                    self.on_exceed("guard: GPU device memory 9.00 GiB passed budget 4.00 GiB")
                    return

        threading.Thread(target=watch, daemon=True).start()

    def stop(self):
        self.done.set()


def test_a_breach_read_after_the_finished_event_leaves_the_trial_completed(tmp_path):
    factory = lambda pid, on_exceed: AfterFinishedSampler(pid, on_exceed, tmp_path / "events.jsonl")  # noqa: E731
    result = _run(tmp_path, "finish_slowly", sampler_factory=factory)
    assert (result.status, result.status_detail) == ("completed", "3 steps")


class LastReadingAtExitSampler(FakeSampler):
    """Its last reading, taken as the trainer exited, passes the budget and lands as it is stopped."""

    def stop(self):
        self.on_exceed("guard: GPU device memory 9.00 GiB passed budget 4.00 GiB")


def test_a_breach_read_after_the_trainer_exited_is_not_oom(tmp_path):
    result = _run(tmp_path, "exit", sampler_factory=LastReadingAtExitSampler)
    assert result.status == "failed"
    assert result.status_detail.startswith("trainer exited with code 7 without a final event")


def test_a_packed_trial_reads_its_own_process_memory_only(tmp_path, monkeypatch):
    import orchestrator.running.supervisor as supervisor
    from orchestrator.words.phases import TrialPhases

    made = []

    class Recorded(FakeSampler):
        def __init__(self, pid, **kwargs):
            super().__init__(pid)
            made.append(kwargs)

    monkeypatch.setattr(supervisor, "MemorySampler", Recorded)
    packed = TrialPhases(hold_at_step=2, then_speed=False, shared_gpu=True)
    assert _run(tmp_path, "finish", guard=GuardSettings(budget_gib=4), phases=packed).status == "completed"
    assert _run(tmp_path, "finish", guard=GuardSettings(budget_gib=4)).status == "completed"
    assert [m["per_process"] for m in made] == [True, False]


def test_a_rank_that_ran_out_of_memory_is_blamed_even_when_its_peer_was_found_gone_first(tmp_path):
    # Under load: rank 1 runs out of memory, rank 0's collective raises ("connection closed by peer")
    # and rank 0 is seen gone first. The trial is rank 1's oom, not rank 0's failure.
    import json

    from orchestrator.running.ranks import RankWatch
    from trainers.distributed import rank_events_path

    events = tmp_path / "events.jsonl"
    finals = {
        0: {"event": "error", "type": "RuntimeError", "message": "Connection closed by peer"},
        1: {"event": "oom", "type": "OutOfMemoryError", "message": "CUDA out of memory."},
    }
    for rank, final in finals.items():
        with open(rank_events_path(str(events), rank), "w") as f:
            f.write(json.dumps({"event": "step", "step": 1}) + "\n" + json.dumps(final) + "\n")
    watch = RankWatch(TrialSpec(num_processes=2, distributed="ddp"), events)
    watch.pids = {0: 1, 1: 2}
    watch.failed = 0  # found gone first
    assert watch.failure() == (
        "oom",
        "rank 1: OutOfMemoryError: CUDA out of memory.; the other ranks were stopped",
    )
    watch.pids, watch.failed = {0: 1}, 0  # no rank ran out of memory: the first found is named
    assert watch.failure()[0] == "failed" and watch.failure()[1].startswith("rank 0 failed: RuntimeError")
