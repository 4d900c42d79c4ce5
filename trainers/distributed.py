"""A trial over several ranks: accelerate's launcher command for a TrialSpec, and what a rank knows of
itself.

The supervisor starts `python -m accelerate.commands.launch ... -m trainers spec.json`; torch's elastic
agent inside the launcher starts one trainer per rank, each in a session of its own, with RANK,
LOCAL_RANK and WORLD_SIZE in its environment. Rank 0 writes the trial's event stream (the supervisor
reads it); rank r > 0 writes the same events to a file of its own beside it (rank_events_path), which
the supervisor reads only to name a rank that failed or fell behind. Without a GPU the ranks are CPU
processes talking over gloo on 127.0.0.1.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainers.trial import TrialSpec

# accelerate's launcher flags for each strategy beyond --multi_gpu (DDP). FSDP 2 shards weights,
# gradients and optimizer state, wrapping each transformer block; ZeRO through DeepSpeed.
STRATEGY_FLAGS: dict[str, tuple[str, ...]] = {
    "ddp": ("--multi_gpu",),
    "fsdp": (
        "--use_fsdp",
        "--fsdp_version",
        "2",
        "--fsdp_auto_wrap_policy",
        "TRANSFORMER_BASED_WRAP",
        "--fsdp_state_dict_type",
        "SHARDED_STATE_DICT",
        "--fsdp_cpu_ram_efficient_loading",
        "false",
    ),
    "zero2": ("--use_deepspeed", "--zero_stage", "2"),
    "zero3": ("--use_deepspeed", "--zero_stage", "3", "--zero3_init_flag", "true"),
}
# The strategies that shard the weights themselves (no device_map; 4-bit storage in the compute dtype).
SHARDS_WEIGHTS = ("fsdp", "zero3")
# The packages a strategy needs beyond accelerate and torch.
STRATEGY_PACKAGES = {"zero2": ("deepspeed",), "zero3": ("deepspeed",)}


def die_with_parent() -> None:
    """The kernel sends this process SIGKILL when the thread that forked it dies (PR_SET_PDEATHSIG): the
    supervisor's trainer child, and each rank under the launcher (torch's elastic agent starts ranks in
    sessions of their own, out of the launcher's process group), so no rank outlives its trial."""
    import contextlib
    import ctypes
    import signal

    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def rank() -> int:
    """This process's global rank (0 when not launched as a rank)."""
    return int(os.environ.get("RANK", "0") or 0)


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def rank_events_path(events_path: str, rank: int) -> str:
    """Where `rank` writes its events: rank 0 the trial's stream, rank r `<stream>.rank<r>`."""
    if rank == 0 or not events_path:
        return events_path
    return f"{events_path}.rank{rank}"


# The signal on which a rank writes its Python stack to stack_path (faulthandler, from a C signal handler:
# it answers even while the rank waits inside a collective), so the supervisor can tell, at a trial's
# timeout, which rank hung and where.
STACK_SIGNAL = "SIGUSR1"


def stack_path(events_path: str, rank: int) -> str:
    return f"{events_path}.rank{rank}.stack"


def dump_stack_on_signal(events_path: str, rank: int):
    """Register faulthandler to write this rank's stack to stack_path on STACK_SIGNAL; returns the open
    file, which must stay open while the rank runs."""
    import faulthandler
    import signal

    out = open(stack_path(events_path, rank), "w")  # noqa: SIM115 - open for the rank's life
    faulthandler.register(getattr(signal, STACK_SIGNAL), file=out, all_threads=False)
    return out


def launch_command(
    spec: TrialSpec, spec_path: str | Path, port: int, program: tuple[str, ...] = ("--module", "trainers")
) -> list[str]:
    """accelerate's launcher running `python -m trainers spec_path` (or another python `program`) as
    spec.num_processes ranks on this node, the rendezvous on 127.0.0.1:port."""
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *STRATEGY_FLAGS[spec.distributed],
        "--num_processes",
        str(spec.num_processes),
        "--num_machines",
        "1",
        "--machine_rank",
        "0",
        "--main_process_ip",
        "127.0.0.1",
        "--main_process_port",
        str(port),
        "--mixed_precision",
        "no",  # the trainer picks its dtype itself (trainers.runtime.choose_dtype)
        "--dynamo_backend",
        "no",
        *program,
        str(spec_path),
    ]


def strategy_unavailable(spec: TrialSpec) -> str | None:
    """Why this machine cannot run the trial's strategy (a package it needs is missing), or None."""
    import importlib.util

    missing = [p for p in STRATEGY_PACKAGES.get(spec.distributed, ()) if importlib.util.find_spec(p) is None]
    if not missing:
        return None
    return (
        f"distributed: {spec.distributed} needs {', '.join(missing)}, which is not installed here; install it "
        "(pip install deepspeed) or choose distributed: ddp, or fsdp on GPUs"
    )


def shared_word(word: bool | None) -> bool:
    """Rank 0's answer, the same on every rank: a collective over the ranks' process group (every rank
    calls it at the same step); the answer as given where there is one rank."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return bool(word)
    box = [word]
    dist.broadcast_object_list(box, src=0)
    return bool(box[0])
