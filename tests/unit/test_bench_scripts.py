"""The benchmark scripts name project code that exists: each `from orchestrator|trainers|tasks ... import
x` in bench/ resolves (a module moved in a restructure left three scripts importing a name from where
it used to live, found only when a benchmark was run)."""

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench"
PROJECT = ("orchestrator", "trainers", "tasks")


def _project_imports(path: Path) -> list[tuple[str, str]]:
    pairs = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PROJECT:
            pairs += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            pairs += [(alias.name, "") for alias in node.names if alias.name.split(".")[0] in PROJECT]
    return pairs


@pytest.mark.parametrize("script", sorted(BENCH.rglob("*.py")), ids=lambda p: str(p.relative_to(BENCH)))
def test_every_project_name_a_benchmark_imports_exists(script):
    missing = []
    for module, name in _project_imports(script):
        loaded = importlib.import_module(module)
        if name and not hasattr(loaded, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ModuleNotFoundError:
                missing.append(f"{module}.{name}")
    assert missing == []
