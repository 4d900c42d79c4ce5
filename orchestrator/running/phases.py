"""A budgeted sweep in two phases: memory first, then speed.

Memory phase: each trial runs its probe steps and its first steady generation cycle (from
TrialSpec.hold_at_step on, to where a steady cycle ends: trainers.control.holds_here), enough
for a verdict: it fits (with its measured peak) or ends `oom`, and pruning acts on that at once. On a
GPU larger than the budget several memory-phase trials share it (Ray's fractional GPUs): each
trainer's own cap and the supervisor's guard judge each process alone, which needs per-process
memory readings: NVML's per-process list on a GPU, RSS on a CPU. Where only device-wide readings
exist, memory-phase trials do not share a GPU. The packed trainers also share the host's RAM: each
trial packs by its own predicted RSS (running/host_memory.py), so the trials the RAM holds fewer
times run in Tune runs of their own, fewer to a GPU (alone if need be), after the others: one huge
trainer does not make every trial run alone, and by its turn the verdicts of the smaller trials have
often pruned it (a trial that dominates an oom is never run).

Speed phase: the configurations that fit run their full steps, one per GPU. A trial whose memory
phase ran alone goes straight on in the same process (the supervisor tells it `continue` at its hold
step); a packed one is started again, alone. With a budget both phases run by default; `phases:
[memory]` stops after the first; without a budget only the speed phase runs. Every trials.parquet row
says which phase its figures come from.

No Ray here: the driver asks `stages` for its Tune runs and hands each trial its `TrialPhases`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.words.phases import (
    MEMORY,
    SPEED,
    TrialPhases,
    host_groups,
    later_groups,
    memory_phase_steps,
    packing,
    speed_pending,
    unfinished,
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


@dataclass(frozen=True)
class Stage:
    """One Tune run of a sweep's phases: the trials it runs (`which`, by their ledger row, among the
    trial keys `keys`; None: among all), what each trial does, and the GPUs each holds."""

    which: Callable[[Mapping[str, Any] | None], bool]
    phases: TrialPhases
    gpus: float
    keys: frozenset[str] | None = None

    def runs(self, spec: Any, row: Mapping[str, Any] | None) -> bool:
        """Whether this run takes the trial `spec` (a TrialSpec) whose ledger row is `row`."""
        return (self.keys is None or spec.trial_key in self.keys) and self.which(row)


def memory_packing(
    sweep: Any, trials: Sequence[Any], gpu_count: int = 1, ram_gib: float | None = None
) -> tuple[str, list[tuple[int, frozenset[str] | None]]]:
    """How the memory phase packs on this host's GPUs: (why, in words; [(trials per GPU, the trial keys
    packed so, None for all), ...] in the order they run). The card bounds every trial alike (packing);
    the host's RAM (`ram_gib`, default what is available now, shared by its `gpu_count` GPUs) bounds each
    trial by its own predicted RSS (host_groups). Raises ValueError for a packing the card cannot hold."""
    from orchestrator.running.host_memory import host_available_gib, host_trainer

    card_gib, per_process = host_gpu()
    args = (
        sweep.memory.budget_gib,
        sweep.resources.gpu_memory_gib or card_gib,
        sweep.resources.memory_phase_headroom_gib,
        per_process,
        sweep.resources.memory_phase_per_gpu,
    )
    card = packing(*args)
    if card.per_gpu == 1 or not trials:
        return card.reason, [(card.per_gpu, None)]
    ram = host_available_gib() if ram_gib is None else ram_gib
    gpus = max(1, gpu_count)
    groups = host_groups(card.per_gpu, [host_trainer(s) for s in trials], ram, gpus)
    first = packing(*args, host=groups[0].room(ram, gpus))
    if len(groups) == 1:
        return first.reason, [(first.per_gpu, None)]
    later = later_groups(groups[1:], ram, gpus)
    why = f"{first.reason}, for {len(groups[0].trainers)} of {len(trials)} trials; {later}"
    return why, [(g.per_gpu, g.keys) for g in groups]


def stages(
    sweep: Any,
    has_gpu: bool,
    say: Callable[[str], None] = print,
    trials: Sequence[Any] = (),
    gpu_count: int = 1,
    host_ram_gib: float | None = None,
) -> list[Stage]:
    """The Tune runs of a sweep's phases, in order. `sweep`: an orchestrator.spec.sweep.SweepSpec;
    `has_gpu`: the cluster has GPUs; `say`: where the packing decision is told; `trials`: the sweep's
    TrialSpecs, each packed no more than the host's RAM holds of its predicted RSS (`host_ram_gib`,
    default what is available now, shared by the host's `gpu_count` GPUs): memory_packing. Raises
    ValueError for a packing the card cannot hold."""
    run = sweep.phases_to_run()
    settle = sweep.stop.settings()
    gpus = sweep.resources.gpus_per_trial
    if MEMORY not in run:
        return [Stage(unfinished, TrialPhases(settle=settle), gpus)]
    hold = memory_phase_steps(sweep.oom.probe_steps)
    packed: list[tuple[int, frozenset[str] | None]] = [(1, None)]
    if gpus == 1 and has_gpu:
        why, packed = memory_packing(sweep, trials, gpu_count, host_ram_gib)
        say(f"memory phase: {why}")
    runs = []
    for per_gpu, keys in packed:
        if per_gpu == 1:  # alone on its GPU: a trial that fits goes straight on into its speed phase
            alone = TrialPhases(hold_at_step=hold, then_speed=SPEED in run, settle=settle)
            runs.append(Stage(unfinished, alone, gpus, keys))
        else:
            shared = TrialPhases(hold_at_step=hold, then_speed=False, shared_gpu=True)
            runs.append(Stage(unfinished, shared, 1 / per_gpu, keys))
    if SPEED in run:
        runs.append(Stage(speed_pending, TrialPhases(settle=settle), gpus))
    return runs
