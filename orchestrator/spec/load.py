"""Reading a sweep file into a SweepSpec: small UTF-8 YAML whose aliases do not multiply it, `--set`
overrides, and every error at once, named by its place in the file (the sections' pydantic errors,
each knob by trainers.trial's rules, grid size, prediction and packing settings)."""

from __future__ import annotations

import copy
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.spec.sweep import (
    INT_MAX,
    INT_MAXIMA,
    SWEEP_KNOBS,
    SweepError,
    SweepSpec,
    unknown_name_hint,
)
from orchestrator.words.phases import packing
from tasks.names import did_you_mean
from trainers.trial import (
    BOOKKEEPING,
    KNOBS,
    RENAMED,
    VLLM_KNOBS,
    canonical,
    check_value,
    idle_set_errors,
    knob_default,
    say_renamed,
)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading `2e-4` and `1.0e5` as numbers, as YAML 1.2 (and HF and TRL configs)
    does: PyYAML's YAML 1.1 floats need a dot and a signed exponent, so `learning_rate: 2e-4` was text."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)

MAX_FILE_BYTES = 1 << 20  # a sweep file is a page of settings; 1 MiB is far past any real one
MAX_NODES = 100_000  # values a file's aliases may expand it to


def knob_errors(raw: dict[str, Any]) -> list[str]:
    """Place-named errors of the grid and fixed sections, checked with the trainer's own rules."""
    errors: list[str] = []
    sections = {name: raw.get(name) if isinstance(raw.get(name), dict) else {} for name in ("grid", "fixed")}
    for section, items in sections.items():
        for key, value in items.items():
            place = f"{section}.{key}"
            if key in BOOKKEEPING:
                errors.append(f"{place}: set by the orchestrator for each trial; remove it")
                continue
            if key not in KNOBS:
                errors.append(f"{place}: unknown setting; {unknown_name_hint(str(key), SWEEP_KNOBS)}")
                continue
            values = value if section == "grid" and isinstance(value, list) else [value]
            if section == "grid" and isinstance(value, list) and not value:
                errors.append(f"{place}: empty list; give at least one value")
            for i, item in enumerate(values):
                problem = bound_problem(key, item) or check_value(key, item)
                if problem:
                    where = f"{place}[{i}]" if section == "grid" and isinstance(value, list) else place
                    errors.append(f"{where}: {problem}")
    for key in sorted(set(sections["grid"]) & set(sections["fixed"])):
        errors.append(f"fixed.{key}: also in grid; keep it in one place")
    from tasks import TASKS

    for name in raw.get("task_settings") or {}:
        if name not in TASKS:
            errors.append(f"task_settings.{name}: unknown task; {did_you_mean(str(name), TASKS)}")
    for key in ("task", "task_args"):
        if key in raw and (key in sections["grid"] or key in sections["fixed"]):
            section = "grid" if key in sections["grid"] else "fixed"
            errors.append(f"{section}.{key}: also set at the top level; keep it in one place")
    return errors


def bound_problem(key: str, value: Any) -> str | None:
    """NaN, infinity, or an integer past what a trial holds (the trainer's own rules do not catch these)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}; give a number such as {KNOBS[key].default!r}"
    if isinstance(value, int) and not isinstance(value, bool):
        limit = INT_MAXIMA.get(key, INT_MAX)
        if abs(value) > limit:
            return f"{value} is past {limit:,}, the largest a trial holds; give a smaller number"
    return None


def trial_set_errors(sets: list[str], base: dict[str, Any], taken: dict[str, str]) -> list[str]:
    """Errors of a verb's --set KNOB=VALUE items (YAML values), each by the trainer's own rule and with
    its fix; the good ones go into base. taken: knobs the verb sets by its own flags, each with what to
    do instead (e.g. {"num_generations": "K is --k: give it there"})."""
    errors = []
    for item in sets:
        key, eq, text = item.partition("=")
        key = key.strip()
        if key in RENAMED:
            say_renamed(key, "--set ")
            key = RENAMED[key]
        if not eq:
            errors.append(f"--set {item}: expected KNOB=VALUE (a YAML value), e.g. --set lora_r=8")
            continue
        if key in BOOKKEEPING:
            errors.append(f"--set {item}: {key} is set by rlsweep for each trial; remove it")
            continue
        if key not in KNOBS:
            errors.append(
                f"--set {item}: unknown trial setting {key!r}; {unknown_name_hint(key, SWEEP_KNOBS)}"
            )
            continue
        try:
            given = yaml_data(text, "--set") if text else None
            say_renamed(key, "--set ", given)
            value = canonical(key, given)
        except SweepError as exc:
            errors += [f"--set {item}: {error}" for error in exc.errors]
            continue
        problem = bound_problem(key, value) or check_value(key, value)
        if problem:
            errors.append(f"--set {item}: {key} {problem}")
        elif key in taken:
            errors.append(f"--set {item}: {taken[key]}")
        else:
            base[key] = value
    asked = [RENAMED.get(k, k) for k in (item.partition("=")[0].strip() for item in sets)]
    return errors + idle_set_errors([key for key in asked if key in base], base, knob_default)


def grid_size_errors(raw: dict[str, Any], spec: SweepSpec | None) -> list[str]:
    """The grid's size from its list lengths (without expanding it) against max_trials."""
    grid = raw.get("grid") if isinstance(raw.get("grid"), dict) else {}
    lengths = {k: len(v) for k, v in grid.items() if isinstance(v, list) and len(v) > 1}
    size = math.prod(lengths.values())
    limit = spec.max_trials if spec else SweepSpec.model_fields["max_trials"].default
    if size <= limit:
        return []
    product = " x ".join(f"{k} {n}" for k, n in lengths.items())
    return [
        f"grid: {product} = {size:,} trials, over max_trials {limit:,}; sweep fewer values, or set "
        f"max_trials: {size} at the top level to run them all"
    ]


