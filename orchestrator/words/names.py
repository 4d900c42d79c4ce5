"""How a trial is named, defined once: the knobs its name shows and the model's short name. A trial key
(orchestrator/spec/plan.py's trial_key: `unsloth-gspo-rand-qwen2.5-3b-k8-b2-<hash>`) and an MLflow run
name (orchestrator/publishing/tracking.py's run_name: `unsloth·gspo·rand-qwen2.5-3b·k8·b2`) are both made
of name_parts.
"""

from __future__ import annotations

import re
from typing import Any

# The knobs a trial's name shows, in the order it shows them.
NAMED = ("framework", "mode", "model", "num_generations", "batch_size")
_MODEL_SUFFIXES = re.compile(r"-(instruct|chat|it|hf|base)$")


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
    """A trial's NAMED knobs as its name shows them: [framework, mode, model_short, kK, bB]; without
    the model when `model` is false (a sweep of one model). `spec`: a trainers.trial.TrialSpec."""
    parts = [spec.framework, spec.mode]
    if model:
        parts.append(model_short(spec.model))
    return [*parts, f"k{spec.num_generations}", f"b{spec.batch_size}"]
