"""What the report says: its sections, in reading order (SECTIONS), each a function from the sweep's
figures (ReportData) to blocks. The answer comes first: what fits (the frontier, then every
configuration with the stacks side by side), then how the stacks compare, then the fastest
configurations; the details follow. A new section is one function appended to SECTIONS."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from orchestrator.judging.intervals import MIN_CYCLES, TIGHT_SPREAD
from orchestrator.views.report._document import Block, fmt, shorten
from orchestrator.views.report._feasibility import FeasibilityGrid, set_budgets_gib
from orchestrator.views.report._feasibility_tables import frontier_view, matrix_views
from orchestrator.views.report._learning import learning_blocks, ranked_learning
from orchestrator.views.report._outputs import SweepOutputs, column, parse_json
from orchestrator.views.report._ranked import ranked_table
from orchestrator.views.report._stacks import comparison_view, pair_sentence, stack_pairs
from orchestrator.views.report._time import time_paragraphs
from orchestrator.views.report._trained import trained_blocks
from orchestrator.views.report._verdicts import memory_probes, sandbox_kill_blocks, verdict_blocks
from orchestrator.views.report._vllm import share_answers, share_table
from orchestrator.words import outcome
from orchestrator.words.outcome import COMPLETED, STATUS_WORDS, STATUSES
from trainers import stacks
from trainers.record import TRIAL


def _status_sentence(trials: pd.DataFrame) -> str:
    counts = trials["status"].value_counts() if "status" in trials else pd.Series(dtype=int)
    parts = [f"{counts[s]} {STATUS_WORDS[s]}" for s in STATUSES if s in counts]
    parts += [f"{n} {s}" for s, n in counts.items() if s not in STATUSES]
    return f"{len(trials)} trials: " + (", ".join(parts) if parts else "none") + "."


def _machine_sentence(trials: pd.DataFrame) -> str:
    gpus = trials.get("gpu_name", pd.Series(dtype=object)).dropna().unique()
    if len(gpus):
        total = column(trials, "gpu_total_gib")
        size = f" ({total.max():.0f} GiB)" if len(total) else ""
        return f"GPU: {', '.join(map(str, gpus))}{size}."
    return (
        f"GPU: {outcome.NO_GPU}; memory figures are the trainer process's peak RSS (resident memory), in GiB."
    )


def versions_sentence(trials: pd.DataFrame) -> str:
    """'torch 2.13.0, trl 1.15.0, ...' from the versions JSON column; several values joined by '/'."""
    seen: dict[str, list[str]] = {}
    for value in trials.get("versions", []):
        for name, version in parse_json(value).items():
            if version is not None and not isinstance(version, (dict, list)):
                seen.setdefault(str(name), [])
                if str(version) not in seen[str(name)]:
                    seen[str(name)].append(str(version))
    return ", ".join(f"{name} {'/'.join(vs)}" for name, vs in sorted(seen.items()))


def startup_sentence(trials: pd.DataFrame) -> str:
    """Each stack's start-up, medians over its trials that reached a step: the time from the trainer's
    start to the end of its first step, and how much of that first step was warm-up (compilation and
    first calls: the first step less the later ones); '' when no trial reached a step."""
    if "stack" not in trials:
        return ""
    parts = []
    for stack, rows in trials.groupby("stack", sort=False):
        first, warmup = column(rows, TRIAL.time_to_first_step_s), column(rows, TRIAL.warmup_s)
        if len(first):
            of_it = f", {fmt(warmup.median())} s of it warm-up" if len(warmup) else ""
            over = "1 trial" if len(first) == 1 else f"median of {len(first)} trials"
            parts.append(f"{stacks.label(str(stack))} first step done {fmt(first.median())} s after the "
                         f"trainer started{of_it} ({over})")  # fmt: skip
    if not parts:
        return ""
    return (
        "Start-up: "
        + "; ".join(parts)
        + ". Warm-up is the first step less the median of the later steps like it: what compiling (Unsloth's "
        "and torch's compilers, Triton's kernels) and first calls cost; the compile caches under "
        "RLSWEEP_CACHE shorten it for later trials of the same shapes."
    )


def not_completed_table(summary: pd.DataFrame) -> pd.DataFrame:
    others = summary[summary["status"] != COMPLETED]
    return pd.DataFrame(
        {
            "Trial": others["run_name"],
            "Stack": others["stack"],
            "Mode": others["mode"],
            "K": others["num_generations"],
            "B": others["batch_size"],
            "Outcome": [STATUS_WORDS.get(s, str(s)) for s in others["status"]],
            "What happened": [shorten(d) for d in others["status_detail"]],
        }
    )


@dataclass
class ReportData:
    """What the sections read: the sweep's outputs and the figures write_report computed from them."""

    outputs: SweepOutputs
    summary: pd.DataFrame  # summary_table
    ranked: pd.DataFrame  # aggregate_repeats
    grids: list[FeasibilityGrid]  # feasibility_matrix
    frontier: pd.DataFrame  # frontier
    comparison: pd.DataFrame  # _stacks.stack_comparison
    plot_paths: dict[str, Any]
    budget_gib: float | None
    predictions: list[Block]  # prediction_blocks
    base: str = stacks.BASE  # the stack the others are compared against
    fit_map: list[Block] = field(default_factory=list)  # _fitmap.fitmap_blocks: empty without a budget


