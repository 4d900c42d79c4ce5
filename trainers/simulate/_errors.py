"""The one error of trainers.simulate, in a module of its own that every part of the simulator imports
(trainers.simulate re-exports it)."""


class CannotSimulate(Exception):
    """The stack, the model or an op cannot be run on meta here; the message says which and why."""
