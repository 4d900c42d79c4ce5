"""Ray for a sweep: a local Ray on loopback in a private temp dir, or a connection to a cluster; its
workers at the driver's priority; credentials kept out of Tune's runtime_env."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path

import ray
from ray.tune.execution import class_cache

from orchestrator.words.storage import PROJECT_ROOT

SOCKET_PATH_MAX = 107  # AF_UNIX sun_path
RAY_SESSION_SUFFIX = 64  # len("/session_2026-11-05_12-34-56_123456_12345/sockets/plasma_store")
# Tune hands these to every trial actor in its runtime_env, which Ray's runtime-env agent writes to its
# log in plain text. A local Ray's workers inherit the driver's environment, so they lose nothing.
CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN")
# Ray starts its workers at nice 15 (worker_niceness), and a trial's supervisor and trainer inherit it:
# beside any other busy process they starve, so the budget guard, the settled stop and the timings lag
# (measured: scipy.stats took 46 s to import in a nice-15 worker where a nice-0 process took 1.7 s, and
# `stop` reached a tiny trainer 26 steps late). Trials run at the driver's priority, as `rlsweep trial`
# does: init_ray sets it for the local Ray it starts and for this job's workers on a cluster.
WORKER_NICENESS = 0


def private_ray_temp_dir() -> Path:
    """Ray's temp dir, out of the sweep's outputs: <private>/ray, where <private> is a new folder only this
    user can enter (0700) under the system temp dir (Ray makes its own temp dir world-writable), short
    enough for Ray's socket paths."""
    base = tempfile.gettempdir()
    if len(base) + len("/rls-ray-xxxxxxxx/ray") + RAY_SESSION_SUFFIX > SOCKET_PATH_MAX:
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix="rls-ray-", dir=base)) / "ray"


def quiet_ray_env() -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Ray's notice that token auth is on (it is, by default) is not for sweep users: keep the log clean.
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    # Workers import orchestrator/trainers from this checkout, installed or not.
    path = os.environ.get("PYTHONPATH", "")
    if str(PROJECT_ROOT) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), path) if p)


class _NotTunesResumeAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return "Resume experiment with" not in text and "Trials did not complete" not in text


def init_ray(address: str | None = None, **local_kwargs) -> Path | None:
    """Connect to RAY_ADDRESS (or `address`), else start a local Ray whose every service listens on
    127.0.0.1 only (kwargs: num_cpus/num_gpus). Returns the temp dir of the local Ray it started (for
    the caller to remove, with its private parent, after ray.shutdown), else None."""
    quiet_ray_env()
    # Tune reads back per-trial result files we do not write (auto loggers are off): not a problem.
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    # On Ctrl-C Tune advises Tuner.restore; our resume is `rlsweep run` again (the CLI prints it).
    logging.getLogger("ray.tune.tune").addFilter(_NotTunesResumeAdvice())
    if ray.is_initialized():
        return None
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(
            address=address,
            runtime_env=_job_worker_env(),
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        return None
    temp = private_ray_temp_dir()
    with _single_node_ray():
        ray.init(
            _node_ip_address="127.0.0.1",
            _temp_dir=str(temp),
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
            _system_config={"worker_niceness": WORKER_NICENESS},
            **local_kwargs,
        )
    return temp


def _job_worker_env() -> dict | None:
    """This job's runtime_env on a cluster: its workers start at WORKER_NICENESS (each reads
    RAY_worker_niceness at its start; Ray's job manager gives its own supervisor actor the same). Ray
    merges it into a submitted job's runtime_env; None where that already sets the variable: the
    submitter's choice stands, and Ray refuses a second value."""
    from ray._private.ray_constants import RAY_WORKER_NICENESS
    from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR

    job = json.loads(os.environ.get(RAY_JOB_CONFIG_JSON_ENV_VAR) or "{}")
    if RAY_WORKER_NICENESS in ((job.get("runtime_env") or {}).get("env_vars") or {}):
        return None
    return {"env_vars": {RAY_WORKER_NICENESS: str(WORKER_NICENESS)}}


@contextlib.contextmanager
def _single_node_ray():
    """While a local Ray starts: Ray on Linux swaps the node address 127.0.0.1 for the machine's and its
    services listen on every interface, unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which the services
    read from the environment and the driver read into ray_constants when Ray was imported. Both are
    set for the start and put back after, so a later connection to a cluster is unaffected."""
    from ray._private import ray_constants

    before_env = os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR)
    before_flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before_flag
        if before_env is None:
            os.environ.pop(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, None)
        else:
            os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = before_env


@contextlib.contextmanager
def credentials_kept_from_runtime_env():
    """While Tune registers the trainable: no credential in its runtime_env (see CREDENTIAL_VARS)."""
    dropped = class_cache.ENV_VARS_TO_PROPAGATE & set(CREDENTIAL_VARS)
    class_cache.ENV_VARS_TO_PROPAGATE.difference_update(dropped)
    try:
        yield
    finally:
        class_cache.ENV_VARS_TO_PROPAGATE.update(dropped)