def _budget_words(budget_gib: float | None) -> str:
    if budget_gib is None:
        return "No memory budget is known, so fitting means completing without running out of memory."
    return (
        f"Memory budget: {budget_gib:g} GiB; a configuration fits when it completed with its peak within it."
    )


def title_section(data: ReportData) -> list[Block]:
    """The title, what was trained (report._trained) with its length warning, how the trials ended."""
    trials = data.outputs.trials
    given = data.outputs.sources
    if given is not None:
        blocks = [Block("h1", f"Measured trials: {data.outputs.output_dir.name}"), *_sources_blocks(given)]
    else:
        blocks = [Block("h1", f"Sweep report: {data.outputs.sweep_name}")]
    blocks += trained_blocks(data.outputs)
    return blocks + [Block("p", _status_sentence(trials)), *(Block("p", w) for w in data.outputs.warnings)]


# Where a report of --trials sources would show steps (curves, per-step tables, steps/).
NO_STEPS = (
    "Steps were not recorded in these sources: a result file or a tracking server's trial holds one row per "
    "trial (its status, peaks, median step time and verdicts), not its steps"
)


def _sources_blocks(given: dict) -> list[Block]:
    """Where a report of --trials sources got its rows, and what it therefore lacks."""
    sources = ", ".join(f"`{s}`" for s in given.get("sources") or []) or "sources not named"
    blocks = [Block("p", f"**Measured trials from**: {sources} (`--trials`).")]
    blocks += [Block("p", line) for line in given.get("provenance") or []]
    return [*blocks, Block("p", f"{NO_STEPS}, so this report has no per-step tables or training curves.")]


def _all_fit(data: ReportData) -> bool:
    """No trial ran out of memory or was pruned as sure to: what fits then says nothing new (filler)."""
    statuses = data.outputs.trials.get("status", pd.Series(dtype=object))
    return not statuses.isin([outcome.OOM, outcome.PRUNED]).any()


def _as_filler(blocks: list[Block]) -> list[Block]:
    for block in blocks:
        block.filler = True
    return blocks


def frontier_section(data: ReportData) -> list[Block]:
    blocks = [Block("h2", "What fits: the feasibility frontier")]
    if data.frontier.empty:
        return [*blocks, Block("p", "No trials in this sweep.", filler=True)]
    blocks.append(
        Block(
            "p",
            "Per stack, mode and model: the largest configuration that fits and the smallest that does "
            f"not, each with its peak memory. {_budget_words(data.budget_gib)}",
        )
    )
    blocks.append(Block("table", table=frontier_view(data.frontier)))
    return _as_filler(blocks) if _all_fit(data) else blocks


