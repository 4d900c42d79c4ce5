"""The phases' words and the packing rule, shared by the sweep file, the driver, the supervisor and the
recorder: a trial's phases (memory, then speed; orchestrator/running/phases.py tells the whole story),
what the supervisor does with one trial (TrialPhases), how many memory-phase trials share a GPU
(packing; host_groups where the host's RAM holds fewer of some trials' trainers), and which ledger rows
each phase runs. Pure: the machine is asked in running/phases.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.words.outcome import COMPLETED, FINAL_STATUSES, IMPLIED
from orchestrator.words.settings import SettleSettings

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


class PackingRefused(ValueError):
    """An asked packing the card cannot hold; `fits`: how many trials it holds."""

    def __init__(self, message: str, fits: int):
        super().__init__(message)
        self.fits = fits


def packing(
    budget_gib: float,
    card_gib: float | None,
    headroom_gib: float,
    per_process: bool,
    asked: int | None,
    host: HostRoom | None = None,
) -> Packing:
    """Memory-phase trials per GPU: `asked`, else as many budgets (plus headroom each) as the card holds;
    with `host`, no more than the host's RAM holds (the largest predicted RSS of the trials packed, every
    GPU of the host packed alike), and the reason says which of the two bounds it. Raises ValueError for
    an `asked` packing the card cannot hold."""
    if card_gib is None:
        return Packing(1, "the GPU's memory is unknown (set resources.gpu_memory_gib to pack trials)")
    each = budget_gib + headroom_gib
    fits = max(1, math.floor(card_gib / each))
    if asked is not None and asked > 1 and asked * each > card_gib:
        raise PackingRefused(
            f"resources.memory_phase_per_gpu: {asked} trials x ({budget_gib:g} GiB budget + "
            f"{headroom_gib:g} GiB headroom) = {asked * each:g} GiB, over the card's {card_gib:g} GiB; "
            f"give at most {fits}, or leave it unset to pack as many as fit",
            fits,
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
    rss_gib: float  # one trial's predicted RSS (the largest of the trials packed together)
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


@dataclass(frozen=True)
class HostTrainer:
    """A memory-phase trial's trainer on the host: its trial key, its predicted RSS (None: not predictable
    here), how that was predicted, and the trial in words ('unsloth K=64 B=2 8192 tokens')."""

    key: str
    rss_gib: float | None
    how: str = ""
    label: str = ""


@dataclass(frozen=True)
class HostGroup:
    """Memory-phase trials that run `per_gpu` to a GPU, in a Tune run of their own."""

    per_gpu: int
    trainers: tuple[HostTrainer, ...]

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(t.key for t in self.trainers)

    @property
    def largest(self) -> HostTrainer | None:
        """The trainer of the largest predicted RSS; None when none was predicted."""
        known = [t for t in self.trainers if t.rss_gib is not None]
        return max(known, key=lambda t: t.rss_gib or 0.0) if known else None

    def room(self, ram_gib: float, gpus: int = 1) -> HostRoom | None:
        """The host's RAM against this group's largest predicted RSS; None when none was predicted."""
        big = self.largest
        return None if big is None or big.rss_gib is None else HostRoom(ram_gib, big.rss_gib, big.how, gpus)


def host_groups(
    per_gpu: int, trainers: Sequence[HostTrainer], ram_gib: float, gpus: int = 1
) -> list[HostGroup]:
    """The memory-phase trials by how many of them share a GPU, the most first: `per_gpu` (the card's
    packing), or fewer for a trial whose own predicted RSS the host's RAM holds fewer times on each of
    its `gpus` (HostRoom.per_gpu; at least 1: a trainer larger than the RAM runs alone). A trial whose
    RSS is not predicted packs by the card. So one huge trainer runs alone without holding back the
    rest, and it runs after them, by when their verdicts may have pruned it."""
    groups: dict[int, list[HostTrainer]] = {}
    for t in trainers:
        n = per_gpu if t.rss_gib is None else min(per_gpu, HostRoom(ram_gib, t.rss_gib, t.how, gpus).per_gpu)
        groups.setdefault(n, []).append(t)
    return [HostGroup(n, tuple(groups[n])) for n in sorted(groups, reverse=True)]


def later_groups(groups: Sequence[HostGroup], ram_gib: float, gpus: int = 1) -> str:
    """How the groups after the first run, for the packing message: '5 whose predicted RSS exceeds
    41.2 GiB (the host's 123.7 GiB / 3) run 2 per GPU after them; ... (largest: unsloth K=64 B=2 8192
    tokens, 155.9 GiB predicted)'. A group of n per GPU holds the trainers the RAM holds n but not n + 1
    times on each GPU: each over RAM / (n + 1) / gpus."""
    across = f" / {gpus} GPUs" if gpus > 1 else ""
    parts = [
        f"{len(g.trainers)} whose predicted RSS exceeds {ram_gib / (g.per_gpu + 1) / gpus:.1f} GiB (the "
        f"host's {ram_gib:.1f} GiB / {g.per_gpu + 1}{across}) run {g.per_gpu} per GPU after them"
        for g in groups
    ]
    big = groups[-1].largest if groups else None
    if big is not None and big.rss_gib is not None:
        over = ", more than the host's RAM" if big.rss_gib > ram_gib else ""
        parts[-1] += f" (largest: {big.label}, {big.rss_gib:.1f} GiB predicted{over})"
    return "; ".join(parts)


def speed_pending(row: Mapping[str, Any] | None) -> bool:
    """A trial whose memory phase fitted (or whose fit was implied, orchestrator/judging/frontier.py)
    and whose speed phase has not run yet."""
    if not row:
        return False
    return row.get("status") == IMPLIED or (row.get("status") == COMPLETED and row.get("phase") == MEMORY)


def unfinished(row: Mapping[str, Any] | None) -> bool:
    """A trial with no final row yet (never ran, or `stopped`)."""
    return row is None or row.get("status") not in FINAL_STATUSES
