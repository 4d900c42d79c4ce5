"""The Ray Tune glue: a trial runs in a Ray actor whose function is the supervisor; its events reach
the Recorder (orchestrator/recording/recorder.py) in the driver through RecorderCallback; init_ray.

Tune reuses an actor for the next trial of the same resources (reuse_actors): the worker holds no CUDA
or trainer state, since every trial's trainer is a fresh child process (orchestrator/running/supervisor.py), so
a reused worker only saves Ray's process start and the trainable's imports.

Resume policy: our own ledger (trials.parquet) decides what runs, not Ray's experiment state. Each
`rlsweep run` builds a fresh Tuner over the trials whose status is not final (never ran, or `stopped`
by an interruption); completed/oom/pruned/failed/unavailable trials are not run again. Ray saves its
state at most every ~10 s and a SIGKILL of the driver loses the rest, so Tuner.restore cannot be the
source of truth; a fresh Tuner plus the ledger is simpler and exact. A trial interrupted mid-run is
started again from scratch and overwrites its steps file and its MLflow run.

The trial order and skips are in PlanSearcher (a Tune Searcher): Tune's schedulers cannot hold back
PENDING trials, a Searcher can. `decide(spec)` answers RUN, HOLD (ask again later) or a pruning
detail string; the default is OomGate (docs/oom.md): a trial that dominates one that ended
`oom` is pruned, and one that dominates a trial still running waits for it (oom.wait_for_smaller).
The out-of-memory verdicts are kept in <output_dir>/pruning.json, so a resumed sweep prunes alike.
Before each trial the gate also predicts its peak memory from the trials finished so far
(orchestrator.judging.memory.Forecast; its row records the prediction); with oom.predict it prunes a trial
predicted wholly over the budget, and the unrun trials go in informative_order.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.tune import Callback
from ray.tune.execution import class_cache
from ray.tune.search import Searcher
from rich.console import Console

from orchestrator.judging.memory import Forecast, informative_order
from orchestrator.judging.pruning import HOLD, RUN, OomGate
from orchestrator.judging.verdict import stop_check
from orchestrator.recording.finish import finish_sweep
from orchestrator.recording.outcome import FAILED, UNAVAILABLE, TrialResult
from orchestrator.recording.recorder import PruningGate, Recorder, StepsFiles, TrialsFile
from orchestrator.recording.runlock import output_dir_lock
from orchestrator.recording.sinks import TrialsTable
from orchestrator.recording.storage import filesystem_and_path, local_dir
from orchestrator.recording.tracking import MlflowSink
from orchestrator.running.phases import MEMORY, SPEED, TrialPhases, speed_pending, stages
from orchestrator.running.supervisor import PROJECT_ROOT, run_trial
from orchestrator.spec.plan import config_mismatches
from orchestrator.spec.plan import plan as make_plan
from orchestrator.spec.sweep import SweepError, SweepSpec, resolved_yaml
from orchestrator.views.progress import Progress
from orchestrator.views.report import frontier, frontier_table
from trainers.events import STEP
from trainers.spec import TrialSpec

SOCKET_PATH_MAX = 107  # AF_UNIX sun_path
RAY_SESSION_SUFFIX = 64  # len("/session_2026-11-05_12-34-56_123456_12345/sockets/plasma_store")
# Tune hands these to every trial actor in its runtime_env, which Ray's runtime-env agent writes to its
# log in plain text. A local Ray's workers inherit the driver's environment, so they lose nothing.
CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN")
# How long a trial no node can host waits for the cluster to grow (an autoscaler) before it ends
# `unavailable`; a local Ray does not grow, so it does not wait.
PLACEMENT_PATIENCE_S = 120.0
# Ray starts its workers at nice 15 (worker_niceness), and a trial's supervisor and trainer inherit it:
# beside any other busy process they starve, so the budget guard, the settled stop and the timings lag
# (measured: scipy.stats took 46 s to import in a nice-15 worker where a nice-0 process took 1.7 s, and
# `stop` reached a tiny trainer 26 steps late). Trials run at the driver's priority, as `rlsweep trial`
# does: init_ray sets it for the local Ray it starts and for this job's workers on a cluster.
WORKER_NICENESS = 0

Decider = Callable[[TrialSpec], str]
FINAL = "final"  # the trainable's last report: the supervisor's TrialResult


# ------------------------------------------------------------------------------------------------
# The trainable: runs inside a Ray worker, which Tune reuses for later trials.
# ------------------------------------------------------------------------------------------------
def trainable(config: dict[str, Any]) -> None:
    spec = TrialSpec.from_dict(json.loads(config["spec_json"]))
    gpu_ids = ray.get_gpu_ids()
    # No GPU held: hide all of them, so a CPU trial on a GPU host cannot take one.
    devices = ",".join(str(g) for g in gpu_ids) if gpu_ids else ""

    relay = _Relay()
    try:
        result = run_trial(
            spec,
            trial_dir=Path(config["trials_dir"]) / spec.trial_key,
            guard=config["guard"],
            on_event=relay,
            cuda_visible_devices=devices,
            cpus=config["cpus"],
            stop_check=stop_check(config["verdict"]),
            phases=config["phases"],
            stop_event=relay.failed,
        )
    finally:
        relay.close()  # its thread ends however run_trial did: a reused worker keeps no stray thread
    # The step rows went to Tune one by one (the relay): the result goes without them, so each row
    # crosses the Ray boundary once; the Recorder keeps the rows it was streamed.
    tune.report({"kind": FINAL, "result": {**result.to_dict(), "steps": []}})


class _Relay:
    """Hands a trial's step rows to Tune from a thread of its own. tune.report waits until Tune's
    controller has taken the previous result, a round trip through the driver; made from the
    supervisor's loop, it held that loop back, so its words to the trainer (`stop` once settled, a
    verdict's stop) came steps late on a busy host. The supervisor's loop now never waits on Tune.
    Whatever the report thread meets (Tune ending the trial raises SystemExit there) sets `failed`, which
    run_trial watches as its stop event (it stops the child), and is raised again in the trainable's own
    thread."""

    def __init__(self, report: Callable[[dict[str, Any]], None] | None = None):
        self.report = report or tune.report
        self.rows: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self.raised: BaseException | None = None
        self.failed = threading.Event()
        self.thread = threading.Thread(target=self._report, name="rlsweep-relay", daemon=True)
        self.thread.start()

    def _report(self) -> None:
        try:
            while (row := self.rows.get()) is not None:
                self.report({"kind": STEP, "row": row})
        except BaseException as exc:  # noqa: BLE001 - handed to the trainable's thread
            self.raised = exc
            self.failed.set()

    def __call__(self, kind: str, row: dict[str, Any]) -> None:
        if self.raised is not None:
            raise self.raised
        if kind == STEP:
            self.rows.put(row)

    def close(self) -> None:
        """Every row reported (in order, before the final result), or what stopped the reports."""
        self.rows.put(None)
        self.thread.join()
        if self.raised is not None:
            raise self.raised


# ------------------------------------------------------------------------------------------------
# Order and skips
# ------------------------------------------------------------------------------------------------
# Tuner pickles its searcher and callbacks (for Tuner.restore, which we do not use); they hold only a
# key into this registry, so the live state (consoles, MLflow client, locks) stays in the driver.
_LIVE: dict[str, Any] = {}


class PlanSearcher(Searcher):
    """Hands Tune the planned trials in order; asks `decide` first (run, hold, or a pruning detail)."""

    def __init__(self, trials: list[TrialSpec], config: dict[str, Any], state_key: str):
        super().__init__()
        self.queue = list(trials)
        self.config = config
        self.state_key = state_key

    def suggest(self, trial_id: str):
        decide = _LIVE[self.state_key + ".decide"]
        placement = _LIVE[self.state_key + ".placement"]()
        if placement == HOLD:
            return None
        if placement != RUN:  # no node can host any trial of the sweep (they all ask alike)
            for spec in self.queue:
                _LIVE[self.state_key].skip(spec, placement, UNAVAILABLE)
            self.queue.clear()
            return Searcher.FINISHED
        for spec in list(self.queue):
            verdict = decide(spec)
            if verdict == HOLD:
                continue
            self.queue.remove(spec)
            if verdict == RUN:
                return {"trial_key": spec.trial_key, "spec_json": spec.to_json(), **self.config}
            _LIVE[self.state_key].skip(spec, verdict)
        return Searcher.FINISHED if not self.queue else None

    def on_trial_complete(self, trial_id, result=None, error=False):
        pass

    # The ledger (trials.parquet) is the resume state, not Tune's searcher checkpoint.
    def save(self, checkpoint_path: str) -> None:
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass


# ------------------------------------------------------------------------------------------------
# Tune's trial events to the recorder in the driver
# ------------------------------------------------------------------------------------------------
class RecorderCallback(Callback):
    """Forwards Tune's trial events to the Recorder (orchestrator/recording/recorder.py) living in the driver."""

    def __init__(self, state_key: str):
        self.state_key = state_key

    @property
    def recorder(self) -> Recorder:
        return _LIVE[self.state_key]

    def on_trial_start(self, iteration, trials, trial, **info):
        self.recorder.start(trial.config["trial_key"])

    def on_trial_result(self, iteration, trials, trial, result, **info):
        key = trial.config["trial_key"]
        if result.get("kind") == STEP:
            self.recorder.step(key, result["row"])
        elif result.get("kind") == FINAL:
            self.recorder.end(key, TrialResult(**result["result"]))

    def on_trial_complete(self, iteration, trials, trial, **info):
        # Ended without a final report (a no-op after one): the trainable itself broke.
        self.recorder.end(trial.config["trial_key"], None, FAILED, "supervisor ended without a result")

    def on_trial_error(self, iteration, trials, trial, **info):
        self.recorder.end(trial.config["trial_key"], None, FAILED, f"supervisor error: {_error_text(trial)}")


