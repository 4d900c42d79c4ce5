"""Suggesting the known name a mistyped one was probably meant to be, for error messages.

Every layer's checks use it (tasks, trainers, orchestrator), so it lives here, at the bottom, and imports
nothing of the project.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """'did you mean 'x'? available: a, b, x' (the hint only when a candidate is close to name, whatever
    the case: `TRLL` is close to trl)."""
    candidates = list(candidates)
    folded: dict[str, str] = {}
    for candidate in candidates:
        folded.setdefault(str(candidate).lower(), candidate)
    close = [folded[m] for m in difflib.get_close_matches(str(name).lower(), folded, n=3, cutoff=0.5)]
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return f"{hint}available: {', '.join(sorted(candidates))}"
