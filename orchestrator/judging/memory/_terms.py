"""The analytical terms of a trial's peak memory, in GiB, computed from its model's config.

Each term is a size that one kind of memory scales with; the model (orchestrator/judging/memory/_model.py)
multiplies each by a coefficient fitted on measured trials (the prior: PRIOR below). A term belongs to
one part of the peak:

- static: the runtime's baseline (CUDA context or the Python process), the base weights (NF4 linear
  layers at half a byte a parameter; embeddings, head, norms and a mixture of experts' fused experts
  at the compute dtype: the architecture is orchestrator/judging/memory/_architecture.py's), the LoRA
  weights with their gradients and AdamW state (fp32: 16 bytes a parameter). A trial over N ranks:
  one rank's share (`sharded`): DDP a whole replica, ZeRO-2 the gradients and AdamW state over N,
  FSDP and ZeRO-3 the weights too; each rank generates and trains on its 1/N of the completions.
  Full fine-tuning (adapter: none): the `lora` term is then every weight's gradient and AdamW state,
  and with beta > 0 the weights count twice (TRL's reference model). No reference model:
  every trial trains LoRA adapters, and with beta > 0 both stacks take the reference log-probs from
  the same base with the adapters switched off (TRL's GRPOTrainer sets ref_model None for a PEFT
  model);
- generation: the KV cache of one generation batch (B x K sequences of prompt + completion tokens,
  at most the window's tokens in a sliding-window layer) and the full-vocabulary logits sampling keeps
  per sequence; with generation: vllm (colocate) instead
  vLLM's pool, which holds its own KV cache and sampling: on a GPU vllm_gpu_memory_utilization of the
  budget (all vLLM takes, its weights included), on a CPU the KV-cache GiB the budget gives it
  (trainers/generation.py) plus its copy of the weights at the compute dtype. Without a budget the
  pool is a share of a card (or node) the model does not know (vllm_pool 0: only a family's fitted
  baseline can carry it, see unsized_vllm_pool). In server mode vLLM is another process: the trainer holds none of it;
- training: the activations kept for backward by one micro-batch and the logits of its completion
  tokens, on the path each stack takes (GPU; trl 1.14.2, accelerate, unsloth_zoo 2026.10.9):
  - activations: without gradient checkpointing every layer's intermediates; with it (TRL: transformers'
    checkpointing) one hidden state a layer plus the one layer being recomputed in backward. Unsloth's
    checkpointing ("unsloth", trainers/stacks/unsloth.py) offloads each layer's input to host memory
    (unsloth_zoo's Unsloth_Offloaded_Gradient_Checkpointer): only the layer recomputed stays on the GPU.
  - logits (TRL): GRPOTrainer._compute_loss calls _get_per_token_logps_and_entropies without a
    batch_size, so _full_logits_logps sends the whole micro-batch through the model at once with
    logits_to_keep = completion + 1; accelerate's prepare_model wraps the forward in bf16 autocast and
    convert_outputs_to_fp32, so the logits reach the fused Triton log-softmax in fp32, which keeps them
    for backward and allocates an fp32 gradient of the same shape there: micro x (completion + 1) x
    vocabulary x (4 + 4) bytes.
  - logit_chunk (Unsloth): the GRPO loss never builds the full logits: unsloth_zoo's
    unsloth_chunked_logprobs projects the flattened completion rows in chunks of
    UNSLOTH_CHUNK_GIB / (vocabulary x 8 B) rows, at most max(512, rows / 8) (chunked_logprob_rows),
    each chunk's logits in fp32 and, in backward, their gradient in the compute dtype: one chunk's
    rows x vocabulary x (4 + w) bytes, however long the completions.
  On a CPU both stacks are counted as fp32 logits (no Triton, no chunking: `logits`).
  - LoRA dropout (lora_dropout > 0): PEFT's lora_B(lora_A(dropout(x))) keeps a dropped-out copy of
    each adapted input and its bool mask (Shape.adapted_width) in every layer that is not checkpointed
    (dropout_copies); a checkpointed layer keeps none in forward, and the one recomputed holds its
    copies only in backward, after the log-probs' peak. What a stack does differently (offloaded checkpoints,
    chunked log-probs, fp32 logits) is read from its registry entry (trainers.stacks.StackMemory).

The KV cache and the activations count a trial's prompts at the longest one its task's trials
measured (MemoryModel.counted: a batch is padded to its longest prompt, max_prompt_length only bounds
it), at max_prompt_length before any trial of the task ran.

The prior's coefficients (PRIOR) are the terms' face values (FACE) calibrated once on the H100
trials of round 1 (bench/data/h100-2026-11-26/trials.csv; `python -m bench gpu_memory` fits them
with MemoryModel.calibrate and prints them); a family's own trials then refit them.
"""

