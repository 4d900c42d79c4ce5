"""A GRPO step's time at full length without decoding to the end, and what a memory probe costs.

A synthetic memory probe does not decode every completion token. It measures decode speed
over a short window (`decode_window_tokens`, about 8) at two contexts: right after the prompt
(`decode_ms_per_token_at_prompt`) and at full length, the KV cache filled to prompt +
max_completion_length by chunked prefill (`decode_ms_per_token_at_full`); each is milliseconds per
decode step of the whole batch (one new token for every sequence). It then runs the real training step
on completions of exactly max_completion_length (`train_s`).

`predict_step` turns those into the time a real step at full length takes:

    decode   = sum over decode steps i = 0 .. L-1 of ms(P + i), ms linear between the two readings
             = L x ms_at_prompt + (ms_at_full - ms_at_prompt) x (L - 1) / 2
    prefill  = the prompt's forward: measured where the probe gives it, else one decode step at the
               prompt's context (a forward over the prompts of a launch-bound batch costs about one
               decode step: both launch every layer's kernels once)
    gen      = prefill + decode
    cycle    = gen + steps_per_generation x train_s   (a generation serves num_iterations steps)

Decode cost grows with the context (attention reads the KV cache), so the interpolation's mean over the
completion is the mean of the two readings. Every figure of the forecast is extrapolated from the probe
(`StepForecast.basis`), never measured at full length.

`probe_seconds` is what one memory probe takes, by its kind: `decode` runs the step to the end
(generation decodes max_completion_length tokens); `synthetic` prefills the full length in chunks of
trainers.probe.chunk_tokens (about one forward each), decodes two windows of WINDOW_TOKENS and runs one training step
at full length. Both pay the trainer's start-up and the first step's warm-up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainers.probe import WINDOW_TOKENS, chunk_tokens  # noqa: F401  (WINDOW_TOKENS: read by the estimates)
from trainers.trial import PROBE_KINDS, SYNTHETIC

DEFAULT_PROBE = SYNTHETIC
EXTRAPOLATED = "extrapolated from a short decode window and the synthetic training step"


@dataclass(frozen=True)
class StepForecast:
    """A full-length step predicted from a synthetic probe's readings (seconds)."""

    prefill_s: float
    decode_s: float
    train_s: float
    steps_per_generation: int = 1
    basis: str = EXTRAPOLATED

    @property
    def gen_s(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def cycle_s(self) -> float:
        """One generation and the steps it serves."""
        return self.gen_s + self.steps_per_generation * self.train_s

    @property
    def step_s(self) -> float:
        """The mean step of a cycle (the first step of a cycle generates, the others only train)."""
        return self.cycle_s / self.steps_per_generation


def _check(name: str, value: Any, rule: str, ok: bool, fix: str) -> None:
    if not ok:
        raise ValueError(f"{name}: {value!r} {rule}; {fix}")


def _positive(name: str, value: Any, fix: str) -> float:
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    _check(name, value, "must be a positive finite number", number is not None and math.isfinite(number)
           and number > 0, fix)  # fmt: skip
    return float(number)


def decode_seconds(ms_at_prompt: float, ms_at_full: float, completion_tokens: int) -> float:
    """Seconds to decode `completion_tokens` steps, ms per step linear in the context from
    `ms_at_prompt` (the first step) to `ms_at_full` (context prompt + completion_tokens)."""
    a = _positive("decode_ms_per_token_at_prompt", ms_at_prompt, "give the probe's reading in ms")
    b = _positive("decode_ms_per_token_at_full", ms_at_full, "give the probe's reading in ms")
    _check("max_completion_length", completion_tokens, "must be a positive whole number of tokens",
           isinstance(completion_tokens, int) and completion_tokens > 0, "give the trial's setting")  # fmt: skip
    n = completion_tokens
    return (n * a + (b - a) * (n - 1) / 2) / 1000


def predict_step(
    ms_at_prompt: float,
    ms_at_full: float,
    completion_tokens: int,
    train_s: float,
    *,
    prefill_s: float | None = None,
    steps_per_generation: int = 1,
) -> StepForecast:
    """A full-length step's time from a synthetic probe (module docstring). Raises ValueError naming
    the reading that is missing or not a positive number."""
    decode = decode_seconds(ms_at_prompt, ms_at_full, completion_tokens)
    train = _positive("train_s", train_s, "give the synthetic training step's measured seconds")
    _check("steps_per_generation", steps_per_generation, "must be a whole number >= 1",
           isinstance(steps_per_generation, int) and steps_per_generation >= 1,
           "give the trial's num_iterations (steps per generation cycle)")  # fmt: skip
    prefill = (
        ms_at_prompt / 1000 if prefill_s is None else _positive("prefill_s", prefill_s, "or leave it None")
    )
    return StepForecast(prefill, decode, train, steps_per_generation)


def predict_step_from_record(
    step: Mapping[str, Any], max_completion_length: int, steps_per_generation: int = 1
) -> StepForecast | None:
    """predict_step from a synthetic probe step's record (a steps.parquet row or `step` event), or
    None where the step has no decode-window readings (a decoded step measures its time itself)."""
    at_prompt = step.get("decode_ms_per_token_at_prompt")
    at_full = step.get("decode_ms_per_token_at_full")
    if at_prompt is None or at_full is None or step.get("train_s") is None:
        return None
    if any(isinstance(v, float) and math.isnan(v) for v in (at_prompt, at_full, step["train_s"])):
        return None
    return predict_step(
        at_prompt, at_full, max_completion_length, step["train_s"],
        prefill_s=step.get("prefill_s"), steps_per_generation=steps_per_generation,
    )  # fmt: skip


def check_probe_kind(kind: str) -> str:
    """The probe kind, or ValueError naming the setting (oom.probe_kind) and its choices."""
    _check("oom.probe_kind", kind, f"is not a probe kind ({' | '.join(PROBE_KINDS)})", kind in PROBE_KINDS,
           f"use {DEFAULT_PROBE} (no token-by-token decode) or decode (generation to the end)")  # fmt: skip
    return kind


def prefill_chunks(prompt_tokens: int, completion_tokens: int, sequences: int) -> int:
    """Chunks of the synthetic probe's prefill to prompt + completion tokens for a batch of `sequences`
    (trainers.probe.chunk_tokens each: a chunk holds a bounded number of token rows)."""
    return math.ceil((prompt_tokens + completion_tokens) / chunk_tokens(sequences))


@dataclass(frozen=True)
class ProbeCost:
    """One memory probe's seconds by part (probe_seconds)."""

    kind: str
    startup_s: float  # process, imports, model load
    warmup_s: float  # the first step's one-off extra (compile, CUDA's first calls)
    generation_s: float  # decode: prefill + every decode step; synthetic: chunked prefill + 2 windows
    train_s: float  # one training step at full length

    @property
    def total_s(self) -> float:
        return self.startup_s + self.warmup_s + self.generation_s + self.train_s