def matrix_section(data: ReportData) -> list[Block]:
    blocks = [Block("h2", "What fits: every configuration, the stacks side by side")]
    if not data.grids:
        return [*blocks, Block("p", "No trials in this sweep.", filler=True)]
    for view in matrix_views(data.grids):
        blocks += [Block("h3", view.model), Block("p", view.caption), Block("table", table=view.table)]
    return _as_filler(blocks) if _all_fit(data) else blocks


def fitmap_section(data: ReportData) -> list[Block]:
    return data.fit_map


def stacks_section(data: ReportData) -> list[Block]:
    base = stacks.label(data.base)
    pairs = list(stack_pairs(data.comparison))
    title = f"{pairs[0][1]} against {base}" if len(pairs) == 1 else f"The stacks against {base}"
    blocks = [Block("h2", title)]
    if not pairs:
        return [*blocks, Block("p", f"No configuration ran on both {base} and another stack.", filler=True)]
    for _, other, rows in pairs:
        if len(pairs) > 1:
            blocks.append(Block("h3", f"{other} against {base}"))
        blocks.append(
            Block(
                "p",
                f"Each configuration both stacks ran. Ratios are {other} ÷ {base}: memory below 1× means "
                f"{other} needs less, tokens/s above 1× means it is faster (medians over measured generation "
                "cycles, with the cycles each is over). The tokens/s ratio carries its 95% interval (a "
                'bootstrap over each side\'s cycles); it reads "no clear difference" where the interval '
                f'covers 1, and "too few cycles to compare" where a side measured fewer than {MIN_CYCLES} '
                "cycles. A memory ratio only where both measured the same kind of memory. Fits: which stack "
                f"fits (completed within the budget) where the other does not. {_budget_words(data.budget_gib)}",
            )
        )
        blocks.append(Block("table", table=comparison_view(rows)))
        blocks.append(Block("p", pair_sentence(rows)))
    return blocks


def fastest_section(data: ReportData) -> list[Block]:
    blocks = [Block("h2", "Fastest configurations that completed")]
    if data.ranked.empty:
        return [*blocks, Block("p", "No trial completed, so nothing can be ranked: see the outcomes below.")]
    return [
        *blocks,
        Block("table", table=ranked_table(data.ranked, data.budget_gib)),
        Block(
            "p",
            "Seeds of one configuration are aggregated. Tokens/s: median over the measured generation "
            "cycles of all seeds (probe cycles left out), its 95% interval (a bootstrap over each seed's "
            f"cycles) and the 10th–90th percentile of the cycles; under {MIN_CYCLES} cycles the median has no "
            "interval and no rank. Rank: configurations whose intervals overlap that of the fastest of "
            'their group share its rank ("tie"): no measurement separates them. Peak memory: the highest '
            'of the seeds; its margin to the budget reads "tight" when it is under the run-to-run spread of '
            f"peaks ({TIGHT_SPREAD:.1%} of the peak, docs/benchmarks.md).",
        ),
    ]


def learning_section(data: ReportData) -> list[Block]:
    """Which configuration learns fastest (report._learning); the ranking by held-out accuracy."""
    return learning_blocks(data.outputs.trials, data.plot_paths.get("learning"))


def vllm_share_section(data: ReportData) -> list[Block]:
    """What share of memory to give vLLM (report._vllm); nothing when no trial generated with vLLM."""
    table = share_table(data.outputs.trials, data.summary)
    if table.empty:
        return []
    return [
        Block("h2", "What share to give vLLM"),
        *(Block("p", answer) for answer in share_answers(table, data.budget_gib)),
        Block("table", table=table),
        Block(
            "p",
            "vLLM share: vllm_gpu_memory_utilization, of the budget where one is set. Peak: NVML per process "
            "on a GPU (torch's counters do not see vLLM's pool), RSS on a CPU. Tokens/s: median over measured steps.",
        ),
    ]


