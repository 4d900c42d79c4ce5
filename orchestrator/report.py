"""The sweep report: summary.csv, the feasibility matrix, plots, report.md and a self-contained report.html.

Everything here reads the sweep's Parquet outputs (trials.parquet + steps/framework=*/mode=*/*.parquet)
and nothing else, so a report can be rebuilt at any time (`rlsweep report OUTPUT_DIR`) and works the
same on a sweep that ran elsewhere. Readers are people: units in every header, statuses in words,
JSON columns rendered as a few words or left out.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

STATUSES = ("completed", "oom", "pruned", "failed", "unavailable", "stopped")
STATUS_WORDS = {
    "completed": "completed",
    "oom": "out of memory",
    "pruned": "skipped (pruned)",
    "failed": "failed",
    "unavailable": "unavailable",
    "stopped": "stopped",
}
# Short cell labels of the feasibility matrix; when a cell holds several outcomes the first listed wins.
CELL_LABELS = {
    "oom": "OOM",
    "failed": "failed",
    "stopped": "stopped",
    "unavailable": "unavailable",
    "pruned": "pruned",
}

# The original benchmark's summary columns, in its order (ours measured where it estimated).
ORIGINAL_COLUMNS = [
    "run_name",
    "framework",
    "mode",
    "num_generations",
    "batch_size",
    "seed",
    "step_count",
    "avg_step_time_sec",
    "avg_estimated_tokens_per_sec",
    "peak_cuda_memory_allocated_gb",
]
EXTRA_COLUMNS = [
    "status",
    "status_detail",
    "peak_device_gib",
    "median_tokens_per_s",
    "p10_tokens_per_s",
    "p90_tokens_per_s",
    "model",
    "task",
    "micro_batch_size",
    "max_completion_length",
    "peak_rss_gib",
    "median_step_s",
    "final_reward",
    "wall_s",
]
SUMMARY_COLUMNS = ORIGINAL_COLUMNS + EXTRA_COLUMNS

# Columns that define a configuration; trials equal on all of them (and on effective_config, less
# per-trial bookkeeping) differ only in seed and are aggregated as repeats.
CONFIG_COLUMNS = [
    "framework",
    "mode",
    "model",
    "task",
    "num_generations",
    "batch_size",
    "micro_batch_size",
    "max_prompt_length",
    "max_completion_length",
    "quantization",
    "dtype",
    "lora_r",
    "max_steps",
]
CONFIG_WORDS = {
    "model": "Model",
    "task": "Task",
    "micro_batch_size": "Micro-batch",
    "max_prompt_length": "Prompt tokens (max)",
    "max_completion_length": "Completion tokens (max)",
    "quantization": "Quantization",
    "dtype": "Dtype",
    "lora_r": "LoRA r",
    "max_steps": "Steps",
}
PLOT_PREFIXES = ("feasibility_", "curves_", "throughput", "memory_vs_completions")
PER_TRIAL_KEYS = {"seed", "trial_key", "sweep", "output_dir", "events_path", "model_cache_dir", "num_threads"}
# Effective-config entries that follow from the framework or mode columns, or only describe a stack's
# internals: listing them as "other settings" would repeat those columns in noisier words.
STACK_KEYS = {
    "importance_sampling_level",
    "fast_inference",
    "gpu_memory_utilization",
    "trainer_class",
    "unsloth_backend",
    "unsloth_changed_config",
}

STEP_NUMERIC = [
    "step_s",
    "tokens_per_s",
    "torch_peak_allocated_gib",
    "device_peak_gib",
    "rss_gib",
    "rss_peak_gib",
    "reward_mean",
    "reward_std",
    "loss",
    "completion_len_mean",
    "completion_len_max",
]
TRIAL_NUMERIC = [
    "num_generations",
    "batch_size",
    "micro_batch_size",
    "max_prompt_length",
    "max_completion_length",
    "lora_r",
    "seed",
    "max_steps",
    "steps_completed",
    "peak_device_gib",
    "peak_torch_reserved_gib",
    "peak_rss_gib",
    "median_step_s",
    "median_tokens_per_s",
    "wall_s",
    "gpu_total_gib",
]


# ----------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------
@dataclass
class SweepOutputs:
    output_dir: Path
    trials: pd.DataFrame
    steps: pd.DataFrame
    warnings: list[str] = field(default_factory=list)

    @property
    def sweep_name(self) -> str:
        names = self.trials["sweep"].dropna().unique() if "sweep" in self.trials else []
        return str(names[0]) if len(names) == 1 else self.output_dir.name


def load_outputs(output_dir: str | Path) -> SweepOutputs:
    """Read trials.parquet and every steps file; a step file that cannot be read becomes a warning."""
    out = Path(output_dir)
    trials_path = out / "trials.parquet"
    if not trials_path.is_file():
        raise FileNotFoundError(
            f"output_dir: no trials.parquet in {out}; give the folder a sweep wrote "
            f"(`rlsweep run SWEEP.yaml` writes outputs/<sweep>/trials.parquet)"
        )
    trials = _numeric(pq.read_table(trials_path).to_pandas(), TRIAL_NUMERIC)
    frames, warnings = [], []
    # Names starting with '.' are in-flight temp files of the atomic writer: skip them.
    for path in sorted(out.glob("steps/framework=*/mode=*/*.parquet")):
        if path.name.startswith("."):
            continue
        try:
            frames.append(pq.read_table(path).to_pandas())
        except Exception as exc:  # a broken file must not hide the rest of the sweep
            warnings.append(f"could not read {path.relative_to(out)}: {exc}")
    frames = [f for f in frames if len(f)]
    steps = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["trial_key", "step", "probe"])
    )
    steps = _numeric(steps, STEP_NUMERIC + ["step"])
    steps["probe"] = (
        steps["probe"].astype("boolean").fillna(False).astype(bool) if "probe" in steps else False
    )
    return SweepOutputs(out, trials, steps, warnings)


def _numeric(df: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    # All-null columns arrive as object dtype; NaN keeps "not measured" distinct from 0.
    df = df.copy()
    for col in df.columns:  # hive partitions and dictionary-encoded strings arrive as Categorical
        if isinstance(df[col].dtype, pd.CategoricalDtype):
            df[col] = df[col].astype(object)
    for col in columns:
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df else np.nan
    return df


def _parse_json(value: Any) -> dict:
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or not value.strip():
        return {}
    try:
        parsed = json.loads(value)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# ----------------------------------------------------------------------------------------------
# Per-trial figures
# ----------------------------------------------------------------------------------------------
def measured_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Steps that measure speed: probe steps force max-length completions, so they are left out
    unless a trial has nothing else."""
    if steps.empty or "probe" not in steps:
        return steps
    regular = steps[~steps["probe"].astype(bool)]
    return regular if len(regular) else steps


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(df[name], errors="coerce").dropna() if name in df else pd.Series(dtype=float)


