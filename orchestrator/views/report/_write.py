"""The entry point: write summary.csv, plots/*.png, report.md and report.html for a sweep's outputs."""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import re
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console

from orchestrator.views.report._configs import aggregate_repeats
from orchestrator.views.report._content import ReportData, build_blocks, learning_sweep, prediction_blocks
from orchestrator.views.report._document import render_markdown
from orchestrator.views.report._feasibility import (
    FRONTIER_COLUMNS,
    feasibility_matrix,
    frontier,
    infer_budget_gib,
)
from orchestrator.views.report._feasibility_tables import matrix_views
from orchestrator.views.report._fitmap import fitmap_blocks, report_fit_map
from orchestrator.views.report._html import render_html
from orchestrator.views.report._learning import learning_table
from orchestrator.views.report._outputs import (
    ORIGINAL_NAMES,
    SweepOutputs,
    load_outputs,
    memory_headroom_gib,
    summary_table,
    trial_steps,
)
from orchestrator.views.report._predictions import error_table, prediction_pairs, terms_table
from orchestrator.views.report._stacks import comparison_view, pair_sentence, stack_comparison, stack_pairs
from orchestrator.views.report._terminal import frontier_table, rich_table
from orchestrator.views.report._verdicts import memory_probes
from trainers import stacks

PLOT_PREFIXES = (
    "feasibility_",
    "fitmap_",
    "curves_",
    "throughput",
    "memory_vs_completions",
    "predicted_vs_measured",
    "learning_curves",
)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# Fewer figures than this are drawn in this process: forking the workers costs more than they save.
PARALLEL_FROM = 4


class ReportDiskFull(OSError):
    """The disk (or quota) filled up while the report was written; the sweep's Parquet files are only
    read by the report, so they are intact."""

    def __init__(self, path: Path, output_dir: Path, cause: OSError):
        try:
            free = f"{shutil.disk_usage(output_dir).free / 2**20:.1f} MiB free"
        except OSError:
            free = "free space unknown"
        self.path = path
        super().__init__(
            cause.errno,
            f"no space left writing the report file {path} ({free} on its filesystem; {cause.strerror}); "
            f"trials.parquet and steps/ are intact. Free some space, then: rlsweep report {output_dir}",
        )


@contextlib.contextmanager
def _space_for(path: Path, output_dir: Path) -> Iterator[Path]:
    """Writes to `path` (a report file of output_dir) inside; a full disk becomes ReportDiskFull."""
    try:
        yield path
    except OSError as exc:
        if exc.errno not in DISK_FULL or isinstance(exc, ReportDiskFull):
            raise
        raise ReportDiskFull(path, output_dir, exc) from exc


def _draw(figures: list[tuple[Path, Callable[[], Path | None]]], output_dir: Path) -> list[Path | None]:
    """Each (path, draw) once, in order: spread over forked worker processes, one per usable core, when
    there are PARALLEL_FROM figures or more and more than one core; else in this process. A full disk
    while one is saved becomes ReportDiskFull naming its file."""
    workers = min(len(figures), len(os.sched_getaffinity(0)))
    if workers < 2 or len(figures) < PARALLEL_FROM:
        drawn = []
        for path, draw in figures:
            with _space_for(path, output_dir):
                drawn.append(draw())
        return drawn
    # fork: the workers start with matplotlib and the data already in memory.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(draw) for _, draw in figures]
        drawn = []
        try:
            for (path, _), future in zip(figures, futures, strict=True):
                with _space_for(path, output_dir):
                    drawn.append(future.result())
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
        return drawn


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80] or "x"