from __future__ import annotations

from orchestrator.judging.memory._architecture import Shape
from trainers.stacks import memory_of
from trainers.trial import TrialSpec, lora_modules, optim_of
from trainers.units import GIB

STATIC, GENERATION, TRAINING = "static", "generation", "training"
PARTS = (STATIC, GENERATION, TRAINING)
# term -> its part
TERMS = {
    "baseline": STATIC,
    "weights": STATIC,
    "lora": STATIC,
    "kv_cache": GENERATION,
    "sampling_logits": GENERATION,
    "vllm_pool": GENERATION,
    "activations": TRAINING,
    "logits": TRAINING,
    "logit_chunk": TRAINING,
}
# The face values: (coefficient, its spread) per term, on a GPU and on a CPU, before any measurement.
# The baseline's term is 1 GiB, so its coefficient is GiB: on a GPU the CUDA context (0.51 GiB) and
# what the process holds outside torch's allocator (NVML's process peak minus torch's peak reserved:
# 0.75-0.76 GiB on every H100 trial of bench/data/h100-2026-11-26); on a CPU the Python process with
# torch, transformers and TRL imported (its RSS; `tiny` trials on a 2-core Linux host: 0.80-0.83 GiB).
# The other terms count what they name once. The GPU spreads are set from the prior's error on
# AgileRL's measured GRPO training peaks (docs/benchmarks.md, "GPU prior against AgileRL's peaks").
FACE = {
    "gpu": {
        "baseline": (0.76, 0.4),
        "weights": (1.0, 0.05),
        "lora": (1.0, 0.25),
        "sampling_logits": (1.0, 1.0),
        "activations": (1.0, 0.05),
        "logits": (1.0, 0.5),
        "logit_chunk": (1.0, 0.5),
    },
    "cpu": {"baseline": (0.75, 0.1), "sampling_logits": (1.0, 1.0), "logits": (1.0, 1.0)},
    # vLLM's pool is a size it is given, not an estimate: a narrow prior on both devices.
    "shared": {"vllm_pool": (1.0, 0.1)},
}
# The GPU prior: the face values calibrated on round 1's H100 trials (module docstring; the spreads
# stay the face values'). `python -m bench gpu_memory` prints these from the CSV, and a unit test
# holds them to it. Round 1 (NF4, two models, completion 128) pins only the baseline, TRL's logits and
# Unsloth's logit chunk (MemoryModel.calibrate); the other terms keep their face values (bf16 weights,
# say, it never ran). logits and logit_chunk over 1: at their peak more than the fp32 logits (or chunk)
# and their gradient are held, sized like them (the allocator's blocks between them, the loss's own
# copies: not itemised; at completion 256 TRL's needs about 1.2, so part of it does not grow).
CALIBRATED = {
    "baseline": 0.748,
    "weights": 1.0,
    "lora": 1.0,
    "kv_cache": 1.0,
    "sampling_logits": 1.0,
    "vllm_pool": 1.0,
    "activations": 1.0,
    "logits": 1.351,
    "logit_chunk": 1.358,
}
DEFAULT_PRIOR = (1.0, 0.5)
# Unsloth's GRPO log-probs (unsloth_zoo fused_losses/chunked_logprob.py): a chunk's logits near
# UNSLOTH_LOGPROB_CHUNK_GB (2.0; capped at half the free memory, more than that on any card it runs on)
# at UNSLOTH_BYTES_PER_LOGIT a logit, and at most max(UNSLOTH_MIN_ROWS, rows / 8) rows.
UNSLOTH_CHUNK_GIB = 2.0
UNSLOTH_BYTES_PER_LOGIT = 8
UNSLOTH_MIN_ROWS = 512
LORA_WEIGHT_BYTES = 4  # fp32 weight
LORA_STATE_BYTES = 12  # fp32 gradient + AdamW's two moments
ADAM_BYTES = 8  # AdamW's two fp32 moments a parameter
# bitsandbytes' 8-bit AdamW (adamw_8bit, paged_adamw_8bit): two uint8 moments a parameter and an fp32
# absmax each per 256-value block (trainers/simulate/_optim.py; weights under 4,096 values keep
# 32-bit moments: LoRA's A and B are larger on every bundled model).
ADAM_8BIT_BYTES = 2 + 2 * 4 / 256


