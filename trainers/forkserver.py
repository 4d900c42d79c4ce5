"""The fork server: a process that has imported a stack's libraries once and forks each trainer child
from there, so a trial skips the interpreter's start and its imports (9 of a tiny trial's 11 s
outside its steps on a shared 2-core CPU host; forked, 0.7 s are left: bench/cost/startup.py).

    python -m trainers.forkserver <socket fd> <profile> <idle seconds>

Started by the supervisor's launcher (orchestrator/running/launcher.py), never by hand. It talks over
one end of a socketpair(AF_UNIX, SOCK_SEQPACKET) it inherits: bound to no address, on the network or
the file system. Messages are one JSON object each:

- server → launcher, once: {"ready": pid} after the preload, or {"refused": why} (then it exits);
- launcher → server: {"argv": [...], "env": {...}, "cwd": "..."} with two descriptors attached
  (SCM_RIGHTS): the trainer's stdin (the supervisor's words, trainers/control.py) and its log (stdout
  and stderr); the server answers {"pid": n} or {"error": why};
- server → launcher: {"exit": pid, "status": waitstatus} when a child ends (the server reaps them).

A profile is a registered stack: what its server preloads (its StackEntry.preload, trainers/stacks) is
what every trial of that stack imports anyway, with the environment the trial itself gets (the launcher
keys a server by that environment), so a forked trainer holds the same modules, in the same state, as a
cold one, and maps the server's resident library pages again before it starts (map_resident): its RSS
and VmHWM mean what a cold trainer's do (docs/benchmarks.md, "Start-up"). A stack that patches other
libraries when imported (Unsloth) preloads none of them on a GPU host, and its child imports them after
the fork, as a cold child does; where no GPU is visible its server imports them too
(StackEntry.preload_without_gpu), before any fork, as a cold child's build does before anything else.

Nothing here touches CUDA: CUDA does not survive a fork. While preloading, torch.cuda.is_available()
is answered from NVML (PYTORCH_NVML_BASED_CUDA_CHECK), and so is torch.cuda.get_device_capability():
bitsandbytes asks each device's capability as it is imported, to pick its native library, and it is
imported by PEFT, which transformers' trainer utilities import (`from transformers import
TrainerCallback` reaches it), so through torch that question initialized CUDA in every server on a GPU
(on an H100 every trainer started cold: "importing trainers.measure initialized CUDA"). A server whose
preload initialized CUDA all the same refuses to serve (the launcher then starts trainers cold).

Bounded in time and tied to its launcher: it exits after `idle seconds` without a child and without a
request, and at once when the launcher's end of the socket closes (the supervisor exited or was
killed), killing its children's process groups first. Each child starts a session of its own (its
process group is the supervisor's to kill) and gets PR_SET_PDEATHSIG from the server, so a server that
dies takes its trainers with it.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from typing import Any, NoReturn

# A profile is a registered stack's name (its fork server imports the entry's preload: trainers.stacks) or
# one of these. Nothing beyond the trainer's entry for "bare": the fork's mechanics alone, in seconds
# (tests), and the server of a stack that names no preload.
BARE = ("trainers.__main__",)
PROFILES: dict[str, tuple[str, ...]] = {"bare": BARE}
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
MAX_MESSAGE = 1 << 20
POLL_S = 0.05
SESSION_S = 10.0  # how long the server waits for a forked child to lead its own session
PAGE = os.sysconf("SC_PAGE_SIZE")
MADV_POPULATE_READ = 22  # Linux >= 5.14
# The file-backed pages resident in the server after its preload, as (address, length) runs: what a
# cold trainer has mapped after the same imports. A fork copies no page-table entries of file-backed
# mappings (the child faults them in as it touches them), so without mapping these again a forked
# trainer's RSS would read 0.15 GiB under a cold one's (tiny on this CPU host: RssFile 161 -> 8 MiB).
_resident: list[tuple[int, int]] = []


def profile_for(spec: Any) -> str | None:
    """The profile a trial forks from, or None: it starts cold (vLLM generation, whose hiding or import
    is the trial's own; and trials over several ranks, which accelerate's launcher starts)."""
    from trainers import stacks

    if spec.generation == "vllm" or spec.num_processes > 1:
        return None
    return spec.stack if spec.stack in stacks.STACKS else None


def profile_modules(profile: str, gpu: bool = True) -> tuple[str, ...]:
    """What a profile's server imports before any fork: a stack's preload (BARE where it names none),
    and without a `gpu` its preload_without_gpu after it; else PROFILES' own. KeyError for neither. The
    registry is imported here, as the preload starts: the server imports nothing of the trainer's (tasks
    and its pydantic included) before it."""
    from trainers import stacks

    if profile in stacks.STACKS:
        entry = stacks.STACKS[profile]
        return (entry.preload or BARE) + (() if gpu else entry.preload_without_gpu)
    return PROFILES[profile]


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def gpu_visible() -> bool:
    """Whether torch would see a GPU, asked of NVML (never CUDA itself)."""
    import torch

    return torch.cuda.is_available()  # NVML_CHECK is set: no CUDA initialization


def cuda_touched() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def device_index(device: Any) -> int:
    """The CUDA index of what get_device_capability takes (None, an int, "cuda:1", a torch.device or a
    torch.cuda.device), found without CUDA: None and an unnumbered "cuda" are device 0, which is all a
    process that has not chosen a device can mean."""
    import torch

    if device is None or isinstance(device, int):
        return device or 0
    if isinstance(device, torch.cuda.device):
        return device.idx
    return torch.device(device).index or 0


@contextlib.contextmanager
def capability_from_nvml():
    """torch.cuda.get_device_capability answered by NVML for the duration (torch's own initializes CUDA).
    Its devices are CUDA_VISIBLE_DEVICES' entries in order (trainers.nvml resolves each); the NVML
    answer is the same number CUDA gives. Where NVML cannot answer, torch's own is kept (and a preload
    that reaches it then refuses to serve, as before)."""
    import torch

    from trainers.nvml import resolve_nvml_handle

    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML: torch's answer stands
        yield
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in visible.split(",")] if visible else None
    original = torch.cuda.get_device_capability

    def from_nvml(device: Any = None) -> tuple[int, int]:
        index = device_index(device)
        handle = resolve_nvml_handle(pynvml, entries[index] if entries else str(index))
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        return int(major), int(minor)

    torch.cuda.get_device_capability = from_nvml
    try:
        yield
    finally:
        torch.cuda.get_device_capability = original
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def preload(profile: str) -> str | None:
    """Import the profile's modules; why this server cannot serve, or None."""
    # Every trial it serves generates with transformers (profile_for): vLLM stays out of it, as out of a
    # cold trainer (trainers.generation.hide_vllm_unless_used). Else TRL, imported here, would load its
    # vLLM backend where vLLM is installed, and every forked trainer would hold it (+0.16 GiB of RSS
    # against a cold one's on a host with vLLM's CPU build: test_forked_trainer caught it).
    from trainers.generation import hide_vllm

    hide_vllm()
    os.environ[NVML_CHECK] = "1"
    try:
        gpu = gpu_visible()
        with capability_from_nvml() if gpu else contextlib.nullcontext():
            for name in profile_modules(profile, gpu):
                importlib.import_module(name)
                if cuda_touched():
                    return f"importing {name} initialized CUDA"
    except Exception as exc:  # noqa: BLE001 - any failure: the launcher starts trainers cold
        return f"preload failed: {type(exc).__name__}: {exc}"
    finally:
        os.environ.pop(NVML_CHECK, None)
    import threading

    if threading.active_count() > 1:
        return f"preload started threads: {[t.name for t in threading.enumerate()]}"
    return None


