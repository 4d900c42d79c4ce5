"""A budgeted sweep in two phases: memory first, then speed.

Memory phase: each trial runs its probe steps and its first steady generation cycle (from
TrialSpec.hold_at_step on, to where a steady cycle ends: trainers.control.holds_here), enough
for a verdict: it fits (with its measured peak) or ends `oom`, and pruning acts on that at once. On a
GPU larger than the budget several memory-phase trials share it (Ray's fractional GPUs): each
trainer's own cap and the supervisor's guard judge each process alone, which needs per-process
memory readings: NVML's per-process list on a GPU, RSS on a CPU. Where only device-wide readings
exist, memory-phase trials do not share a GPU.

Speed phase: the configurations that fit run their full steps, one per GPU. A trial whose memory
phase ran alone goes straight on in the same process (the supervisor tells it `continue` at its hold
step); a packed one is started again, alone. With a budget both phases run by default; `phases:
[memory]` stops after the first; without a budget only the speed phase runs. Every trials.parquet row
says which phase its figures come from.

No Ray here: the driver asks `stages` for its Tune runs and hands each trial its `TrialPhases`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.recording.outcome import COMPLETED, FINAL_STATUSES, IMPLIED
from orchestrator.running.settle import SettleSettings

MEMORY, SPEED = "memory", "speed"
PHASES = (MEMORY, SPEED)


@dataclass(frozen=True)
class TrialPhases:
    """What the supervisor does with one trial. hold_at_step: the memory phase's last step (None: no
    memory phase in this run); then_speed: at it, go on into the speed phase (else stop there);
    settle: end the speed phase once settled (orchestrator/running/settle.py), None: run to max_steps;
    shared_gpu: packed beside other trials on one GPU, so its memory is read per process only."""

    hold_at_step: int | None = None
    then_speed: bool = True
    settle: SettleSettings | None = None
    shared_gpu: bool = False

    def for_trial(self, max_steps: int) -> TrialPhases:
        """These phases for a trial of max_steps: one whose memory phase would be its whole run has none
        (it runs as a speed-phase trial, and its figures are the speed phase's)."""
        if self.hold_at_step is not None and self.hold_at_step >= max_steps:
            return replace(self, hold_at_step=None)
        return self


SPEED_ONLY = TrialPhases()


def memory_phase_steps(probe_steps: int) -> int:
    """The memory phase's first possible hold step: after the probe steps (worst case), one steady
    step; the phase holds where the steady generation cycle that step is in ends (holds_here)."""
    return probe_steps + 1


@dataclass(frozen=True)
class Packing:
    """How many memory-phase trials share one GPU (1: none share) and why."""

    per_gpu: int
    reason: str


def packing(
    budget_gib: float,
    card_gib: float | None,
    headroom_gib: float,
    per_process: bool,
    asked: int | None,
    host: HostRoom | None = None,
) -> Packing:
    """Memory-phase trials per GPU: `asked`, else as many budgets (plus headroom each) as the card holds;
    with `host`, no more than the host's RAM holds (each trial's predicted RSS, every GPU of the host
    packed alike), and the reason says which of the two bounds it. Raises ValueError for an `asked`
    packing the card cannot hold."""
    if card_gib is None:
        return Packing(1, "the GPU's memory is unknown (set resources.gpu_memory_gib to pack trials)")
    each = budget_gib + headroom_gib
    fits = max(1, math.floor(card_gib / each))
    if asked is not None and asked > 1 and asked * each > card_gib:
        raise ValueError(
            f"resources.memory_phase_per_gpu: {asked} trials x ({budget_gib:g} GiB budget + "
            f"{headroom_gib:g} GiB headroom) = {asked * each:g} GiB, over the card's {card_gib:g} GiB; "
            f"give at most {fits}, or leave it unset to pack as many as fit"
        )
    per_gpu = asked or fits
    if per_gpu > 1 and not per_process:
        return Packing(
            1,
            "memory-phase trials do not share a GPU: the driver reports only device-wide memory (no "
            "per-process readings in NVML), so the guard could not tell the trials apart",
        )
    if per_gpu > 1 and host is not None and host.per_gpu < per_gpu:
        return Packing(host.per_gpu, f"{host.why(per_gpu)}; {card_gib:g} GiB GPU memory would hold {per_gpu}")
    if per_gpu == 1:
        return Packing(1, f"one {each:g} GiB trial (budget + headroom) per {card_gib:g} GiB GPU")
    return Packing(
        per_gpu, f"{per_gpu} memory-phase trials per {card_gib:g} GiB GPU ({each:g} GiB each with headroom)"
    )


@dataclass(frozen=True)
class HostRoom:
    """The host's RAM against the trials' predicted RSS (orchestrator/running/host_memory.py): every
    packed trial's trainer holds its RSS on the host at once, on each of the host's `gpus`."""

    ram_gib: float  # available now
    rss_gib: float  # one trial's predicted RSS (the largest of the sweep's)
    how: str  # how the RSS was predicted
    gpus: int = 1

    @property
    def trials(self) -> int:
        return math.floor(self.ram_gib / self.rss_gib) if self.rss_gib > 0 else 0

    @property
    def per_gpu(self) -> int:
        return max(1, self.trials // max(1, self.gpus))

    def why(self, asked: int) -> str:
        across = f" across {self.gpus} GPUs" if self.gpus > 1 else ""
        return (
            f"{self.per_gpu} memory-phase trial{'s' if self.per_gpu > 1 else ''} per GPU: the host's "
            f"{self.ram_gib:.1f} GiB of available RAM holds {self.trials} trainer{'s' if self.trials != 1 else ''}"
            f"{across} of {self.rss_gib:.1f} GiB RSS each (predicted: {self.how}), not {asked}"
        )


# A child that creates a CUDA context and says whether NVML lists its own PID on its device.
_NVML_PROBE = (
    "import os, torch; from trainers.nvml import import_pynvml, open_visible_device, process_used_bytes; "
    "torch.zeros(1, device='cuda'); nvml = import_pynvml(); "
    "handle = open_visible_device(nvml, os.environ.get('CUDA_VISIBLE_DEVICES')); "
    "print(process_used_bytes(nvml, handle, {os.getpid()}) is not None)"
)
NVML_PROBE_TIMEOUT_S = 180


def host_gpu() -> tuple[float | None, bool]:
    """(memory of the GPU this driver was given, in GiB; whether NVML reads each process's GPU memory).
    The GPU is the first entry of the driver's CUDA_VISIBLE_DEVICES (index 0 when unset), the one its
    trials run on, not NVML's device 0. Without an NVIDIA GPU: (None, True), since trials then run on
    the CPU and the guard reads each one's RSS."""
    from trainers.nvml import (
        CUDA_DEVICE_ORDER,
        NvmlUnavailable,
        first_visible_device,
        import_pynvml,
        open_visible_device,
    )

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        nvml = import_pynvml()
        handle = open_visible_device(nvml, visible)
    except NvmlUnavailable as exc:
        return None, exc.no_gpu
    try:
        total = nvml.nvmlDeviceGetMemoryInfo(handle).total / 1024**3
    finally:
        nvml.nvmlShutdown()
    import subprocess
    import sys

    env = {**os.environ, **CUDA_DEVICE_ORDER, "CUDA_VISIBLE_DEVICES": first_visible_device(visible)}
    try:
        answer = subprocess.run(
            [sys.executable, "-c", _NVML_PROBE],
            capture_output=True,
            text=True,
            timeout=NVML_PROBE_TIMEOUT_S,
            env=env,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        answer = ""
    return total, answer.endswith("True")


def host_room(trials: Sequence[Any], gpus: int, ram_gib: float | None = None) -> HostRoom | None:
    """The host's RAM against the largest predicted RSS of these trials; None when no trial's RSS can
    be predicted (packing then goes by GPU memory alone)."""
    from orchestrator.running.host_memory import host_available_gib, largest_rss

    predicted, model = largest_rss(trials)
    if predicted is None:
        return None
    ram = host_available_gib() if ram_gib is None else ram_gib
    return HostRoom(ram, predicted.gib, f"{model}: {predicted.how}", max(1, gpus))


def speed_pending(row: Mapping[str, Any] | None) -> bool:
    """A trial whose memory phase fitted (or whose fit was implied, orchestrator/judging/frontier.py)
    and whose speed phase has not run yet."""
    if not row:
        return False
    return row.get("status") == IMPLIED or (row.get("status") == COMPLETED and row.get("phase") == MEMORY)


def unfinished(row: Mapping[str, Any] | None) -> bool:
    """A trial with no final row yet (never ran, or `stopped`)."""
    return row is None or row.get("status") not in FINAL_STATUSES


Stage = tuple[Callable[[Mapping[str, Any] | None], bool], TrialPhases, float]


def stages(
    sweep: Any,
    has_gpu: bool,
    say: Callable[[str], None] = print,
    trials: Sequence[Any] = (),
    gpu_count: int = 1,
    host_ram_gib: float | None = None,
) -> list[Stage]:
    """The Tune runs of a sweep's phases, in order: (which trials run, by their ledger row; what each
    trial does; the GPUs each holds). `sweep`: an orchestrator.spec.sweep.SweepSpec; `has_gpu`: the cluster
    has GPUs; `say`: where the packing decision is told; `trials`: the sweep's TrialSpecs, whose largest
    predicted RSS bounds the packing by the host's RAM (`host_ram_gib`, default what is available now,
    shared by the host's `gpu_count` GPUs). Raises ValueError for a packing the card cannot hold."""
    run = sweep.phases_to_run()
    settle = sweep.stop.settings()
    gpus = sweep.resources.gpus_per_trial
    if MEMORY not in run:
        return [(unfinished, TrialPhases(settle=settle), gpus)]
    hold = memory_phase_steps(sweep.oom.probe_steps)
    per_gpu = 1
    if gpus == 1 and has_gpu:
        card_gib, per_process = host_gpu()
        packed = packing(
            sweep.memory.budget_gib,
            sweep.resources.gpu_memory_gib or card_gib,
            sweep.resources.memory_phase_headroom_gib,
            per_process,
            sweep.resources.memory_phase_per_gpu,
            host_room(trials, gpu_count, host_ram_gib),
        )
        say(f"memory phase: {packed.reason}")
        per_gpu = packed.per_gpu
    if per_gpu == 1:  # alone on its GPU: a trial that fits goes straight on into its speed phase
        runs = [(unfinished, TrialPhases(hold_at_step=hold, then_speed=SPEED in run, settle=settle), gpus)]
    else:
        runs = [(unfinished, TrialPhases(hold_at_step=hold, then_speed=False, shared_gpu=True), 1 / per_gpu)]
    if SPEED in run:
        runs.append((speed_pending, TrialPhases(settle=settle), gpus))
    return runs