def _stat(series: pd.Series, how: str) -> float:
    if series.empty:
        return float("nan")
    if how == "mean":
        return float(series.mean())
    if how == "max":
        return float(series.max())
    return float(series.quantile({"median": 0.5, "p10": 0.1, "p90": 0.9}[how]))


def _trial_steps(steps: pd.DataFrame, trial_key: Any) -> pd.DataFrame:
    if steps.empty or "trial_key" not in steps:
        return steps.iloc[0:0]
    return steps[steps["trial_key"] == trial_key]


def peak_memory(
    trial_row: pd.Series | dict, steps: pd.DataFrame | None = None
) -> tuple[float | None, str | None]:
    """(peak GiB, kind): the device peak on GPU, else the process RSS peak (CPU), else (None, None)."""
    steps = steps if steps is not None else pd.DataFrame()
    device = _finite(trial_row.get("peak_device_gib"))
    if device is None:
        device = _finite(_stat(_col(steps, "device_peak_gib"), "max"))
    if device is not None:
        return device, "GPU"
    rss = _finite(trial_row.get("peak_rss_gib"))
    if rss is None:
        rss = _finite(_stat(pd.concat([_col(steps, "rss_peak_gib"), _col(steps, "rss_gib")]), "max"))
    return (rss, "RSS") if rss is not None else (None, None)


def final_reward(steps: pd.DataFrame) -> float | None:
    if steps.empty or "reward_mean" not in steps:
        return None
    ordered = steps.sort_values("step") if "step" in steps else steps
    rewards = pd.to_numeric(ordered["reward_mean"], errors="coerce").dropna()
    return _finite(rewards.iloc[-1]) if len(rewards) else None


def summary_metrics(trial_row: pd.Series | dict, steps_df: pd.DataFrame | None) -> dict[str, float]:
    """Numbers for a trial's MLflow run, so its run table and compare view sort and chart by them.

    Only measured values appear: an unmeasurable figure (device memory on CPU) is left out, not 0.
    """
    steps = steps_df if steps_df is not None else pd.DataFrame()
    if "trial_key" in steps and trial_row.get("trial_key") is not None:
        steps = _trial_steps(steps, trial_row.get("trial_key"))
    steps = _numeric(steps, STEP_NUMERIC + ["step"])
    speed = measured_steps(steps)
    peak, kind = peak_memory(trial_row, steps)
    tokens = _col(speed, "tokens_per_s")
    step_s = _col(speed, "step_s")
    metrics = {
        "peak_memory_gib": peak,
        "peak_device_gib": _finite(trial_row.get("peak_device_gib")) if kind == "GPU" else None,
        "peak_rss_gib": _finite(trial_row.get("peak_rss_gib")),
        "peak_torch_allocated_gib": _finite(_stat(_col(steps, "torch_peak_allocated_gib"), "max")),
        "median_tokens_per_s": _finite(_stat(tokens, "median"))
        or _finite(trial_row.get("median_tokens_per_s")),
        "median_step_s": _finite(_stat(step_s, "median")) or _finite(trial_row.get("median_step_s")),
        "final_reward": final_reward(steps),
        "steps_completed": _finite(trial_row.get("steps_completed")),
    }
    return {name: value for name, value in metrics.items() if value is not None}


