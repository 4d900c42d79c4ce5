"""Each term of one trial's predicted peak with its bytes in words (`rlsweep predict --explain`): the
numbers orchestrator/judging/memory/_terms.py's terms() multiplies, read from the spec and the Shape."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.judging.memory._architecture import Shape
from orchestrator.judging.memory._terms import (
    ADAM_BYTES,
    LORA_STATE_BYTES,
    LORA_WEIGHT_BYTES,
    NF4_BYTES,
    adam_bytes,
    chunks_logprobs,
    dropout_copies,
    dtype_bytes,
    logit_bytes,
    logit_rows,
    offloads_checkpoints,
    sharded,
    unsloth_chunk_rows,
)
from trainers.stacks import label, memory_of
from trainers.trial import TrialSpec, lora_modules, optim_of


@dataclass(frozen=True)
class TermLine:
    """One term of a prediction: its size (GiB), its family's coefficient, and the bytes in words."""

    term: str
    part: str
    formula: str
    gib: float
    coefficient: float

    @property
    def counted_gib(self) -> float:
        return self.gib * self.coefficient


def _dropout_words(spec: TrialSpec, shape: Shape, device: str, w: int) -> str:
    """LoRA dropout's copies (_terms.dropout_copies) in words, or '' where it keeps none."""
    checkpointed = spec.gradient_checkpointing and device == "gpu"
    if not dropout_copies(spec, shape, checkpointed, w):
        return ""
    return (
        f" + the same tokens x {shape.layers} layers x {shape.adapted_width():,.0f} adapted inputs x "
        f"({w} B copy + 1 B mask) (LoRA dropout {spec.lora_dropout:g})"
    )


