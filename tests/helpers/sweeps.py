"""Sweep files for tests that run real sweeps."""

from pathlib import Path

import yaml


def tiny_sweep(path: Path, name: str, grid: dict, **sections) -> Path:
    """A sweep of real `tiny` trainer children kept as short as a real run allows."""
    raw = {
        "name": name,
        "grid": grid,
        "fixed": {
            "model": "tiny",
            "batch_size": 1,
            "max_steps": 2,
            "max_prompt_length": 96,
            "max_completion_length": 8,
            "quantization": "none",
            **sections.pop("fixed", {}),
        },
        "resources": {"gpus_per_trial": 1, "cpus_per_trial": 1, "max_concurrent": 2},
        "oom": {"probe_steps": 1},
        "timeout_s": 300,
        **sections,
    }
    raw["fixed"] = {k: v for k, v in raw["fixed"].items() if k not in grid}
    path.write_text(yaml.safe_dump(raw))
    return path
