"""The synthetic memory probe: a probe step's peak without decoding every token to max_completion_length.

A GRPO step's peak memory is set by tensor shapes, not by the text generated: generation's KV cache at
prompt + max_completion_length, and the training step's logits, activations, gradients and optimizer state
over completions of that length. A `decode` probe (probe_kind: decode) gets there by generating every token
with EOS masked (min_new_tokens), at 0.1-0.2 s a token on a GPU: minutes per probe. A `synthetic` probe
(probe_kind: synthetic, the default) reaches both shapes directly:

- generation: the stack's own generate, timed over a short window of WINDOW_TOKENS tokens right after the
  prompt, then its KV cache filled to prompt + max_completion_length - WINDOW_TOKENS in chunks (each chunk
  one generate call that only prefills, so no prefill's activations span the whole context) and a second
  window decoded at full length. Where the stack's generate keeps no KV cache (transformers under gradient
  checkpointing in training mode drops it: every decoding step then runs the whole sequence), the second
  window is decoded on the full-length context directly, exactly as that path's last tokens are.
- training: completions of exactly max_completion_length (random token ids of the vocabulary, never EOS or
  another special token) with random rewards, so the advantages are non-zero: the stack's real log-prob
  path, loss, backward and optimizer step run on the full shape.

Everything here goes through the model's own `generate` (transformers', or the one a stack patched in), so
it is the stack's generation path; a stack whose generation works otherwise says so in its own module.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

# Decoding steps timed in each window (the first step of a window also prefills; it is not timed).
WINDOW_TOKENS = 8
# A prefill chunk holds at most this many token rows (chunk tokens x sequences), at least MIN_CHUNK tokens:
# small enough that a chunk's activations and attention scores stay a sliver of the full-length KV cache.
CHUNK_ROWS = 512
MIN_CHUNK, MAX_CHUNK = 16, 512
SYNTHETIC, DECODE = "synthetic", "decode"
PROBE_KINDS = (SYNTHETIC, DECODE)


def chunk_tokens(sequences: int) -> int:
    """Tokens per prefill chunk for a batch of `sequences`."""
    return max(MIN_CHUNK, min(MAX_CHUNK, CHUNK_ROWS // max(1, sequences)))


@dataclass
class GenerationProbe:
    """What a synthetic probe's generation phase measured."""

    ms_per_token_at_prompt: float | None = None  # one decoding step of the whole batch, context = the prompt
    ms_per_token_at_full: float | None = None  # the same at context = prompt + max_completion_length
    window_tokens: int = WINDOW_TOKENS
    chunk_tokens: int | None = None  # tokens per prefill chunk; None where the path keeps no cache
    kept_cache: bool | None = None  # the stack's generate kept a KV cache (chunked prefill was possible)


class _Clock:
    """A logits processor that reads the clock at every decoding step (after the device has run it)."""

    def __init__(self, sync):
        self.sync = sync
        self.times: list[float] = []

    def __call__(self, input_ids, scores):
        self.sync()
        self.times.append(time.perf_counter())
        return scores

    def ms_per_step(self) -> float | None:
        """Mean ms between decoding steps; the first step (prefill) is left out."""
        if len(self.times) < 2:
            return None
        return 1000 * (self.times[-1] - self.times[0]) / (len(self.times) - 1)


def _synchronize():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def random_completions(
    sequences: int, length: int, vocab_size: int, special_ids: set[int], generator=None
) -> list[list[int]]:
    """`sequences` completions of exactly `length` token ids drawn from [0, vocab_size) with no special id
    (EOS, pad, ...): a completion nothing ends early."""
    import torch

    ids = torch.randint(0, vocab_size, (sequences, length), generator=generator)
    if special_ids:
        specials = torch.tensor(sorted(special_ids))
        plain = next(i for i in range(vocab_size) if i not in special_ids)
        ids[torch.isin(ids, specials)] = plain
    return ids.tolist()


