"""A benchmark registered `isolated=True` runs here, in a process of its own (it patches the code it times,
or times its own process): `python -m bench._child MODULE NAME SETTINGS.json OUT.json`. Imports only its
module, runs it with its settings, and writes what the harness records (metrics, timings, tables)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace


def main(module: str, name: str, settings: str, out: str) -> None:
    from bench._harness import BENCHMARKS, Context

    importlib.import_module(module)
    given = json.loads(Path(settings).read_text())
    context = Context(
        name,
        SimpleNamespace(**given["params"]),
        smoke=given["smoke"],
        refit=given["refit"],
        given_scratch=Path(given["scratch"]),
    )
    metrics = BENCHMARKS[name].fn(context)
    found = {
        "metrics": metrics,
        "timings": context.timings,
        "tables": context.tables,
    }
    Path(out).write_text(json.dumps(found, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:5])
