"""The Ray Tune glue of a sweep: the trainable (the supervisor, inside a Ray worker), the searcher that
hands Tune the planned trials in order, and the callback that forwards Tune's trial events to the
Recorder in the driver.

Tune reuses an actor for the next trial of the same resources (reuse_actors): the worker holds no CUDA
or trainer state itself. Every trial's trainer is a fresh child process (orchestrator/running/supervisor.py),
except in a memory phase with oom.session on: there the worker keeps one probe session's child
(orchestrator/running/session.py), and the next probe of the same model and stack Tune gives it runs in
that child, without loading the model again.

The trial order and skips are in PlanSearcher (a Tune Searcher): Tune's schedulers cannot hold back
PENDING trials, a Searcher can. `decide(spec)` answers RUN, HOLD (ask again later) or a pruning
detail string (orchestrator.judging.pruning.OomGate by default, docs/oom.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.tune import Callback
from ray.tune.execution.placement_groups import PlacementGroupFactory
from ray.tune.search import Searcher

from orchestrator.judging.frontier import skip_status
from orchestrator.judging.pruning import HOLD, RUN
from orchestrator.judging.verdict import stop_check
from orchestrator.recording.recorder import Recorder
from orchestrator.running.session import in_session
from orchestrator.running.supervisor import run_trial
from orchestrator.words.outcome import FAILED, UNAVAILABLE, TrialResult
from trainers.events import STEP
from trainers.trial import TrialSpec

# How long a trial no node can host waits for the cluster to grow (an autoscaler) before it ends
# `unavailable`; a local Ray does not grow, so it does not wait.
PLACEMENT_PATIENCE_S = 120.0

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
    run = in_session if config.get("session") else run_trial  # a probe session (oom.session) or a child
    try:
        result = run(
            spec,
            trial_dir=Path(config["trials_dir"]) / spec.trial_key,
            guard=config["guard"],
            on_event=relay,
            cuda_visible_devices=devices,
            cpus=config["cpus"],
            stop_check=stop_check(config["verdict"]),
            phases=config["phases"],
            stop_event=relay.failed,
            trainer_cmd=config.get("trainer_cmd"),
        )
    finally:
        relay.close()  # its thread ends however run_trial did: a reused worker keeps no stray thread
    # The step rows went to Tune one by one (the relay): the result goes without them, so each row
    # crosses the Ray boundary once; the Recorder keeps the rows it was streamed.
    tune.report(final_payload(result))


# What crosses the Ray boundary: a step row, or the final result, as one JSON string each. Tune keeps,
# for every trial to the end of the sweep, running statistics of each number a report holds (its
# metric analysis: min, max, mean, the last 5 and 10 values); rows as nested dicts gave it some hundred
# numbers per trial, about 0.1 MB each trial in the driver. A string is kept as the last result only.
def step_payload(row: dict[str, Any]) -> dict[str, Any]:
    return {"kind": STEP, "row": json.dumps(row, default=str)}


def final_payload(result: TrialResult) -> dict[str, Any]:
    return {"kind": FINAL, "result": json.dumps({**result.to_dict(), "steps": []}, default=str)}


def payload_row(payload: dict[str, Any]) -> dict[str, Any]:
    """The step row, or the final result's fields, of a report made by step_payload / final_payload."""
    value = payload["row" if payload["kind"] == STEP else "result"]
    return json.loads(value) if isinstance(value, str) else value


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
                self.report(step_payload(row))
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


class _Live:
    """Tuner pickles its searcher and callbacks into its experiment folder (tuner.pkl, for
    Tuner.restore, which rlsweep does not use: the ledger is the resume state). What they hold live (the
    recorder with its consoles, locks and MLflow client; the gate; the placement watch) stays out of
    that copy: the copy is inert."""

    LIVE: tuple[str, ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in self.LIVE}


class PlanSearcher(_Live, Searcher):
    """Hands Tune the planned trials in order; asks `decide` first (run, hold, or a skip: a pruning
    detail, or an orchestrator.judging.frontier.Skip that names its status), and `placement` whether any
    node can host a trial at all. `order`, where given, reorders the pending trials before each pass
    (the frontier search's bisection order: OomGate.order)."""

    LIVE = ("recorder", "decide", "placement", "order")

    def __init__(
        self,
        trials: list[TrialSpec],
        config: dict[str, Any],
        recorder: Recorder,
        decide: Decider,
        placement: Callable[[], str],
        order: Callable[[list[TrialSpec]], list[TrialSpec]] | None = None,
    ):
        super().__init__()
        self.queue = list(trials)
        self.config = config
        self.recorder = recorder
        self.decide = decide
        self.placement = placement
        self.order = order

    def suggest(self, trial_id: str):
        placement = self.placement()
        if placement == HOLD:
            return None
        if placement != RUN:  # no node can host any trial of the sweep (they all ask alike)
            for spec in self.queue:
                self.recorder.skip(spec, placement, UNAVAILABLE)
            self.queue.clear()
            return Searcher.FINISHED
        for spec in self.order(list(self.queue)) if self.order else list(self.queue):
            verdict = self.decide(spec)
            if verdict == HOLD:
                continue
            self.queue.remove(spec)
            if verdict == RUN:
                return {"trial_key": spec.trial_key, "spec_json": spec.to_json(), **self.config}
            status, implied_by = skip_status(verdict)
            self.recorder.skip(spec, verdict, status, implied_by)
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
class RecorderCallback(_Live, Callback):
    """Forwards Tune's trial events to the Recorder (orchestrator/recording/recorder.py) living in the driver."""

    LIVE = ("recorder",)

    def __init__(self, recorder: Recorder):
        self.recorder = recorder

    def on_trial_start(self, iteration, trials, trial, **info):
        self.recorder.start(trial.config["trial_key"])

    def on_trial_result(self, iteration, trials, trial, result, **info):
        key = trial.config["trial_key"]
        if result.get("kind") == STEP:
            self.recorder.step(key, payload_row(result))
        elif result.get("kind") == FINAL:
            self.recorder.end(key, TrialResult(**payload_row(result)))

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
# What a trial holds
# ------------------------------------------------------------------------------------------------
def trial_request(spec: TrialSpec, cpus: int, gpus: float, has_gpu: bool) -> dict[str, float]:
    """Ray's resources for one trial: its CPUs, and where the cluster has GPUs, `gpus` (a fraction for
    packed memory-phase trials) or one whole GPU per rank for a trial over several ranks."""
    request: dict[str, float] = {"CPU": cpus}
    held = spec.num_processes if spec.num_processes > 1 else gpus
    if has_gpu and held:
        request["GPU"] = held
    return request


def trial_placement(
    cpus: int, gpus: float, has_gpu: bool
) -> Callable[[dict[str, Any]], PlacementGroupFactory]:
    """Tune's resources per trial (its config names its spec): one bundle, so a trial's GPUs (one per
    rank) are on one node; trials across nodes are not supported."""

    def placement(config: dict[str, Any]) -> PlacementGroupFactory:
        spec = TrialSpec.from_dict(json.loads(config["spec_json"]))
        return PlacementGroupFactory([trial_request(spec, cpus, gpus, has_gpu)], strategy="PACK")

    return placement


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
