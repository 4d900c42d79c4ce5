"""The two phases through Ray Tune on fake GPUs, with real `tiny` trainer children: memory-phase trials
share one GPU (a trial the host's RAM holds once runs alone, after them), speed-phase trials never do,
and the settled stop ends a real trainer early."""

import pyarrow.parquet as pq
import pytest

from orchestrator.running.driver import run_sweep
from orchestrator.spec.load import load_sweep
from tests.helpers.sweeps import tiny_sweep

pytestmark = pytest.mark.slow


def overlapping(rows: list[dict]) -> list[tuple[dict, dict]]:
    rows = sorted(rows, key=lambda r: r["started_at"])
    return [(a, b) for i, a in enumerate(rows) for b in rows[i + 1 :] if b["started_at"] < a["ended_at"]]


def memory_phase_sweep(tmp_path, name: str):
    """Two memory-phase trials (grpo and gspo: neither dominates the other, so neither waits for the
    other) on a 5 GiB card that holds two 2 GiB budgets with 0.5 GiB headroom each, run: (the sweep file,
    its output dir)."""
    path = tiny_sweep(
        tmp_path / "s.yaml",
        name,
        {"mode": ["grpo", "gspo"]},
        fixed={"max_steps": 30},  # room for `stop` to arrive a few steps late on a busy host
        memory={"budget_gib": 2},
        resources={
            "gpus_per_trial": 1,
            "cpus_per_trial": 1,
            "max_concurrent": 2,
            "gpu_memory_gib": 5,
            "memory_phase_headroom_gib": 0.5,
        },  # fmt: skip
        tracking={"enabled": False},
        phases=["memory"],
    )
    out = tmp_path / "out"
    run_sweep(load_sweep(path), output_dir=out)
    return path, out


@pytest.mark.heavy
def test_memory_phase_trials_share_a_fake_gpu_and_speed_phase_trials_never_do(ray_fake_gpus, tmp_path):
    # A 5 GiB card holds two 2 GiB budgets with 0.5 GiB headroom each: two memory-phase trials per GPU.
    path, out = memory_phase_sweep(tmp_path, "phases")
    memory = pq.read_table(out / "trials.parquet").to_pylist()
    assert [(r["status"], r["phase"], r["steps_completed"]) for r in memory] == [
        ("completed", "memory", 2)
    ] * 2
    pairs = overlapping(memory)
    assert pairs and all(a["cuda_visible_devices"] == b["cuda_visible_devices"] for a, b in pairs)

    # The same output with both phases: the memory phase's verdicts stand, the speed phase runs the
    # trials that fit, one per GPU, each until it has settled.
    settle = ["stop.when_settled=true", "stop.settle_steps=2", "stop.settle_half_width=0.5",
              "stop.settle_growth_tolerance=0.05"]  # fmt: skip
    run_sweep(load_sweep(path, ["phases=[memory, speed]", *settle]), output_dir=out)
    speed = pq.read_table(out / "trials.parquet").to_pylist()
    assert [(r["status"], r["phase"]) for r in speed] == [("completed", "speed")] * 2
    assert all(r["started_at"] > max(m["ended_at"] for m in memory) for r in speed)
    assert all(a["cuda_visible_devices"] != b["cuda_visible_devices"] for a, b in overlapping(speed))
    # Settled: peak memory flat for 2 steps after the probe step and its first reading, and the median
    # tokens/s over at least intervals.MIN_CYCLES (5) cycles after the probe step, so step 6 at the
    # earliest; the trainer heard `stop` and ended cleanly before max_steps.
    assert all(6 <= r["settled_step"] <= r["steps_completed"] < 30 for r in speed), speed
    assert all(r["status_detail"].endswith(f"settled at step {r['settled_step']}") for r in speed)


@pytest.mark.heavy
def test_a_trial_the_host_ram_holds_once_runs_alone_after_the_packed_ones(
    ray_fake_gpus, tmp_path, monkeypatch
):
    # 10 GiB of RAM: the grpo trainer (1 GiB) packs 2 to the 5 GiB card; the gspo one (predicted 100 GiB)
    # runs alone, after it, not beside it on the other fake GPU.
    from orchestrator.running import host_memory
    from orchestrator.words.phases import HostTrainer

    def trainer(spec):
        return HostTrainer(spec.trial_key, 100.0 if spec.mode == "gspo" else 1.0, "stated", spec.mode)

    monkeypatch.setattr(host_memory, "host_trainer", trainer)
    monkeypatch.setattr(host_memory, "host_available_gib", lambda: 10.0)
    _, out = memory_phase_sweep(tmp_path, "host-ram")
    rows = {r["mode"]: r for r in pq.read_table(out / "trials.parquet").to_pylist()}
    assert {m: (r["status"], r["phase"]) for m, r in rows.items()} == {
        "grpo": ("completed", "memory"),
        "gspo": ("completed", "memory"),
    }
    assert rows["gspo"]["started_at"] >= rows["grpo"]["ended_at"]
