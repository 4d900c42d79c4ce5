"""Which path Unsloth's GRPO step takes on each architecture family rlsweep bundles, as data, read from the
installed unsloth and unsloth_zoo (2026.10.9) and checked against them by tests/unit/test_unsloth_paths.py
(a release that moves a family to another path fails it). The Unsloth simulator follows it
(trainers/stacks/_simulate_unsloth.py): Unsloth's decoding buffers only where the family decodes through
Unsloth's fast path, transformers' decoding elsewhere; Unsloth's fused LoRA kernels only where its model
file installs them, unsloth_zoo's compiled LoRA forward elsewhere.

Where each column comes from:

- patch: FastLanguageModel.from_pretrained (unsloth/models/loader.py) dispatches `llama`, `mistral`,
  `qwen2` and `qwen3` to their own model files (FastLlamaModel, FastMistralModel, FastQwen2Model,
  FastQwen3Model); every other model type (and any full fine-tune, 8-bit or QAT load) goes to FastModel,
  unsloth/models/vision.py's FastBaseModel: transformers' own modeling code, its modules compiled by
  unsloth_zoo's compiler.
- decoding: the model files' pre_patch sets `<X>ForCausalLM.forward = CausalLM_fast_forward(<X>
  fast_forward_inference)` (Mistral: MistralForCausalLM_fast_forward over LlamaModel_fast_forward_inference):
  each layer's KV cache is copied at the first decoding step into a buffer KV_CACHE_INCREMENT tokens
  longer (unsloth/models/_decode_graphs.py alloc_decode_buffers). FastBaseModel generates through
  transformers' generate with a static cache of prompt + max_new_tokens - 1 tokens (vision.py
  unsloth_base_fast_generate; sliding-window layers sized to their window by transformers' layer plan).
- decode_graphs: the model types whose one-token decode step Unsloth replays as CUDA graphs inside an RL
  trainer's generate (_decode_graphs._SUPPORTED_MODEL_TYPES; rl.py's unsloth_unwrap_model_for_generation
  opens that scope and frees the buffers when it closes). rlsweep's synthetic probe generates through
  TRL's own unwrap_model_for_generation (trainers/measure.py), outside that scope: eager buffers, kept
  until the next forward reaches each layer - what the simulator counts.
- lora: FastLlamaModel.patch_peft_model names a fused MLP kernel per model type (apply_lora_mlp_swiglu:
  LoRA_MLP) and patches q/k/v (LoRA_QKV) and o (LoRA_W); FastBaseModel keeps PEFT's LoRA modules with
  their forward rewritten by unsloth_zoo's compiler (compiler.py COMPILED_LORA_FORWARD, lora_forward: the
  adapters cast to the base output's dtype, where PEFT would cast the input to the fp32 adapters').
- blocks: one torch.compile region per decoder layer on CUDA (unsloth/models/_block_compile.py
  patch_block_compile, torch >= 2.7). The fast path compiles them through llama.py's _legacy_block_compile
  only from torch 2.11 (unsloth/kernels/fast_lora.py TRACE_LORA_FUNCTIONS); below, its blocks run eager.
  The simulator runs every block eager (meta has no compiler): a compiled block allocates at most what
  its eager ops do.
- loss: unsloth_zoo's grpo_accumulated_loss, packed (one varlen [1, sum of lengths] forward: rl_replacements.py,
  UNSLOTH_GRPO_SEQ_PACKING) unless a sequence is longer than the config's sliding window, where it falls
  back to the padded loop. Rows of one length allocate the same either way: the simulator runs the padded
  loop.
- attention: the fast path's own attention (llama.py LlamaAttention_fast_forward through
  utils/attention_dispatch.py: flash-attn, else xformers, else SDPA; SDPA with a padding mask);
  FastBaseModel, transformers' implementation resolved by resolve_attention_implementation (SDPA here).
"""

from __future__ import annotations

from dataclasses import dataclass

FAST, GENERIC = "fast", "generic"
FUSED, COMPILED_LORA = "unsloth kernels", "unsloth_zoo's lora_forward"
UNSLOTH, TRANSFORMERS = "unsloth", "transformers"