def predict_errors(spec: SweepSpec | None) -> list[str]:
    """oom.predict compares each prediction with the budget: without one it could skip nothing."""
    if spec is None or not spec.oom.predict or spec.base().get("memory_budget_gib") is not None:
        return []
    return [
        "oom.predict: true, but no memory.budget_gib to compare predictions with; set memory.budget_gib "
        "(e.g. memory: {budget_gib: 16}) or oom.predict: false"
    ]


def packing_errors(spec: SweepSpec | None) -> list[str]:
    """A memory-phase packing the stated card cannot hold, refused before anything runs (a card whose
    memory is read at run time is checked then)."""
    if spec is None or None in (spec.memory.budget_gib, spec.resources.gpu_memory_gib):
        return []
    try:
        packing(
            spec.memory.budget_gib,
            spec.resources.gpu_memory_gib,
            spec.resources.memory_phase_headroom_gib,
            per_process=True,
            asked=spec.resources.memory_phase_per_gpu,
        )
    except ValueError as exc:
        return [str(exc)]
    return []


# The fix of a section setting's broken rule, by pydantic's error type (its ctx fills the bound).
_FIXES = {
    "finite_number": "; give a finite number (YAML's .inf and .nan are not)",
    "greater_than": "; give a number above {gt}",
    "greater_than_equal": "; give {ge} or more",
    "less_than": "; give a number below {lt}",
    "less_than_equal": "; give {le} or less",
}


def _pydantic_errors(exc: ValidationError) -> list[str]:
    errors = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            parent = _section_model(err["loc"][:-1])
            errors.append(f"{loc}: unknown key; {did_you_mean(str(err['loc'][-1]), parent.model_fields)}")
        else:
            bounds = {k: f"{v:g}" if isinstance(v, float) else v for k, v in err.get("ctx", {}).items()}
            fix = _FIXES.get(err["type"], "").format(**bounds)
            errors.append(f"{loc or '(top level)'}: {err['msg'].lower()}, got {err.get('input')!r}{fix}")
    return errors


def _section_model(loc: tuple) -> type[BaseModel]:
    model: type[BaseModel] = SweepSpec
    for part in loc:
        ann = model.model_fields[part].annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
    return model


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """--set key=value (dotted; the value is YAML). A bare trial knob goes to `fixed` (and off the grid)."""
    raw = copy.deepcopy(raw)
    for item in overrides:
        if "=" not in item:
            raise SweepError([f"--set {item}: expected key=value, e.g. memory.budget_gib=16"])
        key, text = item.split("=", 1)
        try:
            value = yaml_data(text, "--set") if text else None
        except SweepError as exc:
            raise SweepError([f"--set {key}: {error}" for error in exc.errors]) from None
        parts = key.strip().split(".")
        if parts[-1] in RENAMED and (len(parts) == 1 or parts[:-1] in (["grid"], ["fixed"])):
            say_renamed(parts[-1], "--set ")
            parts[-1] = RENAMED[parts[-1]]
        if len(parts) == 1 and parts[0] not in SweepSpec.model_fields:
            if parts[0] not in KNOBS:  # neither a top-level setting nor a trial knob
                names = dict.fromkeys([*SweepSpec.model_fields, *SWEEP_KNOBS])
                raise SweepError([f"--set {key}: unknown setting; {unknown_name_hint(parts[0], names)}"])
            grid = raw.setdefault("grid", {})
            for name in (parts[0], *(old for old, new in RENAMED.items() if new == parts[0])):
                grid.pop(name, None)
            parts = ["fixed", parts[0]]
        node = raw
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return raw


