"""The ranked table for people: the configurations that completed, fastest first, with their tokens/s
interval, step time, peak memory and whether they fit the budget."""

from __future__ import annotations

from typing import Any

import pandas as pd

from orchestrator.judging.intervals import MIN_CYCLES, TIGHT, TIGHT_SPREAD, Estimate, Margin, tie_ranks
from orchestrator.views.report._configs import CONFIG_WORDS, varying_config_columns
from orchestrator.views.report._document import fmt
from orchestrator.views.report._feasibility import OVER_BUDGET, memory_words
from orchestrator.views.report._outputs import plain
from orchestrator.words import outcome


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _seeds(seeds: str) -> str:
    """'seed 42' for one seed, '3 seeds (1, 2, 3)' for repeats."""
    listed = [x for x in seeds.split(", ") if x]
    return f"seed {listed[0]}" if len(listed) == 1 else f"{len(listed)} seeds ({seeds})"


def ranked_table(ranked: pd.DataFrame, budget_gib: float | None = None) -> pd.DataFrame:
    """The ranked table for people: varying settings, units in headers, one row per configuration;
    with a budget, a column says whether each configuration's peak fits it."""
    varying = varying_config_columns(ranked, exclude=("stack", "mode", "num_generations", "batch_size"))
    kinds = set(ranked["memory_kind"].dropna())
    memory_header = _sentence(memory_words(kinds))
    ranks = _tie_ranks(ranked)
    rows = []
    for i, row in ranked.iterrows():
        k, b = plain(row["num_generations"]), plain(row["batch_size"])
        line = {"Rank": ranks[i], "Stack": row["stack"], "Mode": row["mode"]}
        line |= {CONFIG_WORDS.get(col, col): plain(row[col]) for col in varying}
        if row["other"]:
            line["Other settings"] = row["other"]
        mixed = len(kinds) > 1 and row["memory_kind"] in outcome.MEMORY_LABELS
        peak = fmt(row["peak_gib"], 2) + (f" {outcome.MEMORY_LABELS[row['memory_kind']]}" if mixed else "")
        line |= {
            "K": k,
            "B": b,
            "B×K": k * b if k is not None and b is not None else None,
            "Seeds": _seeds(row["seeds"]),
            "Tokens/s (median)": row["tokens_median"],
            "Tokens/s 95% CI": _interval(row),
            "Cycles": plain(row["cycles"]),
            "Tokens/s p10–p90": f"{fmt(row['tokens_p10'])}–{fmt(row['tokens_p90'])}",
            "Step (s, median)": _step_s(row),
            memory_header: peak,
            "Final reward": fmt(row["final_reward"], 3),
        }
        if budget_gib is not None:
            fits = row["fits"]
            line[f"Fits {budget_gib:g} GiB"] = (
                _fit_margin(row)
                if fits is True
                else f"no: {OVER_BUDGET}"
                if fits is False
                else "not measured"
            )
        rows.append(line)
    return pd.DataFrame(rows)


def _step_s(row) -> str:
    """The measured median step; where only a synthetic probe ran, its full-length step, extrapolated."""
    measured, extrapolated = row["step_s_median"], row.get("step_s_extrapolated")
    if (
        (measured is None or measured != measured)
        and extrapolated is not None
        and extrapolated == extrapolated
    ):
        return f"{fmt(extrapolated, 2)} (extrapolated)"
    return fmt(measured, 2)


def _tie_ranks(ranked: pd.DataFrame) -> list[str]:
    """Each row's rank as people read it: '1', '2 (tie)', or '— (too few cycles)'; ties
    (intervals.tie_ranks) within each part of the ranking (fits, passed the budget, not measured)."""
    estimates = [
        Estimate(
            row["tokens_median"], _or_none(row["tokens_low"]), _or_none(row["tokens_high"]), row["cycles"], 1
        )
        for _, row in ranked.iterrows()
    ]
    parts = ranked["fits"].map({True: 0, False: 1}).fillna(2).tolist()
    ranks: list[int | None] = []
    for part in sorted(set(parts), key=parts.index):
        before = sum(r is not None for r in ranks)  # ranked in the parts above
        part_ranks = tie_ranks([e for e, p in zip(estimates, parts, strict=True) if p == part])
        ranks += [None if r is None else r + before for r in part_ranks]
    counts = {r: ranks.count(r) for r in ranks if r is not None}
    return ["— (too few cycles)" if r is None else f"{r} (tie)" if counts[r] > 1 else str(r) for r in ranks]


def _or_none(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _interval(row: pd.Series) -> str:
    if pd.isna(row["tokens_low"]):
        return f"too few cycles (under {MIN_CYCLES})"
    return f"{fmt(row['tokens_low'])}–{fmt(row['tokens_high'])}"


def _fit_margin(row: pd.Series) -> str:
    """'yes, 2.00 GiB (25%) to spare' or 'tight: 0.02 GiB (0.25%) to spare'."""
    if pd.isna(row["budget_margin_gib"]):
        return "yes"
    words = Margin(row["budget_margin_gib"], row["budget_margin_pct"], TIGHT_SPREAD * row["peak_gib"]).words()
    return words if words.startswith(TIGHT) else f"yes, {words}"
