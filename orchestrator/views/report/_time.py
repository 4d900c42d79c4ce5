"""Where the time goes: each trial's split of step time (generation's share), the milliseconds per
decoding step (ms_per_token: the time to add one token to every sequence decoded together) and the GPU's
utilisation during generation, and a judgement: is generation latency-bound?

Generation is latency-bound when it takes most of the step and its time per token barely changes with
the number of sequences decoded together (trials of one decoding family: stack, model, completion
length, quantization, generation backend), or, for a trial alone, the GPU is mostly idle while it
generates (its own utilisation, or the whole GPU's when nothing shares it). Each decoding step then
costs the launch of the model's kernels more than their arithmetic, so tokens/s measures the number of
sequences decoded together (K x B) more than the stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from trainers import stacks
from trainers.record import STEP, TRIAL, time_split_figures

# Generation's share of the step above which it is what the step's time is.
HIGH_SHARE = 0.5
# Time per token growing by at most this factor while the sequences decoded together grow by at least
# MIN_SEQUENCE_RATIO: decoding is paying per step, not per sequence.
FLAT_GROWTH = 1.25
MIN_SEQUENCE_RATIO = 2.0
# The GPU busy less than this share of generation's time: mostly idle.
IDLE_UTIL_PCT = 50.0
FAMILY = ("stack", "model", "max_completion_length", "quantization", "generation")


@dataclass(frozen=True)
class Family:
    """A decoding family's trials, by the sequences each decoded together."""

    label: str
    sequences: list[float]  # per trial
    ms_per_token: list[float]
    gen_share: list[float]
    gen_util_pct: list[float | None]
    util_source: list[str | None]

    def median_at(self, n: float) -> float:
        values = sorted(m for s, m in zip(self.sequences, self.ms_per_token, strict=True) if s == n)
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    @property
    def lo(self) -> float:
        return min(self.sequences)

    @property
    def hi(self) -> float:
        return max(self.sequences)

    @property
    def growth(self) -> float | None:
        """ms per token at the most sequences over that at the fewest; None with one count of sequences."""
        if self.hi / self.lo < MIN_SEQUENCE_RATIO:
            return None
        return self.median_at(self.hi) / self.median_at(self.lo)

    @property
    def share(self) -> float:
        return float(pd.Series(self.gen_share).median())

    @property
    def idle_util(self) -> float | None:
        """The median utilisation during generation where it measured the trainer (its own); None when
        not measured so."""
        own = [
            u
            for u, s in zip(self.gen_util_pct, self.util_source, strict=True)
            if u is not None and s == "process"
        ]
        return float(pd.Series(own).median()) if own else None

    @property
    def latency_bound(self) -> bool | None:
        """True/False when judged; None when neither the sequences nor the utilisation tell."""
        if self.share < HIGH_SHARE:
            return False
        if self.growth is not None:
            return self.growth <= FLAT_GROWTH
        if self.idle_util is not None:
            return self.idle_util < IDLE_UTIL_PCT
        return None

    def sentence(self) -> str:
        share = f"generation took {self.share:.0%} of each step"
        if self.growth is not None:
            told = (
                f"{_n(self.hi)} sequences decoded together took {self.median_at(self.hi):.0f} ms per token, "
                f"{_n(self.lo)} took {self.median_at(self.lo):.0f} ms (x{self.hi / self.lo:g} the sequences, "
                f"{self.growth - 1:+.0%} per token)"
            )
        else:
            told = f"{self.median_at(self.lo):.0f} ms per token for {_n(self.lo)} sequences decoded together"
        if self.idle_util is not None:
            told += f"; the trainer kept the GPU busy {self.idle_util:.0f}% of generation"
        verdict = {
            True: "latency-bound",
            False: "not latency-bound",
            None: "not judged (one count of sequences, no per-process utilisation)",
        }
        return f"{self.label}: {share}; {told}: {verdict[self.latency_bound]}."


def _n(value: float) -> str:
    return f"{value:g}"


def trial_time_split(trials: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per trial that generated: its family's fields, sequences decoded together (the steps'
    completions per generation, else K x B over its ranks), and its time_split_figures (from the step
    rows, so rows recorded before those trial fields existed are read too)."""
    rows: list[dict[str, Any]] = []
    if steps.empty or "trial_key" not in steps:
        return pd.DataFrame()
    by_trial = {key: group for key, group in steps.groupby("trial_key", sort=False)}
    for trial in trials.to_dict("records"):
        group = by_trial.get(trial.get("trial_key"))
        if group is None:
            continue
        figures = time_split_figures(group.to_dict("records"))
        if figures[TRIAL.median_ms_per_token] is None:
            continue
        completions = pd.to_numeric(group.get(STEP.completions, pd.Series(dtype=float)), errors="coerce")
        completions = completions.dropna()
        ranks = trial.get("num_processes") or 1
        k, b = trial.get("num_generations"), trial.get("batch_size")
        sequences = (
            float(completions.median())
            if len(completions)
            else (k * b / ranks if k is not None and b is not None else None)
        )
        if pd.isna(sequences) or not sequences:
            continue  # the sequences decoded together are not known: nothing to compare
        rows.append({**{k: trial.get(k) for k in ("trial_key", *FAMILY)}, "sequences": sequences, **figures})
    return pd.DataFrame(rows)


def families(trials: pd.DataFrame, steps: pd.DataFrame) -> list[Family]:
    table = trial_time_split(trials, steps)
    if table.empty:
        return []
    found = []
    for key, group in table.groupby([c for c in FAMILY if c in table], sort=False, dropna=False):
        stack, model, length = key[0], key[1], key[2]
        found.append(
            Family(
                f"{stacks.label(str(stack))} {str(model).split('/')[-1]}, completions up to {length:g} tokens",
                list(group["sequences"]),
                list(group[TRIAL.median_ms_per_token]),
                list(group[TRIAL.median_gen_share]),
                [None if pd.isna(u) else float(u) for u in group[TRIAL.median_gen_util_pct]],
                [None if pd.isna(s) else str(s) for s in group[TRIAL.gpu_util_source]],
            )
        )
    return found


def time_paragraphs(trials: pd.DataFrame, steps: pd.DataFrame) -> list[str]:
    """The report's words on where the time goes; [] when no trial generated."""
    found = families(trials, steps)
    if not found:
        return []
    out = [" ".join(f.sentence() for f in found)]
    if any(f.latency_bound for f in found):
        out.append(
            "Latency-bound decoding: each new token costs about the same whatever the number of sequences "
            "decoded together, because every decoding step launches the model's kernels one after another "
            "and waits on them, and the GPU idles between launches. Tokens/s then measures the batch "
            "(completions per generation, K x B) more than the stack: a configuration with twice the "
            "completions shows about twice the tokens/s at the same ms per token. What raises throughput: "
            "more completions per generation (a larger K or B) while memory allows, or generating with "
            "vLLM (`generation: vllm`), whose batched, graph-captured decoding keeps the GPU busy."
        )
    out.append(
        "ms per token: generation's time over its decoding steps (the longest completion of each "
        "generation call). GPU utilisation during generation is the trainer's own where NVML reports "
        "it per process; the whole GPU's otherwise, which counts every process's kernels: on a GPU "
        "shared by packed trials it does not judge one trial."
    )
    return out