def write_report(
    output_dir: str | Path,
    console: Console | None = None,
    budget_gib: float | None = None,
    outputs: SweepOutputs | None = None,
    base: str = stacks.BASE,
    headroom_gib: float | None = None,
) -> dict:
    """Write summary.csv, report.md, report.html and plots/*.png into output_dir; print the report's
    answer (the frontier, the side-by-side matrices, the stack comparison) to `console`.

    outputs: the sweep's Parquet already loaded (load_outputs(output_dir)), so a caller that needs them
    too reads them once. base: the stack every other is compared against (a registered name).
    headroom_gib: what a fit must leave free under the budget; default the sweep's memory.headroom_gib.
    Returns {"summary_csv", "report_md", "report_html": Path, "prediction_errors_csv":
    Path or None (no trial scored), "plots": [Path, ...]}.
    Raises ReportDiskFull when the disk fills up.
    """
    # matplotlib is imported only when a report is written
    from orchestrator.views.report._plots import (
        feasibility_heatmap,
        fit_map_plot,
        learning_curves_plot,
        memory_plot,
        prediction_plot,
        throughput_plot,
        trial_curves,
    )

    stacks.get(base, field="base")  # an unknown base is refused before anything is written
    console = console or Console()
    outputs = outputs if outputs is not None else load_outputs(output_dir)
    out = outputs.output_dir
    budget = budget_gib if budget_gib is not None else infer_budget_gib(outputs.trials)
    headroom = headroom_gib if headroom_gib is not None else memory_headroom_gib(out)
    summary = summary_table(outputs)
    summary_csv = out / "summary.csv"
    with _space_for(summary_csv, out):
        # the original benchmark's ten columns under its own names (ORIGINAL_NAMES), none of them renamed here
        summary.rename(columns=ORIGINAL_NAMES).to_csv(summary_csv, index=False)

    grids = feasibility_matrix(outputs.trials, budget, headroom)
    plot_dir = out / "plots"
    with _space_for(plot_dir, out):
        plot_dir.mkdir(exist_ok=True)
    for stale in plot_dir.glob("*.png"):  # a rebuilt report shows only what the data holds now
        if stale.name.startswith(PLOT_PREFIXES):
            stale.unlink()
    # Every figure is drawn once, here or in a worker (_draw); report.md and report.html both use its file.
    figures: list[tuple[str, str | None, Path, partial]] = []  # (kind, name, path, draw)
    for grid in grids:
        path = plot_dir / f"feasibility_{_slug(grid.stack)}_{_slug(grid.mode)}_{_slug(grid.model)}.png"
        figures.append(("feasibility", grid.title, path, partial(feasibility_heatmap, grid, path)))
    fit_map = report_fit_map(outputs.trials, budget)
    for model in fit_map.models if fit_map is not None else []:
        path = plot_dir / f"fitmap_{_slug(model)}.png"
        figures.append(("fitmap", model, path, partial(fit_map_plot, fit_map, model, path)))
    ranked = aggregate_repeats(outputs, budget, headroom)
    path = plot_dir / "throughput.png"
    figures.append(("throughput", None, path, partial(throughput_plot, ranked, path)))
    path = plot_dir / "memory_vs_completions.png"
    figures.append(("memory", None, path, partial(memory_plot, outputs, path, budget)))
    pairs = prediction_pairs(outputs.trials, outputs.steps)
    path = plot_dir / "predicted_vs_measured.png"
    figures.append(("predictions", None, path, partial(prediction_plot, pairs, path, budget)))
    path = plot_dir / "learning_curves.png"
    figures.append(
        ("learning", None, path, partial(learning_curves_plot, outputs.trials, outputs.steps, path))
    )
    errors = error_table(pairs)
    prediction_errors_csv = out / "prediction_errors.csv"
    with _space_for(prediction_errors_csv, out):
        prediction_errors_csv.unlink(missing_ok=True)  # a rebuilt report shows only what the data holds now
        if len(errors):
            errors.to_csv(prediction_errors_csv, index=False)
    for _, trial in outputs.trials.iterrows():
        steps = trial_steps(outputs.steps, trial.get("trial_key"))
        if len(steps):
            path = plot_dir / f"curves_{_slug(str(trial['trial_key']))}.png"
            figures.append(
                ("curves", str(trial["trial_key"]), path, partial(trial_curves, trial, steps, path))
            )
    plot_paths: dict[str, Any] = {"feasibility": {}, "fitmap": {}, "curves": {}}
    drawn = _draw([(path, draw) for _, _, path, draw in figures], out)
    for (kind, name, _, _), result in zip(figures, drawn, strict=True):
        if name is None:
            plot_paths[kind] = result
        else:
            plot_paths[kind][name] = result

    fits = (
        frontier(outputs.trials, budget, headroom) if grids else pd.DataFrame(columns=list(FRONTIER_COLUMNS))
    )
    comparison = stack_comparison(ranked, outputs.trials, base)
    predictions = prediction_blocks(pairs, errors, terms_table(outputs.trials), plot_paths["predictions"])
    data = ReportData(
        outputs, summary, ranked, grids, fits, comparison, plot_paths, budget, predictions, base,
        fitmap_blocks(fit_map, plot_paths["fitmap"]),
    )  # fmt: skip
    blocks = build_blocks(data)
    report_md = out / "report.md"
    with _space_for(report_md, out):
        report_md.write_text(render_markdown(blocks, out))
    report_html = out / "report.html"
    with _space_for(report_html, out):
        report_html.write_text(render_html(blocks, f"Sweep report: {outputs.sweep_name}"))

    if not grids:
        console.print(f"No trials in {out / 'trials.parquet'}.")
    elif learning_sweep(data):  # the answer it was run for first, as the report reads
        console.print(rich_table(learning_table(outputs.trials), "Which configuration learns"))
        _print_verdicts(console, outputs.trials)
        _print_answer(console, fits, grids, comparison)
    else:
        _print_answer(console, fits, grids, comparison)
        _print_verdicts(console, outputs.trials)
    console.print(f"Report: {report_html}")
    all_plots = [p for p in [*plot_paths["feasibility"].values(), *plot_paths["fitmap"].values(),
                             plot_paths["throughput"], plot_paths["memory"], plot_paths["predictions"],
                             plot_paths["learning"],
                             *plot_paths["curves"].values()] if p]  # fmt: skip
    return {
        "summary_csv": summary_csv,
        "report_md": report_md,
        "report_html": report_html,
        "prediction_errors_csv": prediction_errors_csv if len(errors) else None,
        "plots": all_plots,
    }


