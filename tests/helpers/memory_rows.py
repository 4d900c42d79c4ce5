"""Synthetic memory-model rows from an independent formula (a CPU process's RSS written out by hand),
for the memory model's tests."""

from __future__ import annotations

import itertools
import json

from trainers.models import TINY_CONFIG
from trainers.trial import TrialSpec
from trainers.units import GIB

V, L, H = TINY_CONFIG["vocab_size"], TINY_CONFIG["num_hidden_layers"], TINY_CONFIG["hidden_size"]
KV_WIDTH = TINY_CONFIG["num_key_value_heads"] * H // TINY_CONFIG["num_attention_heads"]
I = TINY_CONFIG["intermediate_size"]  # noqa: E741


def true_peak(spec: TrialSpec) -> float:
    """A CPU process's RSS written out by hand: 0.9 GiB of runtime, the completion tokens' fp32 logits
    held 2.6 times, the fp32 KV cache of a generation, a layer's ten hidden-sized and three MLP-sized
    fp32 tensors."""
    tokens = spec.max_prompt_length + spec.max_completion_length
    micro, generation = spec.effective_micro_batch_size, spec.generation_batch_size
    logits = micro * spec.max_completion_length * V * 4
    kv_cache = 2 * L * KV_WIDTH * 4 * generation * tokens
    activations = micro * tokens * L * (10 * H + 3 * I) * 4
    return 0.9 + (2.6 * logits + kv_cache + activations) / GIB


def row(spec: TrialSpec, status: str = "completed", peak: float | None = None, **extra) -> dict:
    return {
        "trial_key": spec.trial_key,
        "status": status,
        "config": json.dumps(spec.to_dict()),
        "peak_rss_gib": true_peak(spec) if peak is None and status == "completed" else peak,
        **extra,
    }


def trial(key: str = "t", **knobs) -> TrialSpec:
    return TrialSpec(trial_key=key, **knobs)


GRID = [
    trial(f"k{k}-b{b}-c{c}", num_generations=k, batch_size=b, max_completion_length=c)
    for k, b, c in itertools.product([2, 8, 24], [1, 2], [16, 128])
]