def summary_table(outputs: SweepOutputs) -> pd.DataFrame:
    """One row per trial (every status): the original benchmark's ten columns first, then ours."""
    rows = []
    for _, trial in outputs.trials.iterrows():
        steps = _trial_steps(outputs.steps, trial.get("trial_key"))
        speed = measured_steps(steps)
        tokens = _col(speed, "tokens_per_s")
        steps_completed = _finite(trial.get("steps_completed"))
        peak, kind = peak_memory(trial, steps)
        rows.append(
            {
                "run_name": trial.get("trial_key"),
                "framework": trial.get("framework"),
                "mode": trial.get("mode"),
                "num_generations": trial.get("num_generations"),
                "batch_size": trial.get("batch_size"),
                "seed": trial.get("seed"),
                "step_count": steps_completed if steps_completed is not None else len(steps),
                "avg_step_time_sec": _stat(_col(speed, "step_s"), "mean"),
                "avg_estimated_tokens_per_sec": _stat(tokens, "mean"),
                "peak_cuda_memory_allocated_gb": _stat(_col(steps, "torch_peak_allocated_gib"), "max"),
                "status": trial.get("status"),
                "status_detail": trial.get("status_detail"),
                "peak_device_gib": peak if kind == "GPU" else np.nan,
                "median_tokens_per_s": _stat(tokens, "median")
                if len(tokens)
                else trial.get("median_tokens_per_s"),
                "p10_tokens_per_s": _stat(tokens, "p10"),
                "p90_tokens_per_s": _stat(tokens, "p90"),
                "model": trial.get("model"),
                "task": trial.get("task"),
                "micro_batch_size": trial.get("micro_batch_size"),
                "max_completion_length": trial.get("max_completion_length"),
                "peak_rss_gib": peak if kind == "RSS" else trial.get("peak_rss_gib"),
                "median_step_s": _stat(_col(speed, "step_s"), "median")
                if len(speed)
                else trial.get("median_step_s"),
                "final_reward": final_reward(steps),
                "wall_s": trial.get("wall_s"),
            }
        )
    table = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    for col in (
        "num_generations",
        "batch_size",
        "seed",
        "step_count",
        "micro_batch_size",
        "max_completion_length",
    ):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("Int64")
    return table


# ----------------------------------------------------------------------------------------------
# Repeats across seeds
# ----------------------------------------------------------------------------------------------
def _config_identity(trial: pd.Series) -> str:
    config = {col: _plain(trial.get(col)) for col in CONFIG_COLUMNS}
    extra = {k: v for k, v in _parse_json(trial.get("effective_config")).items() if k not in PER_TRIAL_KEYS}
    return json.dumps({**extra, **config}, sort_keys=True, default=str)


