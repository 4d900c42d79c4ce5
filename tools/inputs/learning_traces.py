"""Recorded step rows of real training runs (bench/data/learning/*.parquet), for the verdict tests and bench/accuracy/learning.py.

A trace's file name starts with the verdict it must read, then `-` and what ran: e.g.
`learning-smollm2-sums.parquet` (a SmolLM2 run that learns), `diverged-smollm2-lr1e-2.parquet`. Each file
holds one trial's steps parquet rows (the steps/stack=<f>/mode=<m>/<trial_key>.parquet the sweep wrote),
copied as they are; beside it, `<name>.json` holds the trial's eval_before_pass_at_1 and eval_before_prompts
(its held-out accuracy before the first step). bench/accuracy/learning.py --record writes both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

LEARNING_TRACES = Path(__file__).resolve().parents[2] / "bench" / "data" / "learning"


def learning_trace_files() -> list[Path]:
    """Every recorded trace, by name (none until real runs are recorded)."""
    return sorted(LEARNING_TRACES.glob("*.parquet"))


def expected_verdict(path: Path) -> str:
    """The verdict a trace must read: its file name up to the first `-`."""
    return path.stem.split("-", 1)[0]


def load_learning_trace(path: Path | str) -> list[dict[str, Any]]:
    """A trace's step rows as dicts (the shape judge() and the recorder take), in step order; a bare name
    is looked up in bench/data/learning/."""
    path = Path(path)
    if not path.is_absolute() and not path.exists():
        path = LEARNING_TRACES / path.name
    rows = pq.read_table(path).to_pylist()
    return sorted(rows, key=lambda r: r.get("step") or 0)


def trace_eval_before(path: Path) -> tuple[float | None, float | None]:
    """The trace's held-out (pass@1, prompts) before its first step; (None, None) where not measured."""
    side = path.with_suffix(".json")
    before = json.loads(side.read_text()) if side.exists() else {}
    return before.get("eval_before_pass_at_1"), before.get("eval_before_prompts")