@dataclass(frozen=True)
class UnslothPath:
    """One family's path through Unsloth's GRPO step (module docstring)."""

    model_type: str
    patch: str  # the model file and class FastLanguageModel dispatches to
    decoding: str  # UNSLOTH (fast decoding, its cache buffers) or TRANSFORMERS (generate, static cache)
    decode_graphs: bool  # CUDA-graph decode inside an RL trainer's generate
    lora: str  # FUSED (LoRA_MLP, LoRA_QKV, LoRA_W) or COMPILED_LORA (PEFT's modules, unsloth_zoo's forward)
    blocks: str  # how its decoder layers run on CUDA
    loss: str
    attention: str

    @property
    def fast(self) -> bool:
        """Whether the family runs through one of Unsloth's own model files."""
        return self.patch != GENERIC_PATCH


GENERIC_PATCH = "unsloth/models/vision.py FastBaseModel (FastModel)"
_FAST_BLOCKS = "compiled per layer from torch 2.11 (TRACE_LORA_FUNCTIONS), eager below"
_GENERIC_BLOCKS = "compiled per layer (patch_block_compile, torch >= 2.7)"
_PACKED = "packed (varlen), padded where a sequence passes the sliding window"
_FAST_ATTENTION = "unsloth's (flash-attn, else xformers, else SDPA; SDPA with a padding mask)"
_GENERIC_ATTENTION = "transformers' (SDPA)"


def _fast(model_type: str, patch: str, graphs: bool) -> UnslothPath:
    return UnslothPath(model_type, patch, UNSLOTH, graphs, FUSED, _FAST_BLOCKS, _PACKED, _FAST_ATTENTION)


def _generic(model_type: str) -> UnslothPath:
    return UnslothPath(
        model_type,
        GENERIC_PATCH,
        TRANSFORMERS,
        False,
        COMPILED_LORA,
        _GENERIC_BLOCKS,
        _PACKED,
        _GENERIC_ATTENTION,
    )


# Every model_type of trainers/model_configs (and tiny's qwen2, smollm2's llama).
PATHS: dict[str, UnslothPath] = {
    path.model_type: path
    for path in (
        _fast("llama", "unsloth/models/llama.py FastLlamaModel", graphs=True),
        _fast("mistral", "unsloth/models/mistral.py FastMistralModel", graphs=False),
        _fast("qwen2", "unsloth/models/qwen2.py FastQwen2Model", graphs=False),
        _fast("qwen3", "unsloth/models/qwen3.py FastQwen3Model", graphs=True),
        _generic("qwen3_moe"),
        _generic("gemma3_text"),
        _generic("phi3"),
        _generic("smollm3"),
    )
}


def path_for(model_type: str) -> UnslothPath:
    """The family's path; a model type rlsweep does not bundle takes FastModel's, as Unsloth's loader
    sends every type without a model file of its own there."""
    return PATHS.get(model_type) or _generic(model_type)


def compile_threads(cpus: int | None = None) -> int:
    """Inductor's compile threads in an Unsloth trainer: TORCHINDUCTOR_COMPILE_THREADS where set (Unsloth's
    _gpu_init plants 1 where NVIDIA_VISIBLE_DEVICES pins a card and CUDA_VISIBLE_DEVICES is unset), else
    unsloth_zoo's determine_compile_threads, min(32, max(4, the host's CPUs)), which its compile options
    pass to Inductor over torch's own default."""
    import os

    asked = os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "").strip()
    if asked.isdigit():
        return int(asked)
    return min(32, max(4, cpus or os.cpu_count() or 1))


def outside_terms(spec) -> list:
    """What an Unsloth trainer holds outside torch's allocator beyond every trainer's terms: Inductor's
    compile workers where the family's blocks compile (trainers/simulate/_outside.py)."""
    from trainers.simulate._meta import model_config
    from trainers.simulate._outside import inductor_compile_workers

    config = model_config(spec)
    path = path_for((config.get("text_config") or config).get("model_type", ""))
    threads = compile_threads()
    if threads <= 1:
        return []  # Inductor compiles in the trainer itself: no child
    return [inductor_compile_workers(threads, f"{path.model_type}'s blocks: {path.blocks}")]
