"""`rlsweep sync-mlflow`: log to MLflow what Parquet has and MLflow lacks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from orchestrator.cli._common import out
from trainers.record import renamed_row
from trainers.trial import TrialSpec


def cmd_sync_mlflow(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    from orchestrator.publishing.tracking import MlflowSink
    from orchestrator.recording.sinks import written_steps_path
    from orchestrator.spec.load import load_sweep

    output = Path(args.output_dir).resolve()
    for name in ("trials.parquet", "sweep.yaml"):
        if not (output / name).exists():
            out.print(f"{output}: no {name}; give a sweep's output dir (it holds both)", markup=False)
            return 2
    sweep = load_sweep(output / "sweep.yaml")
    uri = args.tracking_uri or sweep.tracking_uri(output)
    sink = MlflowSink(uri, sweep.experiment_name(), output, sweep.name, goes_on="the sync stops")
    sink.start_sweep((output / "sweep.yaml").read_text())
    logged = present = 0
    for row in map(renamed_row, pq.read_table(output / "trials.parquet").to_pylist()):
        if not sink.enabled:
            break
        if sink.has_complete_run(row["trial_key"]):
            present += 1
            continue
        spec = TrialSpec.from_dict(json.loads(row["config"]))
        path = written_steps_path(output, spec)
        steps = pq.read_table(path).to_pylist() if path.exists() else []
        sink.log_whole_trial(spec, row, steps, path)
        logged += sink.enabled
    if sink.enabled:
        statuses = {}
        for row in pq.read_table(output / "trials.parquet", columns=["status"]).to_pylist():
            statuses[row["status"]] = statuses.get(row["status"], 0) + 1
        sink.end_sweep(statuses, interrupted=False)
    if not sink.enabled:
        out.print(f"MLflow at {uri} failed: {sink.error}", markup=False)
        return 1
    out.print(f"{uri}: logged {logged} trial run(s), {present} already there", markup=False)
    return 0


def add_sync_mlflow(sub) -> None:
    p = sub.add_parser("sync-mlflow", help="log to MLflow what a sweep's Parquet holds and MLflow lacks")
    p.add_argument("output_dir", help="a sweep's output dir (holds trials.parquet and sweep.yaml)")
    p.add_argument(
        "--tracking-uri",
        help="default: the sweep's tracking.mlflow_uri, else MLFLOW_TRACKING_URI, else mlflow.db next to "
        "the output dir",
    )
    p.set_defaults(func=cmd_sync_mlflow)
