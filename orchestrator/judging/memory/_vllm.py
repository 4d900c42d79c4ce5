"""Generation by vLLM, counted beside a simulated step: what vLLM holds on the trainer's card, read from
vLLM's and the stacks' own code (vllm 0.32, trl 1.14, unsloth_zoo 2026.10). The simulated step is the
trainer's (trainers/simulate); with generation: vllm the trainer does not generate, vLLM does:

- its pool: vLLM asks for gpu_memory_utilization x the card's total at start (vllm/v1/worker/utils.py
  request_memory) and sizes its KV cache to fill it (gpu_worker.determine_available_memory: the pool
  less its weights, its profiled activations, its non-torch memory and, with
  VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on by default, its CUDA graphs' estimate), so the pool holds
  vLLM's weights, KV cache and CUDA graphs, and nothing vLLM holds lies outside it. rlsweep passes the
  share of the budget (trainers/generation.py pool_utilization). A stack whose entry says
  `vllm_pool_of_free` (Unsloth's fast_inference: unsloth_zoo's approximate_vllm_memory_usage takes
  gpu_memory_utilization of the free memory at load) asks for that share of the card less the context.
- what it refuses: vLLM raises at start where the free memory is under its request (request_memory),
  and where the pool less its weights cannot hold one sequence of max_model_len tokens
  (kv_cache_utils' check_enough_kv_cache_memory). TRL's colocated vLLM starts after the trainer loaded
  its model, so the trainer's resting memory is not free to it.
- the weights: vLLM loads its own copy (TRL: LLM(model=...), 4-bit through bitsandbytes where the
  trainer's base is NF4), except where the entry says `vllm_shares_weights` (Unsloth's fast_inference:
  convert_vllm_to_huggingface builds the trainer's model on vLLM's own tensors), where the trainer's base
  weights are the pool's and count once.
- sleep mode (vllm_enable_sleep_mode; TRL calls llm.sleep(level=2) after each generation): the weights
  and the KV cache are released while the trainer trains; what stays (the CUDA graphs' pool, buffers
  outside vLLM's sleep allocator) is not measured here, at most the pool less its weights and one
  sequence's KV cache, so the training phase counts from none of it to that much.
- server mode: vLLM runs in another process on other GPUs; the trainer's card holds none of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainers.units import GIB


@dataclass(frozen=True)
class VllmHeld:
    """GiB vLLM holds on the trainer's card while it generates, and (low, high) while the trainer trains;
    the trainer's GiB it holds for it (its base weights, where shared); why vLLM would refuse to start
    (None where it starts); and the words that say how."""

    generating: float
    training: tuple[float, float]
    shared_weights: float
    refused: str | None
    words: str


def weights_gib(spec, shape) -> float:
    """vLLM's copy of the model's weights: NF4 linear layers at half a byte a parameter where the base is
    4-bit (bitsandbytes), the rest at the compute dtype's 2 bytes."""
    from orchestrator.judging.memory._terms import NF4_BYTES

    linear = NF4_BYTES if spec.quantization == "nf4" else 2
    return (shape.linear_params * linear + shape.other_params * 2) / GIB


def one_sequence_gib(spec, shape) -> float:
    """The KV cache of one sequence of max_model_len tokens (prompt + completion), at 2 bytes."""
    tokens = spec.max_prompt_length + spec.max_completion_length
    return 2 * shape.kv_heads * shape.head_dim * 2 * shape.cached_tokens(tokens) / GIB