def vocabulary(model, tokenizer) -> tuple[int, set[int]]:
    """The ids a completion may use (the smaller of the tokenizer's and the model's vocabulary) and the
    special ids among them."""
    sizes = [len(tokenizer)]
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is not None and getattr(embeddings, "num_embeddings", None):
        sizes.append(int(embeddings.num_embeddings))
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    for name in ("eos_token_id", "pad_token_id", "bos_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            special.add(value)
    return min(sizes), special


def probe_generation(
    model, prompt_ids: list[list[int]], length: int, pad_id: int, generation_config, special_ids: set[int]
) -> GenerationProbe:
    """The generation phase of a synthetic probe on `model` (the unwrapped model the stack generates with,
    in the stack's generation context: no_grad and its own modes): a timed window after the prompt, the
    KV cache filled to prompt + `length`, and a timed window at full length. Returns what it measured; the
    process's memory peak over it is the generation phase's peak."""
    import copy

    import torch
    from transformers import DynamicCache, LogitsProcessorList

    device = next(model.parameters()).device
    width = max(len(ids) for ids in prompt_ids)
    rows = len(prompt_ids)
    padded = torch.full((rows, width), pad_id, dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    for i, ids in enumerate(prompt_ids):  # left padding, as the stacks generate
        padded[i, width - len(ids) :] = torch.tensor(ids)
        mask[i, width - len(ids) :] = 1
    padded, mask = padded.to(device), mask.to(device)
    window = max(2, min(WINDOW_TOKENS, length))
    result = GenerationProbe(window_tokens=window)

    def generate(ids, attention, new_tokens, cache=None, clock=None):
        config = copy.deepcopy(generation_config)
        config.max_new_tokens = config.min_new_tokens = new_tokens
        kwargs = {"past_key_values": cache} if cache is not None else {}
        return model.generate(
            input_ids=ids,
            attention_mask=attention,
            generation_config=config,
            logits_processor=LogitsProcessorList([clock] if clock else []),
            **kwargs,
        )

    clock = _Clock(_synchronize)
    generate(padded, mask, window, clock=clock)
    result.ms_per_token_at_prompt = clock.ms_per_step()

    vocab = int(model.get_input_embeddings().num_embeddings)
    filler = random_completions(rows, max(0, length - window), vocab, special_ids)
    context = torch.cat([padded, torch.tensor(filler, dtype=torch.long, device=device)], dim=1)
    context_mask = torch.cat(
        [mask, torch.ones((rows, context.shape[1] - width), dtype=torch.long, device=device)], 1
    )
    step = chunk_tokens(rows)
    cache = DynamicCache(config=getattr(model, "config", None))
    filled = 0
    # Prefill in chunks: each call adds one chunk to the cache (generate prefills only the uncached tokens)
    # and samples one token, which is dropped: the next chunk is the filler's.
    end = min(context.shape[1] - 1, width)
    while end <= context.shape[1] - 1 and end > filled:
        generate(context[:, :end], context_mask[:, :end], 1, cache=cache)
        if cache.get_seq_length() == 0:  # this path keeps no cache: decode on the whole context below
            cache = None
            break
        filled = end
        end = min(context.shape[1] - 1, end + step)
    result.kept_cache = cache is not None
    result.chunk_tokens = step if cache is not None else None
    clock = _Clock(_synchronize)
    generate(context, context_mask, window, cache=cache, clock=clock)
    result.ms_per_token_at_full = clock.ms_per_step()
    return result


def random_rewards(rows: int, funcs: int, device) -> Any:
    """Rewards in [0, 1) for `rows` completions and `funcs` reward functions: their spread within a group
    gives non-zero advantages, so the loss's backward has the real graph to run."""
    import torch

    return torch.rand(rows, funcs, device=device)


def end_synthetic_cycle(trainer) -> bool:
    """After a synthetic probe's optimizer step, the next step generates anew: no step reuses its random
    completions (num_iterations > 1, or steps_per_generation above the accumulation), so its cycle is that
    one step. A reuse would train once more on random tokens, undone after (nothing learned), in training
    shapes the probe step already ran (generation's and the first pass's memory on top: its peak is the
    cycle's), and would take a step of the trial's max_steps: a trial of max_steps 2 with num_iterations
    2 was all probe (too_short, nothing trained). A decoded probe's completions are real (forced long):
    their reuse steps stay. TRL's trainer regenerates where its buffer is empty and counts its cycle from
    `_step` (grpo_trainer's _prepare_inputs); False where the trainer keeps neither (nothing changed)."""
    if getattr(trainer, "_buffered_inputs", None) is None or not isinstance(
        getattr(trainer, "_step", None), int
    ):
        return False
    trainer._buffered_inputs = None
    trainer._step = 0  # at an optimizer step's end: the accumulation's count restarts with it
    return True
