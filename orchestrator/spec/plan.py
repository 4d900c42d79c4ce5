"""The grid expands to TrialSpecs with stable, readable keys, smallest configurations first.

A key is the readable knobs plus a 48-bit digest of the whole configuration (the model's full name
included, since its readable form drops the organisation and suffixes); two different configurations
with one key are refused, never merged. A local run is refused when a trial asks for more CPUs or GPUs
than the host has (Ray would wait for them forever).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from orchestrator.spec.sweep import Resources, SweepError, SweepSpec
from orchestrator.words.names import NAMED, name_parts
from trainers.nvml import local_gpus
from trainers.record import OLD_NAMES, OLD_VALUES
from trainers.trial import (
    BOOKKEEPING,
    EXECUTION,
    KEYED_WHEN_SET,
    KNOBS,
    VLLM_KNOBS,
    TrialSpec,
    knob_default,
    mode_warnings,
    probe_steps_within,
)

# The knobs named in the readable part of a key (words/names.py); the hash covers everything else that
# defines the trial.
# Bookkeeping and execution knobs (trainers.trial roles) do not define the trial either.
NOT_HASHED = NAMED + BOOKKEEPING + EXECUTION
# Knobs renamed since keys were published: hashed under their published name and value, so keys stay.
PUBLISHED_AS = {
    "generation": ("fast_inference", lambda value: {"transformers": False, "vllm": True}.get(value, value)),
    "vllm_gpu_memory_utilization": ("gpu_memory_utilization", lambda value: value),
    # knobs renamed with the stack (the stack itself is not hashed: NAMED)
    **{new: (old, lambda value: value) for new, old in OLD_NAMES.items()},
    "optim": ("optim", lambda value: OLD_VALUES["optim"].get(value, value)),  # its renamed value
}
# The knobs a key hashes, and the defaults of those hashed only when set (read once, not per trial).
_HASHED = tuple(k for k in KNOBS if k not in NOT_HASHED)
_WHEN_SET = {k: knob_default(k) for k in KEYED_WHEN_SET if k not in NOT_HASHED}
_UNSET = object()


# '"knob": value' of each (knob, type, value) met, as json.dumps writes it inside the whole mapping: a
# grid repeats few values many times, and encoding ~40 knobs per trial was most of a large plan's time.
_FRAGMENTS: dict[tuple[str, type, Any], str] = {}
_FRAGMENTS_MAX = 1 << 16


def canonical_json(values: dict[str, Any]) -> str:
    """json.dumps(values, sort_keys=True), the same text, from remembered per-knob fragments."""
    parts = []
    for key in sorted(values):
        value = values[key]
        try:  # a list or mapping is encoded each time; so is a zero (0.0 == -0.0, written apart)
            cached = (key, type(value), value) if value != 0 or type(value) is not float else None
            part = _FRAGMENTS.get(cached)
        except TypeError:
            cached, part = None, None
        if part is None:
            part = f"{json.dumps(key)}: {json.dumps(value, sort_keys=True)}"
            if cached is not None and len(_FRAGMENTS) < _FRAGMENTS_MAX:
                _FRAGMENTS[cached] = part
        parts.append(part)
    return "{" + ", ".join(parts) + "}"


def trial_key(spec: TrialSpec) -> str:
    # A knob added since keys were first made is hashed only when set: keys of existing sweeps stay.
    values = vars(spec)
    rest = {k: values[k] for k in _HASHED if values[k] != _WHEN_SET.get(k, _UNSET)}
    for name, (published, value) in PUBLISHED_AS.items():
        if name in rest:
            rest[published] = value(rest.pop(name))
    rest["model"] = spec.model  # model_short drops the organisation and suffixes: hash the full name
    digest = hashlib.sha1(canonical_json(rest).encode()).hexdigest()[:12]
    return "-".join([*name_parts(spec), digest])


def size_key(spec: TrialSpec, model_rank: dict[str, int]) -> tuple:
    """Smaller first: completions per step, then lengths, micro batch, LoRA rank, model (grid order)."""
    return (
        spec.completions_per_step,
        spec.max_prompt_length + spec.max_completion_length,
        spec.effective_micro_batch_size,
        spec.lora_r,
        model_rank.get(spec.model, 0),
        spec.batch_size,
        spec.stack,
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
    # probe steps left to their default leave a trial of two steps or more at least one step to train
    probes_set = "probe_steps" in sweep.oom.model_fields_set or "probe_steps" in {**sweep.fixed, **axes}
    specs = []
    for combo in itertools.product(*axes.values()):
        values = {**base, **dict(zip(axes, combo, strict=True))}
        if values.get("generation", knob_default("generation")) == "transformers":
            # A grid's vLLM axes do not apply to its transformers trials: one such trial, not one per value.
            for name in VLLM_KNOBS:
                if name in axes:
                    values.pop(name)
        values["task_args"] = sweep.task_args_for(values["task"], values.get("task_args", {}))
        steps, probes = values.get("max_steps", knob_default("max_steps")), values.get("probe_steps")
        if not probes_set and isinstance(steps, int) and isinstance(probes, int):
            values["probe_steps"] = probe_steps_within(steps, probes)
        spec = TrialSpec(**values)
        spec.trial_key = trial_key(spec)
        specs.append(spec)
    models = axes.get("model", [base.get("model", TrialSpec.model)])
    rank = {m: i for i, m in enumerate(models)}
    unique: dict[str, TrialSpec] = {}
    collisions = []
    for spec in specs:
        kept = unique.setdefault(spec.trial_key, spec)
        if kept is spec:
            continue
        differences = _differences(configuration(kept.to_dict()), configuration(spec.to_dict()))
        if differences:  # a list with a repeated value gives one trial; two configurations never do
            collisions.append(
                f"trial key {spec.trial_key}: two different configurations ({differences}); one would "
                "be lost. Report this (the key's digest collided) and sweep the value on its own meanwhile"
            )
    if collisions:
        raise SweepError(collisions, "plan")
    return sorted(unique.values(), key=lambda s: size_key(s, rank))


def configuration(values: dict[str, Any]) -> dict[str, Any]:
    """What makes a trial the trial it is: every knob but the bookkeeping and execution ones."""
    return {k: v for k, v in values.items() if k not in BOOKKEEPING and k not in EXECUTION}


def _differences(a: dict[str, Any], b: dict[str, Any]) -> str:
    """'knob: A vs B' for each knob where two configurations differ ('' when they are the same)."""
    return "; ".join(
        f"{k}: {_shown(a.get(k, _MISSING))} vs {_shown(b.get(k, _MISSING))}"
        for k in sorted(set(a) | set(b))
        if a.get(k, _MISSING) != b.get(k, _MISSING)
    )


_MISSING = object()


def _shown(value: Any) -> str:
    return "(not a setting)" if value is _MISSING else repr(value)


def config_mismatches(rows: Iterable[dict[str, Any]], trials: list[TrialSpec]) -> dict[str, str]:
    """Planned trial key -> why the ledger's stored config (trials.parquet's `config` JSON) is not the
    planned configuration under that key. Keys absent from either side are not mismatches. A knob the
    stored config lacks (added since) counts as its default."""
    planned = {t.trial_key: t for t in trials}
    defaults = TrialSpec().to_dict()
    found = {}
    for row in rows:
        spec = planned.get(row.get("trial_key"))
        if spec is None:
            continue
        stored = configuration({**defaults, **json.loads(row["config"])})
        differences = _differences(stored, configuration(spec.to_dict()))
        if differences:
            found[spec.trial_key] = (
                f"{spec.trial_key}: the output dir holds this trial with another configuration (stored vs "
                f"planned: {differences}); resume into a fresh --output-dir, or rerun the sweep as it was"
            )
    return found


def local_cpus() -> int:
    """The CPUs a local Ray counts (it uses the machine's count too)."""
    return os.cpu_count() or 1


def resource_problems(resources: Resources, cpus: int, gpus: int) -> list[str]:
    """What a trial asks for beyond a host with `cpus` CPUs and `gpus` GPUs (on a host without GPUs
    gpus_per_trial is ignored): such a trial never starts, a local Ray waits for it forever."""
    problems = []
    if resources.cpus_per_trial > cpus:
        problems.append(
            f"resources.cpus_per_trial: {resources.cpus_per_trial}, but this machine has {cpus} CPU(s) and "
            f"a trial holds its CPUs, so none would ever start; set resources.cpus_per_trial to at most {cpus}"
        )
    if gpus and resources.gpus_per_trial > gpus:
        problems.append(
            f"resources.gpus_per_trial: {resources.gpus_per_trial:g}, but this machine has {gpus} GPU(s), so "
            f"no trial would ever start; set resources.gpus_per_trial to at most {gpus}"
        )
    return problems


def rank_problems(trials: list[TrialSpec], gpus: int) -> list[str]:
    """Trials whose ranks (one GPU each) outnumber the GPUs of a host with `gpus` GPUs: a trial's
    ranks share one node, so such a trial never starts. A host without GPUs runs ranks as CPU
    processes."""
    too_many = sorted({s.num_processes for s in trials if gpus and s.num_processes > gpus})
    if not too_many:
        return []
    keys = [s.trial_key for s in trials if s.num_processes in too_many]
    return [
        f"num_processes: {', '.join(map(str, too_many))} ranks, one GPU each on one node, but this machine "
        f"has {gpus} GPU(s), so {len(keys)} trial(s) (e.g. {keys[0]}) would never start; set num_processes "
        f"(or resources.gpus_per_trial) to at most {gpus}; trials across nodes are not supported"
    ]


def vllm_server_problems(spec: TrialSpec, resources: Resources) -> list[str]:
    """Server mode trains on a trial's GPUs but its last, which serves: it needs two at least."""
    if spec.generation == "vllm" and spec.vllm_mode == "server" and resources.gpus_per_trial < 2:
        return [
            f"vllm_mode: server with resources.gpus_per_trial {resources.gpus_per_trial:g}; server mode trains "
            "on all the trial's GPUs but one and serves vLLM on that one, so it needs at least 2: set "
            "resources.gpus_per_trial: 2 or vllm_mode: colocate"
        ]
    return []


def plan(sweep: SweepSpec) -> Plan:
    """Expand the grid and check each trial with the trainer's own rules, grouping repeated problems;
    a local run (no RAY_ADDRESS) also checks the resources a trial asks for against this machine."""
    trials = expand(sweep)
    problems: dict[str, list[str]] = {}
    warnings: dict[str, list[str]] = {}
    for spec in trials:
        for problem in spec.problems() + vllm_server_problems(spec, sweep.resources):
            problems.setdefault(problem, []).append(spec.trial_key)
        for warning in mode_warnings(spec):
            warnings.setdefault(warning, []).append(spec.trial_key)
    if "mode" not in sweep.axes() or len(sweep.axes()["mode"]) < 2:
        warnings = {w: k for w, k in warnings.items() if not w.startswith("mode:")}
    local = []
    if not os.environ.get("RAY_ADDRESS"):
        gpus = local_gpus()
        local = resource_problems(sweep.resources, local_cpus(), gpus) + rank_problems(
            trials if sweep.resources.gpus_per_trial <= gpus else [], gpus
        )
    return Plan(trials, local + _grouped(problems, len(trials)), _grouped(warnings, len(trials)))


def _grouped(found: dict[str, list[str]], total: int) -> list[str]:
    return [f"{msg} (in {len(keys)} of {total} trials, e.g. {keys[0]})" for msg, keys in found.items()]
