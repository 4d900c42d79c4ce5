"""The end of a sweep, one path for `rlsweep run` and `rlsweep report`: close the sweep's MLflow run,
write the report, and put the report and each trial's summary metrics on MLflow through the same sink.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from orchestrator.words.storage import StoragePath, is_remote

if TYPE_CHECKING:
    from orchestrator.publishing.tracking import MlflowSink


def finish_sweep(
    output_dir: StoragePath,
    *,
    console: Console,
    mlflow: MlflowSink | None = None,
    counts: dict[str, int] | None = None,
    interrupted: bool = False,
    report: bool = True,
    budget_gib: float | None = None,
    base_stack: str | None = None,
) -> dict | None:
    """counts (trials by status, given when a sweep ran): close the parent run with them. report: write
    report.md/html, summary.csv and plots (orchestrator.views.report.write_report, printing to `console`) and
    log them with `mlflow`; base_stack: the stack the report compares the others against (default: the
    registry's base). Returns write_report's paths, or None when no report was written.
    Raises FileNotFoundError when output_dir holds no trials.parquet."""
    if mlflow is not None and counts is not None:
        mlflow.end_sweep(counts, interrupted)
    paths = _report(output_dir, console, mlflow, budget_gib, base_stack) if report else None
    if mlflow is not None and mlflow.enabled and mlflow.runs_url():
        console.print(f"MLflow runs: {mlflow.runs_url()}{ui_hint(mlflow.uri)}", markup=False)
    return paths


def _report(
    output_dir: StoragePath, console: Console, mlflow: MlflowSink | None, budget_gib, base_stack: str | None
) -> dict | None:
    if is_remote(output_dir):
        console.print(
            f"report: reports read a local folder; copy {output_dir} down, then `rlsweep report DIR`"
        )
        return None
    from orchestrator.views.report import (  # matplotlib only when a report is written
        load_outputs,
        write_report,
    )

    console.print(f"writing the report (tables, plots, report.html) in {output_dir} ...", markup=False)
    outputs = load_outputs(output_dir)  # read once, for the report and for MLflow's best figures
    base = {"base": base_stack} if base_stack else {}
    paths = write_report(output_dir, console=console, budget_gib=budget_gib, outputs=outputs, **base)
    if mlflow is not None and mlflow.enabled:
        mlflow.log_report(paths, outputs)
    return paths


def ui_hint(uri: str) -> str:
    """How to serve a sqlite store's UI: `make ui` (outputs/mlflow.db), with MLFLOW_STORE for another."""
    if not uri.startswith("sqlite:///"):
        return ""
    if Path(uri[len("sqlite:///") :]) == Path("outputs/mlflow.db").resolve():
        return " (serve it: make ui)"
    return f" (serve it: make ui MLFLOW_STORE={uri})"
