"""Unsloth against TRL: for each configuration both stacks ran, the ratios of their peak memory and
throughput, and which of them fits where the other does not."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from orchestrator.recording.outcome import COMPLETED, MEMORY_LABELS, OOM, STATUS_WORDS
from orchestrator.views.report._configs import CONFIG_COLUMNS, CONFIG_WORDS, varying_config_columns
from orchestrator.views.report._document import fmt
from orchestrator.views.report._outputs import plain
from trainers.spec import FRAMEWORKS

# The stack each ratio is taken against, and the one divided by it (Unsloth ÷ TRL).
BASE, OTHER = FRAMEWORKS
STACK_NAMES = {"trl": "TRL", "unsloth": "Unsloth"}
# A configuration less its framework: what two stacks must share to be compared.
MATCH_COLUMNS = [c for c in CONFIG_COLUMNS if c != "framework"]
MIXED = "mixed"  # memory_kind where the two stacks measured different kinds of memory
COMPARISON_COLUMNS = [*MATCH_COLUMNS, "memory_kind",
                      *(f"{s}_{figure}" for s in FRAMEWORKS for figure in ("status", "peak_gib", "tokens", "fits")),
                      "memory_ratio", "speed_ratio"]  # fmt: skip


def _key(row: pd.Series) -> tuple:
    return tuple(plain(row.get(c)) for c in MATCH_COLUMNS)


def stack_comparison(ranked: pd.DataFrame, trials: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration both stacks ran (completed or out of memory).

    ranked: _configs.aggregate_repeats (completed configurations; `fits` False where the peak passed the
    budget). memory_kind: the kind of peak both measured (outcome.PEAK_SOURCES), MIXED where they
    differ. {stack}_status: COMPLETED where a seed completed, else OOM. {stack}_fits: True where a
    completed configuration fits (or no budget is known), False where
    it ran out of memory or passed the budget. memory_ratio: OTHER's peak over BASE's, only where both
    measured the same kind of memory; speed_ratio: OTHER's median tokens/s over BASE's.
    """
    figures: dict[tuple, dict[str, Any]] = {}
    for _, row in ranked.iterrows():
        entry = figures.setdefault(_key(row), {}).setdefault(row["framework"], {})
        entry.update(peak_gib=row["peak_gib"], tokens=row["tokens_median"], kind=row["memory_kind"])
        entry["fits"] = entry.get("fits") or row["fits"] is not False
    if "status" in trials:
        for _, row in trials[trials["status"] == OOM].iterrows():
            entry = figures.setdefault(_key(row), {}).setdefault(row["framework"], {})
            entry["fits"] = entry.get("fits", False)
    rows = []
    for key, stacks in figures.items():
        if BASE not in stacks or OTHER not in stacks:
            continue
        base, other = stacks[BASE], stacks[OTHER]
        same_kind = base.get("kind") is not None and base.get("kind") == other.get("kind")
        kinds = {base.get("kind"), other.get("kind")} - {None}
        rows.append(
            {
                **dict(zip(MATCH_COLUMNS, key, strict=True)),
                "memory_kind": kinds.pop() if len(kinds) == 1 else MIXED if kinds else None,
                **{f"{s}_{f}": stacks[s].get(f, np.nan) for s in FRAMEWORKS for f in ("peak_gib", "tokens")},
                **{f"{s}_fits": stacks[s]["fits"] for s in FRAMEWORKS},
                **{f"{s}_status": COMPLETED if "peak_gib" in stacks[s] else OOM for s in FRAMEWORKS},
                "memory_ratio": _ratio(other.get("peak_gib"), base.get("peak_gib")) if same_kind else np.nan,
                "speed_ratio": _ratio(other.get("tokens"), base.get("tokens")),
            }
        )
    frame = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    order = frame["num_generations"] * frame["batch_size"]
    return frame.assign(_order=order).sort_values(["mode", "model", "_order"]).drop(columns="_order")


def _ratio(numerator: Any, denominator: Any) -> float:
    if (
        numerator is None
        or denominator is None
        or pd.isna(numerator)
        or pd.isna(denominator)
        or not denominator
    ):
        return np.nan
    return float(numerator) / float(denominator)


def _fit_words(base_fits: bool, other_fits: bool) -> str:
    if base_fits and other_fits:
        return "both"
    if base_fits or other_fits:
        return f"only {STACK_NAMES[BASE if base_fits else OTHER]}"
    return "neither"


def comparison_view(comparison: pd.DataFrame) -> pd.DataFrame:
    """stack_comparison as people read it: ratios as "0.62×", figures with units, fits in words."""
    varying = varying_config_columns(comparison, exclude=("mode", "num_generations", "batch_size"))
    base, other = STACK_NAMES[BASE], STACK_NAMES[OTHER]
    rows = []
    for _, r in comparison.iterrows():
        line = {"Mode": r["mode"], **{CONFIG_WORDS.get(c, c): plain(r[c]) for c in varying}}
        line |= {"K": plain(r["num_generations"]), "B": plain(r["batch_size"])}
        kind = MEMORY_LABELS.get(r["memory_kind"], "differs" if r["memory_kind"] == MIXED else "—")
        line |= {
            f"{base} peak (GiB)": _peak(r, BASE),
            f"{other} peak (GiB)": _peak(r, OTHER),
            f"Memory {other} ÷ {base}": _times(r["memory_ratio"]),
            "Memory": kind,
            f"{base} tokens/s": fmt(r[f"{BASE}_tokens"]),
            f"{other} tokens/s": fmt(r[f"{OTHER}_tokens"]),
            f"Tokens/s {other} ÷ {base}": _times(r["speed_ratio"]),
            "Fits": _fit_words(bool(r[f"{BASE}_fits"]), bool(r[f"{OTHER}_fits"])),
        }
        rows.append(line)
    return pd.DataFrame(rows)


def _peak(row: pd.Series, stack: str) -> str:
    return fmt(row[f"{stack}_peak_gib"], 2) if row[f"{stack}_status"] == COMPLETED else STATUS_WORDS[OOM]


def _times(ratio: float) -> str:
    return "—" if pd.isna(ratio) else f"{ratio:.2f}×"