def _error_text(trial) -> str:
    with contextlib.suppress(Exception):
        path = trial.error_file or ""
        if path and os.path.exists(path):
            return Path(path).read_text()[-2000:]
    return "see Ray's trial error"


# ------------------------------------------------------------------------------------------------
# Trials no node can host
# ------------------------------------------------------------------------------------------------
def placement_verdict(
    request: dict[str, float], nodes: list[dict[str, float]], waited_s: float, patience_s: float
) -> str:
    """RUN when some node's total resources cover `request` (Ray's keys: CPU, GPU); HOLD while none does
    and waited_s < patience_s; then the `unavailable` detail with the numbers."""
    if any(all(node.get(k, 0) >= need for k, need in request.items()) for node in nodes):
        return RUN
    if waited_s < patience_s:
        return HOLD
    asked = ", ".join(f"{k} {need:g}" for k, need in request.items())
    largest = ", ".join(f"{k} {max((n.get(k, 0) for n in nodes), default=0):g}" for k in request)
    return (
        f"no node can host the trial: it asks for {asked} and the largest node has {largest} "
        f"(waited {waited_s:.0f} s for the cluster to grow); lower resources.cpus_per_trial / "
        "gpus_per_trial or add a larger node"
    )


class PlacementWatch:
    """placement_verdict over the cluster's live nodes, timed from the first time no node fits."""

    def __init__(self, request: dict[str, float], patience_s: float):
        self.request = request
        self.patience_s = patience_s
        self.short_since: float | None = None

    def __call__(self) -> str:
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        now = time.monotonic()
        verdict = placement_verdict(self.request, nodes, now - (self.short_since or now), self.patience_s)
        if verdict == RUN:
            self.short_since = None
        elif self.short_since is None:
            self.short_since = now
        return verdict


