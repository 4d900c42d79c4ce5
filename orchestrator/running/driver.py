"""A sweep from start to end: the plan, the ledger's resume, the sinks, Ray (orchestrator.running.ray_env),
one Tuner per phase (its glue: orchestrator.running._tune), then the sweep's finish.

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
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray import tune
from rich.console import Console

from orchestrator.judging.frontier import FrontierGate
from orchestrator.judging.memory import Forecast, informative_order
from orchestrator.judging.pruning import OomGate
from orchestrator.publishing.finish import finish_sweep
from orchestrator.publishing.tracking import MlflowSink
from orchestrator.recording.recorder import PruningGate, Recorder, StepsFiles, TrialsFile
from orchestrator.recording.sinks import TrialsTable
from orchestrator.running._tune import (
    PLACEMENT_PATIENCE_S,
    Decider,
    PlacementWatch,
    PlanSearcher,
    RecorderCallback,
    trainable,
    trial_placement,
    trial_request,
)
from orchestrator.running.phases import stages
from orchestrator.running.ray_env import credentials_kept_from_runtime_env, init_ray
from orchestrator.spec.load import resolved_yaml
from orchestrator.spec.plan import config_mismatches
from orchestrator.spec.plan import plan as make_plan
from orchestrator.spec.sweep import SweepError, SweepSpec
from orchestrator.views.progress import Progress
from orchestrator.views.report import frontier, frontier_table
from orchestrator.words.phases import MEMORY, SPEED, TrialPhases, speed_pending
from orchestrator.words.runlock import output_dir_lock
from orchestrator.words.storage import filesystem_and_path, local_dir
from trainers.session import session_key


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
    trainer_cmd: list[str] | None = None,
) -> SweepOutcome:
    """Run the sweep's unfinished trials, then end it (orchestrator.publishing.finish.finish_sweep); with
    report_to, the end writes the report and prints its matrix there. Holds the output dir's lock
    (orchestrator.words.runlock) throughout: a second run on it raises OutputDirBusy naming this one.
    trainer_cmd: the program each trial's supervisor starts instead of `python -m trainers` (a stand-in
    trainer, for benchmarks of the driver: bench/cost/driver_scaling.py)."""
    console = console or Console(stderr=True)
    out = sweep.resolved_output_dir(str(output_dir) if output_dir else None)
    plan = make_plan(sweep)
    if plan.problems:
        raise SweepError(plan.problems, "plan")
    out.mkdir(parents=True, exist_ok=True)
    with output_dir_lock(out):
        return _run_locked(sweep, plan, out, console, decide, ray_init_kwargs or {}, report_to, trainer_cmd)


def _run_locked(
    sweep, plan, out, console, decide, ray_init_kwargs, report_to, trainer_cmd=None
) -> SweepOutcome:
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
    forecast = Forecast(ledger.rows, version=lambda: ledger.version)
    # Frontier search (orchestrator.judging.frontier) where the memory phase runs: trials a measured fit
    # dominates are implied, not probed, and the rest are probed in bisection order.
    search = sweep.oom.frontier and MEMORY in sweep.phases_to_run()
    gate = (FrontierGate if search else OomGate).load(
        out / "pruning.json",
        ledger,
        sweep.oom.prune_dominated,
        sweep.oom.wait_for_smaller,
        forecast=forecast,
        predict=sweep.oom.predict,
    )
    if sweep.oom.session and MEMORY in sweep.phases_to_run():  # a probe session's shapes one after another
        gate.group = session_key
    if sweep.oom.predict and not search:
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
                cluster_gpus = ray.cluster_resources().get("GPU", 0)
                runs = stages(sweep, cluster_gpus > 0, console.print, plan.trials, max(1, int(cluster_gpus)))
            except ValueError as exc:
                raise SweepError([str(exc)], "phases") from None
            # Each run picks its trials from the ledger as it stands when the run starts: a trial an
            # earlier run settled does not run again, and the gate skips at once the trials that the
            # earlier runs' verdicts prune or imply.
            for stage in runs:
                ready = [s for s in plan.trials if stage.runs(s, ledger.rows.get(s.trial_key))]
                if ready and not interrupted:
                    progress.begin(_phase_name(stage.phases) if len(runs) > 1 else None, len(ready))
                    for batch in tune_batches(ready):
                        interrupted = _tune(
                            sweep, batch, out, recorder, progress, decide or gate, local, stage.phases,
                            stage.gpus, trainer_cmd, None if decide else gate.order,
                        )  # fmt: skip
                        if interrupted:
                            break
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


# Times a trial runs again after the node it ran on was lost.
NODE_LOST_RETRIES = 2
# Trials per Tuner: Tune keeps every trial of a run in the driver to its end (its state as JSON, each
# number's running statistics: some 50 kB of Python objects and 0.1 MB of RSS a trial, measured), so a
# long sweep runs its trials through one Tuner after another, in order; a new Tuner costs a second or
# two, a slot idle at each batch's tail. Our ledger, not Tune's state, carries the sweep between them.
TUNE_BATCH = 250


def tune_batches(trials: list, size: int = TUNE_BATCH) -> list[list]:
    """`trials` in order, in runs of at most `size` (one Tuner each)."""
    return [trials[i : i + size] for i in range(0, len(trials), size)]


def _phase_name(phases: TrialPhases) -> str | None:
    """What a Tune run of a two-run sweep does, for its progress lines: the memory phase alone, the
    speed phase alone, or None for trials that go straight from one into the other."""
    if phases.hold_at_step is None:
        return SPEED
    return None if phases.then_speed else MEMORY


def _tune(
    sweep,
    todo,
    out,
    recorder,
    progress,
    decide,
    local: bool,
    phases: TrialPhases,
    gpus: float,
    trainer_cmd: list[str] | None = None,
    order=None,
) -> bool:
    """Run `todo` through a fresh Tuner, each trial under `phases` holding `gpus` GPUs (where the
    cluster has any), asked about in `order` (PlanSearcher); True when Ctrl-C cut it short."""
    scratch = local_dir(out, sweep.name)  # trainer scratch must be local
    has_gpu = ray.cluster_resources().get("GPU", 0) > 0
    cpus = sweep.resources.cpus_per_trial
    # The largest request of these trials: no node that hosts it, no trial waits for the cluster.
    requests = [trial_request(spec, cpus, gpus, has_gpu) for spec in todo] or [{"CPU": cpus}]
    largest = max(requests, key=lambda r: r.get("GPU", 0))
    config = {
        "trials_dir": str(scratch / "trials"),
        "cpus": sweep.resources.cpus_per_trial,
        "guard": sweep.guard(),
        "verdict": sweep.verdict.settings(),
        "phases": phases,
        "trainer_cmd": trainer_cmd,
        # a memory phase alone (probes that stop at their hold step) runs in probe sessions
        "session": sweep.oom.session and phases.hold_at_step is not None and not phases.then_speed,
    }
    storage_fs, storage_path = filesystem_and_path(out / "ray")  # a URI: Tune syncs there via pyarrow.fs
    placement = PlacementWatch(largest, 0.0 if local else PLACEMENT_PATIENCE_S)
    tuner = tune.Tuner(
        tune.with_resources(trainable, trial_placement(cpus, gpus, has_gpu)),
        tune_config=tune.TuneConfig(
            search_alg=PlanSearcher(todo, config, recorder, decide, placement, order),
            num_samples=-1,
            max_concurrent_trials=sweep.resources.max_concurrent or 0,
            reuse_actors=True,
            trial_dirname_creator=lambda trial: trial.config["trial_key"],
        ),
        run_config=tune.RunConfig(
            name=f"tune-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=storage_path,
            storage_filesystem=storage_fs,
            callbacks=[RecorderCallback(recorder)],
            verbose=0,
            # A trial whose trainable died with its node (a worker lost, its raylet killed) runs again
            # where there is room; the Recorder starts it afresh (its steps so far and its MLflow run
            # dropped), so it is recorded once. A trial's own failure never gets here: the supervisor
            # returns it as the trial's result.
            failure_config=tune.FailureConfig(max_failures=NODE_LOST_RETRIES),
            log_to_file=True,
        ),
    )
    interrupted = False
    try:
        with progress, credentials_kept_from_runtime_env() if local else contextlib.nullcontext():
            tuner.fit()
    except KeyboardInterrupt:
        interrupted = True
    # Ctrl-C: Tune stopped them; a resume runs them again
    recorder.stop_running("interrupted (Ctrl-C); a resumed sweep runs it again")
    return interrupted


def print_frontier(ledger: TrialsTable, console: Console) -> None:
    """The feasibility frontier (orchestrator.views.report.frontier) of every trial in the ledger."""
    if ledger.rows:
        console.print(frontier_table(frontier(ledger.table().to_pandas())))
