"""The benchmark harness (bench/): selection by name and tag, one record per run with its fields, goals
checked (exit 1 on a miss), smoke settings applied, bad arguments refused before anything runs (exit 2),
fitters writing shipped files only under --refit; and bench/ and tests/ not importing each other."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from bench import _cli
from bench._harness import BENCHMARKS, Context, benchmark

ROOT = Path(__file__).resolve().parents[2]
CALLS: list[dict] = []


def _register(**kwargs):
    """A benchmark registered for a test only (taken back out of the shared registry)."""

    def wrap(fn):
        benchmark(**kwargs)(fn)
        return BENCHMARKS.pop(kwargs.get("name") or fn.__name__)

    return wrap


@_register(tags=("fast", "ratio"), needs="data", params={"steps": 8, "label": "full"}, smoke={"steps": 2},
           goals={"ratio": "<= 0.40"}, smoke_goals={})  # fmt: skip
def measured(ctx: Context) -> dict:
    CALLS.append({"steps": ctx.args.steps, "label": ctx.args.label, "smoke": ctx.smoke})
    with ctx.timed("loop"):
        ratio = 0.1 * ctx.args.steps
    ctx.table("steps", ["steps", "ratio"], [[ctx.args.steps, ratio]])
    return {"ratio": ratio, "not_measured": None}


@_register(tags=("fast",), needs="cpu", goals={"ok": "== true"})
def crashes(ctx: Context) -> dict:
    raise RuntimeError("the benchmark's own failure")


@_register(tags=("fast",), needs="gpu")
def on_a_card(ctx: Context) -> dict:
    return {}


KNOWN = {b.name: b for b in (measured, crashes, on_a_card)}


@pytest.fixture(autouse=True)
def _calls():
    CALLS.clear()


def run(tmp_path: Path, *argv: str) -> int:
    return _cli.main(list(argv), records=tmp_path, known=KNOWN)


def test_a_name_selects_that_benchmark_and_a_tag_every_one_it_tags_gpu_ones_left_out():
    assert [b.name for b in _cli.select(["measured"], smoke=False, gpu=False, known=KNOWN)] == ["measured"]
    assert [b.name for b in _cli.select(["fast"], smoke=False, gpu=False, known=KNOWN)] == [
        "crashes",
        "measured",
    ]
    assert [b.name for b in _cli.select(["fast"], smoke=False, gpu=True, known=KNOWN)] == [
        "crashes",
        "measured",
        "on_a_card",
    ]
    assert [b.name for b in _cli.select([], smoke=True, gpu=False, known=KNOWN)] == ["measured"]
    assert [b.name for b in _cli.select(["data"], smoke=False, gpu=False, known=KNOWN)] == ["measured"]


def test_a_name_that_is_no_benchmark_or_tag_exits_2_naming_it_and_the_fix(tmp_path, capsys):
    assert run(tmp_path, "nonesuch") == 2
    said = capsys.readouterr().err
    assert "'nonesuch' is neither a benchmark nor a tag" in said and "python -m bench --list" in said
    assert list(tmp_path.iterdir()) == []


def test_a_gpu_benchmark_named_without_gpu_exits_2_with_the_flag_to_add(tmp_path, capsys):
    assert run(tmp_path, "on_a_card") == 2
    assert "needs a GPU; add --gpu" in capsys.readouterr().err


def test_gpu_on_a_host_without_one_exits_2_before_anything_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_cli, "has_gpu", lambda: False)
    assert run(tmp_path, "--gpu", "measured") == 2
    assert "--gpu: no NVIDIA GPU here" in capsys.readouterr().err
    assert CALLS == [] and list(tmp_path.iterdir()) == []


def test_a_run_writes_one_record_with_what_ran_where_and_what_it_measured(tmp_path):
    assert run(tmp_path, "measured", "--set", "ratio_never=1") == 2  # not a parameter: refused first
    assert CALLS == []
    assert run(tmp_path, "measured", "--set", "steps=3") == 0
    record = json.loads((tmp_path / "measured.json").read_text())
    for field in ("name", "commit", "host", "card", "versions", "parameters", "metrics", "goals", "passed"):
        assert field in record, field
    assert record["name"] == "measured" and record["passed"] is True and record["smoke"] is False
    assert record["parameters"] == {"steps": 3, "label": "full"}
    assert record["metrics"] == {"ratio": pytest.approx(0.3), "not_measured": None}
    assert record["goals"] == [
        {"metric": "ratio", "rule": "<= 0.4", "measured": pytest.approx(0.3), "passed": True}
    ]
    assert set(record["host"]) >= {"name", "cpus", "load_1m"} and record["versions"]["python"]
    assert "loop" in record["timings_s"] and "| 3 |" in record["tables"]["steps"]
    assert "| 3 |" in record["output"]


def test_a_missed_goal_exits_1_and_its_record_says_which_and_passed_false(tmp_path):
    assert run(tmp_path, "measured", "--set", "steps=5") == 1
    record = json.loads((tmp_path / "measured.json").read_text())
    assert record["passed"] is False
    assert record["goals"] == [
        {"metric": "ratio", "rule": "<= 0.4", "measured": pytest.approx(0.5), "passed": False}
    ]


def test_a_smoke_run_applies_the_smoke_settings_checks_the_smoke_goals_and_records_apart(tmp_path):
    assert run(tmp_path, "measured", "--smoke") == 0
    assert CALLS == [{"steps": 2, "label": "full", "smoke": True}]
    record = json.loads((tmp_path / "smoke" / "measured.json").read_text())
    assert record["smoke"] is True and record["parameters"]["steps"] == 2 and record["goals"] == []
    assert not (tmp_path / "measured.json").exists()


def test_a_set_value_of_the_wrong_type_exits_2_before_anything_runs(tmp_path, capsys):
    assert run(tmp_path, "measured", "--set", "steps=many") == 2
    said = capsys.readouterr().err
    assert "--set steps=many: steps takes int" in said and "--set steps=8" in said
    assert CALLS == [] and list(tmp_path.iterdir()) == []


def test_a_benchmark_that_raises_is_recorded_failed_and_the_next_still_runs(tmp_path):
    assert run(tmp_path, "fast", "--set", "steps=2") == 1
    failed = json.loads((tmp_path / "crashes.json").read_text())
    assert failed["passed"] is False and "the benchmark's own failure" in failed["error"]
    assert failed["metrics"] is None and failed["goals"][0]["passed"] is False
    assert json.loads((tmp_path / "measured.json").read_text())["passed"] is True


def test_a_fitter_rewrites_its_shipped_file_only_under_refit(tmp_path):
    shipped = tmp_path / "fit.json"
    shipped.write_text("old\n")
    check = Context("fitter", None, given_scratch=tmp_path, root=tmp_path)
    assert check.shipped(shipped, "new\n") is False and shipped.read_text() == "old\n"
    refit = Context("fitter", None, refit=True, given_scratch=tmp_path, root=tmp_path)
    assert refit.shipped(shipped, "new\n") is True and shipped.read_text() == "new\n"
    assert check.shipped(shipped, "new\n") is True


def _registered(path: Path) -> list[tuple[str, list[str]]]:
    """(name, keywords) of each `@benchmark(...)` in a module, read from its source (nothing imported)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "benchmark":
                    keywords = {k.arg: k.value for k in deco.keywords}
                    name = keywords["name"].value if "name" in keywords else node.name
                    found.append((name, sorted(keywords)))
    return found


