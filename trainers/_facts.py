"""A model's facts (trainers.models.model_facts: parameters, vocabulary, layers, KV heads, the weights
bitsandbytes stores in 4 bits) without building the model where they are known already. They are counted
on a model built on the meta device from its config.json (0.3-0.7 s a model, after seconds of importing
torch and transformers), and depend on nothing but that config and the installed transformers, so:

- the bundled configs' facts ship with the code, in trainers/_facts_shipped.py, each with its config's
  digest and the transformers version that counted it: `python tools/model_facts.py` writes that file
  again by counting each (tests/unit/test_model_facts.py fails when one differs from a fresh count);
- any other config's, once counted, are kept in the rlsweep cache (<cache>/facts/<key>.json, the key the
  config's digest, the transformers version and this rule's version).

A config whose digest or transformers version differs from what was kept is counted again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

# Bump when how the facts are counted changes (trainers.models.model_facts), so kept facts are counted again.
RULE_VERSION = 1
SHIPPED = Path(__file__).with_name("_facts_shipped.py")


def digest(config: dict) -> str:
    """The config's digest: its content, whatever its key order or formatting."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def transformers_version() -> str | None:
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None


def shipped(hub_id: str, config: dict) -> tuple[int, ...] | None:
    """The shipped facts of a bundled model (parameters, vocab, layers, KV heads, 4-bit weights), where
    they were counted from this very config by this transformers under this rule; else None."""
    from trainers import _facts_shipped

    if (transformers_version(), RULE_VERSION) != (_facts_shipped.TRANSFORMERS, _facts_shipped.RULE):
        return None
    kept = _facts_shipped.FACTS.get(hub_id)
    if kept is None or kept[0] != digest(config):
        return None
    return tuple(kept[1:])


def _kept_path(folder: Path, config: dict) -> Path:
    key = hashlib.sha256(f"{digest(config)} {transformers_version()} {RULE_VERSION}".encode()).hexdigest()[
        :32
    ]
    return folder / "facts" / f"{key}.json"


def kept(folder: Path, config: dict) -> dict[str, Any] | None:
    """Facts counted before from this config under this transformers, read from the rlsweep cache
    `folder` (the fields of trainers.models.ModelFacts but its name)."""
    try:
        data = json.loads(_kept_path(folder, config).read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def keep(folder: Path, config: dict, facts: dict[str, Any]) -> None:
    """Keep `facts` in the rlsweep cache `folder` (written whole; a cache that cannot be written is skipped)."""
    target = _kept_path(folder, config)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=target.parent, suffix=".tmp", delete=False) as handle:
            json.dump(facts, handle, sort_keys=True)
        os.replace(handle.name, target)
    except OSError:
        return


def shipped_text(counted: list[tuple[str, tuple[int, ...], dict]]) -> str:
    """trainers/_facts_shipped.py's text for `counted`: (name, its facts as counted (parameters, vocab,
    layers, KV heads, 4-bit weights), the config they were counted from) of each model shipped."""
    lines = [
        '"""The bundled models\' facts as trainers.models.model_facts counted them (trainers/_facts.py), each',
        "with its config's digest: (digest, parameters, vocab, layers, KV heads, 4-bit weights). Written by",
        '`python tools/model_facts.py`; do not edit."""',
        "",
        f'TRANSFORMERS = "{transformers_version()}"',
        f"RULE = {RULE_VERSION}",
        "FACTS = {",
    ]
    for name, figures, config in counted:
        lines.append(f'    "{name}": ("{digest(config)}", {", ".join(str(n) for n in figures)}),')
    return "\n".join([*lines, "}", ""])
