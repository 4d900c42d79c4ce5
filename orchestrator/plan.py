"""The grid expands to TrialSpecs with stable, readable keys, smallest configurations first."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass

from orchestrator.sweep import SweepSpec
from trainers.spec import KEYED_WHEN_SET, TrialSpec, knob_default, mode_warnings

# Knobs named in the readable part of a key; the hash covers everything else that defines the trial.
NAMED = ("framework", "mode", "model", "num_generations", "batch_size")
NOT_HASHED = NAMED + ("trial_key", "sweep", "output_dir", "events_path", "model_cache_dir", "num_threads")
_MODEL_SUFFIXES = re.compile(r"-(instruct|chat|it|hf|base)$")


def model_short(model: str) -> str:
    """tiny -> tiny; random:Qwen/Qwen2.5-3B-Instruct -> rand-qwen2.5-3b; /x/My_Model -> my-model."""
    prefix = ""
    if model.startswith("random:"):
        prefix, model = "rand-", model[len("random:") :]
    name = model.rstrip("/").split("/")[-1].lower()
    while True:
        stripped = _MODEL_SUFFIXES.sub("", name)
        if stripped == name:
            break
        name = stripped
    name = re.sub(r"[^a-z0-9.]+", "-", name).strip("-") or "model"
    return prefix + name


def trial_key(spec: TrialSpec) -> str:
    rest = {
        k: v
        for k, v in spec.to_dict().items()
        if k not in NOT_HASHED and not (k in KEYED_WHEN_SET and v == knob_default(k))
    }
    digest = hashlib.sha1(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:6]
    return f"{spec.framework}-{spec.mode}-{model_short(spec.model)}-k{spec.num_generations}-b{spec.batch_size}-{digest}"


def size_key(spec: TrialSpec, model_rank: dict[str, int]) -> tuple:
    """Smaller first: completions per step, then lengths, micro batch, LoRA rank, model (grid order)."""
    return (
        spec.completions_per_step,
        spec.max_prompt_length + spec.max_completion_length,
        spec.effective_micro_batch_size,
        spec.lora_r,
        model_rank.get(spec.model, 0),
        spec.batch_size,
        spec.framework,
        spec.mode,
    )


@dataclass
class Plan:
    trials: list[TrialSpec]
    problems: list[str]  # distinct problems, each with an example trial and a count
    warnings: list[str]

    @property
    def keys(self) -> list[str]:
        return [t.trial_key for t in self.trials]


def expand(sweep: SweepSpec) -> list[TrialSpec]:
    axes = sweep.axes()
    base = sweep.base()
    specs = []
    for combo in itertools.product(*axes.values()):
        values = {**base, **dict(zip(axes, combo, strict=True))}
        values["task_args"] = sweep.task_args_for(values["task"], values.get("task_args", {}))
        spec = TrialSpec(**values)
        spec.trial_key = trial_key(spec)
        specs.append(spec)
    models = axes.get("model", [base.get("model", TrialSpec.model)])
    rank = {m: i for i, m in enumerate(models)}
    unique = {s.trial_key: s for s in specs}  # a list with a repeated value gives one trial
    return sorted(unique.values(), key=lambda s: size_key(s, rank))


def plan(sweep: SweepSpec) -> Plan:
    """Expand the grid and check each trial with the trainer's own rules, grouping repeated problems."""
    trials = expand(sweep)
    problems: dict[str, list[str]] = {}
    warnings: dict[str, list[str]] = {}
    for spec in trials:
        for problem in spec.problems():
            problems.setdefault(problem, []).append(spec.trial_key)
        for warning in mode_warnings(spec):
            warnings.setdefault(warning, []).append(spec.trial_key)
    if "mode" not in sweep.axes() or len(sweep.axes()["mode"]) < 2:
        warnings = {w: k for w, k in warnings.items() if not w.startswith("mode:")}
    return Plan(trials, _grouped(problems, len(trials)), _grouped(warnings, len(trials)))


def _grouped(found: dict[str, list[str]], total: int) -> list[str]:
    return [f"{msg} (in {len(keys)} of {total} trials, e.g. {keys[0]})" for msg, keys in found.items()]
