"""The training stacks, registered in one place: STACKS maps each `framework` value to its entry.

An entry is what validation, the report, compare and gpu-check need to know of a stack (its name, label
and the vllm_mode values it generates with) and where its Stack class lives; load() imports that class
on first use. So this package imports no stack module: the trial spec validates against the entries
without depending on the stacks that consume it. Stack modules stay light too (each imports torch,
transformers and its own packages inside build()).

Add a stack: subclass trainers.stacks._base.Stack in one module (build; packages where it needs more than
the shared ones) and register its entry below.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from tasks.names import did_you_mean

__all__ = ["BASE", "STACKS", "StackEntry", "get", "label", "load", "names", "register"]


@dataclass(frozen=True)
class StackEntry:
    """A registered stack. target: 'module:Class' of its trainers.stacks._base.Stack subclass."""

    name: str  # the `framework` value that picks it
    label: str  # how the report and gpu-check write it
    target: str
    vllm_modes: tuple[str, ...] = ()  # the vllm_mode values it generates with (generation: vllm)
    # The environment every trainer child gets for this stack (orchestrator/running/child_env.py sets
    # every registered stack's, so one fork server serves them all): variables set outright, and
    # compile caches (variable, folder under rlsweep's cache/compile/) a user's own setting overrides.
    env: tuple[tuple[str, str], ...] = ()
    compile_caches: tuple[tuple[str, str], ...] = ()
    # The effective_config entry (key, value) a trial records when the stack ran a fallback rather than
    # its own trainer (Unsloth without a GPU runs TRL's): the report shows its figures, never compares them.
    fallback_when: tuple[str, str] | None = None


STACKS: dict[str, StackEntry] = {}
BASE = "trl"  # the stack the others are compared against unless a report or check names another
_loaded: dict[str, Any] = {}  # name -> its trainers.stacks._base.Stack, once loaded


def register(entry: StackEntry) -> StackEntry:
    """Add a stack under its name; a second stack of the same name is refused."""
    if entry.name in STACKS:
        raise ValueError(f"stack {entry.name!r} is registered already ({STACKS[entry.name].target})")
    STACKS[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove a stack (a test's own); its loaded instance goes with it."""
    del STACKS[name]
    _loaded.pop(name, None)


def get(name: str, field: str = "framework") -> StackEntry:
    """The entry `name` picks, or a ValueError naming the field, the value and the registered stacks."""
    try:
        return STACKS[name]
    except KeyError:
        raise ValueError(f"{field}: unknown value {name!r}; {did_you_mean(str(name), STACKS)}") from None


def load(name: str, field: str = "framework"):
    """The trainers.stacks._base.Stack that trains for `name`, imported on first use and kept (one
    instance per stack). Unannotated on purpose: naming the Stack type here would make the registry,
    which the trial spec reads, depend on the stack interface, which reads the trial spec."""
    entry = get(name, field)
    if name not in _loaded:
        module, _, cls = entry.target.partition(":")
        _loaded[name] = getattr(importlib.import_module(module), cls)(entry)
    return _loaded[name]


def names() -> tuple[str, ...]:
    """The registered stacks' names, in registration order."""
    return tuple(STACKS)


def label(name: str) -> str:
    """How reports write a stack: its label, or the name itself for one not registered here (a sweep
    recorded where another stack was installed)."""
    return STACKS[name].label if name in STACKS else name


register(StackEntry("trl", "TRL", "trainers.stacks.trl:TrlStack", vllm_modes=("colocate", "server")))
# Unsloth's fast_inference: vLLM inside the trainer's process. Its from_pretrained otherwise checks for a
# network and downloads a statistics repo (up to 120 s) on every model load (unsloth/models/_utils.py
# get_statistics: any value switches it off). It writes the source of its patched modules into
# UNSLOTH_COMPILE_LOCATION (unsloth_zoo/compiler.py; child_env.py says why trials share it).
register(
    StackEntry(
        "unsloth",
        "Unsloth",
        "trainers.stacks.unsloth:UnslothStack",
        vllm_modes=("colocate",),
        env=(("UNSLOTH_DISABLE_STATISTICS", "1"),),
        compile_caches=(("UNSLOTH_COMPILE_LOCATION", "unsloth"),),
        fallback_when=("unsloth_backend", "cpu"),  # trainers/stacks/unsloth.py records it
    )
)