def adam_bytes(spec: TrialSpec) -> float:
    """The optimizer's moments a trained parameter, bytes: AdamW's two fp32, or 8-bit's."""
    return ADAM_8BIT_BYTES if "8bit" in optim_of(spec) else ADAM_BYTES


NF4_BYTES = 0.5
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def device_of(measure_kind: str) -> str:
    """'cpu' for a process's RSS, else 'gpu'."""
    return "cpu" if measure_kind == "RSS" else "gpu"


def dtype_bytes(spec: TrialSpec, device: str) -> int:
    """The compute dtype's bytes (auto: fp32 on a CPU, bf16 or fp16 on a GPU)."""
    dtype = spec.effective_dtype
    if dtype == "auto":
        return 4 if device == "cpu" else 2
    return DTYPE_BYTES[dtype]


def sharded(spec: TrialSpec) -> tuple[float, float]:
    """(share of the base weights, share of the LoRA weights' gradient and AdamW state) one rank holds
    under the trial's strategy: DDP keeps a whole replica on every rank; ZeRO-2 shards the gradients
    and optimizer state over the N ranks; FSDP and ZeRO-3 the weights too."""
    n = spec.num_processes
    weights = 1 / n if spec.distributed in ("fsdp", "zero3") else 1.0
    state = 1 / n if spec.distributed in ("fsdp", "zero2", "zero3") else 1.0
    return weights, state


def terms(spec: TrialSpec, shape: Shape, device: str) -> dict[str, float]:
    """Each term's size in GiB for `spec` on `device` ('cpu' or 'gpu'): one rank's, on its own GPU, for a
    trial over several ranks (each generates and trains on its share of the step's completions)."""
    w = dtype_bytes(spec, device)
    linear_bytes = NF4_BYTES if spec.quantization == "nf4" else w
    weights_share, state_share = sharded(spec)
    full = spec.adapter == "none"
    # Full fine-tuning with beta > 0: TRL's reference model, a second copy of the weights.
    copies = 2 if full and spec.beta > 0 else 1
    weights = (shape.linear_params * linear_bytes + shape.other_params * w) * weights_share * copies
    if device == "gpu" and vllm_colocated(spec) and memory_of(spec.stack).vllm_shares_weights:
        weights = 0.0  # the trainer's model is built on vLLM's weights: counted in its pool (_vllm.py)
    # What trains: every weight's gradient (compute dtype) and AdamW's fp32 moments; or the LoRA weights
    # (fp32, on every rank unless FSDP or ZeRO-3 shard them) with their gradient and AdamW state.
    params = shape.linear_params + shape.other_params
    moments = adam_bytes(spec)
    lora = shape.lora_params(spec.lora_r, lora_modules(spec.lora_target_modules)) * (
        LORA_WEIGHT_BYTES * weights_share + (LORA_STATE_BYTES - ADAM_BYTES + moments) * state_share
    )
    trained = params * (w + moments) * state_share if full else lora
    tokens = spec.max_prompt_length + spec.max_completion_length
    generation = spec.generation_batch_size / spec.num_processes
    micro = spec.effective_micro_batch_size
    # A layer keeps its attention and MLP intermediates for backward (Shape.layer_width a token).
    # Gradient checkpointing (ignored on a CPU) keeps only each layer's input, and backward recomputes
    # one layer at a time, which then holds its intermediates.
    checkpointed = spec.gradient_checkpointing and device == "gpu"
    layer = shape.layer_width()
    offloaded = offloads_checkpoints(spec, device)
    kept = (0 if offloaded else shape.layers * shape.hidden) + layer if checkpointed else shape.layers * layer
    completion_rows = micro * spec.max_completion_length
    chunked = chunks_logprobs(spec, device)
    vllm = vllm_colocated(spec)
    sizes = {
        "baseline": float(GIB),
        "weights": weights,
        "lora": trained,
        "kv_cache": 0
        if vllm
        else 2 * shape.kv_heads * shape.head_dim * w * generation * shape.cached_tokens(tokens),
        "sampling_logits": 0 if vllm else generation * shape.vocab * 4,
        "vllm_pool": vllm_pool_bytes(spec, shape, device, w) if vllm else 0,
        "activations": micro * tokens * (kept * w + dropout_copies(spec, shape, checkpointed, w)),
        "logits": 0 if chunked else logit_rows(spec, device) * shape.vocab * logit_bytes(spec, device),
        "logit_chunk": unsloth_chunk_rows(completion_rows, shape.vocab) * shape.vocab * (4 + w)
        if chunked
        else 0,
    }
    return {name: sizes[name] / GIB for name in TERMS}