def _plain(value: Any) -> Any:
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def aggregate_repeats(outputs: SweepOutputs) -> pd.DataFrame:
    """Completed trials grouped by configuration (all but the seed), fastest first.

    tokens/s median, p10 and p90 are taken over the measured steps of every seed together, so one seed
    still shows its step-to-step spread; trials without step rows fall back to their own median.
    """
    trials = outputs.trials
    done = trials[trials["status"] == "completed"].copy() if "status" in trials else trials.iloc[0:0]
    columns = [*CONFIG_COLUMNS, "other", "seeds", "trial_keys", "tokens_median", "tokens_p10", "tokens_p90",
               "step_s_median", "peak_gib", "memory_kind", "final_reward"]  # fmt: skip
    if done.empty:
        return pd.DataFrame(columns=columns)
    done["_identity"] = done.apply(_config_identity, axis=1)
    varying_extra = _varying_effective_keys(done)
    rows = []
    for _, group in done.groupby("_identity", sort=False):
        first = group.iloc[0]
        keys = list(group["trial_key"])
        speed = measured_steps(
            outputs.steps[outputs.steps["trial_key"].isin(keys)]
            if "trial_key" in outputs.steps
            else outputs.steps
        )
        tokens = _col(speed, "tokens_per_s")
        if tokens.empty:
            tokens = _col(group, "median_tokens_per_s")
        step_s = _col(speed, "step_s")
        if step_s.empty:
            step_s = _col(group, "median_step_s")
        peaks = [peak_memory(t, _trial_steps(outputs.steps, t["trial_key"])) for _, t in group.iterrows()]
        kinds = {kind for _, kind in peaks if kind}
        values = [value for value, _ in peaks if value is not None]
        rewards = [final_reward(_trial_steps(outputs.steps, k)) for k in keys]
        rewards = [r for r in rewards if r is not None]
        extra = _parse_json(first.get("effective_config"))
        rows.append(
            {
                **{col: first.get(col) for col in CONFIG_COLUMNS},
                "other": ", ".join(f"{k.replace('_', ' ')} {extra.get(k)}" for k in varying_extra),
                "seeds": ", ".join(str(_plain(s)) for s in sorted(group["seed"].dropna().unique())),
                "trial_keys": keys,
                "tokens_median": _stat(tokens, "median"),
                "tokens_p10": _stat(tokens, "p10"),
                "tokens_p90": _stat(tokens, "p90"),
                "step_s_median": _stat(step_s, "median"),
                "peak_gib": max(values) if values else np.nan,
                "memory_kind": "GPU" if "GPU" in kinds else ("RSS" if kinds else None),
                "final_reward": float(np.median(rewards)) if rewards else np.nan,
            }
        )
    ranked = pd.DataFrame(rows, columns=columns)
    return ranked.sort_values("tokens_median", ascending=False, na_position="last").reset_index(drop=True)


def _varying_effective_keys(trials: pd.DataFrame) -> list[str]:
    configs = [_parse_json(v) for v in trials.get("effective_config", pd.Series(dtype=object))]
    keys = sorted({k for c in configs for k in c} - PER_TRIAL_KEYS - STACK_KEYS - set(CONFIG_COLUMNS))
    return [k for k in keys if len({json.dumps(c.get(k), sort_keys=True, default=str) for c in configs}) > 1]


def varying_config_columns(frame: pd.DataFrame, exclude: Iterable[str] = ()) -> list[str]:
    """Configuration columns whose value differs between rows (worth a column in a table)."""
    skip = set(exclude)
    if "micro_batch_size" in frame and "num_generations" in frame and "batch_size" in frame:
        # The default micro-batch is B×K: it varies with them but says nothing new.
        default = frame["micro_batch_size"].isna() | (
            frame["micro_batch_size"] == frame["num_generations"] * frame["batch_size"]
        )
        if default.all():
            skip.add("micro_batch_size")
    return [
        col
        for col in CONFIG_COLUMNS
        if col in frame and col not in skip and frame[col].astype(str).nunique(dropna=False) > 1
    ]


# ----------------------------------------------------------------------------------------------
# Feasibility matrix
# ----------------------------------------------------------------------------------------------
@dataclass
class FeasibilityGrid:
    """One (framework, mode, model): rows K, columns batch; labels for people, values for colour."""

    framework: str
    mode: str
    model: str
    memory_kind: str | None  # "GPU" (device peak) or "RSS" (process peak on CPU)
    labels: pd.DataFrame  # str: "12.3 GiB", "OOM", "pruned", ... ; "" where no trial ran
    values: pd.DataFrame  # float GiB for cells with a completed trial, NaN elsewhere
    statuses: pd.DataFrame  # the cell's outcome: a status, or "" where no trial ran
    budget_gib: float | None = None

    @property
    def title(self) -> str:
        return f"{self.framework} · {self.mode} · {self.model}"

    @property
    def memory_words(self) -> str:
        if self.memory_kind == "GPU":
            return "peak GPU memory (GiB)"
        if self.memory_kind == "RSS":
            return "peak process memory, RSS (GiB; CPU run, no GPU)"
        return "peak memory (GiB)"

    def fits(self, k: Any, b: Any) -> bool:
        value = self.values.loc[k, b]
        return self.budget_gib is not None and pd.notna(value) and value <= self.budget_gib


def infer_budget_gib(trials: pd.DataFrame) -> float | None:
    """The memory budget a sweep ran under: the emulated budget if one was set, else the GPU's size."""
    from_rows = (_finite(v) for v in trials.get("memory_budget_gib", []))
    from_config = (
        _finite(_parse_json(v).get("memory_budget_gib")) for v in trials.get("effective_config", [])
    )
    budgets = {b for b in (*from_rows, *from_config) if b}
    if len(budgets) == 1:
        return budgets.pop()
    totals = _col(trials, "gpu_total_gib")
    return float(totals.min()) if len(totals) else None


