"""The sweep report: summary.csv, the feasibility frontier and matrices, the stack comparison, plots,
report.md and a self-contained report.html, opening on what fits.

Everything here reads the sweep's Parquet outputs (trials.parquet + steps/stack=*/mode=*/*.parquet)
and nothing else, so a report can be rebuilt at any time (`rlsweep report OUTPUT_DIR`) and works the
same on a sweep that ran elsewhere. Readers are people: units in every header, statuses in words,
JSON columns rendered as a few words or left out.

Modules, each with one job (imports run down this list, never up):
  _outputs      load_outputs, per-trial figures (summary.csv's table, MLflow summary metrics, peaks)
  _configs      configuration columns, the ones that vary, repeats across seeds aggregated
  _feasibility  the feasibility matrix (K x B per stack and model) and the frontier
  _feasibility_tables  both as tables for people (the frontier table, one side-by-side matrix per model)
  _document     the document model (blocks) and its Markdown rendering
  _stacks       every stack against a base (TRL by default): ratios per configuration both ran, which fits where
  _predictions  predicted against measured peak: per-trial pairs, errors by family, MLflow metrics
  _terminal     a table for people as a rich Table (the frontier `rlsweep run` prints)
  _html         the document's HTML rendering with the page's CSS
  _ranked       the fastest configurations that completed, as a table for people
  _trained      what was trained (model and source, task, rewards, lengths, K, B, steps) and the warning
                where completions hit their length limit on most steps
  _content      the report's sections in reading order (SECTIONS), built from the above
  _figure       what every PNG figure shares: colours, resolution, text size, width, its style and saving
  _fitmap_plot  the fit map's PNG figure
  _plots        PNG figures, the fit map's included (matplotlib, imported only when a report is written)
  _write        write_report, the entry point
"""

from orchestrator.views.report._feasibility import frontier
from orchestrator.views.report._outputs import SweepOutputs, load_outputs, summary_metrics, summary_table
from orchestrator.views.report._predictions import prediction_metrics, prediction_pairs, prediction_summary
from orchestrator.views.report._terminal import frontier_table
from orchestrator.views.report._write import ReportDiskFull, write_report

__all__ = [
    "ReportDiskFull",
    "SweepOutputs",
    "frontier",
    "frontier_table",
    "load_outputs",
    "prediction_metrics",
    "prediction_pairs",
    "prediction_summary",
    "summary_metrics",
    "summary_table",
    "write_report",
]