def canonical_knobs(raw: dict[str, Any]) -> dict[str, Any]:
    """raw with its grid and fixed values as trials hold them (trainers.trial.canonical: `stack: TRL`
    is trl), each grid list element by element; the rest as it was."""
    raw = dict(raw)
    for section in ("grid", "fixed"):
        items = raw.get(section)
        if isinstance(items, dict) and RENAMED.keys() & items.keys():
            for old in RENAMED.keys() & items.keys():
                say_renamed(old, f"{section}.")
            # in place, the new name's value kept where both are given
            items = {RENAMED.get(k, k): v for k, v in items.items() if RENAMED.get(k) not in items}
        if isinstance(items, dict):
            for key, value in items.items():
                say_renamed(key, f"{section}.", value)
            raw[section] = {
                key: [canonical(key, v) for v in value]
                if section == "grid" and isinstance(value, list)
                else canonical(key, value)
                for key, value in items.items()
            }
    return raw


def parse_sweep(raw: Any, source: str = "") -> SweepSpec:
    if not isinstance(raw, dict):
        raise SweepError([f"(top level): expected a mapping of settings, got {type(raw).__name__}"], source)
    raw = canonical_knobs(raw)
    errors: list[str] = []
    spec = None
    refused: list[tuple] = []  # the places of the sections' refused settings
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        errors = _pydantic_errors(exc)
        refused = [err["loc"] for err in exc.errors()]
    errors += knob_errors(raw)
    errors += idle_knob_errors(raw)
    errors += grid_size_errors(raw, spec)
    errors += predict_errors(spec)
    errors += packing_errors(spec)
    if errors:
        raise SweepError(errors + combination_errors(raw, refused), source)
    return spec


def idle_knob_errors(raw: dict[str, Any]) -> list[str]:
    """Knobs a sweep names in fixed or grid that do nothing in every trial it plans, even at their default
    value: vLLM's where no trial generates with vLLM, LoRA's where every trial fine-tunes in full."""
    sections = {name: raw.get(name) if isinstance(raw.get(name), dict) else {} for name in ("fixed", "grid")}

    def values(knob: str) -> set:
        try:
            found = {sections["fixed"][knob]} if knob in sections["fixed"] else set()
            grid = sections["grid"].get(knob, [])
            found |= set(grid) if isinstance(grid, list) else {grid} if knob in sections["grid"] else set()
        except TypeError:  # an unhashable value: knob_errors says why
            return {"vllm", "lora"}  # judged by nothing here
        return found or {knob_default(knob)}

    errors = []
    for section, settings in sections.items():
        for name in settings:
            if name in VLLM_KNOBS and "vllm" not in values("generation"):
                errors.append(
                    f"{section}.{name}: does nothing, no trial generates with vLLM (generation: "
                    f"{', '.join(sorted(map(str, values('generation'))))}); set generation: vllm or remove {name}"
                )
            elif str(name).startswith("lora_") and values("adapter") == {"none"}:
                errors.append(
                    f"{section}.{name}: does nothing, every trial fine-tunes in full (adapter: none, no LoRA "
                    f"adapter); set adapter: lora or remove {name}"
                )
    return errors


# The trial knob each section setting gives every trial (SweepSpec.base).
_SECTION_KNOBS = {
    ("memory", "budget_gib"): "memory_budget_gib",
    ("oom", "probe_steps"): "probe_steps",
    ("oom", "probe_kind"): "probe_kind",
    ("resources", "cpus_per_trial"): "num_threads",
    ("resources", "gpus_per_trial"): "num_processes",
    ("task",): "task",
    ("task_args",): "task_args",
}


