"""The report's fit map: with a budget, where each stack and model of the sweep stops fitting past the
configurations it ran (orchestrator/judging/fitmap.py), predicted from the memory model fitted on the
sweep's trials, its measured trials drawn on it; and the report's section of it."""

from __future__ import annotations

from typing import Any

import pandas as pd

from orchestrator.judging.fitmap import BS, KS, LENGTHS, FitMap, fit_map, hub_name
from orchestrator.judging.memory import spec_of
from orchestrator.views.report._document import Block
from trainers import stacks
from trainers.record import MEMORY_LABELS

# More B values than this: the map shows the smallest and the largest (a figure's row per B).
MAX_BS = 3


def report_fit_map(trials: pd.DataFrame, budget_gib: float | None) -> FitMap | None:
    """The sweep's fit map: its stacks (the base first) and models, its fixed knobs (its first trial's),
    K over KS and the sweep's own, its B values, completions LENGTHS and its own; None without a
    budget or a trial with a configuration."""
    if budget_gib is None or "config" not in trials:
        return None
    rows: list[dict[str, Any]] = [
        {k: (None if isinstance(v, float) and pd.isna(v) else v) for k, v in row.items()}
        for row in trials.to_dict("records")
        if isinstance(row.get("config"), str)
    ]
    if not rows:
        return None
    specs = [spec_of(r) for r in rows]
    stack_names = sorted({s.stack for s in specs}, key=lambda f: (f != stacks.BASE, f))
    models = list(dict.fromkeys(hub_name(s.model) for s in specs))
    ks = sorted({*KS, *(s.num_generations for s in specs)})
    bs = sorted({s.batch_size for s in specs}) or list(BS)
    if len(bs) > MAX_BS:
        bs = [bs[0], bs[-1]]
    lengths = (
        min(LENGTHS[0], *(s.max_completion_length for s in specs)),
        max(LENGTHS[1], *(s.max_completion_length for s in specs)),
    )
    return fit_map(rows, specs[0], models, stack_names, budget_gib, ks, bs, lengths)


def fitmap_blocks(fm: FitMap | None, plots: dict[str, Any]) -> list[Block]:
    """The section: what the map is, the table, each model's picture, the measured trials on it."""
    if fm is None:
        return []
    lo, hi = fm.lengths
    blocks = [
        Block("h2", "Where it stops fitting: the predicted fit map"),
        Block(
            "p",
            f"Predicted from the memory model fitted on this sweep's trials (nothing more ran): for each "
            f"stack, model, K and B, the longest completion (of {lo}–{hi} tokens) whose predicted "
            f"{MEMORY_LABELS[fm.measure]} peak fits the {fm.budget_gib:g} GiB budget, then in brackets "
            "the length it surely fits up to and the one past which it surely does not (the prediction "
            "interval's high and low ends against the budget). The other knobs are the sweep's first "
            "trial's. Markers on the pictures are measured trials; the rest is predicted.",
        ),
        Block("table", table=fm.table()),
        *(Block("p", line) for line in fm.against_base()),
    ]
    for model in fm.models:
        path = plots.get(model)
        if path:
            blocks.append(Block("image", f"Fit map {model}", path=path))
    if fm.measured:
        blocks += [
            Block("p", f"Measured trials on the map ({len(fm.measured)}), each against the prediction:"),
            Block("table", table=fm.measured_table()),
        ]
    return blocks
