"""The training stacks, registered in one place: STACKS maps each `stack` value to its entry.

An entry is what validation, the report, compare and gpu-check need to know of a stack (its name, label
and the vllm_mode values it generates with) and where its Stack class lives; load() imports that class
on first use. So this package imports no stack module: the trial spec validates against the entries
without depending on the stacks that consume it. Stack modules stay light too (each imports torch,
transformers and its own packages inside build()).

Add a stack: subclass trainers.stacks._base.Stack in one module (build; packages where it needs more than
the shared ones) and register its entry below. Nothing outside this package names a stack: what one does
differently is its module's or its entry's (tests/unit/test_stack_registry.py registers a stub stack and
checks that no code elsewhere names trl or unsloth).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from tasks.names import did_you_mean

__all__ = [
    "BASE",
    "STACKS",
    "StackEntry",
    "StackMemory",
    "get",
    "label",
    "load",
    "memory_of",
    "names",
    "register",
    "supporting",
]


# What a stack does with memory that the memory model (orchestrator/judging/memory) and the host-RAM
# check for packing (orchestrator/running/host_memory.py) read from its entry, never by its name.
@dataclass(frozen=True)
class StackMemory:
    """A stack's memory behaviour. The defaults are transformers' and TRL's plain path.

    offloads_checkpoints: with gradient checkpointing on a GPU, each layer's input is kept in host
        memory, not on the GPU (only the layer recomputed in backward stays there), and the host's
        RSS holds them (Unsloth: unsloth_zoo's Unsloth_Offloaded_Gradient_Checkpointer).
    chunked_logprobs: on a GPU the GRPO loss projects the completion rows to the vocabulary one
        chunk of rows at a time and never builds the full logits (Unsloth: unsloth_zoo's
        unsloth_chunked_logprobs; the chunk's size: orchestrator/judging/memory/_terms.py).
    fp32_logits: where the full logits are built on a GPU, they reach the log-softmax in fp32 and
        their gradient is fp32 too (TRL under accelerate's convert_outputs_to_fp32); False: both in
        the compute dtype.
    host_baseline_gib: the trainer's RSS besides the model's checkpoint (Python, torch, the CUDA
        libraries, the stack's imports), measured on a GPU host; None where never measured (the
        largest measured stack's is used).
    simulated_error: per architecture family (a config's model_type), (family, low, high, rows): the
        measured NVML peak over the least its step simulated on meta tensors (trainers/simulate) runs in
        (the capped replay's needed + the context) on the GPU rows of that family that checked it (python -m bench simulate --set out=..., bench/data/simulated-h100.csv;
        tests/unit/test_simulated_intervals.py checks these against it); () where no GPU row has. A
        family not in it takes the error across these families, one left out, or no upper bound where
        fewer than two (orchestrator/judging/memory/_interval.py).
    vllm_pool_of_free: with generation: vllm, its vLLM asks for vllm_gpu_memory_utilization of the
        card's free memory at load (the card less the context), not of its total (Unsloth: unsloth_zoo's
        approximate_vllm_memory_usage); orchestrator/judging/memory/_vllm.py.
    vllm_shares_weights: with generation: vllm, the trainer's model is built on vLLM's own weight
        tensors, so the base weights count once, in vLLM's pool (Unsloth: convert_vllm_to_huggingface).
    """

    offloads_checkpoints: bool = False
    chunked_logprobs: bool = False
    fp32_logits: bool = True
    host_baseline_gib: float | None = None
    simulated_error: tuple[tuple[str, float, float, int], ...] = ()
    vllm_pool_of_free: bool = False
    vllm_shares_weights: bool = False


@dataclass(frozen=True)
class StackEntry:
    """A registered stack. target: 'module:Class' of its trainers.stacks._base.Stack subclass."""

    name: str  # the `stack` value that picks it
    label: str  # how the report and gpu-check write it
    target: str
    vllm_modes: tuple[str, ...] = ()  # the vllm_mode values it generates with (generation: vllm)
    default_optim: str = "adamw_torch"  # the optimizer its own GRPOConfig picks (a trial's `optim: stack`)
    # The environment every trainer child gets for this stack (orchestrator/running/child_env.py sets
    # every registered stack's, so one fork server serves them all): variables set outright, and
    # compile caches (variable, folder under rlsweep's cache/compile/) a user's own setting overrides.
    env: tuple[tuple[str, str], ...] = ()
    compile_caches: tuple[tuple[str, str], ...] = ()
    # --- what it can run, and how its trainers start (capabilities: a new stack claims none) ----------
    # Validation (trainers/trial.py, trainers/_trial_rules.py) refuses a setting the stack cannot run and
    # names the registered stacks that can. preload: the modules its fork server imports before forking
    # a trainer (trainers/forkserver.py); () forks from a server that imported the trainer's entry alone.
    full_finetune: bool = False  # adapter: none (every weight trains)
    multi_rank: bool = False  # num_processes > 1 (accelerate's launcher, a distributed strategy)
    vllm_min_tokens: bool = False  # its vLLM path reads min_tokens, so probe_steps force full length
    vllm_sleep_mode: bool = False  # vllm_enable_sleep_mode
    preload: tuple[str, ...] = ()
    # What its fork server imports after `preload` on a host where no GPU is visible: a library that touches
    # CUDA as it is imported (and so cannot be imported before a fork on a GPU host) but not on a CPU.
    preload_without_gpu: tuple[str, ...] = ()
    # The installed packages whose code its trainer runs besides torch, transformers, PEFT, accelerate and
    # bitsandbytes: their versions key its simulated steps on disk (trainers/simulate/_cache.py).
    packages: tuple[str, ...] = ()
    # What it does with memory (StackMemory above): the memory model and packing read this.
    memory: StackMemory = StackMemory()
    # The effective_config entry (key, value) a trial records when the stack ran a fallback rather than
    # its own trainer (Unsloth without a GPU runs TRL's): the report shows its figures, never compares them.
    fallback_when: tuple[str, str] | None = None


STACKS: dict[str, StackEntry] = {}
BASE = "trl"  # the stack the others are compared against unless a report or check names another
_loaded: dict[str, Any] = {}  # name -> its trainers.stacks._base.Stack, once loaded


def register(entry: StackEntry) -> StackEntry:
    """Add a stack under its name; a second stack of the same name is refused."""
    if entry.name in STACKS:
        raise ValueError(f"stack {entry.name!r} is registered already ({STACKS[entry.name].target})")
    STACKS[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove a stack (a test's own); its loaded instance goes with it."""
    del STACKS[name]
    _loaded.pop(name, None)


def get(name: str, field: str = "stack") -> StackEntry:
    """The entry `name` picks, or a ValueError naming the field, the value and the registered stacks."""
    try:
        return STACKS[name]
    except KeyError:
        raise ValueError(f"{field}: unknown value {name!r}; {did_you_mean(str(name), STACKS)}") from None


def load(name: str, field: str = "stack"):
    """The trainers.stacks._base.Stack that trains for `name`, imported on first use and kept (one
    instance per stack). Unannotated on purpose: naming the Stack type here would make the registry,
    which the trial spec reads, depend on the stack interface, which reads the trial spec."""
    entry = get(name, field)
    if name not in _loaded:
        module, _, cls = entry.target.partition(":")
        _loaded[name] = getattr(importlib.import_module(module), cls)(entry)
    return _loaded[name]


def memory_of(name: str) -> StackMemory:
    """The memory behaviour of stack `name`; the default (transformers' and TRL's plain path) for a
    stack not registered here (a sweep recorded where another stack was installed)."""
    return STACKS[name].memory if name in STACKS else StackMemory()


def names() -> tuple[str, ...]:
    """The registered stacks' names, in registration order."""
    return tuple(STACKS)


def supporting(capability: str) -> tuple[str, ...]:
    """The registered stacks whose entry has `capability` (a StackEntry field: true or non-empty), in
    registration order: what an error names as the stack to pick."""
    return tuple(name for name, entry in STACKS.items() if getattr(entry, capability))


def label(name: str) -> str:
    """How reports write a stack: its label, or the name itself for one not registered here (a sweep
    recorded where another stack was installed)."""
    return STACKS[name].label if name in STACKS else name


# TRL 1.14: the whole micro-batch's completion logits at once, fp32 (accelerate), with an fp32 gradient;
# transformers' checkpointing keeps each layer's input on the GPU. RSS baseline: bench/data/h100-2026-11-26.
# What a trial of each stack imports anyway (`from trl import GRPOTrainer` loads trl.trainer.grpo_trainer),
# and the trainer's own modules: its fork server imports them once.
register(
    StackEntry(
        "trl",
        "TRL",
        "trainers.stacks.trl:TrlStack",
        vllm_modes=("colocate", "server"),
        full_finetune=True,
        multi_rank=True,
        vllm_min_tokens=True,  # TRL passes min_tokens in vLLM's sampling parameters
        vllm_sleep_mode=True,
        preload=(
            "torch",
            "transformers",
            "transformers.models.auto.modeling_auto",
            "transformers.models.qwen2.modeling_qwen2",
            "accelerate",
            "datasets",
            "bitsandbytes",
            "peft",
            "trl",
            "trl.trainer.grpo_config",
            "trl.trainer.grpo_trainer",
            "tasks",
            "trainers.__main__",
            "trainers.device",
            "trainers.evaluate",
            "trainers.measure",
            "trainers.models",
            "trainers.runtime",
            "trainers.stacks.trl",
        ),
        packages=("trl",),
        default_optim="adamw_torch_fused",  # transformers' default with torch >= 2.8
        # simulated_error: NVML on the 15 completed TRL rows of the H100 (docs/benchmarks.md)
        memory=StackMemory(
            fp32_logits=True, host_baseline_gib=1.13, simulated_error=(("qwen2", 0.98, 1.24, 15),)
        ),
    )
)
# Unsloth's fast_inference: vLLM inside the trainer's process, colocated, without sleep mode; its own vLLM
# path is not shown to read min_tokens (so probe steps would not force full-length completions there).
# Its from_pretrained otherwise checks for a network and downloads a statistics repo (up to 120 s) on
# every model load (unsloth/models/_utils.py get_statistics: any value switches it off). It writes the
# source of its patched modules into UNSLOTH_COMPILE_LOCATION (unsloth_zoo/compiler.py; child_env.py
# says why trials share it). It patches transformers and TRL when imported, and on a GPU host reads the
# card as it does: there its fork server preloads torch alone and the child imports Unsloth after the
# fork, as a cold child does; without a GPU there is no card to read, and the server imports it first.
register(
    StackEntry(
        "unsloth",
        "Unsloth",
        "trainers.stacks.unsloth:UnslothStack",
        vllm_modes=("colocate",),
        env=(("UNSLOTH_DISABLE_STATISTICS", "1"),),
        compile_caches=(("UNSLOTH_COMPILE_LOCATION", "unsloth"),),
        preload=("torch", "trainers.__main__", "trainers.device", "trainers.stacks.unsloth"),
        # Without a GPU, Unsloth itself (its CPU fallback: 15 s of imports a trainer on a loaded 2-core host)
        preload_without_gpu=("unsloth",),
        # unsloth_zoo 2026.10.9: chunked GRPO log-probs, checkpoints offloaded to the host (StackMemory)
        packages=("trl", "unsloth", "unsloth_zoo"),
        default_optim="adamw_8bit",  # UnslothGRPOConfig's (its notebooks' too)
        # simulated_error: NVML on the 15 completed Unsloth rows of the H100, each simulated as its trainer
        # ran, furthest at 1,024-2,048 tokens (docs/benchmarks.md)
        memory=StackMemory(
            offloads_checkpoints=True,
            chunked_logprobs=True,
            host_baseline_gib=1.32,
            simulated_error=(("qwen2", 0.99, 1.32, 15),),
            vllm_pool_of_free=True,
            vllm_shares_weights=True,
        ),
        fallback_when=("unsloth_backend", "cpu"),  # trainers/stacks/unsloth.py records it
    )
)
# TRL's GRPOTrainer with use_liger_kernel (trainers/stacks/liger.py): the log-probs in TRL's chunks of
# 2,048 rows x 8,192 tokens, never the whole logits (chunked_logprobs; the memory model sizes the chunk as
# Unsloth's, larger than TRL's), Liger's Triton kernels in the layers on a GPU. Claims no capability it
# has not been shown to run; its preload is TRL's trainer and its own module.
register(
    StackEntry(
        "liger",
        "Liger",
        "trainers.stacks.liger:LigerStack",
        preload=(*STACKS["trl"].preload, "trainers.stacks.liger"),
        packages=("trl", "liger_kernel"),
        default_optim="adamw_torch_fused",  # TRL's GRPOConfig's, as the trl stack's
        memory=StackMemory(chunked_logprobs=True, fp32_logits=False),
    )
)