def formulas(spec: TrialSpec, shape: Shape, device: str) -> dict[str, str]:
    """term -> its bytes in words, with this trial's numbers."""
    w = dtype_bytes(spec, device)
    name = "fp32" if w == 4 else "bf16" if spec.effective_dtype == "auto" else spec.effective_dtype
    dtype = f"{w} B ({name})"
    linear = f"{NF4_BYTES} B (nf4)" if spec.quantization == "nf4" else dtype
    tokens = spec.max_prompt_length + spec.max_completion_length
    generation = spec.generation_batch_size / spec.num_processes  # one rank's share of the step
    micro = spec.effective_micro_batch_size
    weights_share, state_share = sharded(spec)
    moments = adam_bytes(spec)
    optim = (
        "AdamW"
        if "8bit" not in optim_of(spec)
        else optim_of(spec).replace("_", " ").replace("adamw", "AdamW")
    )

    def share(fraction: float) -> str:  # one rank's part of what its strategy shards
        return "" if fraction == 1 else f" x 1/{spec.num_processes} ({spec.distributed}: this rank's share)"

    copies = " x 2 (TRL's reference model)" if spec.adapter == "none" and spec.beta > 0 else ""
    experts = f", {shape.moe_layers} layers x {shape.experts} experts" if shape.experts else ""
    cached = f"{shape.layers} layers x {tokens} tokens"
    if shape.sliding_layers:
        full = shape.layers - shape.sliding_layers
        window = min(tokens, shape.sliding_window)
        cached = f"({full} layers x {tokens} + {shape.sliding_layers} sliding layers x {window} tokens)"
    width = shape.layer_width()
    if offloads_checkpoints(spec, device):
        kept = (
            f"(one layer's {width:,.0f} recomputed; {label(spec.stack)} offloads the {shape.layers} kept "
            "hidden states to the host)"
        )
    elif spec.gradient_checkpointing and device == "gpu":
        kept = f"({shape.layers} layers x {shape.hidden} kept + one layer's {width:,.0f} recomputed)"
    else:
        kept = f"{shape.layers} layers x {width:,.0f} values"
    rows = logit_rows(spec, device)
    if device == "cpu":
        logits = (
            f"{rows:,} rows (micro-batch {micro} x {spec.max_completion_length} completion tokens) x "
            f"{shape.vocab:,} vocab x {logit_bytes(spec, device)} B (fp32 logits, no Triton on a CPU)"
        )
    elif chunks_logprobs(spec, device):
        logits = f"0 ({label(spec.stack)} never builds the full logits: logit_chunk)"
    else:
        held = (
            "fp32 logits, accelerate's cast of bf16 autocast, and their fp32 gradient"
            if memory_of(spec.stack).fp32_logits
            else f"logits and their gradient in {name}"
        )
        logits = (
            f"{rows:,} rows (micro-batch {micro} x ({spec.max_completion_length} + 1)) x {shape.vocab:,} vocab x "
            f"{logit_bytes(spec, device)} B ({label(spec.stack)}'s {held})"
        )
    chunk = unsloth_chunk_rows(micro * spec.max_completion_length, shape.vocab)
    logit_chunk = (
        f"{chunk:,} of the {micro * spec.max_completion_length:,} completion rows x {shape.vocab:,} vocab x (4 B fp32 "
        f"logits + {dtype} gradient) (one chunk of {label(spec.stack)}'s chunked log-probs)"
        if chunks_logprobs(spec, device)
        else f"0 ({label(spec.stack)} builds the full logits)"
        if device == "gpu"
        else "0 (no chunked log-probs on a CPU)"
    )
    runtime = "the CUDA context and allocator" if device == "gpu" else "the Python process with torch and TRL"
    return {
        "baseline": f"{runtime}: 1 GiB x its coefficient",
        "weights": f"({shape.linear_params:,} linear params x {linear} + {shape.other_params:,} others "
        f"(embeddings{', untied head' if not shape.tied else ''}, norms{experts}) x {dtype})"
        f"{share(weights_share)}{copies}",
        "lora": (
            f"{shape.linear_params + shape.other_params:,} params trained in full x ({dtype} gradient + "
            f"{moments:g} B {optim}'s 2 {'fp32' if moments == ADAM_BYTES else '8-bit'} moments){share(state_share)}"
            if spec.adapter == "none"
            else f"{shape.lora_params(spec.lora_r, lora_modules(spec.lora_target_modules)):,} LoRA params (r "
            f"{spec.lora_r}, {'every nn.Linear' if spec.lora_target_modules == 'all-linear' else spec.lora_target_modules}) x "
            f"({LORA_WEIGHT_BYTES} B fp32 weight{share(weights_share)} + "
            f"{LORA_STATE_BYTES - ADAM_BYTES + moments:g} B gradient and {optim}'s 2 moments{share(state_share)})"
        ),
        "kv_cache": f"2 (K and V) x {shape.kv_heads} KV heads x {shape.head_dim} head dim x {dtype} x "
        f"{generation:g} sequences x {cached}",
        "sampling_logits": f"{generation:g} sequences x {shape.vocab:,} vocab x 4 B (fp32)",
        "vllm_pool": _vllm_pool_words(spec, device, dtype),
        "activations": f"micro-batch {micro} x {tokens} tokens x {kept} x {dtype}"
        + _dropout_words(spec, shape, device, w),
        "logits": logits,
        "logit_chunk": logit_chunk,
    }


def _vllm_pool_words(spec: TrialSpec, device: str, dtype: str) -> str:
    """vllm_pool_bytes in words: what colocated vLLM takes of the budget (0 without vLLM or a budget)."""
    if spec.generation != "vllm":
        return "generation: transformers: no vLLM pool (0)"
    if not spec.memory_budget_gib:
        return "no memory_budget_gib: a share of a card the model does not know (0; a fitted baseline carries it)"
    if device == "cpu":
        from trainers.generation import cpu_kvcache_space_gib

        return f"VLLM_CPU_KVCACHE_SPACE {cpu_kvcache_space_gib(spec):g} GiB + vLLM's copy of the weights x {dtype}"
    return f"vllm_gpu_memory_utilization {spec.vllm_gpu_memory_utilization:g} x budget {spec.memory_budget_gib:g} GiB"
