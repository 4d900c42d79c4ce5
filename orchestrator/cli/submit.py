"""`rlsweep submit`: a sweep on a Ray cluster as a Ray job (Jobs API), or with --slurm as a Slurm batch job
that starts its own Ray; follow it, ask its status, stop it. This module reads the verb's arguments and
prints; the job's command line and the Jobs API are orchestrator/running/submit.py's, the sbatch script and
Slurm's commands orchestrator/running/slurm.py's (their docstrings say how each job runs)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import time
import uuid
from pathlib import Path

from rich.console import Console

from orchestrator.cli._flags import add_output_dir
from orchestrator.running.slurm import (
    SlurmError,
    batch_script,
    cpus_per_node,
    known_state,
    slurm_log,
    slurm_output_dir,
    stop_job,
    submit_script,
)
from orchestrator.running.submit import (
    SubmitError,
    client,
    entrypoint,
    job_output_dir,
    job_tracking_uri,
    runtime_env,
    submit_with_retry,
)

EXIT = {"SUCCEEDED": 0, "FAILED": 1, "STOPPED": 3, "DETACHED": 130}
SLURM_EXIT = {"COMPLETED": 0, "FAILED": 1, "TIMEOUT": 1, "NODE_FAIL": 1, "OUT_OF_MEMORY": 1, "CANCELLED": 3}

console = Console(stderr=True, highlight=False, soft_wrap=True)


# ------------------------------------------------------------------------------------------------
# Following a Ray job
# ------------------------------------------------------------------------------------------------
def follow(jobs, job_id: str, address: str) -> int:
    """Stream the job's logs until it ends; Ctrl-C detaches and leaves it running."""

    async def tail() -> None:
        async for chunk in jobs.tail_job_logs(job_id):
            sys.stdout.write(chunk)
            sys.stdout.flush()

    try:
        asyncio.run(tail())
    except KeyboardInterrupt:
        return detached(job_id, address)
    return report_status(jobs, job_id)


def detached(job_id: str, address: str) -> int:
    again = f"--address {shlex.quote(address)}"
    console.print(
        f"\ndetached; job {job_id} goes on.\n  follow: rlsweep submit --attach {job_id} {again}\n"
        f"  status: rlsweep submit --status {job_id} {again}\n  stop:   rlsweep submit --stop {job_id} {again}",
        markup=False,
    )
    return EXIT["DETACHED"]


def report_status(jobs, job_id: str) -> int:
    info = jobs.get_job_info(job_id)
    status = str(getattr(info.status, "value", info.status))
    colour = {"SUCCEEDED": "green", "FAILED": "red", "STOPPED": "yellow"}.get(status, "cyan")
    console.print(
        f"job {job_id}: [{colour}]{status}[/{colour}]" + (f" ({info.message})" if info.message else "")
    )
    return EXIT.get(status, 0)


# ------------------------------------------------------------------------------------------------
# The subcommand
# ------------------------------------------------------------------------------------------------
def cmd_submit(args: argparse.Namespace) -> int:
    try:
        return _submit(args)
    except (SubmitError, SlurmError) as exc:
        console.print(f"error: {exc}", markup=False)
        return 2


def _submit(args: argparse.Namespace) -> int:
    from orchestrator.spec.load import load_sweep
    from orchestrator.spec.plan import plan
    from orchestrator.spec.sweep import SweepError

    if args.dry_run and not args.slurm:
        raise SubmitError("--dry-run: prints the sbatch script of --slurm; add --slurm")
    job = args.status or args.stop or args.attach
    if job and args.slurm:
        return submit_slurm(args, None, console)
    if job:
        jobs = client(args.address)
        address = args.address or os.environ["RAY_ADDRESS"]
        try:
            if args.stop:
                jobs.stop_job(job)
                console.print(f"job {job}: stop requested", markup=False)
                return 0
            return follow(jobs, job, address) if args.attach else report_status(jobs, job)
        except RuntimeError as exc:  # the Jobs API's answer, e.g. "Job ... does not exist"
            raise SubmitError(
                f"JOB {job!r}: {exc}; `ray job list --address {address}` lists the jobs"
            ) from None
    if not args.sweep:
        raise SubmitError("SWEEP: missing; give a sweep file (or --status/--stop/--attach JOB)")

    try:
        sweep = load_sweep(args.sweep, args.set)
        problems = plan(sweep).problems
    except SweepError as exc:
        console.print(str(exc), markup=False)
        return 2
    if problems:
        console.print(f"{args.sweep}: {len(problems)} impossible combination(s):\n  " + "\n  ".join(problems))
        return 2
    if args.slurm:
        return submit_slurm(args, sweep, console)
    output_dir = job_output_dir(args.output_dir, sweep.output_dir)
    tracking = job_tracking_uri(args.tracking_uri, sweep.tracking.mlflow_uri, sweep.tracking.enabled)
    jobs = client(args.address)
    address = args.address or os.environ["RAY_ADDRESS"]
    tag = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    job_id = submit_with_retry(
        jobs,
        entrypoint=entrypoint(Path(args.sweep), args.set, output_dir, tag),
        runtime_env=runtime_env(tracking),
        submission_id=f"rlsweep-{sweep.name}-{tag}",
        metadata={"rlsweep.sweep": sweep.name, "rlsweep.output_dir": output_dir},
    )
    try:  # from here on Ctrl-C detaches, whenever it comes
        print(job_id, flush=True)
        console.print(
            f"submitted {job_id} to {address}; outputs: {output_dir}; Ctrl-C detaches", markup=False
        )
        return 0 if args.no_wait else follow(jobs, job_id, address)
    except KeyboardInterrupt:
        return detached(job_id, address)


