"""`rlsweep submit`: run a sweep on a Ray cluster as a Ray job (Jobs API), follow it, ask its status, stop it.

The job uploads this project (without outputs/, .venv, .git, caches) as its working_dir and runs
`python -m orchestrator.cli run ...` there: the code is the submitted copy, while every node brings the
dependencies (a venv made from pyproject.toml, activated before `ray start`, so `python` is that venv's).
Inside the job Ray sets RAY_ADDRESS, so the driver joins the cluster and trials spread over every GPU.
Outputs and MLflow must be reachable from the head: an output dir that is a URI or an absolute shared
path, and an MLflow server. Credentials stay in the nodes' environment; nothing secret is sent.
"""

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

from orchestrator.running.slurm import SlurmError, submit_slurm
from orchestrator.words.storage import PROJECT_ROOT, URI

EXCLUDES = [
    "outputs/",
    ".venv/",
    ".git/",
    ".cache/",
    "__pycache__/",
    "*.egg-info/",
    ".pytest_cache/",
    ".ruff_cache/",
]
EXIT = {"SUCCEEDED": 0, "FAILED": 1, "STOPPED": 3, "DETACHED": 130}
AGENT_WAIT_S = 60  # a freshly started head answers "No available agent" for a few seconds

console = Console(stderr=True, highlight=False, soft_wrap=True)


class SubmitError(ValueError):
    """Bad input for submit: the message names the setting, the value, the rule and a fix."""


# ------------------------------------------------------------------------------------------------
# The job's command line
# ------------------------------------------------------------------------------------------------
def job_output_dir(given: str | None, sweep_output_dir: str | None) -> str:
    """The job runs in a throwaway copy of the project: a relative output dir would be lost with it."""
    value = given or sweep_output_dir
    if value and (URI.match(value) or Path(value).is_absolute()):
        return value
    raise SubmitError(
        f"--output-dir: {f'{value!r} is relative' if value else 'not set'}; a Ray job runs in a temporary "
        "copy of the project, so results there would be lost. Give a URI every node can write "
        "(--output-dir s3://BUCKET/PREFIX or gs://...) or an absolute path mounted on every node "
        "(--output-dir /shared/rlsweep/NAME)"
    )


def job_tracking_uri(given: str | None, sweep_uri: str | None, enabled: bool) -> str | None:
    """The MLflow URI the job needs in its environment (None: the sweep names one, or tracking is off)."""
    if not enabled or sweep_uri:
        return None
    uri = given or os.environ.get("MLFLOW_TRACKING_URI")
    if uri and not uri.startswith("sqlite:"):
        return uri
    raise SubmitError(
        f"--tracking-uri: {f'{uri!r} is a local sqlite file' if uri else 'not set'}; the job's default "
        "sqlite store would live in a temporary copy of the project. Start an MLflow server (docs/cluster.md: Running on a Ray cluster) "
        "and pass --tracking-uri http://HOST:5000 (or set MLFLOW_TRACKING_URI, or tracking.mlflow_uri in "
        "the sweep), or --set tracking.enabled=false for Parquet only"
    )


def sweep_argument(sweep_file: Path, job_tag: str) -> tuple[str, str]:
    """(shell prefix, path the job reads): a sweep inside the project travels with it; one outside is
    written into the job's working dir by the entrypoint itself."""
    sweep_file = sweep_file.resolve()
    if sweep_file.is_relative_to(PROJECT_ROOT) and not any(
        part in ("outputs", ".venv", ".git") for part in sweep_file.relative_to(PROJECT_ROOT).parts
    ):
        return "", str(sweep_file.relative_to(PROJECT_ROOT))
    name = f".rlsweep-{job_tag}-{sweep_file.name}"
    return f"printf '%s' {shlex.quote(sweep_file.read_text())} > {shlex.quote(name)} && ", name


def entrypoint(sweep_file: Path, sets: list[str], output_dir: str, job_tag: str) -> str:
    prefix, path = sweep_argument(sweep_file, job_tag)
    args = ["python", "-m", "orchestrator.cli", "run", path, *[f"--set={s}" for s in sets]]
    return prefix + shlex.join([*args, "--output-dir", output_dir])


def runtime_env(tracking_uri: str | None) -> dict:
    env_vars = {"RAY_USAGE_STATS_ENABLED": "0"}
    if tracking_uri:
        env_vars["MLFLOW_TRACKING_URI"] = tracking_uri
    return {"working_dir": str(PROJECT_ROOT), "excludes": EXCLUDES, "env_vars": env_vars}


# ------------------------------------------------------------------------------------------------
# Talking to the cluster
# ------------------------------------------------------------------------------------------------
def client(address: str | None):
    from ray.job_submission import JobSubmissionClient

    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise SubmitError(
            "--address: not set; give the head's dashboard address, e.g. --address http://HEAD:8265 "
            "(or set RAY_ADDRESS)"
        )
    try:
        return JobSubmissionClient(address)
    except Exception as exc:
        raise SubmitError(
            f"--address: cannot reach the Ray dashboard at {address!r} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}). Check that `ray start --head` runs there with "
            "the dashboard on that port and that `ray[default]` is installed on the head; with token auth "
            "(Ray's default) set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (from `ray get-auth-token` on the head)"
        ) from None


def submit_with_retry(jobs, **kwargs) -> str:
    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        try:
            return jobs.submit_job(**kwargs)
        except RuntimeError as exc:
            if "No available agent" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(1)


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
    p.add_argument(
        "--output-dir",
        help="a URI (s3://, gs://) or an absolute path every node mounts (--slurm: a relative path is made "
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
