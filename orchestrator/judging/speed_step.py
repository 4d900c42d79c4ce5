"""Seconds per step on a named card, for one configuration: generation, scoring and training, each with
its basis and an interval that carries the speed model's own measured error.

The figures are the per-stack speed model's (orchestrator/judging/speed_model.py, h100_speed.json:
the mechanism fitted on the H100 rows of bench/data/h100-2026-11-26, one trial alone on the card), at
the configuration's full completion length (random weights never stop early: a real model's
completions may end sooner, so a step is at most this):

  generation  the prefill and max_completion_length decode steps of B x K sequences. Decode is
              launch-bound there (ms per step hardly moves from 2 to 16 sequences), so the headline is
              the H100's own figure (as fast on any card with as fast a host) and the interval runs to
              the figure scaled by memory bandwidth (orchestrator/judging/card_speed.py). A generation
              serves num_iterations steps, so a step pays 1 / num_iterations of it. Generation by vLLM
              is its own term: no GPU row measured it, so it has no figure (transformers' generate is
              said beside it for scale).
  scoring     the rewards: inside the training figure, since a step's train_s is the step less its
              generation (trainers/record.py); not measured apart.
  training    the step's fixed cost per module call (launch-bound: as on the H100), once per
              micro-batch pass (gradient accumulation), plus its per-token arithmetic scaled by dense
              BF16 throughput; the interval runs from the H100's figure to the fully scaled one.

Each term's interval is then widened by the speed model's held-out error on the H100 rows
(h100_speed_error.json, written by bench/accuracy/speed_model.py from bench/data: every row predicted by
the model fitted on the others; measured = predicted / (1 + error), over the errors' range).

A card known only by its memory size (`--card 24gb`) has no one speed: `card_speeds` names the cards
it could be (cards.py's aliases with speed figures here) and the answer gives their range.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.judging.card_speed import MEASURED, SPEEDS, CardSpeed, Scale, speed_of

ERROR_FILE = Path(__file__).with_name("h100_speed_error.json")
SCORING = "scoring: inside training (not measured apart)"


def load_error(path: Path = ERROR_FILE) -> dict[str, Any]:
    """The speed model's held-out errors (bench/accuracy/speed_model.py writes them)."""
    return json.loads(path.read_text())


def without_figures(card: Any) -> list[str]:
    """The aliases of a card known by its memory that name a GPU with no speed figures here."""
    return [
        a for a in card.aliases
        if not re.fullmatch(r"\d+gib|\d+gb", a) and speed_of(a, card.name) is None
    ]  # fmt: skip


def card_speeds(card: Any) -> list[CardSpeed]:
    """The speed figures of a registered card (cards.Card) as typed: its own where its name has them,
    else, for a card known by its memory alone (`24GB`), those of every card it could be (its aliases
    with figures here); empty where none is known."""
    own = speed_of(card.typed or card.name, card.name)
    if own is not None:
        return [own]
    found: list[CardSpeed] = []
    for alias in card.aliases:
        speed = speed_of(alias, card.name)
        if speed is not None and speed not in found:
            found.append(speed)
    return found


@dataclass(frozen=True)
class Term:
    """One part of a step, seconds: headline and interval; None where not known (`why`)."""

    name: str
    seconds: float | None
    low: float | None
    high: float | None
    why: str = ""


@dataclass(frozen=True)
class StepTime:
    """A step's seconds on one card by term (per step: a generation's share when it serves several)."""

    card: CardSpeed
    generation: Term
    training: Term
    per_generation: int  # steps one generation serves (num_iterations)
    vllm: Term | None = None  # generation by vLLM: its own term

    @property
    def known(self) -> bool:
        return self.vllm is None and self.generation.seconds is not None and self.training.seconds is not None

    @property
    def total(self) -> tuple[float, float, float] | None:
        """(headline, low, high) of a step, None where a term is not known."""
        if not self.known:
            return None
        terms = (self.generation, self.training)
        return tuple(sum(getattr(t, part) for t in terms) for part in ("seconds", "low", "high"))  # type: ignore[return-value]


def _widen(seconds: float, low: float, high: float, error: dict[str, float]) -> tuple[float, float, float]:
    """The interval widened by the model's held-out errors (measured = predicted / (1 + error))."""
    return seconds, low / (1 + error["high"]), high / (1 + error["low"])