# Trials whose verdict the terminal spells out, per verdict (the report lists them all).
SHOWN_VERDICTS = 3


def _print_verdicts(console: Console, trials: pd.DataFrame) -> None:
    """Does it train: each verdict's count, and the details of the first trials that learn or went wrong.
    A memory-phase row (probe steps only, not a training run) is counted apart, as not judged."""
    if "training_verdict" not in trials:
        return
    verdicts = trials["training_verdict"].notna()
    probe = trials["trial_key"].astype(str).isin(memory_probes(trials))
    judged, probes = trials[verdicts & ~probe], int((verdicts & probe).sum())
    not_judged = f"not judged ({probes} memory probe{'s' if probes != 1 else ''}: probe steps, not training)"
    if judged.empty:
        if probes:
            console.print(f"Training: {not_judged}", markup=False)
        return
    counts = judged["training_verdict"].value_counts()
    words = ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
    console.print(f"Training: {words}" + (f"; {not_judged}" if probes else ""), markup=False)
    for verdict, group in judged.groupby("training_verdict", sort=False):
        if verdict in ("ok", "too_short"):
            continue
        for _, row in group.head(SHOWN_VERDICTS).iterrows():
            console.print(f"  {row['trial_key']}: {row['training_verdict_detail']}", markup=False)


def _print_answer(console: Console, fits, grids, comparison) -> None:
    """The report's first sections on the terminal, the same tables as report.md and report.html."""
    console.print(frontier_table(fits))
    for view in matrix_views(grids):
        console.print(rich_table(view.table, view.model))
        console.print(view.caption, markup=False)  # under the table, the console's width, not the table's
    for base, other, rows in stack_pairs(comparison):
        console.print(rich_table(comparison_view(rows), f"{other} against {base} (ratios {other} ÷ {base})"))
        console.print(pair_sentence(rows), markup=False)