def combination_errors(raw: dict[str, Any], refused: list[tuple]) -> list[str]:
    """The plan's problems (the rules across settings) of a sweep whose single settings were refused, so
    one reading lists every error: each refused value is left out (a grid list keeps its good values),
    and a rule reading a knob left out whole is not checked, since it would judge a stand-in, not the
    user's value. None where what is left is no sweep to plan (a setting of the whole file refused)."""
    from orchestrator.spec.plan import expand, vllm_server_problems

    raw = copy.deepcopy(raw)
    skip = set()
    for loc in refused:
        node = raw
        for part in loc[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not loc or not isinstance(node, dict):
            return []
        node.pop(loc[-1], None)
        skip |= {knob for place, knob in _SECTION_KNOBS.items() if place[: len(loc)] == tuple(loc)}
    for section in ("grid", "fixed"):
        items = raw.get(section) if isinstance(raw.get(section), dict) else {}
        for key, value in list(items.items()):
            if key not in KNOBS or key in BOOKKEEPING:
                del items[key]
                continue
            kept = [v for v in (value if isinstance(value, list) and section == "grid" else [value])
                    if not (bound_problem(key, v) or check_value(key, v))]  # fmt: skip
            if len(kept) < (len(value) if isinstance(value, list) and section == "grid" else 1):
                if kept and section == "grid":
                    items[key] = kept
                else:
                    del items[key]
                    skip.add(key)
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError:
        return []
    if grid_size_errors(raw, spec):
        return []
    try:
        trials = expand(spec)
    except SweepError:
        return []
    found: dict[str, list[str]] = {}
    for trial in trials:
        reads = ("generation", "vllm_mode", "num_processes")
        server = vllm_server_problems(trial, spec.resources) if skip.isdisjoint(reads) else []
        for problem in trial.problems(frozenset(skip)) + server:
            found.setdefault(problem, []).append(trial.trial_key)
    return [f"{msg} (in {len(keys)} of {len(trials)} trials, e.g. {keys[0]})" for msg, keys in found.items()]


def _yaml_error(exc: yaml.YAMLError, source: str) -> str:
    """PyYAML's message, its places in `source` (the file, or --set) rather than in "<unicode string>"."""
    return f"not valid YAML: {str(exc).replace('<unicode string>', source)}"


def yaml_data(text: str, source: str) -> Any:
    """yaml.safe_load (exponents read as numbers: _Loader), refusing a document whose aliases expand it
    past MAX_NODES values."""
    try:
        loader = _Loader(text)
    except yaml.YAMLError as exc:  # the reader refuses control characters at once
        raise SweepError([_yaml_error(exc, source)], source) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded, distinct = _expanded_size(node)
        if expanded > max(MAX_NODES, distinct):
            raise SweepError(
                [
                    f"aliases (*name) expand this YAML to {expanded:,} values, over the limit of "
                    f"{MAX_NODES:,}; write the values out, or refer to fewer aliases"
                ],
                source,
            )
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise SweepError([_yaml_error(exc, source)], source) from None
    except RecursionError:
        raise SweepError(
            ["YAML nested too deeply; a sweep file is a few levels of settings"], source
        ) from None
    finally:
        loader.dispose()


def _expanded_size(root: yaml.Node) -> tuple[int, int]:
    """(values the node graph holds once every alias is copied out, distinct nodes); a cycle raises."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in active:
            raise yaml.YAMLError("an alias refers to a collection that holds it (a recursive alias)")
        active.add(id(node))
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
        total = 1 + sum(size(child) for child in children)
        active.discard(id(node))
        sizes[id(node)] = total
        return total

    return size(root), len(sizes)


def load_raw(path: str | Path) -> dict[str, Any]:
    """A sweep file's data: a regular file under MAX_FILE_BYTES of UTF-8 YAML, read without expanding it."""
    source = str(path)
    too_big = f"over the {MAX_FILE_BYTES >> 20} MiB limit for a sweep file; is it the right file?"
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise SweepError(
                ["not a regular file (a folder, device or pipe); give a sweep YAML file"], source
            )
        if info.st_size > MAX_FILE_BYTES:
            raise SweepError([f"{info.st_size:,} bytes, {too_big}"], source)
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)  # bounded even if the file grew since
    except OSError as exc:
        raise SweepError([f"cannot read: {exc.strerror}"], source) from None
    if len(data) > MAX_FILE_BYTES:
        raise SweepError([too_big], source)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SweepError(
            [
                f"not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); a sweep file is YAML "
                "text: save it as UTF-8"
            ],
            source,
        ) from None
    raw = yaml_data(text, source)
    return raw if raw is not None else {}


def load_sweep(path: str | Path, overrides: list[str] | None = None) -> SweepSpec:
    raw = load_raw(path)
    if isinstance(raw, dict):
        raw = apply_overrides(raw, overrides or [])
    return parse_sweep(raw, str(path))


def resolved_yaml(spec: SweepSpec) -> str:
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
