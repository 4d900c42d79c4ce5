"""The GPU memory prior's error on AgileRL's measured GRPO training peaks
(bench/data/agilerl-grpo-training-peaks.csv: its source, licence and what was measured are in its header).

Their workload is matched to ours where it can be and the differences are stated, not fitted away:
- the log-prob path: theirs is chunked and never builds the full logits, like Unsloth's, so each row's
  logits are an Unsloth trial's (the `logit_chunk` term); their gradient checkpointing is
  transformers' (each layer's input kept on the GPU), so its activations are a TRL trial's (Unsloth
  offloads them to the host). Their knobs: K = group_size, B = 1 prompt,
  micro-batch = min(micro_batch, K) (their micro-batches are capped by the rows available), prompt
  seq_len/4 and completion 3/4 seq_len tokens, LoRA rank lora_rank, bf16, no quantization, gradient
  checkpointing on;
- their training rows hold no generation (vLLM sleeps, its KV cache handed back): the generation part
  (KV cache, sampled logits) is left out, and the runtime baseline is their measured sleeping baseline
  (CUDA context and vLLM's residue) instead of the prior's 0.6 GiB CUDA context;
- they keep a second fp32 LoRA adapter for the reference: 4 bytes a LoRA parameter are added;
- where completions were not forced to their maximum (7B), the measured peak may be lower than a
  full-length step would reach: the prior's error there is an upper bound.

Prints, for the GPU prior (the face values calibrated on round 1's H100 trials: _terms.CALIBRATED) and
for the face values alone (_terms.FACE), per model and GPU, the mean and worst absolute error and the worst under-prediction (measured
above predicted), as % of the measured peak, and the same over all rows.

Usage: python -m bench prior_agilerl
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from bench import DATA as BENCH_DATA
from bench import Context, benchmark
from orchestrator.judging.memory._fit import predictive_sd
from orchestrator.judging.memory._model import Z, model_shape
from orchestrator.judging.memory._terms import face, prior, terms
from trainers.trial import TrialSpec
from trainers.units import GIB

DATA = BENCH_DATA / "agilerl-grpo-training-peaks.csv"
TRAINING_TERMS = ("weights", "lora", "activations", "logit_chunk")
REFERENCE_ADAPTER_BYTES = 4


def load(path: Path = DATA) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def spec_of_row(row: dict, stack: str = "unsloth") -> TrialSpec:
    seq, k = int(row["seq_len"]), int(row["group_size"])
    return TrialSpec(
        stack=stack,
        model=row["model"],
        quantization="none",
        dtype="bf16",
        lora_r=int(row["lora_rank"]),
        num_generations=k,
        batch_size=1,
        micro_batch_size=min(int(row["micro_batch"]), k),
        max_prompt_length=seq // 4,
        max_completion_length=seq - seq // 4,
        gradient_checkpointing=True,
    )


def predicted(row: dict, coefficients_of=prior) -> tuple[float, float]:
    """The prior's training-phase peak for a row and its interval's half-width (Z predictive standard
    deviations from the prior's spreads, as MemoryModel gives a family without trials), in bytes, on
    their workload (module docstring)."""
    spec = spec_of_row(row)
    shape, why = model_shape(spec.model)
    if shape is None:
        raise ValueError(why)
    # their chunked log-probs as Unsloth's, their checkpointed activations as TRL's (module docstring)
    sizes = terms(spec, shape, "gpu") | {
        "activations": terms(spec_of_row(row, "trl"), shape, "gpu")["activations"]
    }
    coefficients = coefficients_of("gpu")
    trained = sum(coefficients[name][0] * sizes[name] for name in TRAINING_TERMS) * GIB
    reference_adapter = shape.lora_params(spec.lora_r) * REFERENCE_ADAPTER_BYTES
    peak = float(row["sleeping_baseline_bytes"]) + trained + reference_adapter
    # The interval keeps the baseline's spread: the measured sleeping baseline replaces the prior's
    # CUDA context, and the spread covers what else a runtime holds (allocator slack, rollout tensors).
    spread_terms = ("baseline", *TRAINING_TERMS)
    vector = np.array([sizes[name] for name in spread_terms])
    covariance = np.diag([coefficients[name][1] ** 2 for name in spread_terms])
    return peak, Z * predictive_sd(vector, covariance, peak / GIB) * GIB


def errors(rows: list[dict], coefficients_of=prior) -> list[float]:
    """(predicted - measured) / measured per row."""
    measured = [float(r["device_peak_bytes"]) for r in rows]
    return [(predicted(r, coefficients_of)[0] - m) / m for r, m in zip(rows, measured, strict=True)]


def covered(rows: list[dict], coefficients_of=prior) -> float:
    """The fraction of rows whose measured peak lies inside the prior's interval."""
    inside = 0
    for r in rows:
        peak, half = predicted(r, coefficients_of)
        inside += abs(float(r["device_peak_bytes"]) - peak) <= half
    return inside / len(rows)


def half_widths(rows: list[dict], coefficients_of=prior) -> tuple[float, float]:
    """The prior's narrowest and widest half-width, as fractions of its predicted peak."""
    fractions = [half / peak for peak, half in (predicted(r, coefficients_of) for r in rows)]
    return min(fractions), max(fractions)


def summary(errs: list[float]) -> tuple[float, float, float]:
    """(mean absolute, worst absolute, worst under-prediction) error, as fractions."""
    return (
        sum(abs(e) for e in errs) / len(errs),
        max(abs(e) for e in errs),
        max([0.0, *(-e for e in errs)]),
    )


@benchmark(tags=("memory",), needs="data", smoke={})
def prior_agilerl(ctx: Context) -> dict:
    """The GPU memory prior's error on AgileRL's measured GRPO training peaks."""
    metrics = {}
    rows = load()
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["gpu"]), []).append(r)
    for title, coefficients_of in (
        ("the GPU prior (calibrated on round 1's H100 trials)", prior),
        ("face values", face),
    ):
        print(title)
        header = f"{'model':28} {'gpu':22} {'rows':>4} {'mean abs':>9} {'worst':>7} {'worst under':>12}"
        print(header + f" {'in interval':>12} {'half-width':>12}")
        for (model, gpu), group in [*groups.items(), (("all", ""), rows)]:
            mean, worst, under = summary(errors(group, coefficients_of))
            low, high = half_widths(group, coefficients_of)
            print(
                f"{model:28} {gpu:22} {len(group):4d} {mean:9.1%} {worst:7.1%} {under:12.1%} "
                f"{covered(group, coefficients_of):12.0%} {low:5.0%}-{high:.0%}"
            )
        key = "prior" if coefficients_of is prior else "face"
        mean, worst, under = summary(errors(rows, coefficients_of))
        metrics |= {
            f"{key}_mean_abs_error": mean,
            f"{key}_worst_abs_error": worst,
            f"{key}_worst_under": under,
        }
        metrics[f"{key}_in_interval"] = covered(rows, coefficients_of)
    return metrics
