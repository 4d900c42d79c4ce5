"""PNG figures of a sweep report (matplotlib's object API with the Agg canvas: no pyplot state, no display).

Every figure is imported from here; what they share (style, size, saving) is _figure.py's, the fit map's
figure _fitmap_plot.py's."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FixedLocator, MaxNLocator, NullLocator, ScalarFormatter

from orchestrator.judging.intervals import MIN_CYCLES
from orchestrator.views.report._accuracy import (
    ACCURACY_LABEL,
    accuracy_panel,
    accuracy_series,
    draw_accuracy,
    target_line,
)
from orchestrator.views.report._configs import varying_config_columns
from orchestrator.views.report._feasibility import OVER_BUDGET, FeasibilityGrid, memory_words
from orchestrator.views.report._figure import (  # noqa: F401 - DPI re-exported with the figures
    DPI,
    FONT_PT,
    MAX_WIDTH_IN,
    OVER_BUDGET_COLOUR,
    STACK_COLOURS,
    report_style,
    save_figure,
)
from orchestrator.views.report._fitmap_plot import fit_map_plot  # noqa: F401 - the report's figures, one face
from orchestrator.views.report._learning import ranked_learning, stack_words
from orchestrator.views.report._outputs import SweepOutputs, plain, trial_peak, trial_steps
from orchestrator.words.outcome import (
    COMPLETED,
    FAILED,
    MEMORY_LABELS,
    OOM,
    STATUS_COLOURS,
    STATUS_WORDS,
    TIMEOUT,
)
from orchestrator.words.verdicts import MARK
from trainers.record import STEP
from trainers.stacks import names as stacks_names
from trainers.trial import knob_letter


@report_style
def feasibility_heatmap(grid: FeasibilityGrid, path: Path) -> Path:
    """Peak GiB per (K, B) on a colour scale; outcomes in their colours; cells whose peak passed the
    budget hatched grey and labelled "over budget": they do not fit."""
    values = grid.values.to_numpy(dtype=float)
    n_k, n_b = values.shape
    fig = Figure(figsize=(min(MAX_WIDTH_IN, max(5.5, 1.7 * n_b + 3.0)), max(3.5, 1.0 * n_k + 2.2)))
    ax = fig.add_subplot()
    finite = values[np.isfinite(values)]
    vmax = max([*finite, grid.budget_gib or 0.0, 1e-9])
    image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", vmin=0, vmax=vmax, aspect="auto")
    colourbar = fig.colorbar(image, ax=ax, label=grid.memory_words)
    if grid.budget_gib is not None:
        colourbar.ax.axhline(grid.budget_gib, color="red", linewidth=2)
    outcomes = ListedColormap(list(STATUS_COLOURS.values()))
    codes = np.full(values.shape, np.nan)
    for i, k in enumerate(grid.statuses.index):
        for j, b in enumerate(grid.statuses.columns):
            status = grid.statuses.loc[k, b]
            if status in STATUS_COLOURS:
                codes[i, j] = list(STATUS_COLOURS).index(status)
            _annotate_cell(ax, grid, i, j, k, b, values[i, j] / vmax if np.isfinite(values[i, j]) else None)
    ax.imshow(
        np.ma.masked_invalid(codes), cmap=outcomes, vmin=-0.5, vmax=len(STATUS_COLOURS) - 0.5, aspect="auto"
    )
    ax.set_xticks(range(n_b), [str(b) for b in grid.values.columns])
    ax.set_yticks(range(n_k), [str(k) for k in grid.values.index])
    ax.set_xlabel("B: prompts per step")
    ax.set_ylabel("K: completions per prompt")
    budget = (
        f"budget {grid.budget_gib:g} GiB: hatched grey cells are over it"
        if grid.budget_gib is not None
        else "no budget given"
    )
    marked = f"\n{MARK}: ran, but its training verdict flags it" if grid.verdict_note else ""
    ax.set_title(f"{grid.title}\n{budget}{marked}", fontsize=FONT_PT + 1)
    present = sorted(set(grid.statuses.to_numpy().ravel()) & set(STATUS_COLOURS))
    handles = [Patch(color=STATUS_COLOURS[s], label=STATUS_WORDS[s]) for s in present]
    if any(grid.over_budget(k, b) for k in grid.values.index for b in grid.values.columns):
        handles.append(
            Patch(facecolor=OVER_BUDGET_COLOUR, hatch="//", edgecolor="#d62728", label=OVER_BUDGET)
        )
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0, -0.2), ncol=min(3, len(handles)))
    return save_figure(fig, path)


def _annotate_cell(ax, grid: FeasibilityGrid, i: int, j: int, k, b, shade: float | None) -> None:
    label = grid.labels.loc[k, b]
    if not label:
        return
    # viridis is dark at the low end, and so are the OOM and failed colours: write in white there.
    over = grid.over_budget(k, b)
    dark = not over and ((shade is not None and shade < 0.6) or grid.statuses.loc[k, b] in (OOM, FAILED))
    text = label.replace(" (+", "\n(+").replace(f" {MARK}", f"\n{MARK}") + (
        f"\n{OVER_BUDGET}" if over else ""
    )
    if over:
        ax.add_patch(
            Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=OVER_BUDGET_COLOUR, hatch="//", edgecolor="#d62728")
        )
    ax.text(j, i, text, ha="center", va="center", fontsize=FONT_PT, color="white" if dark else "black")


def _config_label(row: pd.Series, extra: list[str]) -> str:
    label = f"K{int(row['num_generations'])}×B{int(row['batch_size'])}"
    for col in extra:
        value = str(row[col])
        label += f"\n{value.split('/')[-1][:18]}" if col == "model" else f"\n{col} {value}"
    return label


@report_style
def throughput_plot(ranked: pd.DataFrame, path: Path) -> Path | None:
    """Median tokens/s (bars, whiskers its 95% interval, hatched where too few cycles gave none) per
    configuration, one colour per stack·mode."""
    data = ranked.dropna(subset=["tokens_median"])
    if data.empty:
        return None
    extra = varying_config_columns(data, exclude=("stack", "mode", "num_generations", "batch_size"))
    data = data.assign(
        stack=data["stack"] + " · " + data["mode"],
        config=[_config_label(r, extra) for _, r in data.iterrows()],
        bk=data["num_generations"] * data["batch_size"],
    ).sort_values(["bk", "num_generations"])
    configs = list(dict.fromkeys(data["config"]))
    stacks = sorted(data["stack"].unique())
    width = 0.8 / len(stacks)
    fig = Figure(figsize=(min(MAX_WIDTH_IN, max(6, 0.9 * len(configs) * max(1, len(stacks) / 2) + 2)), 4.8))
    ax = fig.add_subplot()
    for s, stack in enumerate(stacks):
        part = data[data["stack"] == stack]
        x = np.array([configs.index(c) for c in part["config"]]) + (s - (len(stacks) - 1) / 2) * width
        medians = part["tokens_median"].to_numpy(float)
        low = np.clip(medians - part["tokens_low"].to_numpy(float), 0, None)  # NaN: no whisker
        high = np.clip(part["tokens_high"].to_numpy(float) - medians, 0, None)
        colour = STACK_COLOURS[s % len(STACK_COLOURS)]
        ax.bar(x, medians, width, yerr=[low, high], capsize=3, label=stack, color=colour)
        few = part["tokens_low"].isna().to_numpy()
        if few.any():  # under the minimum of cycles: hatched, no interval to draw
            ax.bar(x[few], medians[few], width, fill=False, hatch="//", edgecolor="white", linewidth=0)
    ax.set_xticks(range(len(configs)), configs)
    ax.set_ylabel(f"tokens/s (median; whiskers 95% CI;\nhatched: under {MIN_CYCLES} cycles, no CI)")
    ax.set_xlabel("configuration (K completions per prompt × B prompts per step)")
    ax.set_title("Throughput of completed configurations")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(title="stack · mode")
    return save_figure(fig, path)


@report_style
def memory_plot(outputs: SweepOutputs, path: Path, budget_gib: float | None) -> Path | None:
    """Peak memory against completions per step (B×K), one line per stack·mode·model; OOM as ✕."""
    trials = outputs.trials
    rows = []
    for _, trial in trials.iterrows():
        peak, kind = trial_peak(trial, trial_steps(outputs.steps, trial.get("trial_key")))
        k, b = trial.get("num_generations"), trial.get("batch_size")
        if pd.isna(k) or pd.isna(b):
            continue
        rows.append({"stack": f"{trial['stack']} · {trial['mode']}", "model": str(trial.get("model")),
                     "bk": int(k) * int(b), "peak": peak, "kind": kind, "status": trial.get("status")})  # fmt: skip
    data = pd.DataFrame(rows)
    measured = data[data["peak"].notna() & (data["status"] == COMPLETED)] if len(data) else data
    ooms = data[data["status"] == OOM] if len(data) else data
    if measured.empty and ooms.empty:
        return None
    several_models = data["model"].nunique() > 1
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    top = max([*measured["peak"].tolist(), budget_gib or 0.0, 1.0])
    for s, ((stack, model), part) in enumerate(measured.groupby(["stack", "model"])):
        worst = part.groupby("bk")["peak"].max()
        label = f"{stack} · {model.split('/')[-1]}" if several_models else stack
        colour = STACK_COLOURS[s % len(STACK_COLOURS)]
        ax.plot(worst.index, worst.to_numpy(), marker="o", color=colour, label=label)
    if len(ooms):
        ax.scatter(
            ooms["bk"], [top * 1.05] * len(ooms), marker="x", s=70, color="#d62728", label="out of memory"
        )
    if budget_gib is not None:
        ax.axhline(budget_gib, color="#d62728", linestyle="--", linewidth=1.5)
        ax.text(0.01, budget_gib, f"budget: fits in {budget_gib:g} GiB", va="bottom", color="#d62728",
                transform=ax.get_yaxis_transform())  # fmt: skip
    kinds = set(measured["kind"].dropna())
    ax.set_ylabel(memory_words(kinds))
    ax.set_xlabel("B×K: completions per optimizer step")
    ax.set_xscale("log", base=2)
    # Ticks where the data are: the B×K values the sweep ran, no others.
    ax.xaxis.set_major_locator(FixedLocator(sorted({*measured["bk"], *ooms["bk"]})))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_ylim(0, top * 1.12)
    ax.set_title("Where memory goes: peak memory against completions per step")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


@report_style
def trial_curves(trial: pd.Series, steps: pd.DataFrame, path: Path) -> Path:
    """Reward, loss, completion length and memory over steps for one trial, and beneath them its held-out
    accuracy where it measured any (step 0: before training); probe steps shaded."""
    steps = steps.sort_values("step")
    x = steps["step"].to_numpy(float)
    accuracy = accuracy_series(trial, steps) is not None
    fig = Figure(figsize=(10, 8.6 if accuracy else 6))
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.07 if accuracy else 0.09, top=0.93 if accuracy else 0.91,
                        wspace=0.22, hspace=0.3 if accuracy else 0.12)  # fmt: skip
    grid = fig.add_gridspec(3 if accuracy else 2, 2)
    first = fig.add_subplot(grid[0, 0])
    axes = [first, *(fig.add_subplot(grid[i // 2, i % 2], sharex=first) for i in range(1, 4))]
    if accuracy:
        axes.append(fig.add_subplot(grid[2, :], sharex=first))
        accuracy_panel(axes[4], trial, steps)
    for ax in axes[:2]:  # the panels beneath them carry the steps
        ax.tick_params(labelbottom=False)
    _series(axes[0], x, steps, [(STEP.reward_mean, "mean reward")], "reward", band=STEP.reward_std)
    _series(axes[1], x, steps, [(STEP.loss, "loss")], "loss")
    _series(
        axes[2],
        x,
        steps,
        [(STEP.completion_len_mean, "mean"), (STEP.completion_len_max, "max")],
        "completion length (tokens)",
    )
    memory = [(STEP.torch_peak_allocated_gib, "torch peak allocated"), (STEP.device_peak_gib, "GPU peak (NVML)"),
              (STEP.rss_peak_gib, "process RSS peak")]  # fmt: skip
    _series(axes[3], x, steps, memory, "memory (GiB)")
    axes[3].set_ylim(bottom=0)  # a flat 0.70 GiB must not read as a ramp
    probes = steps["probe"].astype(bool).to_numpy() if "probe" in steps else np.zeros(len(steps), bool)
    for ax in axes:
        for step in x[probes]:
            ax.axvspan(step - 0.5, step + 0.5, color="#ff7f0e", alpha=0.18, linewidth=0)
        ax.grid(alpha=0.3)
    axes[2].xaxis.set_major_locator(MaxNLocator(integer=True))  # shared x: steps are whole numbers
    for ax in axes[2:]:
        ax.set_xlabel("step")
    if probes.any():
        axes[0].legend(handles=[*axes[0].get_legend_handles_labels()[0],
                                Patch(color="#ff7f0e", alpha=0.3, label="probe step")])  # fmt: skip
    status = STATUS_WORDS.get(trial.get("status"), str(trial.get("status")))
    fig.suptitle(f"{trial.get('trial_key')} ({status})", fontsize=FONT_PT + 2)
    return save_figure(fig, path, tight=False)


def _series(ax, x: np.ndarray, steps: pd.DataFrame, columns, ylabel: str, band: str | None = None) -> None:
    drawn = False
    for column, label in columns:
        y = (
            pd.to_numeric(steps[column], errors="coerce").to_numpy(float)
            if column in steps
            else np.full(len(x), np.nan)
        )
        # Steps that did not measure a figure (a step reusing earlier completions logs no reward or
        # length) are left out, so the line joins the steps that did instead of breaking at each gap.
        seen = np.isfinite(y)
        if not seen.any():
            continue
        ax.plot(x[seen], y[seen], marker=".", label=label)
        drawn = True
        if band and band in steps:
            spread = pd.to_numeric(steps[band], errors="coerce").to_numpy(float)[seen]
            ax.fill_between(
                x[seen], y[seen] - spread, y[seen] + spread, alpha=0.2, label=f"± {band.replace('_', ' ')}"
            )
    if not drawn:
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes, color="#777")
    elif len(columns) > 1 or band:
        ax.legend()
    ax.set_ylabel(ylabel)


@report_style
def prediction_plot(pairs: pd.DataFrame, path: Path, budget_gib: float | None) -> Path | None:
    """Predicted against measured peak per trial (report._predictions.prediction_pairs), the interval
    as error bars, one colour per family, the identity line and the budget; an `oom` or `timeout`
    trial's measured peak is a lower bound (▸). None when no trial with a prediction measured a peak."""
    shown = (
        pairs[pairs["measured_gib"].notna() & pairs["status"].isin([COMPLETED, OOM, TIMEOUT])]
        if len(pairs)
        else pairs
    )
    if shown.empty:
        return None
    fig = Figure(figsize=(7.0, 6.0))
    ax = fig.add_subplot()
    top = max(
        [*shown["measured_gib"], *shown["predicted_gib"], *shown["high_gib"].dropna(), budget_gib or 0.0]
    )
    top *= 1.1
    ax.plot([0, top], [0, top], color="#7f7f7f", linewidth=1, label="predicted = measured")
    for s, (family, part) in enumerate(shown.groupby("family", sort=True)):
        colour = STACK_COLOURS[s % len(STACK_COLOURS)]
        predicted = part["predicted_gib"].to_numpy(float)
        low = np.clip(predicted - part["low_gib"].fillna(part["predicted_gib"]).to_numpy(float), 0, None)
        high = np.clip(part["high_gib"].fillna(part["predicted_gib"]).to_numpy(float) - predicted, 0, None)
        labelled = False
        for statuses, marker in (((COMPLETED,), "o"), ((OOM, TIMEOUT), ">")):
            mask = part["status"].isin(statuses).to_numpy()
            if mask.any():
                ax.errorbar(part["measured_gib"].to_numpy(float)[mask], predicted[mask],
                            yerr=[low[mask], high[mask]], fmt=marker, color=colour, capsize=3,
                            label=None if labelled else family)  # fmt: skip
                labelled = True
    if shown["status"].isin((OOM, TIMEOUT)).any():
        ax.plot([], [], ">", color="#555", label="out of memory or timed out: measured peak is a lower bound")
    if budget_gib is not None:
        ax.axhline(budget_gib, color="#d62728", linestyle="--", linewidth=1.2)
        ax.axvline(budget_gib, color="#d62728", linestyle="--", linewidth=1.2)
        ax.text(0.01, budget_gib, f"budget {budget_gib:g} GiB", va="bottom", color="#d62728", fontsize=FONT_PT,
                transform=ax.get_yaxis_transform())  # fmt: skip
    kinds = set(shown["memory_kind"].dropna())
    unit = MEMORY_LABELS[next(iter(kinds))] if len(kinds) == 1 else "memory (each trial's kind)"
    ax.set_xlabel(f"measured peak {unit} (GiB)")
    ax.set_ylabel("predicted peak (GiB; bars: the interval)")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_aspect("equal")
    ax.set_title("Predicted vs measured peak")
    ax.grid(alpha=0.3)
    # Below the axes, not on them: a family's label (stack, mode, model, settings) is longer than the
    # plot is wide, and inside it covered the points; the saved figure's tight box takes the legend in.
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, [textwrap.fill(label, 60) for label in labels], fontsize=FONT_PT, loc="upper center",
              bbox_to_anchor=(0.5, -0.1), frameon=False)  # fmt: skip
    return save_figure(fig, path)


