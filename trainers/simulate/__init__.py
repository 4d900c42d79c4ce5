"""A trial's training step simulated on meta tensors: its stack's own code (the loss, backward, clipping
and the optimizer) on the trial's model as the stack holds it on a GPU, with no GPU and no weights, every
allocation counted as CUDA's caching allocator counts `allocated` (trainers/simulate/_count.py).

    step = simulate(spec)                 # a TrialSpec; SimulatedStep, or CannotSimulate with the reason
    simulate_each(specs)                  # several at once in worker processes; simulate() then reads them
    step.allocated_gib, step.phase, step.phase_gib

What it gives is torch's allocated peak, the figure a GPU's `torch.cuda.max_memory_allocated` reads, and
what the caching allocator reserves for that trace of allocations and frees, replayed through its rules
(trainers/simulate/_allocator.py: `torch.cuda.max_memory_reserved`'s figure). What the CUDA context and
the libraries hold outside torch (NVML's figure less reserved: 0.76 GiB on an H100) is the card's, not the
step's. The patches that make the stack's code run on meta as it does on CUDA: docs/oom.md, "Simulated
steps". A stack says how it simulates (trainers/stacks/_base.py Stack.simulate_step).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from trainers.simulate._errors import CannotSimulate
from trainers.units import GIB

# The phases a simulated step counts apart: generation (the KV cache filled to full length by chunked
# prefill, as the synthetic probe fills it), its decoding (a stack's own decoding buffers beside the full
# cache: Unsloth's), the no-grad scoring forward (num_iterations > 1 or beta > 0) and the training
# micro-batch (forward, backward, clipping, optimizer). Each phase's peak is affine in the layer count
# (trainers/simulate/_layers.py); the step's is the largest.
PHASES = ("generation", "decoding", "scoring", "training")
# The asking process's environment that its answers read of the trainer's (Inductor's compile threads:
# trainers/simulate/_outside.py's compile workers), put back after a simulation: the libraries a step
# imports set it for their own processes (vLLM's import sets TORCHINDUCTOR_COMPILE_THREADS=1), so an
# answer would otherwise depend on whether this process had simulated before or read the step from disk.
ASKERS_ENV = ("TORCHINDUCTOR_COMPILE_THREADS",)
# When AdamW's moments are made (simulate's optimizer_state): before the first step, inside it, or inside it
# with only that step simulated.
OPTIMIZER_STATES = ("before", "lazy", "first")


# Steps simulated for this process by simulate_each's worker, by their cache key: simulate() answers
# with them as it would with a step it simulated itself (not "cached": they were simulated for this
# question), and with the reason where one could not be simulated.
_FRESH: dict[str, SimulatedStep | CannotSimulate] = {}


@dataclass(frozen=True)
class SimulatedStep:
    """One simulated training step: torch's allocated peak (GiB), the caching allocator's reserved peak for
    it, the phase that set the allocated peak, each phase's peak, what the step held at rest, and how it
    was simulated. needed_gib: the least torch may map for the step to run, the allocator releasing its
    cache and retrying where a card runs out (trainers/simulate/_allocator.py: live tensors plus the
    fragmentation no release removes); a card whose capacity for torch is below it runs out of memory.
    under_cap() gives the reserved peak a card would read."""

    allocated_gib: float
    reserved_gib: float
    phase: str
    phase_gib: dict[str, float]
    resting_gib: float
    seconds: float
    simulated: dict[str, Any] = field(default_factory=dict)
    needed_gib: float | None = None

    def under_cap(self, capacity_gib: float) -> float | None:
        """torch's reserved peak (GiB) under a capacity for torch of `capacity_gib` (the card less what is
        held outside torch), or None where the step runs out of it: the uncapped peak where it fits under
        the capacity (the cache is never released), else the capacity (the allocator maps up to it, then
        releases its cache and retries)."""
        needed = self.reserved_gib if self.needed_gib is None else self.needed_gib
        if needed > capacity_gib:
            return None
        return min(self.reserved_gib, capacity_gib)


def simulate(
    spec: Any,
    prompt_tokens: int | None = None,
    device: str = "meta",
    attention: str = "sdpa",
    as_cuda: bool | None = None,
    whole: bool = False,
    cache: bool = True,
    optimizer_state: str = "before",
) -> SimulatedStep:
    """`spec`'s training step through its stack's code (module docstring). prompt_tokens: the prompt's
    length (default max_prompt_length, the worst case). device "cpu" runs the same step on real tensors,
    counted the same way; as_cuda (default: on meta) runs CUDA's kernels' stand-ins (docs/oom.md,
    "Simulated steps"); attention: transformers' implementation ("eager" where the host's and meta's SDPA
    kernels would differ). On meta a deep model is simulated at two shallow depths and its own read off
    the line through them (trainers/simulate/_layers.py; `whole` simulates every layer), and the step is
    kept on disk (trainers/simulate/_cache.py; `cache` False neither reads nor writes it). optimizer_state:
    "before" allocates AdamW's moments before the step, as rlsweep's trainers do (trainers/optimizer_state.py),
    so the one step simulated is every step; "lazy" leaves torch to create them inside the first step's
    `optimizer.step()`, as a plain TRL or Unsloth run does, and simulates num_iterations + 1 steps (up to
    one that generates again with the moments live; those between train on the first batch again, as
    TRL's do): the peaks are the largest, the later steps' reserved on the blocks the earlier left;
    "first", that first step alone."""
    if optimizer_state not in OPTIMIZER_STATES:
        raise ValueError(f"optimizer_state {optimizer_state!r}: one of {', '.join(OPTIMIZER_STATES)}")
    from trainers.simulate import _cache
    from trainers.simulate._meta import model_config

    tokens = prompt_tokens or spec.max_prompt_length
    cuda = device == "meta" if as_cuda is None else as_cuda
    on_meta = device == "meta"
    config = model_config(spec)
    cut = on_meta and not whole
    name = _key(spec, config, tokens, attention, cuda, cut, optimizer_state) if on_meta and cache else None
    fresh = _FRESH.get(name) if name else None
    if isinstance(fresh, CannotSimulate):
        raise CannotSimulate(str(fresh))
    if fresh is not None:
        return fresh
    kept = _cache.read(name, SimulatedStep) if name else None
    if kept is not None:
        return dataclasses.replace(kept, simulated={**kept.simulated, "cached": True})
    from transformers import AutoConfig

    from trainers.models import _without_meta
    from trainers.simulate import _layers

    try:
        built = AutoConfig.for_model(**_without_meta(config))
    except Exception as exc:  # a model_type this transformers does not know, a config it refuses
        raise CannotSimulate(
            f"{spec.model}'s config: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        ) from exc
    depth = _layers.depths(built) if cut else None
    started = time.perf_counter()
    if depth is None:
        step = _one(spec, tokens, device, attention, cuda, optimizer_state)
    else:
        with _layers.cut_to(depth[0]):
            small = _one(spec, tokens, device, attention, cuda, optimizer_state)
        with _layers.cut_to(depth[1]):
            large = _one(spec, tokens, device, attention, cuda, optimizer_state)
        step = _layers.extrapolated(small, large, depth, time.perf_counter() - started)
    if name:
        _cache.write(name, step)
    return step


def _key(
    spec: Any,
    config: dict,
    tokens: int,
    attention: str = "sdpa",
    cuda: bool = True,
    cut: bool = True,
    optimizer_state: str = "before",
) -> str:
    """The disk cache's key of a step simulated on meta (simulate()'s defaults: `simulate(spec)`'s)."""
    from trainers.simulate import _cache

    # The cut's depths follow from the config, the installed transformers and the simulator's source,
    # all in the key: a kept step is found before transformers is imported (seconds of a cached answer).
    how = {"attention": attention, "as_cuda": cuda, "layers": "cut" if cut else "whole",
           "stack": spec.stack, "optimizer_state": optimizer_state}  # fmt: skip
    return _cache.key(spec, config, tokens, how)


def simulate_each(specs: Any, prompt_tokens: int | None = None) -> None:
    """Every step of `specs` (TrialSpecs) that is not kept on disk simulated now, several at once by a
    worker process (trainers/simulate/_pool.py: as many at once as the host's CPUs, or
    RLSWEEP_SIMULATE_WORKERS), so that simulate() of each then answers at once in this process, as
    simulated (or, where it could not be, with the reason). With RLSWEEP_SIMULATE_WORKERS=0 nothing:
    simulate() simulates each in this process as it is asked."""
    from trainers.simulate import _cache, _pool
    from trainers.simulate._meta import model_config

    todo: dict[str, dict[str, Any]] = {}
    for spec in specs:
        if spec.stack is None:
            continue
        try:
            config = model_config(spec)
        except CannotSimulate:
            continue  # simulate() says why, in this process
        name = _key(spec, config, prompt_tokens or spec.max_prompt_length)
        if name in _FRESH or name in todo or _cache.read(name, SimulatedStep) is not None:
            continue
        todo[name] = {"spec": spec.to_dict(), "prompt_tokens": prompt_tokens}
    count = _pool.workers(len(todo))
    if count == 0:
        return
    answers = _pool.run(list(todo.values()), count)
    for index, name in enumerate(todo):
        said = answers.get(index)
        if said is None:
            continue  # its worker died: simulate() simulates it here
        if "cannot" in said:
            _FRESH[name] = CannotSimulate(said["cannot"])
        else:
            _FRESH[name] = SimulatedStep(**said["step"])


@contextlib.contextmanager
def _quiet():
    """The libraries' warnings about the step they run (transformers' "use_cache=True is incompatible with
    gradient checkpointing", TRL's note on the installed vLLM's version, Unsloth's on import order) unsaid
    while it runs on meta: the user asked about memory, and the simulated trainer is not theirs. Errors
    still raise."""
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(before)


def _one(
    spec: Any, prompt_tokens: int, device: str, attention: str, cuda: bool, optimizer_state: str
) -> SimulatedStep:
    """One simulation of the step, every layer of the model as built."""
    from trainers import stacks
    from trainers.simulate._allocator import replayed
    from trainers.simulate._count import AllocationCounter
    from trainers.simulate._meta import on_meta

    started = time.perf_counter()
    counter = AllocationCounter(trace=True)
    kept_env = {name: os.environ.get(name) for name in ASKERS_ENV}
    try:
        with _quiet(), on_meta(as_cuda=cuda):
            stack = stacks.load(spec.stack)
            simulated = stack.simulate_step(
                spec,
                prompt_tokens,
                counter,
                device=device,
                attention=attention,
                as_cuda=cuda,
                optimizer_state=optimizer_state,
            )
    except CannotSimulate:
        raise
    except Exception as exc:  # an op with no meta kernel, an architecture the stand-ins miss: said
        raise CannotSimulate(f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from exc
    finally:
        for name, value in kept_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    phases = {name: counter.phase_peaks[name] / GIB for name in PHASES if name in counter.phase_peaks}
    replay = replayed(counter.trace)
    return SimulatedStep(
        allocated_gib=counter.peak_bytes / GIB,
        reserved_gib=replay.peak_reserved / GIB,
        needed_gib=replay.needed / GIB,
        phase=max(phases, key=phases.get) if phases else "training",
        phase_gib=phases,
        resting_gib=counter.resting_bytes / GIB,
        seconds=time.perf_counter() - started,
        simulated=simulated,
    )
