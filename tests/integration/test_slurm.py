"""A real Slurm on loopback (tests/helpers/slurm.py: munged, slurmctld, slurmd, one node of 2 CPUs):
`rlsweep submit --slurm` sends a small cpu-smoke sweep through sbatch; the job starts Ray's head on its
node and runs the sweep as the driver. A plain `scancel` mid-sweep leaves nothing running; the same
command again resumes: the finished trial is kept, the cancelled one runs again, nothing is doubled.
One node only: the worker path (`ray start --address` on nodes 2..N) is not run here."""

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from orchestrator.words.storage import PROJECT_ROOT
from tests.helpers.slurm import job_state, loopback_slurm, wait_for_job_end

pytestmark = pytest.mark.slow

STEPS = 2
SETS = [
    "grid.stack=[trl]", "grid.num_generations=[2]", f"max_steps={STEPS}", "max_completion_length=8",
    "quantization=none", "resources.max_concurrent=1", "tracking.enabled=false", "timeout_s=300",
]  # fmt: skip
JOB_TIMEOUT_S = 420


@pytest.fixture(scope="module")
def slurm():
    with loopback_slurm(cpus=2) as env:
        yield env


def job_processes(job: str) -> list[psutil.Process]:
    """Every live process of the job: Slurm puts SLURM_JOB_ID in the environment of all it starts."""
    found = []
    for proc in psutil.process_iter():
        with_env = None
        try:
            with_env = proc.environ().get("SLURM_JOB_ID") == job and proc.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if with_env:
            found.append(proc)
    return found


def no_job_processes(job: str, timeout_s: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (left := job_processes(job)) and time.monotonic() < deadline:
        time.sleep(1)
    return [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in left if p.is_running()]


def submit(out: Path, env: dict) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "submit", "--slurm", "sweeps/cpu-smoke.yaml"]
        + ["--output-dir", str(out), "--cpus-per-node", "2", *[f"--set={s}" for s in SETS]],
        capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[0]


def trials(out: Path):
    path = out / "trials.parquet"
    return pq.read_table(path).to_pandas() if path.exists() else None


@pytest.mark.heavy
def test_a_sweep_through_sbatch_cancelled_mid_sweep_resumes_when_resubmitted(slurm, tmp_path):
    out = tmp_path / "shared" / "cpu-smoke"
    first = submit(out, slurm)
    log = lambda job: (out / "slurm" / f"slurm-{job}.out").read_text()  # noqa: E731

    # Cancel once one of the two trials (one at a time) is done and the other has started.
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while (done := trials(out)) is None or not (done.status == "completed").any():
        state = job_state(first, slurm)
        assert state in ("PENDING", "CONFIGURING", "RUNNING"), f"job {first} {state}:\n{log(first)[-4000:]}"
        assert time.monotonic() < deadline, f"no trial finished in {JOB_TIMEOUT_S} s:\n{log(first)[-4000:]}"
        time.sleep(0.5)
    subprocess.run(["scancel", first], check=True, env=slurm, timeout=30)
    assert wait_for_job_end(first, slurm, 60) == "CANCELLED"
    assert no_job_processes(first) == [], "processes of the cancelled job still run"
    before = trials(out)
    kept = before[before.status == "completed"]
    assert len(kept) == 1, f"both trials ended before the cancel: {before.status.tolist()}"
    assert "rlsweep slurm driver: 1 node(s) in Ray" in log(first)

    # The same command again: the finished trial is kept as it was, the other runs; one row each.
    second = submit(out, slurm)
    state = wait_for_job_end(second, slurm, JOB_TIMEOUT_S)
    assert state == "COMPLETED", f"job {second} {state}:\n{log(second)[-4000:]}"
    assert no_job_processes(second) == [], "processes of the finished job still run"
    after = trials(out)
    assert sorted(after["mode"]) == ["grpo", "gspo"] and after.trial_key.is_unique
    assert (after.status == "completed").all(), after.status_detail.tolist()
    assert (after.steps_completed == STEPS).all()
    again = after.set_index("trial_key").loc[kept.trial_key.iloc[0]]
    assert again.wall_s == kept.wall_s.iloc[0]  # not run again
    steps = pq.read_table(out / "steps").to_pandas()
    assert sorted(steps.trial_key.unique()) == sorted(after.trial_key) and len(steps) == 2 * STEPS
