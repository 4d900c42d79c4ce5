"""The synthetic probe's parts (trainers/probe.py) on the real `tiny` model: completions nothing ends early,
a KV cache filled to prompt + max_completion_length in chunks by the model's own generate, and a path
without a cache decoded on the whole context."""

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationConfig

from tests.helpers.trainer_child import ROOT
from trainers.models import load_tokenizer, resolve_model
from trainers.probe import (
    chunk_tokens,
    end_synthetic_cycle,
    probe_generation,
    random_completions,
    random_rewards,
    vocabulary,
)


@pytest.fixture(scope="module")
def tiny():
    path = resolve_model("tiny", str(ROOT / ".cache"))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model, load_tokenizer(path)


class Calls:
    """model.generate, recording each call's input length, cache length before it, and output length."""

    def __init__(self, model):
        self.model, self.real, self.calls = model, model.generate, []

    def __call__(self, **kwargs):
        cache = kwargs.get("past_key_values")
        before = cache.get_seq_length() if cache is not None else None
        out = self.real(**kwargs)
        self.calls.append((kwargs["input_ids"].shape[1], before, out.shape[1]))
        return out


def test_random_completions_have_exactly_the_length_and_no_special_token():
    ids = random_completions(6, 300, vocab_size=50, special_ids={0, 1, 2, 49})
    assert [len(row) for row in ids] == [300] * 6
    used = {token for row in ids for token in row}
    assert used.isdisjoint({0, 1, 2, 49})
    assert len(used) > 20  # drawn from the vocabulary, not one repeated token


def test_the_vocabulary_of_a_completion_is_the_smaller_of_the_tokenizers_and_the_models(tiny):
    model, tokenizer = tiny
    size, special = vocabulary(model, tokenizer)
    assert size == min(len(tokenizer), model.get_input_embeddings().num_embeddings)
    assert tokenizer.eos_token_id in special


def test_random_rewards_differ_within_a_group_so_advantages_are_not_zero():
    rewards = random_rewards(8, 2, "cpu")
    assert rewards.shape == (8, 2)
    assert float(rewards[:, 0].std()) > 0


def test_a_prefill_chunk_shrinks_as_the_batch_grows_within_its_bounds():
    assert chunk_tokens(1) == 512
    assert chunk_tokens(16) == 32
    assert chunk_tokens(1024) == 16


def test_the_kv_cache_is_filled_to_prompt_plus_completion_in_chunks_by_the_models_generate(tiny):
    model, tokenizer = tiny
    model.eval()
    calls = Calls(model)
    model.generate = calls
    try:
        prompts = [[5, 6, 7, 8, 9], [10, 11, 12]]
        config = GenerationConfig(do_sample=True, pad_token_id=tokenizer.pad_token_id)
        with torch.no_grad():
            probe = probe_generation(model, prompts, 1200, tokenizer.pad_token_id, config, {0})
    finally:
        del model.generate
    assert probe.kept_cache and probe.chunk_tokens == 256
    assert probe.ms_per_token_at_prompt > 0 and probe.ms_per_token_at_full > 0
    window = probe.window_tokens
    first, *chunks, last = calls.calls
    assert first == (5, None, 5 + window)  # the window right after the prompt, no cache given
    # Each chunk adds at most chunk_tokens to the cache, and none prefills the whole context at once.
    for length, cached, _ in chunks:
        assert 0 < length - (cached or 0) <= 256
    assert len(chunks) >= 1200 // 256
    # The last window starts from the cache filled to all but one token and ends at prompt + 1200.
    assert last[1] == last[0] - 1
    assert last[2] == 5 + 1200


def test_where_generate_keeps_no_cache_the_last_window_decodes_on_the_whole_context(tiny):
    model, tokenizer = tiny
    model.gradient_checkpointing_enable()
    model.train()  # transformers drops the cache under gradient checkpointing in training mode
    calls = Calls(model)
    model.generate = calls
    try:
        config = GenerationConfig(do_sample=True, pad_token_id=tokenizer.pad_token_id)
        with torch.no_grad():
            probe = probe_generation(model, [[5, 6, 7]], 100, tokenizer.pad_token_id, config, {0})
    finally:
        del model.generate
        model.gradient_checkpointing_disable()
        model.eval()
    assert probe.kept_cache is False and probe.chunk_tokens is None
    assert calls.calls[-1][1] is None  # no cache handed over: the whole context runs at once
    assert calls.calls[-1][2] == 3 + 100


def test_after_a_synthetic_probe_step_trls_trainer_generates_anew_and_counts_its_cycle_from_zero():
    trainer = SimpleNamespace(_buffered_inputs=[{"prompt_ids": [1]}, {"prompt_ids": [2]}], _step=1)
    assert end_synthetic_cycle(trainer)
    assert (
        trainer._buffered_inputs is None and trainer._step == 0
    )  # grpo_trainer's _prepare_inputs regenerates


def test_a_trainer_without_trls_generation_buffer_is_left_as_it_is():
    trainer = SimpleNamespace(_step=3)
    assert not end_synthetic_cycle(trainer) and trainer._step == 3
    assert not end_synthetic_cycle(SimpleNamespace(_buffered_inputs=None, _step=2))
