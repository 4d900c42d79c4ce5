"""Shared pieces of the integration tests: a tiny sweep, a local Ray with fake GPUs (one per module)."""

import tempfile
from pathlib import Path

import psutil
import pytest
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


@pytest.fixture(scope="module")
def ray_fake_gpus():
    import ray

    from orchestrator.driver import quiet_ray_env

    quiet_ray_env()
    temp = tempfile.mkdtemp(prefix="rls-ray-", dir="/tmp")
    ray.init(
        num_cpus=2,
        num_gpus=2,
        _node_ip_address="127.0.0.1",
        _temp_dir=temp,
        include_dashboard=False,
        log_to_driver=False,
    )
    yield
    ray.shutdown()


def kill_processes_mentioning(text: str) -> None:
    """Stop leftovers of a Ray we started (after a SIGKILL of its driver), by PID, found by our own temp dir."""
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(text in part for part in proc.info["cmdline"] or []):
                proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
