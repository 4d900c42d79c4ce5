"""The nearest bundled twin of a model: the bundled config (trainers/model_configs) of the same
architecture (model_type) closest in size, what `random:<hub id>` builds without a download.

Size is the parameter count a config implies (approx_parameters: embeddings, attention, MLP or every
expert), then layers and hidden size, then the vocabulary, then the same organisation: Qwen2.5-Math-7B (qwen2, 28 x 3,584, 7.6B) has
the twin Qwen2.5-7B-Instruct, not a Qwen3 whose name reads alike. With no bundled model of its
architecture the twin is the nearest in size of any, and the reason says so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path


def approx_parameters(config: Mapping) -> int:
    """The parameters a decoder-only config implies: embeddings (twice when untied), each layer's
    attention (q, k, v, o) and MLP (gate, up, down) or routed experts; norms and biases left out (under
    0.1% of a model this size). 0 where the config lacks the sizes."""
    try:
        hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or hidden // heads)
        vocab = int(config["vocab_size"])
        experts = int(config.get("num_experts") or 0)
        mlp = 3 * hidden * int(config["moe_intermediate_size" if experts else "intermediate_size"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return 0
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    tied = bool(config.get("tie_word_embeddings", False))
    return vocab * hidden * (1 if tied else 2) + layers * (attention + mlp * max(experts, 1))


def _size_words(config: Mapping) -> str:
    return (
        f"{approx_parameters(config) / 1e9:.1f}B parameters, {config.get('num_hidden_layers')} layers x "
        f"{config.get('hidden_size')} hidden"
    )


def nearest_twin(config: Mapping, name: str, bundled: Mapping[str, Path]) -> tuple[str, str]:
    """(the bundled hub id nearest `config` by architecture then size, why in words); ValueError where
    `config` implies no size."""
    size = approx_parameters(config)
    if not size:
        raise ValueError(f"{name}'s config.json lacks the sizes a twin is chosen by (hidden_size, layers...)")
    kind = config.get("model_type")
    configs = {hub: json.loads(path.read_text()) for hub, path in bundled.items()}
    same = {hub: c for hub, c in configs.items() if c.get("model_type") == kind}
    pool = same or configs

    def distance(hub: str) -> tuple:
        other = pool[hub]
        return (
            abs(math.log(approx_parameters(other) / size)),
            abs(int(other["num_hidden_layers"]) - int(config["num_hidden_layers"])),
            abs(int(other["hidden_size"]) - int(config["hidden_size"])),
            abs(int(other["vocab_size"]) - int(config.get("vocab_size") or 0)),
            hub.split("/")[0] != name.split("/")[0],  # a tie goes to the same organisation's
            hub,
        )

    twin = min(pool, key=distance)
    architecture = (
        f"the same architecture ({kind})"
        if same
        else f"no bundled model is a {kind}, so the nearest in size of any ({pool[twin].get('model_type')})"
    )
    why = (
        f"random:{twin} is {name}'s nearest bundled twin: {architecture}, {_size_words(pool[twin])} against "
        f"its {_size_words(config)}"
    )
    return twin, why