MODE_STYLES = ["-", "--", ":", "-."]


@report_style
def learning_curves_plot(trials: pd.DataFrame, steps: pd.DataFrame, path: Path) -> Path | None:
    """Held-out accuracy over the steps of every judged trial (a timeout's kept steps), on one axis: a colour
    per stack (the registry's order), a line style per mode, the sweep's target; None when none did."""
    ranked = ranked_learning(trials)
    drawn = []
    for _, trial in ranked.iterrows():
        series = accuracy_series(trial, trial_steps(steps, trial.get("trial_key")))
        if series is not None:
            drawn.append((trial, series))
    if not drawn:
        return None
    names = [n for n in stacks_names() if n in set(ranked["stack"])]
    names += sorted(set(ranked["stack"]) - set(names))
    modes = sorted(set(ranked["mode"].astype(str)))
    varying = [
        c for c in ("num_generations", "batch_size", "seed") if c in ranked and ranked[c].nunique() > 1
    ]
    fig = Figure(figsize=(8.0, 5.0))
    ax = fig.add_subplot()
    for trial, series in drawn:
        colour = STACK_COLOURS[names.index(trial["stack"]) % len(STACK_COLOURS)]
        style = MODE_STYLES[modes.index(str(trial["mode"])) % len(MODE_STYLES)]
        cut = "(timed out)" if trial.get("status") == TIMEOUT else ""
        axes = " ".join(f"{knob_letter(c)}={plain(trial[c])}" for c in varying)
        label = " ".join(filter(None, [stack_words(trial), str(trial["mode"]), axes, cut]))
        draw_accuracy(ax, series, label, colour, style)
    target_line(ax, ranked.get("accuracy_target", []))
    ax.set_ylim(0, 1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step (0: before training)")
    ax.set_ylabel(ACCURACY_LABEL)
    ax.set_title("Held-out accuracy over the steps, the stacks on one axis (bands: 95% intervals)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), frameon=False, ncol=1 if len(drawn) > 6 else 2)
    return save_figure(fig, path)