def test_every_benchmark_module_registers_a_benchmark_and_the_fitters_declare_what_they_write():
    modules = [
        p for kind in _cli.KINDS for p in (ROOT / "bench" / kind).glob("*.py") if not p.name.startswith("_")
    ]
    registered = {path.stem: _registered(path) for path in modules}
    assert len(modules) >= 30 and [m for m, found in registered.items() if not found] == []
    names = [name for found in registered.values() for name, _ in found]
    assert len(names) == len(set(names))
    fitters = {name for found in registered.values() for name, keywords in found if "writes" in keywords}
    assert fitters == {"duration", "speed_model"}


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
    return found


def test_bench_never_imports_tests_and_the_shared_inputs_import_neither():
    bench = [p for p in (ROOT / "bench").rglob("*.py") if "data" not in p.parts]
    assert bench and [str(p) for p in bench if "tests" in _imports(p)] == []
    inputs = list((ROOT / "tools" / "inputs").glob("*.py"))
    assert inputs and [str(p) for p in inputs if _imports(p) & {"tests", "bench"}] == []


ISOLATED = """
import os

from bench import Context, benchmark


@benchmark(needs="data", params={"steps": 3}, isolated=True, goals={"steps_seen": "== 3"})
def apart(ctx: Context) -> dict:
    print("in a process of its own")
    with ctx.timed("work"):
        (ctx.scratch / "mine.txt").write_text("x")
    return {"pid": os.getpid(), "steps_seen": ctx.args.steps}
"""


def test_an_isolated_benchmark_runs_in_a_process_of_its_own_and_its_metrics_come_back(tmp_path, monkeypatch):
    import importlib
    import os
    import sys

    (tmp_path / "isolated_bench_module.py").write_text(ISOLATED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    importlib.import_module("isolated_bench_module")
    apart = BENCHMARKS.pop("apart")
    try:
        assert _cli.main(["apart"], records=tmp_path / "records", known={"apart": apart}) == 0
    finally:
        sys.modules.pop("isolated_bench_module", None)
    record = json.loads((tmp_path / "records" / "apart.json").read_text())
    assert record["passed"] is True and record["metrics"]["steps_seen"] == 3
    assert record["metrics"]["pid"] != os.getpid() and "work" in record["timings_s"]
    assert "in a process of its own" in record["output"]
    assert (Path(record["scratch"]) / "mine.txt").read_text() == "x"
