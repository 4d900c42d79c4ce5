"""The Ray Tune driver: one trial = one fresh Ray actor whose function is the supervisor.

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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.tune import Callback
from ray.tune.search import Searcher
from rich.console import Console

from orchestrator.outcome import FAILED, PRUNED, STOPPED, TrialResult
from orchestrator.plan import plan as make_plan
from orchestrator.progress import Progress
from orchestrator.pruning import HOLD, RUN, OomGate
from orchestrator.report import frontier, frontier_table
from orchestrator.sinks import TrialsTable, trial_row, write_steps
from orchestrator.storage import filesystem_and_path, local_dir
from orchestrator.supervisor import PROJECT_ROOT, default_sampler_factory, run_trial
from orchestrator.sweep import SweepError, SweepSpec, resolved_yaml
from orchestrator.tracking import MlflowSink
from trainers.spec import TrialSpec

SOCKET_PATH_MAX = 107  # AF_UNIX sun_path
RAY_SESSION_SUFFIX = 64  # len("/session_2026-11-05_12-34-56_123456_12345/sockets/plasma_store")

Decider = Callable[[TrialSpec], str]


# ------------------------------------------------------------------------------------------------
# The trainable: runs inside a Ray worker, one per trial.
# ------------------------------------------------------------------------------------------------
def trainable(config: dict[str, Any]) -> None:
    spec = TrialSpec.from_dict(json.loads(config["spec_json"]))
    ctx = config["ctx"]
    gpu_ids = ray.get_gpu_ids()
    # No GPU held: hide all of them, so a CPU trial on a GPU host cannot take one.
    devices = ",".join(str(g) for g in gpu_ids) if gpu_ids else ""

    def relay(event: dict[str, Any]) -> None:
        if event.get("event") == "step":
            tune.report({"kind": "step", "step": event.get("step"), "row_json": json.dumps(event)})
        elif event.get("event") == "started":
            tune.report({"kind": "started", "row_json": json.dumps(event)})

    result = run_trial(
        spec,
        trial_dir=Path(ctx["trials_dir"]) / spec.trial_key,
        on_event=relay,
        timeout_s=ctx.get("timeout_s"),
        cuda_visible_devices=devices,
        cpus=ctx.get("cpus"),
        sampler_factory=default_sampler_factory(ctx, devices),
    )
    final = result.to_dict()
    final.pop("steps")  # already relayed one by one
    tune.report({"kind": "final", "status": result.status, "result_json": json.dumps(final, default=str)})


# ------------------------------------------------------------------------------------------------
# Order and skips
# ------------------------------------------------------------------------------------------------
# Tuner pickles its searcher and callbacks (for Tuner.restore, which we do not use); they hold only a
# key into this registry, so the live state (consoles, MLflow client, locks) stays in the driver.
_LIVE: dict[str, Any] = {}


class PlanSearcher(Searcher):
    """Hands Tune the planned trials in order; asks `decide` first (run, hold, or a pruning detail)."""

    def __init__(self, trials: list[TrialSpec], ctx: dict[str, Any], state_key: str):
        super().__init__()
        self.queue = list(trials)
        self.ctx = ctx
        self.state_key = state_key

    def suggest(self, trial_id: str):
        decide = _LIVE[self.state_key + ".decide"]
        for spec in list(self.queue):
            verdict = decide(spec)
            if verdict == HOLD:
                continue
            self.queue.remove(spec)
            if verdict == RUN:
                return {"trial_key": spec.trial_key, "spec_json": spec.to_json(), "ctx": self.ctx}
            _LIVE[self.state_key].on_skip(spec, verdict)
        return Searcher.FINISHED if not self.queue else None

    def on_trial_complete(self, trial_id, result=None, error=False):
        pass

    # The ledger (trials.parquet) is the resume state, not Tune's searcher checkpoint.
    def save(self, checkpoint_path: str) -> None:
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass


# ------------------------------------------------------------------------------------------------
# Sinks: a Tune callback in the driver
# ------------------------------------------------------------------------------------------------
@dataclass
class SinkState:
    output_dir: Path
    specs: dict[str, TrialSpec]
    ledger: TrialsTable
    mlflow: MlflowSink | None
    progress: Progress
    steps: dict[str, dict[int, dict]] = field(default_factory=dict)
    started: dict[str, dict] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    on_row: Callable[[TrialSpec, dict[str, Any]], None] | None = None  # OomGate.record

    def on_start(self, key: str) -> None:
        self.steps[key] = {}
        self.running.add(key)
        self.progress.started(key, self.specs[key].max_steps)
        if self.mlflow:
            self.mlflow.trial_started(self.specs[key])

    def on_step(self, key: str, row: dict[str, Any]) -> None:
        row = {k: v for k, v in row.items() if k not in ("event", "time")}
        step = int(row.get("step") or 0)
        if step in self.steps.setdefault(key, {}):
            return  # Tune may hand the last report over twice
        self.steps[key][step] = row
        self.progress.step(key, row)
        if self.mlflow:
            self.mlflow.trial_step(key, row)

    def on_end(
        self, key: str, result: TrialResult | None, status: str | None = None, detail: str = ""
    ) -> None:
        spec = self.specs[key]
        if result is not None:
            result.steps = [self.steps.get(key, {})[s] for s in sorted(self.steps.get(key, {}))]
        row = trial_row(spec, result, status=status, detail=detail)
        path = write_steps(self.output_dir, spec, result.steps if result else [])
        artifact = path if isinstance(path, Path) else None  # MLflow uploads local files only
        if self.on_row:  # before the ledger: a verdict on disk never lags the row that made it
            self.on_row(spec, row)
        self.ledger.upsert(row)
        self.running.discard(key)
        self.progress.finished(key, row["status"], row["status_detail"])
        if self.mlflow:
            self.mlflow.trial_finished(row, artifact)

    def on_skip(self, spec: TrialSpec, detail: str) -> None:
        """A trial the searcher decided not to run (pruned): a row and a run like any trial."""
        self.specs[spec.trial_key] = spec
        self.on_start(spec.trial_key)
        self.on_end(spec.trial_key, None, status=PRUNED, detail=detail)


class SinkCallback(Callback):
    """Feeds Tune's trial events to the sinks (SinkState) living in the driver."""

    def __init__(self, state_key: str):
        self.state_key = state_key

    @property
    def state(self) -> SinkState:
        return _LIVE[self.state_key]

    def on_trial_start(self, iteration, trials, trial, **info):
        self.state.on_start(trial.config["trial_key"])

    def on_trial_result(self, iteration, trials, trial, result, **info):
        key = trial.config["trial_key"]
        kind = result.get("kind")
        if kind == "step":
            self.state.on_step(key, json.loads(result["row_json"]))
        elif kind == "started":
            self.state.started[key] = json.loads(result["row_json"])
        elif kind == "final" and key in self.state.running:  # Tune may repeat the last report
            data = json.loads(result["result_json"])
            self.state.on_end(key, TrialResult(**{**data, "steps": []}))

    def on_trial_complete(self, iteration, trials, trial, **info):
        key = trial.config["trial_key"]
        if key in self.state.running:  # ended without a final report: the trainable itself broke
            self.state.on_end(key, None, status=FAILED, detail="supervisor ended without a result")

    def on_trial_error(self, iteration, trials, trial, **info):
        key = trial.config["trial_key"]
        if key in self.state.running:
            self.state.on_end(key, None, status=FAILED, detail=f"supervisor error: {_error_text(trial)}")


