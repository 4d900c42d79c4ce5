"""The sweep file's base section, its integer limits, and the sections that judge a trial or end it early:
Verdict (the training verdict's thresholds) and Stop (the settled stop). orchestrator/spec/sweep.py holds
them in SweepSpec and re-exports them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.words.settings import SETTLE, SettleSettings, VerdictSettings
from orchestrator.words.settings import VERDICT as VERDICT
from orchestrator.words.verdicts import MEMORY_CREEP, STOPPABLE

# Counts and lengths are 32-bit inside torch and the tokenizers; their products must fit trials.parquet's
# 64-bit columns. The seed goes to numpy, which takes 0 .. 2**32 - 1.
INT_MAX = 2**31 - 1
INT_MAXIMA = {"seed": 2**32 - 1}


class Section(BaseModel):
    """A sweep file's section: unknown keys and non-finite numbers refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Verdict(Section):
    """The training verdict's thresholds (orchestrator/judging/verdict.py): every completed trial gets one."""

    min_steps: int = Field(
        VERDICT.min_steps,
        ge=1,
        le=INT_MAX,
        description="Fewer steps than this after the probe steps, and no other verdict holds: too_short.",
    )
    no_signal_share: float = Field(
        VERDICT.no_signal_share,
        gt=0,
        le=1,
        description="no_signal: frac_reward_zero_std (share of groups whose rewards are all equal) at or "
        "above this ...",
    )
    no_signal_steps: int = Field(
        VERDICT.no_signal_steps, ge=1, le=INT_MAX, description="... for this many steps in a row."
    )
    truncated_share: float = Field(
        VERDICT.truncated_share,
        gt=0,
        le=1,
        description="truncated: clipped_ratio (share of completions cut at max_completion_length) at or "
        "above this ...",
    )
    truncated_steps: int = Field(
        VERDICT.truncated_steps, ge=1, le=INT_MAX, description="... for this many steps in a row."
    )
    spike_k: float = Field(
        VERDICT.spike_k,
        gt=0,
        description="diverged: a kl or grad_norm above median + spike_k x MAD of the trial's preceding steps.",
    )
    spike_min_history: int = Field(
        VERDICT.spike_min_history,
        ge=1,
        le=INT_MAX,
        description="Preceding steps a kl / grad_norm spike is judged against, at least.",
    )
    spike_floor: float = Field(
        VERDICT.spike_floor,
        ge=0,
        description="The spread (MAD) counts as at least this fraction of the median, so a flat history "
        "does not call every rise a spike.",
    )
    update_ratio_max: float = Field(
        VERDICT.update_ratio_max,
        gt=0,
        description="diverged: a step whose update_ratio (the change of the trained weights over their size) "
        "reaches this; 1 means the step rewrote them.",
    )
    creep_min_steps: int = Field(
        VERDICT.creep_min_steps,
        ge=2,
        le=INT_MAX,
        description="memory_creep: steps after the probe steps that the peak-memory slope is fitted over, "
        "at least.",
    )
    creep_horizon_steps: int | None = Field(
        VERDICT.creep_horizon_steps,
        ge=1,
        le=INT_MAX,
        description="memory_creep: the step by which projected peak memory must reach the budget (else the "
        "GPU's total); default the trial's max_steps.",
    )
    creep_confidence: float = Field(
        VERDICT.creep_confidence,
        gt=0,
        lt=1,
        description="memory_creep: the slope's confidence interval at this level must lie above zero.",
    )
    learning_min_steps: int = Field(
        VERDICT.learning_min_steps,
        ge=3,
        le=INT_MAX,
        description="learning and collapsed: steps after the probe steps that carry a reward, at least, for the "
        "reward's trend (a Theil-Sen slope) to be judged.",
    )
    learning_confidence: float = Field(
        VERDICT.learning_confidence,
        gt=0,
        lt=1,
        description="learning: the reward trend's interval and held-out accuracy's change (last minus first "
        "evaluation) at this level must lie above zero; collapsed: the change's below zero.",
    )
    collapse_window_steps: int = Field(
        VERDICT.collapse_window_steps,
        ge=1,
        le=INT_MAX,
        description="collapsed: completion entropy is compared as the median of this many first and last "
        "steps after the probe steps ...",
    )
    collapse_entropy_drop: float = Field(
        VERDICT.collapse_entropy_drop,
        gt=0,
        lt=1,
        description="... and the reward rising while the last ones' median is at most (1 - this) x the "
        "first ones' is collapsed.",
    )
    collapse_distinct_share: float = Field(
        VERDICT.collapse_distinct_share,
        gt=0,
        lt=1,
        description="collapsed: distinct_completion_share (distinct completion texts / completions in the "
        "step) at or below this ...",
    )
    collapse_distinct_steps: int = Field(
        VERDICT.collapse_distinct_steps, ge=1, le=INT_MAX, description="... for this many steps in a row."
    )
    accuracy_target: float = Field(
        VERDICT.accuracy_target,
        gt=0,
        le=1,
        description="The held-out accuracy (eval_pass_at_1) each trial's steps_to_accuracy_target and "
        "seconds_to_accuracy_target count to; the report ranks configurations by the time to it.",
    )
    stop_on: list[Literal[STOPPABLE]] = Field(
        list(VERDICT.stop_on),
        description="End a trial as soon as one of these verdicts holds (it stays `completed`, its detail "
        "says why); memory_creep is a projection, not certain, so a trial never ends on it.",
    )

    @field_validator("stop_on", mode="before")
    @classmethod
    def _stop_on_names(cls, value: Any) -> Any:
        if isinstance(value, list) and MEMORY_CREEP in value:
            raise ValueError(
                f"{MEMORY_CREEP} is a projection, not certain, so a trial never ends on it (the budget guard "
                f"ends one that passes the budget); give some of {', '.join(STOPPABLE)}"
            )
        return value

    def settings(self) -> VerdictSettings:
        return VerdictSettings(**{**self.model_dump(), "stop_on": tuple(self.stop_on)})


class Stop(Section):
    """The settled stop (orchestrator/running/settle.py): end a speed-phase trial once it has told all it will."""

    when_settled: bool = Field(
        False,
        description="End a speed-phase trial once its peak memory stopped growing and its median tokens/s "
        "is known within settle_half_width; its row says at which step (settled_step).",
    )
    settle_steps: int = Field(
        SETTLE.steps,
        ge=1,
        le=INT_MAX,
        description="Steps after the probe steps without peak-memory growth before a trial is settled.",
    )
    settle_half_width: float = Field(
        SETTLE.half_width,
        gt=0,
        lt=1,
        description="Largest half-width of the median tokens/s's confidence interval, relative to the median.",
    )
    settle_confidence: float = Field(
        SETTLE.confidence,
        gt=0,
        lt=1,
        description="Confidence level of that interval (a bootstrap of the median).",
    )
    settle_growth_tolerance: float = Field(
        SETTLE.growth_tolerance,
        ge=0,
        lt=1,
        description="A peak-memory reading this much (relative) over the highest before it counts as growth.",
    )

    def settings(self) -> SettleSettings | None:
        """The thresholds, or None when the settled stop is off."""
        if not self.when_settled:
            return None
        return SettleSettings(
            steps=self.settle_steps,
            half_width=self.settle_half_width,
            confidence=self.settle_confidence,
            growth_tolerance=self.settle_growth_tolerance,
        )
