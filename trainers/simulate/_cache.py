"""Simulated steps kept on disk: a step simulated once answers again at once. The key is everything the
figures depend on and nothing else: the model's config, the trial's settings that shape the step, the
prompt length and how it was simulated, the installed versions of the libraries whose code runs, and
the simulator's own source. A change to any of them is a new key, so nothing stale is read.

Files: <rlsweep cache>/simulated/<key>.json (trainers.models.cache_home), written whole (temporary file,
then rename), so a reader never sees half of one.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

# Settings that do not shape one step's memory: how long a trial runs, where it writes, what judges it.
NOT_THE_STEP = frozenset({
    "max_steps", "probe_steps", "probe_kind", "memory_budget_gib", "eval_every", "eval_at_end", "eval_samples",
    "eval_k", "seed", "data_seed", "num_threads", "trial_key", "sweep", "output_dir", "events_path",
    "model_cache_dir", "vllm_server_port", "hold_at_step", "task", "task_args",
})  # fmt: skip
# The libraries every stack's step runs; each registered stack adds its own (StackEntry.packages).
LIBRARIES = ("torch", "transformers", "peft", "accelerate", "bitsandbytes")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def _code() -> str:
    """The simulator's source (trainers/simulate, the stacks' simulated steps, the optimizer's state)."""
    root = Path(__file__).resolve().parents[1]
    files = sorted([*root.glob("simulate/*.py"), *root.glob("stacks/*.py"), root / "optimizer_state.py"])
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def _libraries() -> tuple[str, ...]:
    from trainers.stacks import STACKS

    return tuple(dict.fromkeys([*LIBRARIES, *(p for entry in STACKS.values() for p in entry.packages)]))


def key(spec: Any, config: dict, prompt_tokens: int, how: dict) -> str:
    settings = {k: v for k, v in spec.to_dict().items() if k not in NOT_THE_STEP}
    said = {
        "settings": settings, "config": config, "prompt_tokens": prompt_tokens, "how": how,
        "versions": {name: _version(name) for name in _libraries()}, "code": _code(),
    }  # fmt: skip
    return hashlib.sha256(json.dumps(said, sort_keys=True, default=str).encode()).hexdigest()[:32]


def folder() -> Path:
    from trainers.models import cache_home

    return cache_home() / "simulated"


def read(name: str, kind: type) -> Any | None:
    """The step kept under `name`, or None (never kept, or unreadable: simulated again)."""
    try:
        data = json.loads((folder() / f"{name}.json").read_text())
        return kind(**data)
    except (OSError, ValueError, TypeError):
        return None


def write(name: str, step: Any) -> None:
    """Keep `step` under `name`; a cache that cannot be written is skipped (the answer stands)."""
    target = folder() / f"{name}.json"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=target.parent, suffix=".tmp", delete=False) as handle:
            json.dump(dataclasses.asdict(step), handle, sort_keys=True)
        os.replace(handle.name, target)
    except OSError:
        return
