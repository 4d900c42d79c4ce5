"""`rlsweep submit`: run a sweep on a Ray cluster as a Ray job (Jobs API), follow it, ask its status, stop it.

The job uploads this project (without outputs/, .venv, .git, caches) as its working_dir and runs
`python -m orchestrator.cli run ...` there: the code is the submitted copy, while every node brings the
dependencies (a venv made from pyproject.toml, activated before `ray start`, so `python` is that venv's).
Inside the job Ray sets RAY_ADDRESS, so the driver joins the cluster and trials spread over every GPU.
Outputs and MLflow must be reachable from the head: an output dir that is a URI or an absolute shared
path, and an MLflow server. Credentials stay in the nodes' environment; nothing secret is sent.

This module builds the job and talks to the cluster; orchestrator/cli/submit.py reads the verb's
arguments and prints.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

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
AGENT_WAIT_S = 60  # a freshly started head answers "No available agent" for a few seconds


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
