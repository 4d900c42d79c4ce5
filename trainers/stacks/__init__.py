"""The training stacks, registered in one place: STACKS maps each `framework` value to its Stack.

Validation (TrialSpec's `framework`), `python -m trainers`, the report, compare, gpu-check and the
memory model's families all read the stacks from here. Importing this package imports no training
library: each stack imports torch, transformers and its own packages inside build().

Add a stack: subclass trainers.stacks._base.Stack in one module (name, label, build; packages and
vllm_modes where they apply) and register an instance below.
"""

from __future__ import annotations

from tasks.names import did_you_mean
from trainers.stacks._base import Stack

__all__ = ["BASE", "STACKS", "Stack", "get", "label", "names", "register"]
from trainers.stacks.trl import TrlStack
from trainers.stacks.unsloth import UnslothStack

STACKS: dict[str, Stack] = {}
BASE = "trl"  # the stack the others are compared against unless a report or check names another


def register(stack: Stack) -> Stack:
    """Add a stack under its name; a second stack of the same name is refused."""
    if stack.name in STACKS:
        raise ValueError(f"stack {stack.name!r} is registered already ({type(STACKS[stack.name]).__name__})")
    STACKS[stack.name] = stack
    return stack


def get(name: str, field: str = "framework") -> Stack:
    """The stack `name` picks, or a ValueError naming the field, the value and the registered stacks."""
    try:
        return STACKS[name]
    except KeyError:
        raise ValueError(f"{field}: unknown value {name!r}; {did_you_mean(str(name), STACKS)}") from None


def names() -> tuple[str, ...]:
    """The registered stacks' names, in registration order."""
    return tuple(STACKS)


def label(name: str) -> str:
    """How reports write a stack: its label, or the name itself for one not registered here (a sweep
    recorded where another stack was installed)."""
    return STACKS[name].label if name in STACKS else name


register(TrlStack())
register(UnslothStack())
