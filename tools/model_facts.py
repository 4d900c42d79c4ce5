"""Write trainers/_facts_shipped.py again: every bundled model's facts (and smollm2's) counted on the meta
device with the installed transformers (trainers/_facts.py). Run it after changing a bundled config or
upgrading transformers, and check the diff; tests/unit/test_model_facts.py fails until the file matches.

    .venv/bin/python tools/model_facts.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainers import _facts  # noqa: E402
from trainers.models import SMOLLM2, bundled_models, count_facts, facts_config  # noqa: E402


def counted() -> list[tuple[str, tuple[int, ...], dict]]:
    """(name, its facts as counted now, its config) of every model the file ships."""
    out = []
    for name in [*bundled_models(), SMOLLM2]:
        f = count_facts(name)
        out.append((name, (f.parameters, f.vocab, f.layers, f.kv_heads, f.quantizable), facts_config(name)))
    return out


def main() -> None:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # Phi-4-mini's rope fields' notice: no news here
    models = counted()
    _facts.SHIPPED.write_text(_facts.shipped_text(models))
    print(f"{_facts.SHIPPED}: {len(models)} models' facts, transformers {_facts.transformers_version()}")


if __name__ == "__main__":
    main()