def dropout_copies(spec: TrialSpec, shape: Shape, checkpointed: bool, w: int) -> float:
    """Bytes a token's LoRA dropout holds for backward (Shape.adapted_width): with lora_dropout > 0 a
    dropped-out copy of each adapted input in the compute dtype and its bool mask, in every layer.
    None with gradient checkpointing: its forward keeps no layer's intermediates, and the one layer
    backward recomputes holds its copies after the log-probs' peak, when TRL's fp32 logits are freed
    (counting them there moved TRL 3B K8 c512, measured oom at 16 GiB, to a wrong `fits`:
    docs/benchmarks.md). None without LoRA or dropout (PEFT's adapter then takes its input as it is)."""
    if spec.adapter != "lora" or not spec.lora_dropout or checkpointed:
        return 0.0
    return shape.layers * shape.adapted_width() * (w + 1)


def vllm_colocated(spec: TrialSpec) -> bool:
    return spec.generation == "vllm" and spec.vllm_mode == "colocate"


def unsized_vllm_pool(spec: TrialSpec) -> bool:
    """Colocated vLLM without a budget: its pool is a share of a card the model does not know."""
    return spec.generation == "vllm" and spec.vllm_mode == "colocate" and not spec.memory_budget_gib


def vllm_pool_bytes(spec: TrialSpec, shape: Shape, device: str, w: int) -> float:
    """Colocated vLLM's pool in bytes under the trial's budget (module docstring); 0 without one."""
    from trainers.generation import cpu_kvcache_space_gib

    if not spec.memory_budget_gib:
        return 0
    if device == "cpu":
        return cpu_kvcache_space_gib(spec) * GIB + (shape.linear_params + shape.other_params) * w
    of = spec.memory_budget_gib
    if memory_of(spec.stack).vllm_pool_of_free:  # a share of the free memory at load: less the context
        of -= FACE["gpu"]["baseline"][0]
    return spec.vllm_gpu_memory_utilization * of * GIB


def logit_rows(spec: TrialSpec, device: str) -> int:
    """Rows of the full logits one micro-batch holds: on a GPU TRL's completion + 1 a completion
    (logits_to_keep + 1, the last row sliced off after), on a CPU the completion's."""
    extra = 1 if device == "gpu" else 0
    return spec.effective_micro_batch_size * (spec.max_completion_length + extra)


def logit_bytes(spec: TrialSpec, device: str) -> int:
    """Bytes a full-logits entry holds: on a GPU the logits and their gradient, fp32 where the stack
    casts them (StackMemory.fp32_logits: TRL's, module docstring), else in the compute dtype; on a CPU
    the fp32 logits."""
    if device == "cpu":
        return 4
    return 4 + 4 if memory_of(spec.stack).fp32_logits else 2 * dtype_bytes(spec, device)


def chunks_logprobs(spec: TrialSpec, device: str) -> bool:
    """Whether the trial's log-probs go through chunks of rows (StackMemory.chunked_logprobs), never
    the full logits: on a GPU only."""
    return device == "gpu" and memory_of(spec.stack).chunked_logprobs


def offloads_checkpoints(spec: TrialSpec, device: str) -> bool:
    """Whether the trial's checkpointed layer inputs live in host memory (StackMemory.offloads_checkpoints),
    not on the GPU: with gradient checkpointing on a GPU only."""
    return device == "gpu" and spec.gradient_checkpointing and memory_of(spec.stack).offloads_checkpoints


def unsloth_chunk_rows(rows: int, vocab: int) -> int:
    """Rows of one chunk of Unsloth's chunked log-probs over `rows` completion rows
    (unsloth_zoo chunked_logprob_rows): at least 2, at most the rows there are."""
    chunk = int(UNSLOTH_CHUNK_GIB * GIB / (vocab * UNSLOTH_BYTES_PER_LOGIT))
    chunk = min(chunk, max(UNSLOTH_MIN_ROWS, -(-rows // 8)))
    return max(min(chunk, rows), 2) if rows else 0


def face(device: str) -> dict[str, tuple[float, float]]:
    """term -> (coefficient, spread): the terms' face values (FACE), before any measurement."""
    return {name: FACE[device].get(name, FACE["shared"].get(name, DEFAULT_PRIOR)) for name in TERMS}


def prior(device: str) -> dict[str, tuple[float, float]]:
    """term -> (coefficient, spread) before a family's trials are measured: on a GPU the face values
    calibrated on round 1's H100 trials (CALIBRATED), on a CPU the face values."""
    values = face(device)
    if device != "gpu":
        return values
    return {name: (CALIBRATED[name], spread) for name, (_, spread) in values.items()}