def feasibility_matrix(trials_df: pd.DataFrame, budget_gib: float | None = None) -> list[FeasibilityGrid]:
    """Per (framework, mode, model): rows K, columns batch, cells peak GiB or the outcome in a word."""
    trials = _numeric(trials_df, TRIAL_NUMERIC)
    if trials.empty:
        return []
    trials["model"] = trials["model"].fillna("?").astype(str)
    grids = []
    for (framework, mode, model), group in trials.groupby(["framework", "mode", "model"], sort=True):
        ks = sorted(int(k) for k in group["num_generations"].dropna().unique())
        bs = sorted(int(b) for b in group["batch_size"].dropna().unique())
        labels = pd.DataFrame("", index=ks, columns=bs, dtype=object)
        statuses = pd.DataFrame("", index=ks, columns=bs, dtype=object)
        values = pd.DataFrame(np.nan, index=ks, columns=bs, dtype=float)
        kind = (
            "GPU"
            if group["peak_device_gib"].notna().any()
            else ("RSS" if group["peak_rss_gib"].notna().any() else None)
        )
        for (k, b), cell in group.groupby(["num_generations", "batch_size"]):
            status, value, label = _cell(cell, kind)
            labels.loc[int(k), int(b)], statuses.loc[int(k), int(b)] = label, status
            values.loc[int(k), int(b)] = value
        for frame in (labels, values, statuses):
            frame.index.name, frame.columns.name = "K", "B"
        grids.append(
            FeasibilityGrid(str(framework), str(mode), str(model), kind, labels, values, statuses, budget_gib)
        )
    return grids


def _cell(cell: pd.DataFrame, kind: str | None) -> tuple[str, float, str]:
    counts = cell["status"].value_counts()
    completed = cell[cell["status"] == "completed"]
    if len(completed):
        column = "peak_device_gib" if kind == "GPU" else "peak_rss_gib"
        peaks = completed[column].dropna()
        value = float(peaks.max()) if len(peaks) else np.nan
        label = f"{value:.2f} GiB" if len(peaks) else "completed"
        failures = [f"{counts[s]} {CELL_LABELS[s]}" for s in CELL_LABELS if s in counts]
        if failures:
            label += f" (+{', '.join(failures)})"
        return "completed", value, label
    for status, word in CELL_LABELS.items():
        if status in counts:
            return status, np.nan, word
    return str(cell["status"].iloc[0]), np.nan, str(cell["status"].iloc[0])


CELL_STYLES = {
    "oom": "bold red",
    "pruned": "magenta",
    "failed": "bold yellow",
    "unavailable": "dim",
    "stopped": "cyan",
}


def feasibility_tables(grids: list[FeasibilityGrid]) -> list[Table]:
    """rich tables of the matrix: green fits the budget, yellow ran but over it, red out of memory."""
    tables = []
    for grid in grids:
        title, caption = f"{grid.title}: {grid.memory_words}", _budget_caption(grid)
        # Wide enough that the title and caption do not wrap into a narrow column.
        table = Table(title=title, caption=caption, min_width=max(len(title), len(caption)) + 2)
        table.add_column("K \\ B", justify="right", style="bold")
        for b in grid.labels.columns:
            table.add_column(f"B={b}", justify="right")
        for k in grid.labels.index:
            cells = []
            for b in grid.labels.columns:
                label, status = grid.labels.loc[k, b], grid.statuses.loc[k, b]
                if status == "completed":
                    style = "green" if grid.budget_gib is None or grid.fits(k, b) else "yellow"
                else:
                    style = CELL_STYLES.get(status, "")
                cells.append(f"[{style}]{label}[/]" if style and label else (label or "·"))
            table.add_row(f"K={k}", *cells)
        tables.append(table)
    return tables


def _budget_caption(grid: FeasibilityGrid) -> str:
    if grid.budget_gib is None:
        return "no memory budget known: pass budget_gib to mark what fits"
    fitting = sum(grid.fits(k, b) for k in grid.values.index for b in grid.values.columns)
    ran = int((grid.statuses != "").to_numpy().sum())
    return f"fits in {grid.budget_gib:g} GiB: {fitting} of {ran} configurations"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


# ----------------------------------------------------------------------------------------------
# Document: one list of blocks rendered both as Markdown and as HTML
# ----------------------------------------------------------------------------------------------
@dataclass
class Block:
    kind: str  # "h1", "h2", "h3", "p", "table", "image", "details"
    text: str = ""
    table: pd.DataFrame | None = None
    path: Path | None = None
    children: list[Block] = field(default_factory=list)


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)) or value is pd.NA:
        return "—"
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if abs(number) >= 100:
            return f"{number:,.0f}"
        return f"{number:.{digits}f}"
    return str(value)