# ------------------------------------------------------------------------------------------------
# Ray
# ------------------------------------------------------------------------------------------------
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
    if PROJECT_ROOT not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (PROJECT_ROOT, path) if p)


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
def _credentials_kept_from_runtime_env():
    """While Tune registers the trainable: no credential in its runtime_env (see CREDENTIAL_VARS)."""
    dropped = class_cache.ENV_VARS_TO_PROPAGATE & set(CREDENTIAL_VARS)
    class_cache.ENV_VARS_TO_PROPAGATE.difference_update(dropped)
    try:
        yield
    finally:
        class_cache.ENV_VARS_TO_PROPAGATE.update(dropped)


# ------------------------------------------------------------------------------------------------
# The sweep
# ------------------------------------------------------------------------------------------------
@dataclass
class SweepOutcome:
    output_dir: Path
    counts: dict[str, int]
    interrupted: bool
    ran: list[str]


def run_sweep(
    sweep: SweepSpec,
    *,
    output_dir: str | Path | None = None,
    console: Console | None = None,
    decide: Decider | None = None,
    ray_init_kwargs: dict[str, Any] | None = None,
    report_to: Console | None = None,
) -> SweepOutcome:
    """Run the sweep's unfinished trials, then end it (orchestrator.recording.finish.finish_sweep); with
    report_to, the end writes the report and prints its matrix there. Holds the output dir's lock
    (orchestrator.recording.runlock) throughout: a second run on it raises OutputDirBusy naming this one."""
    console = console or Console(stderr=True)
    out = sweep.resolved_output_dir(str(output_dir) if output_dir else None)
    plan = make_plan(sweep)
    if plan.problems:
        raise SweepError(plan.problems, "plan")
    out.mkdir(parents=True, exist_ok=True)
    with output_dir_lock(out):
        return _run_locked(sweep, plan, out, console, decide, ray_init_kwargs or {}, report_to)