def prediction_blocks(
    pairs: pd.DataFrame, errors: pd.DataFrame, terms: pd.DataFrame, plot: Any
) -> list[Block]:
    """Predicted vs measured peak (report._predictions): the scatter and the errors by family, or one
    sentence when no trial had a prediction; then what each family's memory is made of."""
    blocks = [Block("h2", "Predicted vs measured peak")]
    if pairs.empty:
        blocks.append(
            Block("p", "No trial of this sweep has a predicted peak: no prediction was made.", filler=True)
        )
    else:
        scored = int(pairs["error_pct"].notna().sum())
        statuses = pairs["status"].value_counts()
        others = ", ".join(f"{n} {STATUS_WORDS.get(s, s)}" for s, n in statuses.items() if s != COMPLETED)
        blocks.append(
            Block(
                "p",
                f"{len(pairs)} trials had a peak predicted before they ran, from the trials finished before "
                f"them; {scored} completed with a measured peak and are scored"
                + (
                    f" (the others: {others}; an out-of-memory or timed-out trial's peak is a lower bound)"
                    if others
                    else ""
                )
                + ". Error = predicted − measured, as % of the measured peak; positive: over-predicted.",
            )
        )
        if plot:
            blocks.append(Block("image", "Predicted vs measured peak", path=plot))
        if len(errors):
            blocks.append(Block("table", table=errors))
    if len(terms):
        blocks.append(Block("h3", "Where the memory goes: fitted terms per family (GiB)"))
        blocks.append(
            Block(
                "p",
                "The memory model fitted on this sweep's trials, at each family's largest measured trial. "
                "Static: the runtime, weights, LoRA with its gradients and optimizer state (and a reference "
                "model when beta > 0); generation: the KV cache and sampling logits of one generation batch; "
                "training: the activations and logits of one micro-batch.",
            )
        )
        blocks.append(Block("table", table=terms))
    return blocks


def setup_section(data: ReportData) -> list[Block]:
    trials = data.outputs.trials
    blocks = [Block("h2", "Where it ran"), Block("p", _machine_sentence(trials))]
    versions = versions_sentence(trials)
    if versions:
        blocks.append(Block("p", f"Software: {versions}."))
    startup = startup_sentence(trials)
    if startup:
        blocks.append(Block("p", startup))
    return [*blocks, Block("p", _budget_words(data.budget_gib), filler=data.budget_gib is None)]


def heatmap_section(data: ReportData) -> list[Block]:
    blocks = []
    for grid in data.grids:
        path = data.plot_paths["feasibility"].get(grid.title)
        if path:
            blocks.append(Block("image", f"Feasibility {grid.title}", path=path))
    if not blocks:
        return []
    heatmaps = [Block("h2", "Feasibility heatmaps"), *blocks]
    return _as_filler(heatmaps) if _all_fit(data) else heatmaps


def verdict_section(data: ReportData) -> list[Block]:
    probes = memory_probes(data.outputs.trials)
    return verdict_blocks(data.summary, data.plot_paths.get("curves", {}), probes) + sandbox_kill_blocks(
        data.summary
    )


def speed_section(data: ReportData) -> list[Block]:
    blocks = [Block("h2", "Speed")]
    if data.plot_paths.get("throughput"):
        return [
            *blocks,
            Block("image", "Tokens per second per configuration", path=data.plot_paths["throughput"]),
        ]
    return [*blocks, Block("p", "No completed trial measured tokens/s.", filler=True)]


def time_section(data: ReportData) -> list[Block]:
    """Where the time goes (report._time); nothing when no trial generated."""
    words = time_paragraphs(data.outputs.trials, data.outputs.steps)
    return [Block("h2", "Where the time goes"), *(Block("p", w) for w in words)] if words else []


