"""What the report says: its blocks (sentences, the ranked and not-completed tables, the matrix, the
plots) built from a sweep's outputs and figures."""

from __future__ import annotations

from typing import Any

import pandas as pd

from orchestrator import outcome
from orchestrator.outcome import COMPLETED, STATUS_WORDS, STATUSES
from orchestrator.report._configs import CONFIG_WORDS, varying_config_columns
from orchestrator.report._document import Block, fmt, shorten
from orchestrator.report._feasibility import FeasibilityGrid
from orchestrator.report._outputs import SweepOutputs, column, parse_json, plain
from orchestrator.verdict import PRECEDENCE, VERDICT_WORDS, VERDICTS


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


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


def ranked_table(ranked: pd.DataFrame, budget_gib: float | None = None) -> pd.DataFrame:
    """The ranked table for people: varying settings, units in headers, one row per configuration;
    with a budget, a column says whether each configuration's peak fits it."""
    varying = varying_config_columns(ranked, exclude=("framework", "mode", "num_generations", "batch_size"))
    kinds = set(ranked["memory_kind"].dropna())
    memory_header = "Peak GPU memory (GiB)" if kinds == {outcome.GPU} else "Peak memory (GiB)"
    rows = []
    for i, row in ranked.iterrows():
        k, b = plain(row["num_generations"]), plain(row["batch_size"])
        line = {"Rank": i + 1, "Framework": row["framework"], "Mode": row["mode"]}
        line |= {CONFIG_WORDS.get(col, col): plain(row[col]) for col in varying}
        if row["other"]:
            line["Other settings"] = row["other"]
        peak = fmt(row["peak_gib"], 2) + (
            " (RSS)" if row["memory_kind"] == outcome.RSS and kinds != {outcome.RSS} else ""
        )
        line |= {
            "K": k,
            "B": b,
            "B×K": k * b if k is not None and b is not None else None,
            "Seeds": row["seeds"],
            "Tokens/s (median)": row["tokens_median"],
            "Tokens/s p10–p90": f"{fmt(row['tokens_p10'])}–{fmt(row['tokens_p90'])}",
            "Step (s, median)": fmt(row["step_s_median"], 2),
            memory_header: peak,
            "Final reward": fmt(row["final_reward"], 3),
        }
        if budget_gib is not None:
            fits = row["fits"]
            line[f"Fits {budget_gib:g} GiB"] = (
                "yes" if fits is True else "NO: over budget" if fits is False else "not measured"
            )
        rows.append(line)
    return pd.DataFrame(rows)


def not_completed_table(summary: pd.DataFrame) -> pd.DataFrame:
    others = summary[summary["status"] != COMPLETED]
    return pd.DataFrame(
        {
            "Trial": others["run_name"],
            "Framework": others["framework"],
            "Mode": others["mode"],
            "K": others["num_generations"],
            "B": others["batch_size"],
            "Outcome": [STATUS_WORDS.get(s, str(s)) for s in others["status"]],
            "What happened": [shorten(d) for d in others["status_detail"]],
        }
    )


def flagged_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Completed trials whose training verdict flags them, worst first (orchestrator.verdict.PRECEDENCE)."""
    flagged = summary[summary["training_verdict"].isin(PRECEDENCE)].copy()
    flagged["_rank"] = [PRECEDENCE.index(v) for v in flagged["training_verdict"]]
    flagged = flagged.sort_values(["_rank", "run_name"])
    return pd.DataFrame(
        {
            "Trial": flagged["run_name"],
            "Framework": flagged["framework"],
            "Mode": flagged["mode"],
            "K": flagged["num_generations"],
            "B": flagged["batch_size"],
            "Verdict": [VERDICT_WORDS[v] for v in flagged["training_verdict"]],
            "Why": list(flagged["training_verdict_detail"]),
        }
    )


def verdict_blocks(summary: pd.DataFrame, curves: dict[str, Any]) -> list[Block]:
    """The training verdicts: how many of each, the flagged trials with why, and their curves."""
    blocks = [Block("h2", "Does it learn: training verdicts")]
    verdicts = summary["training_verdict"].dropna()
    if verdicts.empty:
        return [*blocks, Block("p", "No trial completed, so none was judged.")]
    counts = verdicts.value_counts()
    parts = [f"{counts[v]} {VERDICT_WORDS[v]}" for v in VERDICTS if v in counts]
    blocks.append(
        Block(
            "p",
            f"{len(verdicts)} completed trials judged from their steps: {', '.join(parts)}. diverged: a NaN "
            "or a spike in loss, grad_norm or kl; memory creep: peak memory rising towards the budget; no "
            "signal: groups whose rewards are all equal (no advantage, nothing learned from the reward); "
            "truncated: completions cut at max_completion_length. Thresholds: the sweep's verdict section.",
        )
    )
    table = flagged_table(summary)
    if table.empty:
        return blocks
    blocks.append(Block("table", table=table))
    for key, verdict in zip(table["Trial"], table["Verdict"], strict=True):
        if curves.get(str(key)):
            blocks.append(Block("image", f"Curves {key} ({verdict})", path=curves[str(key)]))
    return blocks


def feasibility_block_table(grid: FeasibilityGrid) -> pd.DataFrame:
    table = grid.labels.replace("", "·").copy()
    table.columns = [f"B={b}" for b in table.columns]
    table.insert(0, "K \\ B", [f"K={k}" for k in table.index])
    return table.reset_index(drop=True)


def prediction_blocks(
    pairs: pd.DataFrame, errors: pd.DataFrame, terms: pd.DataFrame, plot: Any
) -> list[Block]:
    """Predicted vs measured peak (report._predictions): the scatter and the errors by family, or one
    sentence when no trial had a prediction; then what each family's memory is made of."""
    blocks = [Block("h2", "Predicted vs measured peak")]
    if pairs.empty:
        blocks.append(Block("p", "No trial of this sweep has a predicted peak: no prediction was made."))
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
                    f" (the others: {others}; an out-of-memory trial's peak is a lower bound)"
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


def build_blocks(outputs: SweepOutputs, summary: pd.DataFrame, ranked: pd.DataFrame, grids: list[FeasibilityGrid],
                 plot_paths: dict[str, Any], budget_gib: float | None, predictions: list[Block]) -> list[Block]:  # fmt: skip
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
        blocks.append(Block("table", table=ranked_table(ranked, budget_gib)))
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
            Block("p", f"Cells: {grid.memory_words}, or the outcome. {_sentence(grid.budget_caption)}.")
        )
        if grid.verdict_note:
            blocks.append(Block("p", f"{grid.verdict_note}."))
        blocks.append(Block("table", table=feasibility_block_table(grid)))
        path = plot_paths["feasibility"].get(grid.title)
        if path:
            blocks.append(Block("image", f"Feasibility {grid.title}", path=path))

    blocks += verdict_blocks(summary, plot_paths.get("curves", {}))

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
    blocks += predictions

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
