"""A test-only third stack, registered for one test and removed after it (trainers.stacks.STACKS)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from trainers.runtime import UnavailableError
from trainers.stacks import STACKS, Stack, register

THIRD_UNAVAILABLE = "third: a test-only stack; it trains nothing"


class ThirdStack(Stack):
    name = "third"
    label = "Third"

    def build(self, spec, events):
        raise UnavailableError(THIRD_UNAVAILABLE)


@contextmanager
def registered(stack: Stack) -> Iterator[Stack]:
    """`stack` in the registry for the with-block, and gone from it after."""
    register(stack)
    try:
        yield stack
    finally:
        del STACKS[stack.name]