def step_time(spec: Any, card: CardSpeed, speed: Any = None, error: dict | None = None) -> StepTime | None:
    """`spec`'s step on `card` (module docstring); None where the speed model cannot say (a stack it has
    no rows of, a model with no bundled architecture)."""
    from orchestrator.judging.speed_model import load_speed_model

    speed = speed or load_speed_model()
    error = error or load_error()
    if spec.stack not in speed.ms_per_launch:
        return None
    shape = _shape(spec.model)
    if shape is None:
        return None
    scale = Scale.to(card)
    seqs = spec.generation_batch_size
    per_gen = spec.num_iterations or 1
    gen_h100 = (
        speed.gen_s(spec.stack, shape, seqs, spec.max_prompt_length, spec.max_completion_length) / per_gen
    )
    gen_ends = sorted((gen_h100, gen_h100 * scale.decode))
    gen = Term("generation", *_widen(gen_h100, *gen_ends, error["generation"]))
    tokens = spec.completions_per_rank * (spec.max_prompt_length + spec.max_completion_length)
    fixed = speed.train_s_per_launch[spec.stack] * _launches(shape) * spec.gradient_accumulation_steps
    arithmetic = speed.train_s_per_token_billion * tokens * shape.parameters / 1e9
    train_h100 = fixed + arithmetic
    train = fixed + arithmetic * scale.train
    train_ends = sorted((train_h100, fixed * scale.train + arithmetic * scale.train))
    training = Term("training", *_widen(train, *train_ends, error["training"]))
    vllm = None
    if spec.generation == "vllm":
        vllm = Term("generation (vLLM)", None, None, None, "no GPU row measured vLLM's generation")
    return StepTime(card, gen, training, per_gen, vllm)


def _shape(model: str) -> Any:
    """The architecture the speed model reads: a bundled hub id's, else any config the memory model
    reads (a config.json's path, a hub id in the HF cache); None where there is none."""
    from orchestrator.judging.memory._model import model_shape
    from orchestrator.judging.speed_model import shape_of

    try:
        return shape_of(model)
    except ValueError:
        return model_shape(model)[0]


def _launches(shape: Any) -> int:
    from orchestrator.judging.speed_model import launches

    return launches(shape)


def _s(x: float) -> str:
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def step_words(t: StepTime) -> str:
    """'12.3 s (9.1-20.4): generation 10.1, training 2.2' within a line."""
    gen, train = t.generation, t.training
    every = f" (1 in {t.per_generation} steps)" if t.per_generation > 1 else ""
    if t.vllm is not None:
        return (
            f"training {_s(train.seconds)} s ({_s(train.low)}-{_s(train.high)}) + generation by vLLM: "
            f"no figure ({t.vllm.why}; transformers' would be {_s(gen.seconds)} s{every})"
        )
    total = t.total
    return (
        f"{_s(total[0])} s ({_s(total[1])}-{_s(total[2])}): generation {_s(gen.seconds)}{every}, "
        f"training {_s(train.seconds)}"
    )


def range_words(times: list[StepTime]) -> str:
    """step_words of one card, or over several (a card known by its memory): each figure's range over
    them, the interval from the lowest low to the highest high."""
    if len(times) == 1:
        return step_words(times[0])
    if any(not t.known for t in times):
        return "; ".join(f"{t.card.name}: {step_words(t)}" for t in times)

    def span(values: list[float]) -> str:
        lo, hi = min(values), max(values)
        return _s(lo) if _s(lo) == _s(hi) else f"{_s(lo)}-{_s(hi)}"

    totals = [t.total for t in times]
    return (
        f"{span([x[0] for x in totals])} s ({_s(min(x[1] for x in totals))}-{_s(max(x[2] for x in totals))}): "
        f"generation {span([t.generation.seconds for t in times])}, "
        f"training {span([t.training.seconds for t in times])}"
    )


def basis_words(cards: list[CardSpeed], error: dict | None = None) -> str:
    """What the seconds rest on, one paragraph (the caller wraps it)."""
    error = error or load_error()
    g, t = error["generation"], error["training"]
    scaled = [c for c in cards if c != MEASURED]
    text = (
        f"Predicted by the speed model (fitted on {error['rows']} H100 rows), one trial alone, every "
        "completion at full length, prompts at max_prompt_length. "
    )
    if scaled:
        text += (
            "Decode is launch-bound there: its headline is the H100's figure, its interval runs to the "
            "bandwidth-scaled one; training: the per-call cost as on the H100, the arithmetic scaled by "
            f"BF16 TFLOPS; {SCORING}. "
        )
    else:
        text += f"Decode is launch-bound there; {SCORING}. "
    text += (
        "Intervals are widened by the model's error on held-out rows (generation "
        f"{g['low']:+.0%} to {g['high']:+.0%}, training {t['low']:+.0%} to {t['high']:+.0%})."
    )
    if scaled:
        scales = [
            f"{c.name} decode x{Scale.to(c).decode:.2f}, training x{Scale.to(c).train:.2f}" for c in scaled
        ]
        text += " Scaled by: " + "; ".join(scales) + "."
    return text


def card_words(card: Any, speeds: list[CardSpeed]) -> str:
    """How the card's speed is known: by its name, or which named cards a memory size could be."""
    if not speeds:
        return f"no speed figures for {card.name}: name the GPU (e.g. --card 4090) for seconds per step"
    if len(speeds) == 1 and speed_of(card.typed or card.name, card.name) is not None:
        return f"on the {speeds[0].name}"
    missing = without_figures(card)
    also = f" (no figures here for {', '.join(missing)})" if missing else ""
    return f"{card.name} is known by its memory only: it could be {', '.join(s.name for s in speeds)}{also}"


__all__ = [
    "SPEEDS", "StepTime", "Term", "basis_words", "card_speeds", "card_words", "load_error", "range_words",
    "step_time", "step_words",
]  # fmt: skip
