"""The test tree's own layout: shared test code lives in tests/helpers, never in a test module."""

import ast
from pathlib import Path

TESTS = Path(__file__).parents[1]


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


def test_no_test_module_imports_another_test_module():
    importers = {
        f"{path.relative_to(TESTS.parent)} imports {name}"
        for path in TESTS.rglob("*.py")
        for name in _imported_modules(path)
        if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")
    }
    assert importers == set(), "move the shared code to tests/helpers/"
