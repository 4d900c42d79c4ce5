"""A memory family: the knobs whose trials share one set of coefficients, and the rows that stand for its
measurements (measured trials; simulated steps only until the family measured one)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from orchestrator.words.outcome import COMPLETED, OOM, TIMEOUT
from trainers.trial import KNOBS, TrialSpec, renamed_keys

# A row of a step simulated on meta (orchestrator/judging/memory/_simulated.py), not a measurement.
SIMULATED = "simulated"
# The knobs that make a family: trials of one family share one set of coefficients.
FAMILY = (
    "stack", "mode", "model", "quantization", "dtype", "gradient_checkpointing", "generation", "distributed",
    "num_processes", "adapter",
)  # fmt: skip


def family_of(spec: TrialSpec) -> tuple:
    return tuple(spec.effective_dtype if k == "dtype" else getattr(spec, k) for k in FAMILY)


def family_label(spec: TrialSpec) -> str:
    extras = [
        " checkpointed" if spec.gradient_checkpointing else "",
        " vLLM" if spec.generation == "vllm" else "",
        f" {spec.num_processes} GPUs {spec.distributed}" if spec.num_processes > 1 else "",
        " full fine-tuning" if spec.adapter == "none" else "",
    ]
    return f"{spec.stack} {spec.mode} {spec.model} {spec.quantization} {spec.effective_dtype}" + "".join(
        extras
    )


def _row_spec(row: Mapping[str, Any]) -> TrialSpec:
    """spec_of for a fit, which only reads the spec: a ledger's row parsed once, not at every refit."""
    config = row.get("config")
    return _spec_of_config(config) if isinstance(config, str) else spec_of(row)


@functools.lru_cache(maxsize=1 << 14)
def _spec_of_config(config: str) -> TrialSpec:
    return spec_of({"config": config})


def spec_of(row: Mapping[str, Any]) -> TrialSpec:
    """The TrialSpec of a trials.parquet row (its `config` JSON), or of a dict of knobs."""
    values = renamed_keys(json.loads(row["config"]) if row.get("config") else row)[0]  # old names too
    return TrialSpec(**{k: v for k, v in values.items() if k in KNOBS})


def measured_families(rows) -> set[tuple]:
    """The families `rows` measured a trial of (completed, oom or timeout; not simulated)."""
    return {
        family_of(_row_spec(r))
        for r in rows
        if r.get("status") in (COMPLETED, OOM, TIMEOUT) and r.get("config") and r.get("basis") != SIMULATED
    }


def superseded_dropped(rows: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """`rows` less the simulated rows of every family a row measured: a measurement always wins."""
    if not any(r.get("basis") == SIMULATED for r in rows):
        return rows
    measured = measured_families(rows)
    return [r for r in rows if r.get("basis") != SIMULATED or family_of(_row_spec(r)) not in measured]
