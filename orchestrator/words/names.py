"""How a trial is named, defined once: the knobs its name shows and the model's short name. A trial key
(orchestrator/spec/plan.py's trial_key: `unsloth-gspo-rand-qwen2.5-3b-k8-b2-<hash>`) and an MLflow run
name (orchestrator/publishing/_runs.py's run_name: `unsloth-gspo-rand-qwen2.5-3b-k8-b2-len256-<hash>`)
are both made of name_parts; a run name adds axis_part for each other grid axis that varies.
"""

from __future__ import annotations

import json
import re
from typing import Any

# The knobs a trial's name shows, in the order it shows them.
NAMED = ("stack", "mode", "model", "num_generations", "batch_size")
_MODEL_SUFFIXES = re.compile(r"-(instruct|chat|it|hf|base)$")
# A varying grid axis in a run name: its short label, glued to the value (`len256`, `seed2`); an axis
# not listed shows as `axis=value`.
AXIS_LABELS = {
    "max_completion_length": "len",
    "max_prompt_length": "prompt",
    "micro_batch_size": "mb",
    "learning_rate": "lr",
    "lora_r": "r",
    "seed": "seed",
}
_DIGEST = re.compile(r"-([0-9a-f]{12})$")


def model_short(model: str) -> str:
    """tiny -> tiny; random:Qwen/Qwen2.5-3B-Instruct -> rand-qwen2.5-3b; /x/My_Model -> my-model;
    /x/Math-7B/config.json -> math-7b (a config.json is named by its folder)."""
    prefix = ""
    if model.startswith("random:"):
        prefix, model = "rand-", model[len("random:") :]
    parts = model.rstrip("/").split("/")
    name = (parts[-2] if parts[-1].endswith(".json") and len(parts) > 1 else parts[-1]).lower()
    while True:
        stripped = _MODEL_SUFFIXES.sub("", name)
        if stripped == name:
            break
        name = stripped
    name = re.sub(r"[^a-z0-9.]+", "-", name).strip("-") or "model"
    return prefix + name


def name_parts(spec: Any, *, model: bool = True) -> list[str]:
    """A trial's NAMED knobs as its name shows them: [stack, mode, model_short, kK, bB]; without
    the model when `model` is false (a sweep of one model). `spec`: a trainers.trial.TrialSpec."""
    parts = [spec.stack, spec.mode]
    if model:
        parts.append(model_short(spec.model))
    return [*parts, f"k{spec.num_generations}", f"b{spec.batch_size}"]


def axis_part(axis: str, value: Any) -> str:
    """A grid axis's value in a run name, in ASCII letters, digits and `._=+-`: `len256`, `lr0.0002`,
    `temperature=0.7`; a list or mapping as compact JSON with its punctuation dropped."""
    text = json.dumps(value, separators=(",", ":")) if isinstance(value, (dict, list)) else str(value)
    text = re.sub(r"[^A-Za-z0-9._=+-]+", "_", text).strip("_")
    return f"{AXIS_LABELS[axis]}{text}" if axis in AXIS_LABELS else f"{axis}={text}"


def key_digest(trial_key: str | None) -> list[str]:
    """[the 12 hex digits a planned trial key ends in], or [] for a key without them."""
    found = _DIGEST.search(trial_key or "")
    return [found.group(1)] if found else []
