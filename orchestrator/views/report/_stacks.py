"""Every stack against a base (TRL unless the report names another): for each configuration both ran,
the ratios of their peak memory and throughput, and which of them fits where the other does not."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.judging.intervals import Estimate, MemoryRatio, memory_ratio_interval, ratio_interval
from orchestrator.views.report._configs import CONFIG_COLUMNS, CONFIG_WORDS, varying_config_columns
from orchestrator.views.report._document import fmt
from orchestrator.views.report._outputs import plain
from orchestrator.words.outcome import COMPLETED, MEMORY_LABELS, OOM, STATUS_WORDS
from trainers import stacks

# A configuration less its stack: what two stacks must share to be compared.
MATCH_COLUMNS = [c for c in CONFIG_COLUMNS if c != "stack"]
MIXED = "mixed"  # memory_kind where the two stacks measured different kinds of memory
# One row per configuration and stack compared with the base: `stack` (the other) and `base` name them,
# base_* and stack_* hold their figures.
SIDES = ("base", "stack")
COMPARISON_COLUMNS = [*MATCH_COLUMNS, "base", "stack", "memory_kind",
                      *(f"{side}_{figure}" for side in SIDES for figure in ("status", "peak_gib", "tokens", "fits")),
                      *(f"{side}_{figure}" for side in SIDES for figure in ("tokens_lo", "tokens_hi", "seeds")),
                      "base_cycles", "stack_cycles", "memory_ratio", "memory_ratio_lo", "memory_ratio_hi", "memory_words",
                      "speed_ratio", "speed_ratio_lo",
                      "speed_ratio_hi", "speed_words"]  # fmt: skip


def _key(row: pd.Series) -> tuple:
    return tuple(plain(row.get(c)) for c in MATCH_COLUMNS)


def stack_comparison(ranked: pd.DataFrame, trials: pd.DataFrame, base: str = stacks.BASE) -> pd.DataFrame:
    """One row per configuration and other stack, where the base and that stack both ran it (completed
    or out of memory); stacks in registration order (then any the registry does not know, by name).

    ranked: _configs.aggregate_repeats (completed configurations; `fits` False where the peak passed the
    budget). memory_kind: the kind of peak both measured (outcome.PEAK_SOURCES), MIXED where they
    differ. {base,stack}_status: COMPLETED where a seed completed, else OOM. {base,stack}_fits: True where
    a completed configuration fits (or no budget is known), False where it ran out of memory or passed
    the budget. memory_ratio: the stack's peak over the base's, only where both measured the same kind of
    memory, memory_ratio_lo/_hi the range the run-to-run spread of both peaks allows and memory_words
    the ratio in words (intervals.memory_ratio_interval: "no clear difference" where it covers 1); speed_ratio: the stack's median tokens/s over the base's, speed_ratio_lo/_hi its 95% interval
    (intervals.ratio_interval over both sides' cycles, each seed's resampled within it; NaN below
    intervals.MIN_CYCLES cycles a side), speed_words the ratio as people read it (Ratio.words: "no clear
    difference" where the interval covers 1, "too few cycles to compare"); {base,stack}_cycles: the
    cycles each side's median is over, {base,stack}_tokens_lo/_hi its 95% interval, {base,stack}_seeds
    the seeds it pools.
    """
    figures: dict[tuple, dict[str, Any]] = {}
    for _, row in ranked.iterrows():
        entry = figures.setdefault(_key(row), {}).setdefault(row["stack"], {})
        entry.update(peak_gib=row["peak_gib"], peaks=row["peaks"], tokens=row["tokens_median"], kind=row["memory_kind"],
                     speeds=row["speeds"], cycles=row["cycles"], tokens_lo=row["tokens_low"],
                     tokens_hi=row["tokens_high"], seeds=len(row["speeds"]))  # fmt: skip
        entry["fits"] = entry.get("fits") or row["fits"] is not False
    if "status" in trials:
        for _, row in trials[trials["status"] == OOM].iterrows():
            entry = figures.setdefault(_key(row), {}).setdefault(row["stack"], {})
            entry["fits"] = entry.get("fits", False)
    rows = []
    for key, ran in figures.items():
        if base not in ran:
            continue
        for name in sorted(set(ran) - {base}, key=lambda n: (_stack_rank(n), n)):
            pair = {"base": ran[base], "stack": ran[name]}
            kinds = {side.get("kind") for side in pair.values()}
            same_kind = None not in kinds and len(kinds) == 1
            speed = ratio_interval(pair["stack"].get("speeds", []), pair["base"].get("speeds", []))
            memory = memory_ratio_interval(pair["stack"].get("peaks", []), pair["base"].get("peaks", []))
            if not same_kind:
                memory = MemoryRatio(None, None, None, memory.runs)
            rows.append(
                {
                    **dict(zip(MATCH_COLUMNS, key, strict=True)),
                    "base": base,
                    "stack": name,
                    "memory_kind": _kind(kinds - {None}),
                    **{
                        f"{side}_{f}": pair[side].get(f, np.nan)
                        for side in SIDES
                        for f in ("peak_gib", "tokens", "cycles", "tokens_lo", "tokens_hi", "seeds")
                    },
                    **{f"{side}_fits": pair[side]["fits"] for side in SIDES},
                    **{f"{side}_status": COMPLETED if "peak_gib" in pair[side] else OOM for side in SIDES},
                    "memory_ratio": np.nan if memory.value is None else memory.value,
                    "memory_ratio_lo": np.nan if memory.low is None else memory.low,
                    "memory_ratio_hi": np.nan if memory.high is None else memory.high,
                    "memory_words": memory.words(),
                    "speed_ratio": _ratio(pair["stack"].get("tokens"), pair["base"].get("tokens")),
                    "speed_ratio_lo": np.nan if speed.low is None else speed.low,
                    "speed_ratio_hi": np.nan if speed.high is None else speed.high,
                    "speed_words": speed.words() if speed.value is not None else "—",
                }
            )
    frame = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    order = frame["num_generations"] * frame["batch_size"]
    rank = frame["stack"].map(_stack_rank)
    return (
        frame.assign(_rank=rank, _order=order)
        .sort_values(["_rank", "stack", "mode", "model", "_order"])
        .drop(columns=["_rank", "_order"])
    )


def _stack_rank(name: str) -> int:
    """Registered stacks in registration order, then the ones this registry does not know."""
    registered = stacks.names()
    return registered.index(name) if name in registered else len(registered)


def _kind(kinds: set) -> str | None:
    return kinds.pop() if len(kinds) == 1 else MIXED if kinds else None


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


def _fit_words(base: str, base_fits: bool, other: str, other_fits: bool) -> str:
    if base_fits and other_fits:
        return "both"
    if base_fits or other_fits:
        return f"only {base if base_fits else other}"
    return "neither"


def stack_pairs(comparison: pd.DataFrame) -> Iterator[tuple[str, str, pd.DataFrame]]:
    """(base label, stack label, its rows) for each stack compared with the base, in the frame's order."""
    for (base, name), rows in comparison.groupby(["base", "stack"], sort=False):
        yield stacks.label(base), stacks.label(name), rows


def comparison_view(comparison: pd.DataFrame) -> pd.DataFrame:
    """One stack's rows of stack_comparison as people read them: ratios as "0.62×", figures with units,
    fits in words."""
    varying = varying_config_columns(comparison, exclude=("mode", "num_generations", "batch_size"))
    rows = []
    for _, r in comparison.iterrows():
        base, other = stacks.label(r["base"]), stacks.label(r["stack"])
        line = {"Mode": r["mode"], **{CONFIG_WORDS.get(c, c): plain(r[c]) for c in varying}}
        line |= {"K": plain(r["num_generations"]), "B": plain(r["batch_size"])}
        kind = MEMORY_LABELS.get(r["memory_kind"], "differs" if r["memory_kind"] == MIXED else "—")
        line |= {
            f"{base} peak (GiB)": _peak(r, "base"),
            f"{other} peak (GiB)": _peak(r, "stack"),
            f"Memory {other} ÷ {base}": r["memory_words"],
            "Memory": kind,
            f"{base} tokens/s": _tokens(r, "base"),
            f"{other} tokens/s": _tokens(r, "stack"),
            f"Tokens/s {other} ÷ {base}": r["speed_words"],
            "Fits": _fit_words(base, bool(r["base_fits"]), other, bool(r["stack_fits"])),
        }
        rows.append(line)
    return pd.DataFrame(rows)


def _peak(row: pd.Series, side: str) -> str:
    return fmt(row[f"{side}_peak_gib"], 2) if row[f"{side}_status"] == COMPLETED else STATUS_WORDS[OOM]


def _tokens(row: pd.Series, side: str) -> str:
    """The median tokens/s with its interval and sample (intervals.Estimate.words): '486 (1 cycle: too
    few for an interval)', '486 (95% CI 470–501; 12 cycles)'."""
    if pd.isna(row[f"{side}_tokens"]) or pd.isna(row[f"{side}_cycles"]):
        return "—"
    low, high = (row[f"{side}_tokens_{end}"] for end in ("lo", "hi"))
    return Estimate(
        float(row[f"{side}_tokens"]),
        None if pd.isna(low) else float(low),
        None if pd.isna(high) else float(high),
        int(row[f"{side}_cycles"]),
        int(row[f"{side}_seeds"]),
    ).words(unit="")


SHOWN_CELLS = 4  # configurations a sentence names before "and N more"


def _cells(rows: pd.DataFrame, varying: list[str], ratio: bool = False) -> str:
    """'grpo K=8 B=1 (1.12×), gspo K=2 B=2 and 3 more': the rows' configurations, named by what varies."""
    named = []
    for _, r in rows.head(SHOWN_CELLS).iterrows():
        words = [str(r["mode"]), f"K={plain(r['num_generations'])}", f"B={plain(r['batch_size'])}"]
        words += [f"{CONFIG_WORDS.get(c, c).lower()} {plain(r[c])}" for c in varying]
        named.append(" ".join(words) + (f" ({r['memory_ratio']:.2f}×)" if ratio else ""))
    more = f" and {len(rows) - SHOWN_CELLS} more" if len(rows) > SHOWN_CELLS else ""
    return ", ".join(named) + more


def pair_sentence(rows: pd.DataFrame) -> str:
    """What one stack's rows of stack_comparison say in words: where it fits what the base does not (the
    base out of memory, or over the budget) and the other way round, and where its peak is clearly above
    the base's (it costs more memory: the ratio's spread all above 1) or clearly below."""
    base, other = stacks.label(rows["base"].iloc[0]), stacks.label(rows["stack"].iloc[0])
    varying = varying_config_columns(rows, exclude=("mode", "num_generations", "batch_size"))
    said = []
    for winner, loser, wins in ((other, base, "stack"), (base, other, "base")):
        lose = "base" if wins == "stack" else "stack"
        only = rows[rows[f"{wins}_fits"].astype(bool) & ~rows[f"{lose}_fits"].astype(bool)]
        if not only.empty:
            oom = int((only[f"{lose}_status"] == OOM).sum())
            why = (
                f"{loser} ran out of memory at each" if oom == len(only)
                else f"{loser}'s peak passed the budget at each" if oom == 0
                else f"{loser} ran out of memory at {oom} of them, its peak passed the budget at the rest"
            )  # fmt: skip
            said.append(
                f"{winner} fits where {loser} does not at {len(only)} configuration(s) "
                f"({_cells(only, varying)}; {why})"
            )
    more, less = rows[rows["memory_ratio_lo"] > 1], rows[rows["memory_ratio_hi"] < 1]
    if not more.empty:
        said.append(
            f"{other}'s peak is above {base}'s, so it costs more memory, at {len(more)} ({_cells(more, varying, True)})"
        )
    if not less.empty:
        said.append(f"{other}'s peak is below {base}'s at {len(less)} ({_cells(less, varying, True)})")
    if not said:
        return f"{other} and {base} fit the same configurations here, and no peak of one is clearly above the other's."
    return "; ".join(said) + "."
