"""`rlsweep submit --slurm`: a sweep as one Slurm batch job, with Ray started inside the allocation.

The sbatch script this module writes (`--dry-run` prints it) runs on the allocation's first node:
  1. `python -m orchestrator.cli._slurm_job env` picks the head's address (the node's NodeAddr in Slurm),
     a free GCS port there and a fresh Ray auth token for this job only; the script exports them.
  2. One `srun` step, one task per node, runs `... _slurm_job node`: `ray start --head --block` on node 0,
     `ray start --address HEAD --block` on every other node (once the head answers), each with its
     own temp dir and free ports, so two jobs on one node never meet.
  3. `... _slurm_job driver` waits for every node to join, then runs `rlsweep run` as Ray's driver: the
     project and its venv are the ones on the shared filesystem, the outputs go to a shared path (or
     a URI). It resumes whatever the output dir holds, as `rlsweep run` does locally.
  4. When the sweep ends (done, failed, or stopped), the script stops the srun step: SIGTERM reaches
     every node's `ray start --block`, which stops its Ray, and the job ends with nothing left.
TERM to the batch shell alone (`scancel --batch --signal=TERM JOB`, which `rlsweep submit --slurm
--stop JOB` sends, or `--signal=B:TERM@...` before the time limit) stops the sweep as Ctrl-C does: its
running trials are recorded as interrupted, then Ray stops. A plain `scancel JOB` signals every process at
once; Slurm kills what is left after KillWait. Either way a resubmission resumes: finished trials are
kept, interrupted ones start over.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from orchestrator.words.storage import PROJECT_ROOT, URI

STOP_WARNING_S = 120  # --signal=B:TERM@120: the sweep's time to stop before the time limit


class SlurmError(ValueError):
    """Bad input for `submit --slurm`: the message names the setting, the value and a fix."""


# ------------------------------------------------------------------------------------------------
# The batch script
# ------------------------------------------------------------------------------------------------
def slurm_output_dir(given: str | None, sweep_output_dir: str | None, sweep_name: str) -> str:
    """A URI as given; a path made absolute from here (it must be on a filesystem every node mounts)."""
    value = given or sweep_output_dir or f"outputs/{sweep_name}"
    return value if URI.match(value) else str(Path(value).expanduser().resolve())


def cpus_per_node(resources, gpus_per_node: int) -> int:
    """The CPUs a node needs for the trials it hosts: one per GPU's worth of trials (or max_concurrent
    trials without GPUs), each with cpus_per_trial."""
    if gpus_per_node > 0:
        trials = max(1, int(gpus_per_node // max(resources.gpus_per_trial, 1e-9)))
    else:
        trials = resources.max_concurrent or 1
    return max(1, trials * resources.cpus_per_trial)


def batch_script(
    sweep_file: Path,
    sets: list[str],
    output_dir: str,
    job_name: str,
    *,
    nodes: int = 1,
    gpus_per_node: int = 0,
    cpus: int = 1,
    partition: str | None = None,
    time_limit: str | None = None,
    account: str | None = None,
    sbatch_lines: list[str] = (),
    tracking_uri: str | None = None,
    log: str | None = None,
    python: str = sys.executable,
) -> str:
    directives = [
        f"--job-name={job_name}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus}",
        *([f"--gpus-per-node={gpus_per_node}"] if gpus_per_node else []),
        *([f"--partition={partition}"] if partition else []),
        *([f"--time={time_limit}"] if time_limit else []),
        *([f"--account={account}"] if account else []),
        *([f"--output={log}"] if log else []),
        f"--signal=B:TERM@{STOP_WARNING_S}",
    ]
    extra = [line.strip().removeprefix("#SBATCH").strip() for line in sbatch_lines]
    helper = f"{shlex.quote(python)} -m orchestrator.cli._slurm_job"
    run_args = [str(sweep_file.resolve()), *[f"--set={s}" for s in sets], "--output-dir", output_dir]
    exports = "export RAY_USAGE_STATS_ENABLED=0 RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0"
    if tracking_uri:
        exports += f" MLFLOW_TRACKING_URI={shlex.quote(tracking_uri)}"
    lines = [
        "#!/bin/bash",
        *[f"#SBATCH {d}" for d in directives + extra],
        "# Written by `rlsweep submit --slurm` (docs/cluster.md: Running on a Slurm cluster). Ray's head runs on this,",
        "# the first node, a Ray worker on every other node, the sweep as Ray's driver; Ray stops with it.",
        "set -u",
        f"cd {shlex.quote(str(PROJECT_ROOT))}",
        exports,
        "# RAY_ADDRESS (this node's NodeAddr, a free port), a Ray auth token for this job only",
        f'eval "$({helper} env)"',
        f'srun --overlap --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task={cpus} {helper} node &',
        "ray_step=$!",
        "# The sweep: waits for every node, then `rlsweep run` (it resumes what the output dir holds).",
        f"{helper} driver {shlex.join(run_args)} &",
        "driver=$!",
        "# TERM to this script (scancel --batch --signal=TERM, or the time limit's warning): the sweep stops",
        "# as on Ctrl-C and records its running trials as interrupted; a resubmission runs them again.",
        """trap 'kill -TERM "$driver" 2>/dev/null' TERM INT""",
        'wait "$driver"; rc=$?',
        'while kill -0 "$driver" 2>/dev/null; do wait "$driver"; rc=$?; done',
        'kill -TERM "$ray_step" 2>/dev/null  # srun passes it to each node\'s `ray start --block`',
        'wait "$ray_step"',
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------
# Submitting, asking, stopping (orchestrator/cli/submit.py reads `submit --slurm`'s arguments and prints)
# ------------------------------------------------------------------------------------------------
def slurm_command(name: str) -> str:
    """The path of a Slurm command (sbatch, scontrol, scancel), or SlurmError naming the fix."""
    found = shutil.which(name)
    if not found:
        raise SlurmError(
            f"{name}: not found on PATH; run this on a Slurm login node (or --dry-run to see the script)"
        )
    return found


def sbatch(script: str) -> str:
    """Submit the script (on stdin); the job id."""
    done = subprocess.run(
        [slurm_command("sbatch"), "--parsable"], input=script, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise SlurmError(f"sbatch refused the job (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout.strip().split(";")[0]


def job_state(job: str) -> str | None:
    done = subprocess.run(
        [slurm_command("scontrol"), "show", "job", "-o", job], capture_output=True, text=True, timeout=60
    )
    for field in done.stdout.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return None


def slurm_log(output_dir: str) -> str | None:
    """The job's log file under its output dir (Slurm's %j its id); None for a URI, which Slurm cannot
    write: the log then goes to slurm-%j.out in the folder sbatch runs in."""
    return None if URI.match(output_dir) else f"{output_dir}/slurm/slurm-%j.out"


def submit_script(script: str, log: str | None) -> str:
    """Submit the batch script: sbatch found before anything is written, the log's folder made (Slurm
    opens the log before the script runs), then sbatch; the job id."""
    slurm_command("sbatch")
    if log:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
    return sbatch(script)


def known_state(job: str) -> str:
    """The job's state in Slurm, or SlurmError when Slurm knows no such job."""
    state = job_state(job)
    if state is None:
        raise SlurmError(f"JOB {job!r}: Slurm knows no such job (`squeue --me` lists yours)")
    return state


def stop_job(job: str) -> str:
    """A running job: TERM to its batch shell, so the sweep stops as on Ctrl-C and Ray after it; a
    pending one is cancelled. The state it was in."""
    state = known_state(job)
    scancel = slurm_command("scancel")
    command = [scancel, job] if state == "PENDING" else [scancel, "--batch", "--signal=TERM", job]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SlurmError(f"{shlex.join(command)}: {done.stderr.strip()}")
    return state