def add_submit(sub) -> None:
    p = sub.add_parser(
        "submit",
        help="run a sweep on a Ray cluster as a Ray job, or with --slurm as a Slurm batch job that starts its "
        "own Ray; follow, status, stop (docs/cluster.md)",
    )
    p.add_argument("sweep", nargs="?", help="sweep YAML file")
    p.add_argument("--address", help="the head's dashboard, e.g. http://HEAD:8265 (default: RAY_ADDRESS)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as for `rlsweep run`")
    add_output_dir(
        p,
        "a URI (s3://, gs://) or an absolute path every node mounts (--slurm: a relative path is made "
        "absolute here; default the sweep's output_dir, else outputs/<name>)",
    )
    p.add_argument(
        "--tracking-uri", help="the MLflow server (default: the sweep's, else MLFLOW_TRACKING_URI)"
    )
    p.add_argument("--no-wait", action="store_true", help="print the job id and return")
    job = p.add_mutually_exclusive_group()
    job.add_argument("--status", metavar="JOB", help="print a job's status; exit code as for a finished job")
    job.add_argument("--stop", metavar="JOB", help="stop a job")
    job.add_argument("--attach", metavar="JOB", help="follow a job's logs until it ends")
    slurm = p.add_argument_group(
        "Slurm (docs/cluster.md: Running on a Slurm cluster)",
        "--slurm submits an sbatch script instead: Ray's head on the allocation's first node, a worker on "
        "every other node, the sweep as the driver, Ray stopped when it ends. The project and its .venv "
        "must be on a filesystem every node mounts at the same path; --status/--stop then take a Slurm job id.",
    )
    slurm.add_argument(
        "--slurm", action="store_true", help="submit to Slurm with sbatch, not to a Ray cluster"
    )
    slurm.add_argument("--partition", help="#SBATCH --partition")
    slurm.add_argument("--nodes", type=int, default=1, help="nodes of the allocation (default 1)")
    slurm.add_argument("--gpus-per-node", type=int, default=0, help="#SBATCH --gpus-per-node (default none)")
    slurm.add_argument(
        "--cpus-per-node",
        type=int,
        help="CPUs for Ray on each node (default: cpus_per_trial x the trials a node hosts)",
    )
    slurm.add_argument("--time", help="#SBATCH --time, e.g. 04:00:00; the sweep stops 2 min before it")
    slurm.add_argument("--account", help="#SBATCH --account")
    slurm.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="LINE",
        help="an extra #SBATCH line, e.g. --sbatch=--mem=0 --sbatch='--constraint=a100' (repeatable)",
    )
    slurm.add_argument("--dry-run", action="store_true", help="print the sbatch script; submit nothing")
    p.set_defaults(func=cmd_submit)


# ------------------------------------------------------------------------------------------------
# --slurm: a Slurm batch job (orchestrator/running/slurm.py writes it and talks to Slurm)
# ------------------------------------------------------------------------------------------------
def submit_slurm(args: argparse.Namespace, sweep, console) -> int:
    if args.status or args.stop:
        job = args.status or args.stop
        if args.stop:
            state = stop_job(job)
            what = "cancelled" if state == "PENDING" else "stop requested (the sweep stops, then Ray)"
            console.print(f"job {job}: {what}", markup=False)
            return 0
        state = known_state(job)
        console.print(f"job {job}: {state}", markup=False)
        return SLURM_EXIT.get(state, 0)
    if args.attach:
        raise SlurmError("--attach: a Slurm job's output is its log file; follow it with `tail -f LOG`")
    output_dir = slurm_output_dir(args.output_dir, sweep.output_dir, sweep.name)
    log = slurm_log(output_dir)
    gpus = args.gpus_per_node or 0
    script = batch_script(
        Path(args.sweep),
        args.set,
        output_dir,
        f"rlsweep-{sweep.name}",
        nodes=args.nodes,
        gpus_per_node=gpus,
        cpus=args.cpus_per_node or cpus_per_node(sweep.resources, gpus),
        partition=args.partition,
        time_limit=args.time,
        account=args.account,
        sbatch_lines=args.sbatch,
        tracking_uri=args.tracking_uri,
        log=log,
    )
    if args.dry_run:
        print(script, end="")
        return 0
    job = submit_script(script, log)
    print(job, flush=True)
    again = shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["submit"] else "the same `rlsweep submit --slurm`"
    console.print(
        f"submitted Slurm job {job}; outputs: {output_dir}; log: "
        f"{(log or 'slurm-%j.out in this folder').replace('%j', job)}\n"
        f"  status: rlsweep submit --slurm --status {job}   (or squeue -j {job})\n"
        f"  stop:   rlsweep submit --slurm --stop {job}     (the sweep stops, finished trials are kept)\n"
        f"  resume: {again}",
        markup=False,
    )
    return 0