def _shorten(text: Any, limit: int = 180) -> str:
    words = " ".join(str(text or "").split())
    return words if len(words) <= limit else words[: limit - 1] + "…"


def _md_table(df: pd.DataFrame) -> str:
    def cell(v: Any) -> str:
        return _fmt(v).replace("|", "\\|")

    head = "| " + " | ".join(cell(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


# Numbers, ranges ("72.9–90.0"), sizes ("4.3 GiB"), lists of seeds ("1, 2") and "—" align right; words left.
NUMERIC_CELL = re.compile(r"—|-?[\d.,]+(–-?[\d.,]+)?( GiB)?( \(RSS\))?|\d+(, \d+)*")


def _html_table(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = []
    for row in df.itertuples(index=False):
        cells = []
        for v in row:
            text = _fmt(v)
            css = " ".join(c for c in (_status_css(text), "num" if NUMERIC_CELL.fullmatch(text) else "") if c)
            cells.append(
                f'<td class="{css}">{html.escape(text)}</td>' if css else f"<td>{html.escape(text)}</td>"
            )
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _status_css(text: str) -> str:
    lowered = text.lower()
    for word, css in (("out of memory", "oom"), ("oom", "oom"), ("failed", "failed"), ("pruned", "pruned")):
        if lowered.startswith(word):
            return css
    return ""


def render_markdown(blocks: list[Block], base: Path) -> str:
    parts = []
    for block in blocks:
        if block.kind in ("h1", "h2", "h3"):
            parts.append("#" * int(block.kind[1]) + " " + block.text)
        elif block.kind == "p":
            parts.append(block.text)
        elif block.kind == "table" and block.table is not None:
            parts.append(_md_table(block.table))
        elif block.kind == "image" and block.path is not None:
            parts.append(f"![{block.text}]({block.path.relative_to(base).as_posix()})")
        elif block.kind == "details":
            parts.append(f"**{block.text}**")
            parts.append(render_markdown(block.children, base))
    return "\n\n".join(parts) + "\n"


HTML_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1150px;
       color: #1d2330; background: #fff; line-height: 1.45; padding: 0 1em; }
h1 { border-bottom: 3px solid #2f6fb3; padding-bottom: .3em; }
h2 { margin-top: 2em; color: #2f6fb3; border-bottom: 1px solid #d5dbe5; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.92em; }
th, td { border: 1px solid #d5dbe5; padding: .35em .7em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #eef2f8; }
tbody tr:nth-child(even) { background: #f8fafc; }
td.oom { background: #fde2e1; color: #a1181d; font-weight: 600; }
td.failed { background: #fff3cd; }
td.pruned { background: #f3e5f5; }
img { max-width: 100%; border: 1px solid #e3e7ee; margin: .5em 0; }
details { margin: 1em 0; } summary { cursor: pointer; font-weight: 600; }
p.note { color: #5a6270; font-size: .9em; }
"""


def render_html(blocks: list[Block], title: str) -> str:
    body = _html_blocks(blocks)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{HTML_STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def _html_blocks(blocks: list[Block]) -> str:
    parts = []
    for block in blocks:
        if block.kind in ("h1", "h2", "h3"):
            parts.append(f"<{block.kind}>{html.escape(block.text)}</{block.kind}>")
        elif block.kind == "p":
            parts.append(f"<p>{_inline_html(block.text)}</p>")
        elif block.kind == "table" and block.table is not None:
            parts.append(_html_table(block.table))
        elif block.kind == "image" and block.path is not None:
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            parts.append(f'<img alt="{html.escape(block.text)}" src="data:image/png;base64,{data}">')
        elif block.kind == "details":
            parts.append(
                f"<details><summary>{html.escape(block.text)}</summary>{_html_blocks(block.children)}</details>"
            )
    return "\n".join(parts)


def _inline_html(text: str) -> str:
    # The Markdown paragraphs use only **bold** and `code`; render those two.
    escaped = html.escape(text)
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", escaped)


# ----------------------------------------------------------------------------------------------
# Report content
# ----------------------------------------------------------------------------------------------
def _status_sentence(trials: pd.DataFrame) -> str:
    counts = trials["status"].value_counts() if "status" in trials else pd.Series(dtype=int)
    parts = [f"{counts[s]} {STATUS_WORDS[s]}" for s in STATUSES if s in counts]
    parts += [f"{n} {s}" for s, n in counts.items() if s not in STATUSES]
    return f"{len(trials)} trials: " + (", ".join(parts) if parts else "none") + "."


def _machine_sentence(trials: pd.DataFrame) -> str:
    gpus = trials.get("gpu_name", pd.Series(dtype=object)).dropna().unique()
    if len(gpus):
        total = _col(trials, "gpu_total_gib")
        size = f" ({total.max():.0f} GiB)" if len(total) else ""
        return f"GPU: {', '.join(map(str, gpus))}{size}."
    return "No GPU: memory figures are the trainer process's peak RSS (resident memory), in GiB."


def versions_sentence(trials: pd.DataFrame) -> str:
    """'torch 2.13.0, trl 1.15.0, ...' from the versions JSON column; several values joined by '/'."""
    seen: dict[str, list[str]] = {}
    for value in trials.get("versions", []):
        for name, version in _parse_json(value).items():
            if version is not None and not isinstance(version, (dict, list)):
                seen.setdefault(str(name), [])
                if str(version) not in seen[str(name)]:
                    seen[str(name)].append(str(version))
    return ", ".join(f"{name} {'/'.join(vs)}" for name, vs in sorted(seen.items()))


def ranked_table(ranked: pd.DataFrame) -> pd.DataFrame:
    """The ranked table for people: varying settings, units in headers, one row per configuration."""
    varying = varying_config_columns(ranked, exclude=("framework", "mode", "num_generations", "batch_size"))
    kinds = set(ranked["memory_kind"].dropna())
    memory_header = "Peak GPU memory (GiB)" if kinds == {"GPU"} else "Peak memory (GiB)"
    rows = []
    for i, row in ranked.iterrows():
        k, b = _plain(row["num_generations"]), _plain(row["batch_size"])
        line = {"Rank": i + 1, "Framework": row["framework"], "Mode": row["mode"]}
        line |= {CONFIG_WORDS.get(col, col): _plain(row[col]) for col in varying}
        if row["other"]:
            line["Other settings"] = row["other"]
        peak = _fmt(row["peak_gib"], 2) + (
            " (RSS)" if row["memory_kind"] == "RSS" and kinds != {"RSS"} else ""
        )
        line |= {
            "K": k,
            "B": b,
            "B×K": k * b if k is not None and b is not None else None,
            "Seeds": row["seeds"],
            "Tokens/s (median)": row["tokens_median"],
            "Tokens/s p10–p90": f"{_fmt(row['tokens_p10'])}–{_fmt(row['tokens_p90'])}",
            "Step (s, median)": _fmt(row["step_s_median"], 2),
            memory_header: peak,
            "Final reward": _fmt(row["final_reward"], 3),
        }
        rows.append(line)
    return pd.DataFrame(rows)


def not_completed_table(summary: pd.DataFrame) -> pd.DataFrame:
    others = summary[summary["status"] != "completed"]
    return pd.DataFrame(
        {
            "Trial": others["run_name"],
            "Framework": others["framework"],
            "Mode": others["mode"],
            "K": others["num_generations"],
            "B": others["batch_size"],
            "Outcome": [STATUS_WORDS.get(s, str(s)) for s in others["status"]],
            "What happened": [_shorten(d) for d in others["status_detail"]],
        }
    )


def feasibility_block_table(grid: FeasibilityGrid) -> pd.DataFrame:
    table = grid.labels.replace("", "·").copy()
    table.columns = [f"B={b}" for b in table.columns]
    table.insert(0, "K \\ B", [f"K={k}" for k in table.index])
    return table.reset_index(drop=True)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80] or "x"


def build_blocks(outputs: SweepOutputs, summary: pd.DataFrame, ranked: pd.DataFrame, grids: list[FeasibilityGrid],
                 plot_paths: dict[str, Any], budget_gib: float | None) -> list[Block]:  # fmt: skip
    trials = outputs.trials
    blocks = [Block("h1", f"Sweep report: {outputs.sweep_name}"), Block("p", _status_sentence(trials))]
    blocks.append(Block("p", _machine_sentence(trials)))
    versions = versions_sentence(trials)
    if versions:
        blocks.append(Block("p", f"Software: {versions}."))
    if budget_gib is not None:
        blocks.append(Block("p", f"Memory budget: {budget_gib:g} GiB."))
    blocks += [Block("p", w) for w in outputs.warnings]

    blocks.append(Block("h2", "Fastest configurations that completed"))
    if ranked.empty:
        blocks.append(Block("p", "No trial completed, so nothing can be ranked: see the outcomes below."))
    else:
        blocks.append(Block("table", table=ranked_table(ranked)))
        blocks.append(
            Block(
                "p",
                "Seeds of one configuration are aggregated. Tokens/s: median and 10th–90th percentile over "
                "measured steps of all seeds (probe steps left out). Peak memory: the highest of the seeds.",
            )
        )

    blocks.append(Block("h2", "What fits"))
    if not grids:
        blocks.append(Block("p", "No trials in this sweep."))
    for grid in grids:
        blocks.append(Block("h3", grid.title))
        blocks.append(
            Block("p", f"Cells: {grid.memory_words}, or the outcome. {_sentence(_budget_caption(grid))}.")
        )
        blocks.append(Block("table", table=feasibility_block_table(grid)))
        path = plot_paths["feasibility"].get(grid.title)
        if path:
            blocks.append(Block("image", f"Feasibility {grid.title}", path=path))

    blocks.append(Block("h2", "Speed"))
    if plot_paths.get("throughput"):
        blocks.append(Block("image", "Tokens per second per configuration", path=plot_paths["throughput"]))
    else:
        blocks.append(Block("p", "No completed trial measured tokens/s."))

    blocks.append(Block("h2", "Memory"))
    if plot_paths.get("memory"):
        blocks.append(Block("image", "Peak memory against completions per step", path=plot_paths["memory"]))
    else:
        blocks.append(Block("p", "No trial measured memory."))

    missed = not_completed_table(summary)
    if len(missed):
        blocks.append(Block("h2", "Trials that did not complete"))
        blocks.append(Block("table", table=missed))

    curves = plot_paths.get("curves", {})
    blocks.append(Block("h2", "Training curves"))
    if curves:
        blocks.append(
            Block(
                "p",
                "Reward, loss, completion length and memory per step; shaded steps are probe steps "
                "(completions forced to the maximum length to measure worst-case memory).",
            )  # fmt: skip
        )
        children = [Block("image", f"Curves {key}", path=path) for key, path in curves.items()]
        blocks.append(Block("details", f"Curves of {len(curves)} trials", children=children))
    else:
        blocks.append(Block("p", "No trial recorded steps."))

    blocks.append(Block("h2", "Files"))
    blocks.append(
        Block(
            "p", "Every trial with its measurements: `summary.csv`. Raw data: `trials.parquet` and `steps/`."
        )
    )
    return blocks


# ----------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------
def write_report(
    output_dir: str | Path, console: Console | None = None, budget_gib: float | None = None
) -> dict:
    """Write summary.csv, report.md, report.html and plots/*.png into output_dir; print the matrix.

    Returns {"summary_csv", "report_md", "report_html": Path, "plots": [Path, ...]}.
    """
    from orchestrator import plots  # matplotlib is imported only when a report is written

    console = console or Console()
    outputs = load_outputs(output_dir)
    out = outputs.output_dir
    budget = budget_gib if budget_gib is not None else infer_budget_gib(outputs.trials)
    summary = summary_table(outputs)
    summary_csv = out / "summary.csv"
    summary.to_csv(summary_csv, index=False)

    grids = feasibility_matrix(outputs.trials, budget)
    plot_dir = out / "plots"
    plot_dir.mkdir(exist_ok=True)
    for stale in plot_dir.glob("*.png"):  # a rebuilt report shows only what the data holds now
        if stale.name.startswith(PLOT_PREFIXES):
            stale.unlink()
    plot_paths: dict[str, Any] = {"feasibility": {}, "curves": {}}
    for grid in grids:
        path = plot_dir / f"feasibility_{_slug(grid.framework)}_{_slug(grid.mode)}_{_slug(grid.model)}.png"
        plot_paths["feasibility"][grid.title] = plots.feasibility_heatmap(grid, path)
    ranked = aggregate_repeats(outputs)
    plot_paths["throughput"] = plots.throughput_plot(ranked, plot_dir / "throughput.png")
    plot_paths["memory"] = plots.memory_plot(outputs, plot_dir / "memory_vs_completions.png", budget)
    for _, trial in outputs.trials.iterrows():
        steps = _trial_steps(outputs.steps, trial.get("trial_key"))
        if len(steps):
            path = plot_dir / f"curves_{_slug(str(trial['trial_key']))}.png"
            plot_paths["curves"][str(trial["trial_key"])] = plots.trial_curves(trial, steps, path)

    blocks = build_blocks(outputs, summary, ranked, grids, plot_paths, budget)
    report_md = out / "report.md"
    report_md.write_text(render_markdown(blocks, out))
    report_html = out / "report.html"
    report_html.write_text(render_html(blocks, f"Sweep report: {outputs.sweep_name}"))

    for table in feasibility_tables(grids):
        console.print(table)
    if not grids:
        console.print(f"No trials in {out / 'trials.parquet'}.")
    console.print(f"Report: {report_html}")
    all_plots = [p for p in [*plot_paths["feasibility"].values(), plot_paths["throughput"], plot_paths["memory"],
                             *plot_paths["curves"].values()] if p]  # fmt: skip
    return {
        "summary_csv": summary_csv,
        "report_md": report_md,
        "report_html": report_html,
        "plots": all_plots,
    }