def _run_locked(sweep, plan, out, console, decide, ray_init_kwargs, report_to) -> SweepOutcome:
    ledger = TrialsTable(out / "trials.parquet")
    # A resume takes a stored result only for the configuration that made it.
    mismatches = config_mismatches(ledger.rows.values(), plan.trials)
    if mismatches:
        raise SweepError(list(mismatches.values()), "resume")
    (out / "sweep.yaml").write_text(resolved_yaml(sweep))
    todo = [s for s in plan.trials if not ledger.done(s.trial_key)]
    done = {k: ledger.status(k) for k in plan.keys if ledger.done(k)}
    if done:
        console.print(f"resuming {out}: {len(done)} of {len(plan.trials)} trials already finished")

    mlflow = None
    mlflow_start = None
    if sweep.tracking.enabled:
        mlflow = MlflowSink(sweep.tracking_uri(out), sweep.experiment_name(), out, sweep.name)
        # The sweep's run is opened (a new store migrates its schema: seconds) while Ray starts; the first
        # trial's events wait for it. start_sweep warns and goes on when MLflow fails.
        mlflow_start = threading.Thread(
            target=mlflow.start_sweep, args=(resolved_yaml(sweep),), name="mlflow-start", daemon=True
        )
        mlflow_start.start()
    progress = Progress(len(plan.trials), console, done)
    forecast = Forecast(ledger.rows)
    gate = OomGate.load(
        out / "pruning.json",
        ledger,
        sweep.oom.prune_dominated,
        sweep.oom.wait_for_smaller,
        forecast=forecast,
        predict=sweep.oom.predict,
    )
    if sweep.oom.predict:
        todo = informative_order(todo, forecast.model())
    sinks = [StepsFiles(out), PruningGate(gate), TrialsFile(ledger), progress, *([mlflow] if mlflow else [])]
    recorder = Recorder(plan.trials, sinks, sweep.verdict.settings(), forecast.made)
    interrupted = False
    if todo or any(speed_pending(ledger.rows.get(k)) for k in plan.keys):
        local = not (ray_init_kwargs.get("address") or os.environ.get("RAY_ADDRESS"))
        ray_temp = init_ray(**ray_init_kwargs)
        try:
            if mlflow_start is not None:
                mlflow_start.join()
            try:
                runs = stages(sweep, ray.cluster_resources().get("GPU", 0) > 0, console.print)
            except ValueError as exc:
                raise SweepError([str(exc)], "phases") from None
            for which, phases, gpus in runs:
                ready = [s for s in plan.trials if which(ledger.rows.get(s.trial_key))]
                if ready and not interrupted:
                    progress.begin(_phase_name(phases) if len(runs) > 1 else None, len(ready))
                    interrupted = _tune(
                        sweep, ready, out, recorder, progress, decide or gate, local, phases, gpus
                    )
        finally:
            if ray_temp is not None:  # the local Ray this run started: its logs and sockets go with it
                ray.shutdown()
                shutil.rmtree(ray_temp.parent, ignore_errors=True)
    if mlflow_start is not None:
        mlflow_start.join()  # at once unless nothing ran
    # Tune ends quietly on Ctrl-C; whatever the ledger does not hold as final was cut short.
    interrupted = interrupted or any(not ledger.done(k) for k in plan.keys)
    counts = progress.counts()
    report = report_to is not None and bool(ledger.rows)
    if not report:  # the report prints the same frontier table first
        print_frontier(ledger, console)
    finish_sweep(
        out,
        console=report_to or console,
        mlflow=mlflow,
        counts=counts,
        interrupted=interrupted,
        report=report,
    )
    return SweepOutcome(out, counts, interrupted, [s.trial_key for s in todo])