def _error_text(trial) -> str:
    with contextlib.suppress(Exception):
        path = trial.error_file or ""
        if path and os.path.exists(path):
            return Path(path).read_text()[-2000:]
    return "see Ray's trial error"


# ------------------------------------------------------------------------------------------------
# Ray
# ------------------------------------------------------------------------------------------------
def ray_temp_dir(output_dir: Path) -> Path:
    """<output>/ray-tmp when short enough for Ray's socket paths, else a short path keyed by the output."""
    preferred = output_dir / "ray-tmp"
    if len(str(preferred)) + RAY_SESSION_SUFFIX <= SOCKET_PATH_MAX:
        return preferred
    digest = hashlib.sha1(str(output_dir).encode()).hexdigest()[:8]
    return Path("/tmp") / f"rlsweep-ray-{digest}"


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


def init_ray(output_dir: Path, address: str | None = None, **local_kwargs) -> None:
    """Connect to RAY_ADDRESS (or `address`), else start a local Ray on 127.0.0.1 (kwargs: num_cpus/num_gpus)."""
    quiet_ray_env()
    # Tune reads back per-trial result files we do not write (auto loggers are off): not a problem.
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    # On Ctrl-C Tune advises Tuner.restore; our resume is `rlsweep run` again (the CLI prints it).
    logging.getLogger("ray.tune.tune").addFilter(_NotTunesResumeAdvice())
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        return
    temp = ray_temp_dir(output_dir)
    temp.mkdir(parents=True, exist_ok=True)
    ray.init(
        _node_ip_address="127.0.0.1",
        _temp_dir=str(temp),
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        **local_kwargs,
    )


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
) -> SweepOutcome:
    console = console or Console(stderr=True)
    out = sweep.resolved_output_dir(str(output_dir) if output_dir else None)
    plan = make_plan(sweep)
    if plan.problems:
        raise SweepError(plan.problems, "plan")
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.yaml").write_text(resolved_yaml(sweep))
    ledger = TrialsTable(out / "trials.parquet")
    todo = [s for s in plan.trials if not ledger.done(s.trial_key)]
    done = {k: ledger.status(k) for k in plan.keys if ledger.done(k)}
    if done:
        console.print(f"resuming {out}: {len(done)} of {len(plan.trials)} trials already finished")

    mlflow = None
    if sweep.tracking.enabled:
        mlflow = MlflowSink(sweep.tracking_uri(), sweep.experiment_name(), out, sweep.name)
        mlflow.start_sweep(resolved_yaml(sweep))
    progress = Progress(len(plan.trials), console, done)
    gate = OomGate.load(out / "pruning.json", ledger, sweep.oom.prune_dominated, sweep.oom.wait_for_smaller)
    state = SinkState(
        out, {s.trial_key: s for s in plan.trials}, ledger, mlflow, progress, on_row=gate.record
    )
    interrupted = False
    if todo:
        scratch = local_dir(out, sweep.name)  # Ray's temp dir and trainer scratch must be local
        init_ray(scratch, **(ray_init_kwargs or {}))
        has_gpu = ray.cluster_resources().get("GPU", 0) > 0
        resources = {"cpu": sweep.resources.cpus_per_trial}
        if has_gpu and sweep.resources.gpus_per_trial:
            resources["gpu"] = sweep.resources.gpus_per_trial
        ctx = {
            "output_dir": str(out),
            "trials_dir": str(scratch / "trials"),
            "timeout_s": sweep.timeout_s,
            "cpus": sweep.resources.cpus_per_trial,
            "budget_gib": sweep.memory.budget_gib,
            "margin_gib": sweep.memory.margin_gib,
            "sample_hz": sweep.memory.sample_hz,
        }
        storage_fs, storage_path = filesystem_and_path(out / "ray")  # a URI: Tune syncs there via pyarrow.fs
        state_key = f"sweep-{id(state)}"
        _LIVE[state_key], _LIVE[state_key + ".decide"] = state, decide or gate
        tuner = tune.Tuner(
            tune.with_resources(trainable, resources),
            tune_config=tune.TuneConfig(
                search_alg=PlanSearcher(todo, ctx, state_key),
                num_samples=-1,
                max_concurrent_trials=sweep.resources.max_concurrent or 0,
                reuse_actors=False,
                trial_dirname_creator=lambda trial: trial.config["trial_key"],
            ),
            run_config=tune.RunConfig(
                name=f"tune-{time.strftime('%Y%m%d-%H%M%S')}",
                storage_path=storage_path,
                storage_filesystem=storage_fs,
                callbacks=[SinkCallback(state_key)],
                verbose=0,
                failure_config=tune.FailureConfig(max_failures=0),
                log_to_file=True,
            ),
        )
        try:
            with progress:
                tuner.fit()
        except KeyboardInterrupt:
            interrupted = True
        finally:
            _LIVE.pop(state_key, None)
            _LIVE.pop(state_key + ".decide", None)
        for key in list(state.running):  # Ctrl-C: Tune stopped them; a resume runs them again
            state.on_end(
                key, None, status=STOPPED, detail="interrupted (Ctrl-C); a resumed sweep runs it again"
            )
    # Tune ends quietly on Ctrl-C; whatever the ledger does not hold as final was cut short.
    interrupted = interrupted or any(not ledger.done(k) for k in plan.keys)
    counts = progress.counts()
    if mlflow:
        mlflow.end_sweep(counts, interrupted)
    print_frontier(ledger, console)
    return SweepOutcome(out, counts, interrupted, [s.trial_key for s in todo])


def print_frontier(ledger: TrialsTable, console: Console) -> None:
    """The feasibility frontier (orchestrator.report.frontier) of every trial in the ledger."""
    if ledger.rows:
        console.print(frontier_table(frontier(ledger.table().to_pandas())))
