"""A model's facts (trainers.models.model_facts: parameters, vocabulary, layers, KV heads, the weights
bitsandbytes stores in 4 bits) without building the model where they are known already. They are counted
on a model built on the meta device from its config.json (0.3-0.7 s a model, after seconds of importing
torch and transformers), and depend on nothing but that config and the installed transformers, so:

- the bundled configs' facts ship with the code, in trainers/_facts_shipped.py, each with its config's
  digest and the transformers version that counted it: `python -m trainers._facts` writes that file
  again by counting each (tests/unit/test_model_facts.py fails when one differs from a fresh count);
- any other config's, once counted, are kept in the rlsweep cache (<cache>/facts/<key>.json, the key the
  config's digest, the transformers version and this rule's version).

A config whose digest or transformers version differs from what was kept is counted again.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from dataclasses import asdict
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


def shipped(hub_id: str, config: dict) -> Any | None:
    """The shipped facts of a bundled model, where they were counted from this very config by this
    transformers under this rule; else None."""
    from trainers import _facts_shipped
    from trainers.models import ModelFacts

    if (transformers_version(), RULE_VERSION) != (_facts_shipped.TRANSFORMERS, _facts_shipped.RULE):
        return None
    kept = _facts_shipped.FACTS.get(hub_id)
    if kept is None or kept[0] != digest(config):
        return None
    return ModelFacts(hub_id, *kept[1:])


def _kept_path(config: dict) -> Path:
    from trainers.models import cache_home

    key = hashlib.sha256(f"{digest(config)} {transformers_version()} {RULE_VERSION}".encode()).hexdigest()[
        :32
    ]
    return cache_home() / "facts" / f"{key}.json"


def kept(name: str, config: dict) -> Any | None:
    """Facts counted before from this config under this transformers, read from the rlsweep cache."""
    from trainers.models import ModelFacts

    try:
        data = json.loads(_kept_path(config).read_text())
        return ModelFacts(**(data | {"hub_id": name}))
    except (OSError, ValueError, TypeError):
        return None


def keep(config: dict, facts: Any) -> None:
    """Keep `facts` in the rlsweep cache (written whole; a cache that cannot be written is skipped)."""
    target = _kept_path(config)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=target.parent, suffix=".tmp", delete=False) as handle:
            json.dump(asdict(facts), handle, sort_keys=True)
        os.replace(handle.name, target)
    except OSError:
        return


def shipped_text(counted: list[tuple[Any, dict]]) -> str:
    """trainers/_facts_shipped.py's text for `counted`: (ModelFacts as counted, the config they were
    counted from) of each model shipped."""
    lines = [
        '"""The bundled models\' facts as trainers.models.model_facts counted them (trainers/_facts.py), each',
        "with its config's digest: (digest, parameters, vocab, layers, KV heads, 4-bit weights). Written by",
        '`python -m trainers._facts`; do not edit."""',
        "",
        f'TRANSFORMERS = "{transformers_version()}"',
        f"RULE = {RULE_VERSION}",
        "FACTS = {",
    ]
    for one, config in counted:
        figures = ", ".join(
            str(n) for n in (one.parameters, one.vocab, one.layers, one.kv_heads, one.quantizable)
        )
        lines.append(f'    "{one.hub_id}": ("{digest(config)}", {figures}),')
    return "\n".join([*lines, "}", ""])


def main() -> None:
    """Count the bundled models' facts (and smollm2's) on the meta device and write
    trainers/_facts_shipped.py."""
    from trainers.models import SMOLLM2, bundled_models, count_facts, facts_config

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # Phi-4-mini's rope fields' notice: no news
    counted = [(count_facts(name), facts_config(name)) for name in [*bundled_models(), SMOLLM2]]
    SHIPPED.write_text(shipped_text(counted))
    print(f"{SHIPPED}: {len(counted)} models' facts, transformers {transformers_version()}", file=sys.stderr)


if __name__ == "__main__":
    main()
