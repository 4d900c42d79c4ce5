"""A trainer's host memory (RSS), predicted before it runs, so that packing several trials on one GPU
also fits the host's RAM (orchestrator/running/phases.py): each trial packs by its own prediction, so a
few huge trainers run fewer to a GPU, after the rest, without holding the rest back.

The mechanism: RSS = a stack's baseline (Python, torch, the CUDA libraries, the trainer and its
stack's imports) + the model's checkpoint as it lies on disk. Loading reads every shard through
safetensors' memory map, and quantized loading (bitsandbytes nf4) reads the bf16/fp32 weights on the
host before quantizing them on the GPU: the pages read stay resident in the trainer's RSS (its
VmHWM), whatever the GPU then holds.

Calibrated on the H100 rows of bench/data/h100-2026-11-26/trials.csv (peak_rss_gib, the sampler's
VmHWM), random-weight Qwen2.5 checkpoints stored in bf16:

  - TRL, Qwen2.5-3B nf4 (round 1, w1/w2 K 2..8): 6.88 GiB; checkpoint 3.09 B params x 2 B = 5.75 GiB,
    baseline 1.13 GiB;
  - Unsloth, Qwen2.5-3B nf4 (round 1 w1/w2, completion 128): 7.06 GiB: baseline 1.31 GiB; at completion
    512 and 1024 (round 2) 7.11 and 7.41 GiB;
  - Unsloth, Qwen2.5-1.5B nf4 (round 1 alone): 4.19 GiB; checkpoint 1.54 B x 2 B = 2.87 GiB: baseline
    1.32 GiB, the 3B's within 0.01 GiB.

TRL's 1.5B gspo row (2.18 GiB) held less than its checkpoint: there the prediction (4.0 GiB) is an
upper bound, which is the safe side for packing.

Unsloth offloads each layer's input to host memory for backward (its gradient checkpointing,
unsloth_zoo's Unsloth_Offloaded_Gradient_Checkpointer): layers x micro-batch x (prompt + completion)
x hidden x 2 bytes, added here on top. The H100 rows bound it rather than pin it: at completion 2048
(round 3, K=8 B=2) RSS reached 11.93 GiB, 4.52 GiB over completion 1024's 7.41 (the offload at 2048:
5.06 GiB at max_prompt_length), but from 128 to 1024 it rose 0.35 GiB where the offload grows 1.97.
So the prediction is an upper bound for Unsloth (+6% at 2048, +38% at 1024), the safe side for packing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.words.phases import HostTrainer
from trainers.stacks import STACKS, memory_of
from trainers.units import GIB


def baseline_gib(stack: str) -> float:
    """GiB a trainer of `stack` holds besides its checkpoint: its registry entry's
    StackMemory.host_baseline_gib (see the module's docstring for the rows); for a stack never
    measured, the largest baseline measured."""
    own = memory_of(stack).host_baseline_gib
    if own is not None:
        return own
    return max(e.memory.host_baseline_gib for e in STACKS.values() if e.memory.host_baseline_gib is not None)


# Over the prediction, for what grows with the run (Unsloth at completion 1024: +5% over 128).
HEADROOM_FRACTION = 0.05
# Bytes per element of an offloaded layer input (the compute dtype, bf16).
OFFLOAD_BYTES = 2
# Bytes per parameter of a checkpoint by its config's torch_dtype; bf16 when it does not say.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class HostPrediction:
    """A trial's predicted RSS and how it was reached."""

    gib: float
    how: str


def checkpoint_gib(model: str) -> tuple[float | None, str]:
    """(GiB of the model's checkpoint on disk, in its stored dtype; how), None when the model's config
    is not known here."""
    from orchestrator.judging.memory._model import model_shape

    shape, why = model_shape(model)
    if shape is None:
        return None, why or "no config"
    dtype = _stored_dtype(model)
    size = shape.parameters * DTYPE_BYTES.get(dtype, 2) / GIB
    return size, f"{shape.parameters / 1e9:.2f} B params x {DTYPE_BYTES.get(dtype, 2)} B ({dtype})"


def _stored_dtype(model: str) -> str:
    from trainers.models import model_config

    try:
        config = model_config(model).config
    except ValueError:
        return "bfloat16"
    return str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")


def offloaded_checkpoints_gib(spec: Any) -> float:
    """GiB of the layer inputs a stack's gradient checkpointing keeps in host memory (module docstring;
    StackMemory.offloads_checkpoints: Unsloth's): 0 for a stack that keeps them on the GPU or without
    checkpointing, or where the model's shape is not known here."""
    from orchestrator.judging.memory._model import model_shape

    if not memory_of(spec.stack).offloads_checkpoints or not spec.gradient_checkpointing:
        return 0.0
    shape, _ = model_shape(spec.model)
    if shape is None:
        return 0.0
    tokens = spec.max_prompt_length + spec.max_completion_length
    return shape.layers * spec.effective_micro_batch_size * tokens * shape.hidden * OFFLOAD_BYTES / GIB


def predicted_rss_gib(spec: Any) -> HostPrediction | None:
    """A trainer's RSS (spec: a TrialSpec): its stack's baseline plus its checkpoint, with
    HEADROOM_FRACTION, plus the checkpoints its stack offloads (Unsloth's); None when the model's size is not known here."""
    size, how = checkpoint_gib(spec.model)
    if size is None:
        return None
    baseline = baseline_gib(spec.stack)
    offload = offloaded_checkpoints_gib(spec)
    gib = (baseline + size) * (1 + HEADROOM_FRACTION) + offload
    return HostPrediction(
        gib,
        f"{spec.stack} baseline {baseline:.2f} GiB + checkpoint {size:.2f} GiB ({how}), "
        f"+{HEADROOM_FRACTION:.0%}" + (f", + offloaded checkpoints {offload:.2f} GiB" if offload else ""),
    )


def host_trainer(spec: Any) -> HostTrainer:
    """A trial's trainer for packing by the host's RAM (words/phases.py host_groups): its predicted RSS
    (None when the model's size is not known here), how that was predicted, and the trial in words."""
    label = f"{spec.stack} K={spec.num_generations} B={spec.batch_size} {spec.max_completion_length} tokens"
    found = predicted_rss_gib(spec)
    if found is None:
        return HostTrainer(spec.trial_key, None, label=label)
    return HostTrainer(spec.trial_key, found.gib, f"{spec.model}: {found.how}", label)


def host_available_gib() -> float:
    """The host's memory available now (psutil's `available`: free plus what the kernel can reclaim)."""
    import psutil

    return psutil.virtual_memory().available / GIB
