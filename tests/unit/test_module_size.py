"""Every module of the three layers (orchestrator/, trainers/, tasks/) stays at 500 lines or fewer: one that
grows past it is split, its parts behind it in private `_x.py` modules that it re-exports."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("orchestrator", "trainers", "tasks")
MAX_LINES = 500


def module_lines(root: Path = ROOT) -> dict[str, int]:
    """Each Python module under the layers, by its path from `root`, and its lines (as `wc -l` counts them
    for a file that ends with a newline)."""
    return {
        path.relative_to(root).as_posix(): len(path.read_text().splitlines())
        for layer in LAYERS
        for path in sorted((root / layer).rglob("*.py"))
    }


def over_the_limit(lines: dict[str, int]) -> dict[str, int]:
    return {path: n for path, n in lines.items() if n > MAX_LINES}


def test_every_module_is_500_lines_or_fewer():
    assert over_the_limit(module_lines()) == {}


def test_the_check_counts_every_module_of_every_layer_and_catches_one_line_too_many(tmp_path):
    for layer in LAYERS:
        (tmp_path / layer / "inner").mkdir(parents=True)
    (tmp_path / "orchestrator" / "inner" / "_long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "tasks" / "at_the_limit.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "trainers" / "short.py").write_text("x = 1\n")
    (tmp_path / "bench_outside.py").write_text("x = 1\n" * (MAX_LINES + 1))  # outside the layers: not counted
    lines = module_lines(tmp_path)
    assert lines == {"orchestrator/inner/_long.py": 501, "tasks/at_the_limit.py": 500, "trainers/short.py": 1}
    assert over_the_limit(lines) == {"orchestrator/inner/_long.py": 501}