def resident_file_ranges() -> list[tuple[int, int]]:
    """This process's resident pages of file-backed mappings (libraries, their data), as runs of
    (address, length), read from /proc/self/pagemap (bit 63: present)."""
    import numpy as np

    runs: list[tuple[int, int]] = []
    with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
        for line in maps:
            fields = line.split()
            if len(fields) < 6 or not fields[5].startswith("/") or fields[4] == "0":
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            pagemap.seek(start // PAGE * 8)
            entries = np.frombuffer(pagemap.read((end - start) // PAGE * 8), dtype=np.uint64)
            present = np.concatenate(([0], (entries >> np.uint64(63)).astype(np.int8), [0]))
            edges = np.flatnonzero(np.diff(present))
            for first, stop in zip(edges[::2], edges[1::2], strict=True):
                runs.append((start + int(first) * PAGE, int(stop - first) * PAGE))
    return runs


def map_resident(runs: list[tuple[int, int]]) -> None:
    """Map the server's resident file pages into this (forked) process again, as a cold trainer has
    them mapped after its imports (MADV_POPULATE_READ: page-table entries for pages already in the page
    cache; nothing is read from disk). Where the kernel cannot, the forked RSS reads low by them."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    for address, length in runs:
        libc.madvise(address, length, MADV_POPULATE_READ)


def serve(sock: socket.socket, profile: str, idle_s: float) -> int:
    refused = preload(profile)
    if refused:
        send(sock, {"refused": refused})
        return 1
    with contextlib.suppress(OSError, ImportError, ValueError):
        _resident[:] = resident_file_ranges()
    gc.collect()
    gc.freeze()  # the preloaded objects stay out of the collector's scans: fewer pages copied per child
    send(sock, {"ready": os.getpid()})
    children: set[int] = set()
    last = time.monotonic()
    while True:
        for pid, status in reap(children):
            children.discard(pid)
            last = time.monotonic()
            with contextlib.suppress(OSError):
                send(sock, {"exit": pid, "status": status})
        if not children and time.monotonic() - last > idle_s:
            return 0
        ready, _, _ = select.select([sock], [], [], POLL_S)
        if not ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 2)
        except OSError:
            data, fds = b"", []
        if not data:  # the launcher is gone: so are its trials
            for pid in children:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            return 0
        last = time.monotonic()
        try:
            request = json.loads(data)
            if len(fds) != 2:
                raise ValueError(f"a request carries stdin and the log: got {len(fds)} descriptors")
            sys.stdout.flush()
            sys.stderr.flush()
            started, arm = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(started)
                child(sock, request, fds, arm)
            os.close(arm)
            children.add(pid)
            # Answer once the child is set up (it leads its session): the supervisor may kill its group.
            with os.fdopen(started, "rb") as ready:
                select.select([ready], [], [], SESSION_S)
            send(sock, {"pid": pid})
        except Exception as exc:  # noqa: BLE001 - a bad request fails alone
            send(sock, {"error": f"{type(exc).__name__}: {exc}"})
        finally:
            for fd in fds:
                os.close(fd)


def reap(children: set[int]) -> list[tuple[int, int]]:
    ended = []
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                ended.append((pid, status))
    return ended


def child(sock: socket.socket, request: dict[str, Any], fds: list[int], started: int) -> NoReturn:
    """The forked trainer: the trial's own session, stdio, environment and directory (then `started` is
    closed: the server answers with this pid), then the trainer's entry (trainers.__main__.run) as
    `python -m trainers` would run it."""
    try:
        server = os.getppid()
        os.setsid()
        from trainers.distributed import die_with_parent

        die_with_parent()
        if os.getppid() != server:  # the server died before the death signal was armed
            os._exit(1)
        map_resident(_resident)
        sock.close()
        stdin_fd, log_fd = fds
        os.dup2(stdin_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(stdin_fd)
        os.close(log_fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = ["-m", *request["argv"]]
        from trainers import startup
        from trainers.__main__ import run

        startup.reset()
        os.close(started)  # set up as the trial asked: the server answers with this pid now
        run(list(request["argv"]))
    except BaseException:  # noqa: BLE001 - a child never returns into the server's loop
        with contextlib.suppress(Exception):
            traceback.print_exc()
            sys.stderr.flush()
    os._exit(70)


def main(argv: list[str]) -> int:
    fd, profile, idle_s = int(argv[0]), argv[1], float(argv[2])
    sock = socket.socket(fileno=fd)
    try:
        return serve(sock, profile, idle_s)
    finally:
        sock.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
