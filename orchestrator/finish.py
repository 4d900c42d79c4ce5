"""The end of a sweep, one path for `rlsweep run` and `rlsweep report`: close the sweep's MLflow run,
write the report, and put the report and each trial's summary metrics on MLflow through the same sink.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from orchestrator.storage import StoragePath, is_remote

if TYPE_CHECKING:
    from orchestrator.tracking import MlflowSink


def finish_sweep(
    output_dir: StoragePath,
    *,
    console: Console,
    mlflow: MlflowSink | None = None,
    counts: dict[str, int] | None = None,
    interrupted: bool = False,
    report: bool = True,
    budget_gib: float | None = None,
) -> dict | None:
    """counts (trials by status, given when a sweep ran): close the parent run with them. report: write
    report.md/html, summary.csv and plots (orchestrator.report.write_report, printing to `console`) and
    log them with `mlflow`. Returns write_report's paths, or None when no report was written.
    Raises FileNotFoundError when output_dir holds no trials.parquet."""
    if mlflow is not None and counts is not None:
        mlflow.end_sweep(counts, interrupted)
    if not report:
        return None
    if is_remote(output_dir):
        console.print(
            f"report: reports read a local folder; copy {output_dir} down, then `rlsweep report DIR`"
        )
        return None
    from orchestrator.report import load_outputs, write_report  # matplotlib only when a report is written

    outputs = load_outputs(output_dir)  # read once, for the report and for MLflow's summary metrics
    paths = write_report(output_dir, console=console, budget_gib=budget_gib, outputs=outputs)
    if mlflow is not None and mlflow.enabled:
        mlflow.log_report(paths, outputs)
    return paths
