"""The offline tokenizer of a locally built model (trainers/models.py): byte-level BPE learnt from the
English text Python ships (its pydoc topics), digits one token each, padded to the model's vocabulary so
every id decodes, with the model family's chat template and special tokens (trainers/chat_templates.py)."""

from __future__ import annotations

import json
from pathlib import Path

from trainers.chat_templates import CHATML, ChatFamily


def tokenizer_corpus() -> str:
    """The text the built tokenizer's merges are learnt from: Python's own documentation topics."""
    from pydoc_data.topics import topics

    return "\n".join(topics[key] for key in sorted(topics))


def build_tokenizer(vocab_size: int, family: ChatFamily = CHATML):
    """A byte-level BPE tokenizer built offline from tokenizer_corpus(): the family's chat template and
    special tokens (its thinking tags single tokens, as in the real vocabulary), digits one token each,
    merges for half the vocabulary and filler tokens for the rest, so every id decodes to text."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    specials = family.special_tokens()
    reserved = specials + list(family.plain)
    if vocab_size < len(alphabet) + len(reserved):
        raise ValueError(
            f"vocab_size {vocab_size} is smaller than the {len(alphabet) + len(reserved)} tokens the "
            "tokenizer needs"
        )
    pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    learner = Tokenizer(models.BPE())
    learner.pre_tokenizer = pre_tokenizer
    # Half the ids are learnt merges, enough for prompts to tokenize like a real model's (3-4 characters
    # a token); the other half are fillers whose text holds digits ("<fill5000>"), so a random-weight
    # model's completions carry digits and the shaped `digits` reward varies between them.
    learnt_size = max(len(alphabet) + len(reserved), vocab_size // 2)
    trainer = trainers.BpeTrainer(
        vocab_size=learnt_size, special_tokens=reserved, initial_alphabet=alphabet, show_progress=False
    )
    learner.train_from_iterator([tokenizer_corpus()], trainer=trainer)
    learnt = json.loads(learner.to_str())["model"]
    vocab = dict(learnt["vocab"])
    for i in range(len(vocab), vocab_size):
        vocab[f"<fill{i}>"] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(pair) for pair in learnt["merges"]]))
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in family.plain])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=family.pad,
        eos_token=family.eos,
        bos_token=family.bos,
        chat_template=family.template,
        model_max_length=1_000_000,
    )


def load_tokenizer(path: str):
    """Built models keep their own tokenizer class; AutoTokenizer would swap in Qwen2's regex."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if (Path(path) / "complete").exists():
        return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path)
