"""The report's answer to "what share of memory to give vLLM": each stack and K, transformers generation
against vLLM at each vllm_gpu_memory_utilization the sweep ran, from the measured peaks and tokens/s
(sweeps/vllm-memory.yaml asks it)."""

from __future__ import annotations

import math

import pandas as pd

from orchestrator.views.report._document import fmt
from orchestrator.views.report._outputs import parse_json
from orchestrator.words.outcome import COMPLETED

COLUMNS = ["Stack", "K", "Generation", "vLLM share", "Status", "Peak GiB", "Tokens/s"]


def share_table(trials: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """One row per trial of a sweep with vLLM trials, by stack, K, then transformers first and shares
    ascending; empty when no trial generated with vLLM."""
    measured = summary.set_index("run_name") if not summary.empty else summary
    rows = []
    for _, trial in trials.iterrows():
        config = parse_json(trial.get("config"))
        generation = config.get("generation", "transformers")
        key = trial.get("trial_key")
        figures = measured.loc[key] if key in measured.index else {}
        peak = _first(figures.get("peak_device_gib"), figures.get("peak_rss_gib"))
        rows.append(
            [trial.get("stack"), config.get("num_generations"), generation,
             config.get("vllm_gpu_memory_utilization") if generation == "vllm" else None,
             trial.get("status"), peak, _first(figures.get("median_tokens_per_s"))]
        )  # fmt: skip
    table = pd.DataFrame(rows, columns=COLUMNS)
    if not (table["Generation"] == "vllm").any():
        return table.iloc[0:0]
    order = table.assign(_g=table["Generation"] != "transformers", _s=table["vLLM share"].fillna(0.0))
    ordered = order.sort_values(["Stack", "K", "_g", "_s"]).drop(columns=["_g", "_s"]).reset_index(drop=True)
    ordered = ordered.astype(object).where(ordered.notna(), None)  # not measured: None, never NaN
    # as the sweep wrote it (0.25, not the table's one-decimal 0.2)
    ordered["vLLM share"] = pd.Series(
        [None if v is None else f"{v:g}" for v in ordered["vLLM share"]], dtype=object
    )
    return ordered


def share_answers(table: pd.DataFrame, budget_gib: float | None) -> list[str]:
    """Per stack and K: the smallest share that completed (within the budget) and the fastest one."""
    answers = []
    for (stack, k), group in table.groupby(["Stack", "K"], sort=True):
        fits = group[(group["Generation"] == "vllm") & (group["Status"] == COMPLETED)]
        if budget_gib is not None:
            fits = fits[
                fits["Peak GiB"].apply(lambda p: p is not None and not math.isnan(p) and p <= budget_gib)
            ]
        if fits.empty:
            answers.append(
                f"{stack}, K {k}: no vLLM share completed; keep transformers generation or a larger budget."
            )
            continue
        fits = fits.assign(_share=fits["vLLM share"].astype(float))
        smallest = fits.sort_values("_share").iloc[0]
        fastest = fits.sort_values(["Tokens/s", "_share"], ascending=[False, True]).iloc[0]
        base = group[(group["Generation"] == "transformers") & (group["Status"] == COMPLETED)]
        versus = (
            f", {fastest['Tokens/s'] / base['Tokens/s'].iloc[0]:.2f}x transformers' tokens/s"
            if not base.empty and base["Tokens/s"].iloc[0]
            else ""
        )
        answers.append(
            f"{stack}, K {k}: give vLLM {fastest['vLLM share']} ({fmt(fastest['Tokens/s'])} tokens/s, peak "
            f"{fmt(fastest['Peak GiB'], 2)} GiB{versus}); the smallest share that completed: {smallest['vLLM share']}."
        )
    return answers


def _first(*values) -> float | None:
    for value in values:
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            return float(value)
    return None