def _phase_name(phases: TrialPhases) -> str | None:
    """What a Tune run of a two-run sweep does, for its progress lines: the memory phase alone, the
    speed phase alone, or None for trials that go straight from one into the other."""
    if phases.hold_at_step is None:
        return SPEED
    return None if phases.then_speed else MEMORY


def _tune(
    sweep, todo, out, recorder, progress, decide, local: bool, phases: TrialPhases, gpus: float
) -> bool:
    """Run `todo` through a fresh Tuner, each trial under `phases` holding `gpus` GPUs (where the
    cluster has any); True when Ctrl-C cut it short."""
    scratch = local_dir(out, sweep.name)  # trainer scratch must be local
    has_gpu = ray.cluster_resources().get("GPU", 0) > 0
    resources = {"cpu": sweep.resources.cpus_per_trial}
    if has_gpu and gpus:
        resources["gpu"] = gpus
    config = {
        "trials_dir": str(scratch / "trials"),
        "cpus": sweep.resources.cpus_per_trial,
        "guard": sweep.guard(),
        "verdict": sweep.verdict.settings(),
        "phases": phases,
    }
    storage_fs, storage_path = filesystem_and_path(out / "ray")  # a URI: Tune syncs there via pyarrow.fs
    state_key = f"sweep-{id(recorder)}"
    _LIVE[state_key], _LIVE[state_key + ".decide"] = recorder, decide
    _LIVE[state_key + ".placement"] = PlacementWatch(
        {k.upper(): v for k, v in resources.items()}, 0.0 if local else PLACEMENT_PATIENCE_S
    )
    tuner = tune.Tuner(
        tune.with_resources(trainable, resources),
        tune_config=tune.TuneConfig(
            search_alg=PlanSearcher(todo, config, state_key),
            num_samples=-1,
            max_concurrent_trials=sweep.resources.max_concurrent or 0,
            reuse_actors=True,
            trial_dirname_creator=lambda trial: trial.config["trial_key"],
        ),
        run_config=tune.RunConfig(
            name=f"tune-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=storage_path,
            storage_filesystem=storage_fs,
            callbacks=[RecorderCallback(state_key)],
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=0),
            log_to_file=True,
        ),
    )
    interrupted = False
    try:
        with progress, _credentials_kept_from_runtime_env() if local else contextlib.nullcontext():
            tuner.fit()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        for suffix in ("", ".decide", ".placement"):
            _LIVE.pop(state_key + suffix, None)
    # Ctrl-C: Tune stopped them; a resume runs them again
    recorder.stop_running("interrupted (Ctrl-C); a resumed sweep runs it again")
    return interrupted


def print_frontier(ledger: TrialsTable, console: Console) -> None:
    """The feasibility frontier (orchestrator.views.report.frontier) of every trial in the ledger."""
    if ledger.rows:
        console.print(frontier_table(frontier(ledger.table().to_pandas())))