def memory_section(data: ReportData) -> list[Block]:
    blocks = [Block("h2", "Memory")]
    if data.plot_paths.get("memory"):
        return [
            *blocks,
            Block("image", "Peak memory against completions per step", path=data.plot_paths["memory"]),
        ]
    return [*blocks, Block("p", "No trial measured memory.", filler=True)]


def predictions_section(data: ReportData) -> list[Block]:
    return data.predictions


def not_completed_section(data: ReportData) -> list[Block]:
    missed = not_completed_table(data.summary)
    return [Block("h2", "Trials that did not complete"), Block("table", table=missed)] if len(missed) else []


def curves_section(data: ReportData) -> list[Block]:
    curves = data.plot_paths.get("curves", {})
    blocks = [Block("h2", "Training curves")]
    if not curves and data.outputs.sources is not None:
        return [*blocks, Block("p", f"{NO_STEPS}: no training curves.")]
    if not curves:
        return [*blocks, Block("p", "No trial recorded steps.", filler=True)]
    children = [Block("image", f"Curves {key}", path=path) for key, path in curves.items()]
    return [
        *blocks,
        Block(
            "p",
            "Reward, loss, completion length and memory per step; shaded steps are probe steps "
            "(completions forced to the maximum length to measure worst-case memory).",
        ),
        Block("details", f"Curves of {len(curves)} trials", children=children),
    ]


def files_section(data: ReportData) -> list[Block]:
    if data.outputs.sources is not None:
        return [
            Block("h2", "Files"),
            Block("p", "Every trial with its measurements: `summary.csv`. Raw data: `trials.parquet`, the "
                  f"sources' rows (their provenance: `sources.json`); no `steps/`. {NO_STEPS}."),
        ]  # fmt: skip
    return [
        Block("h2", "Files"),
        Block(
            "p", "Every trial with its measurements: `summary.csv`. Raw data: `trials.parquet` and `steps/`."
        ),
    ]


HEADINGS = ("h1", "h2", "h3")

# The report, in reading order.
SECTIONS = (
    title_section,
    frontier_section,
    matrix_section,
    fitmap_section,
    stacks_section,
    fastest_section,
    learning_section,
    vllm_share_section,
    setup_section,
    heatmap_section,
    verdict_section,
    speed_section,
    time_section,
    memory_section,
    predictions_section,
    not_completed_section,
    curves_section,
    files_section,
)


# A learning sweep's report, in reading order: the answer it was run for first (which configuration
# learns, then the verdicts), what fits after the speed (without a budget, every completed trial fits).
LEARNING_SECTIONS = (
    title_section,
    learning_section,
    verdict_section,
    stacks_section,
    fastest_section,
    vllm_share_section,
    setup_section,
    frontier_section,
    matrix_section,
    fitmap_section,
    heatmap_section,
    speed_section,
    time_section,
    memory_section,
    predictions_section,
    not_completed_section,
    curves_section,
    files_section,
)


def learning_sweep(data: ReportData) -> bool:
    """A sweep run to see what learns, not what fits: no memory budget set (memory.budget_gib; the GPU's
    size may still stand in for one), no memory-phase probe, and held-out accuracy measured."""
    trials = data.outputs.trials
    return not set_budgets_gib(trials) and not memory_probes(trials) and not ranked_learning(trials).empty


def build_blocks(data: ReportData) -> list[Block]:
    """The report's blocks in reading order. A learning sweep's report leaves out what says nothing
    (filler blocks) and each section left with nothing but its headings."""
    if not learning_sweep(data):
        return [block for section in SECTIONS for block in section(data)]
    blocks = []
    for section in LEARNING_SECTIONS:
        said = [block for block in section(data) if not block.filler]
        if any(block.kind not in HEADINGS for block in said):
            blocks += said
    return blocks