def held(spec, budget_gib: float, context_gib: float, trainer_resting_gib: float) -> VllmHeld | None:
    """What vLLM holds for `spec` on a card of `budget_gib` (module doc); None without generation: vllm.
    trainer_resting_gib: the trainer's own memory between steps (its model loaded), which a colocated
    vLLM started after it cannot have."""
    from orchestrator.judging.memory._model import model_shape
    from trainers.stacks import memory_of

    if spec.generation != "vllm":
        return None
    if spec.vllm_mode == "server":
        return VllmHeld(0.0, (0.0, 0.0), 0.0, None, "vLLM in server mode: another process, other GPUs")
    memory = memory_of(spec.stack)
    shape, why = model_shape(spec.model)
    if shape is None:
        return VllmHeld(0.0, (0.0, 0.0), 0.0, f"vLLM's weights unknown: {why}", "")
    util = spec.vllm_gpu_memory_utilization
    of = budget_gib - context_gib if memory.vllm_pool_of_free else budget_gib
    pool = util * of
    weights = weights_gib(spec, shape)
    shared = weights if memory.vllm_shares_weights else 0.0
    free = budget_gib - context_gib - (0.0 if memory.vllm_shares_weights else trainer_resting_gib)
    sequence = one_sequence_gib(spec, shape)
    refused = None
    if pool > free + 1e-9:
        refused = (
            f"vLLM asks for vllm_gpu_memory_utilization {util:g} x {of:.1f} GiB = {pool:.1f} GiB at start and "
            f"{free:.1f} GiB is free then; lower vllm_gpu_memory_utilization to {max(free / of - 0.01, 0):.2f} or less"
        )
    elif pool < weights + sequence:
        refused = (
            f"vLLM's pool of {pool:.1f} GiB holds its weights ({weights:.1f} GiB) and not one sequence of "
            f"{spec.max_prompt_length + spec.max_completion_length} tokens ({sequence:.2f} GiB); raise "
            f"vllm_gpu_memory_utilization"
        )
    words = f"vLLM's pool {util:g} x {of:.1f} GiB = {pool:.1f} (its weights {weights:.1f}"
    words += ", the trainer's too" if shared else ""
    if spec.vllm_enable_sleep_mode:
        sleeping = max(pool - weights - sequence, 0.0)
        words += f"; asleep while training: 0-{sleeping:.1f} GiB kept)"
        return VllmHeld(pool, (0.0, sleeping), shared, refused, words)
    return VllmHeld(pool, (pool, pool), shared, refused, words + ")")


@dataclass(frozen=True)
class Beside:
    """A simulated step's trainer beside vLLM on a card (GiB, torch's; the context not in them): what the
    trainer needs at least and reserves uncapped while it trains (without the generation phases where vLLM
    generates, less the weights vLLM holds for it), vLLM's (low, high) beside it then, and while generating
    the trainer's resting memory and vLLM's; `vllm` None without generation: vllm."""

    needed: float
    reserved: float
    trained: float
    beside: tuple[float, float]
    generating: tuple[float, float]
    vllm: VllmHeld | None

    def least(self, context_gib: float, error: float = 1.0, upper: bool = True) -> float:
        """The least NVML the step runs in, the trainer's part (with the context: the error was measured
        on it) times `error`, beside vLLM's most (`upper`) or least while the trainer trains."""
        training = (self.needed + context_gib) * error + self.beside[1 if upper else 0]
        generating = (self.generating[0] + context_gib) * error + self.generating[1]
        return max(training, generating if self.vllm is not None else 0.0)


# A simulated step's phases in which the trainer generates: vLLM's instead with generation: vllm
GENERATING = ("generation", "decoding")


def beside_vllm(spec, step, budget_gib: float, context_gib: float) -> Beside:
    """`step` (a trainers.simulate SimulatedStep) on a card of `budget_gib` beside what vLLM holds there."""
    vllm = held(spec, budget_gib, context_gib, step.resting_gib)
    trained = step.allocated_gib
    if vllm is not None:
        trained = max((v for k, v in step.phase_gib.items() if k not in GENERATING), default=trained)
    shared = vllm.shared_weights if vllm else 0.0
    needed = step.reserved_gib if step.needed_gib is None else step.needed_gib
    return Beside(
        needed=trained + needed - step.allocated_gib - shared,
        reserved=trained + step.reserved_gib - step.allocated_gib - shared,
        trained=trained,
        beside=vllm.training if vllm else (0.0, 0.0),
        generating=(step.resting_gib - shared, vllm.generating) if vllm else (0.0, 0.0),
        vllm=vllm,
    )
