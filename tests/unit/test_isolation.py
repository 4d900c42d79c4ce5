"""Layers run one way, orchestrator -> trainers -> tasks, and each import pulls in only what its layer needs.

Inside the orchestrator its subpackages are floors, each importing only the floors below it (FLOORS),
and it imports from the trainer child only the modules trainers.FACE names.

Importing Unsloth patches transformers and TRL for the whole process, so it may only happen inside an
Unsloth trainer child. The trainer child and the tasks run on a GPU host that has the training stack
only, without Ray or MLflow. Each import check runs in a fresh interpreter, so modules other tests loaded
do not hide an import.
"""

import ast
import graphlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("tasks", "trainers", "orchestrator")  # bottom to top: a layer imports only layers before it
# The orchestrator's subpackages, bottom to top: each imports only the floors before it (and its own
# modules). words: the shared words; spec: the sweep file; judging: verdicts, pruning, the memory model,
# solve's search; recording: the recorder and its Parquet sinks; views: the report, compare, progress;
# publishing: MLflow and a sweep's finish; running: the driver, supervisor, sampler; cli: the commands.
FLOORS = ("words", "spec", "judging", "recording", "views", "publishing", "running", "cli")


def loaded_top_level_packages(modules: list[str], of: tuple[str, ...]) -> list[str]:
    """Which of the packages `of` a fresh interpreter has loaded after importing `modules`."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(of)!r})))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_orchestrator_and_trl_stack_leave_unsloth_unimported():
    modules = [
        module_name(p) for p in sorted((ROOT / "orchestrator").rglob("*.py")) if p.name != "__main__.py"
    ]
    modules += [
        "trainers",
        "trainers.__main__",
        "trainers.stacks",
        "trainers.stacks.trl",
        "trainers.stacks.unsloth",
        "trainers.measure",
    ]
    modules += ["tasks"]
    assert "orchestrator.cli" in modules and "orchestrator.running.driver" in modules
    assert loaded_top_level_packages(modules, ("unsloth", "unsloth_zoo")) == []


def test_importing_tasks_loads_neither_trainers_nor_orchestrator():
    assert loaded_top_level_packages(["tasks"], ("trainers", "orchestrator")) == []


@pytest.mark.parametrize("module", ["trainers.__main__", "trainers.stacks.trl", "trainers.stacks.unsloth"])
def test_trainer_child_modules_load_neither_ray_mlflow_nor_orchestrator(module):
    assert loaded_top_level_packages([module], ("ray", "mlflow", "orchestrator")) == []


def test_importing_the_stack_registry_loads_no_training_library():
    loaded = loaded_top_level_packages(
        ["trainers.stacks", "trainers.trial"], ("torch", "transformers", "trl", "peft")
    )
    assert loaded == []


def test_trial_and_gpu_check_commands_load_neither_ray_mlflow_nor_pandas():
    modules = [
        "orchestrator.cli",
        "orchestrator.running.supervisor",
        "orchestrator.running.telemetry",
        "orchestrator.recording.sinks",
    ]
    modules += ["orchestrator.spec.plan", "orchestrator.running.gpu_check", "orchestrator.cli.gpu_check"]
    assert loaded_top_level_packages(modules, ("ray", "mlflow", "pandas")) == []


# ------------------------------------------------------------------------------------------------
# The import graph, read from source: module-level and function-level imports alike.
# ------------------------------------------------------------------------------------------------
def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Each project module mapped to the project modules it imports anywhere in its source (inside
    functions and under `if TYPE_CHECKING:` too)."""
    files = {module_name(f, root): f for layer in LAYERS for f in (root / layer).rglob("*.py")}

    def resolve(name: str) -> str | None:  # the module a dotted name lives in: its longest known prefix
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = []
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets += [base] + [f"{base}.{alias.name}" for alias in node.names]
        graph[name] = {t for t in map(resolve, targets) if t and t != name}
    return graph


def layer_of(module: str) -> int:
    return LAYERS.index(module.split(".")[0])


def test_the_import_graph_sees_function_level_imports():
    graph = import_graph()
    assert "orchestrator.running.driver" in graph["orchestrator.cli.run"], (
        "cli.run imports the driver inside cmd_run"
    )
    assert "trainers.stacks" in graph["trainers.__main__"], "__main__ picks its stack from the registry"
    assert "trainers.evaluate" in graph["trainers.stacks._base"], "the assembly imports it inside assemble()"
    assert {"tasks.names", "trainers.models", "tasks"} <= graph["trainers.trial"]
    # An import for annotations only never runs, but the module still depends on the one it names.
    assert "trainers.trial" in graph["trainers.runtime"], "runtime names TrialSpec under `if TYPE_CHECKING:`"


def test_no_layer_imports_a_layer_above_it():
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        for target in targets
        if layer_of(target) > layer_of(module)
    )
    assert upward == []


def floor_of(module: str) -> int | None:
    """The floor of an orchestrator module (FLOORS' index); None outside the orchestrator's subpackages."""
    parts = module.split(".")
    if parts[0] != "orchestrator" or len(parts) < 2:
        return None
    return FLOORS.index(parts[1]) if parts[1] in FLOORS else -1


def imports_up_a_floor(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        if floor_of(module) is not None
        and floor_of(target) is not None
        and floor_of(target) > floor_of(module)
    )


def test_every_orchestrator_subpackage_has_a_floor():
    subpackages = {p.name for p in (ROOT / "orchestrator").iterdir() if (p / "__init__.py").exists()}
    assert subpackages == set(FLOORS)


def test_no_orchestrator_floor_imports_one_above_it():
    assert imports_up_a_floor(import_graph()) == []


def test_an_import_up_a_floor_is_caught(tmp_path):
    """The check reads a tree's source, so a words module that imports the CLI (inside a function too)
    is reported."""
    for layer in LAYERS:
        (tmp_path / layer).mkdir()
    words, cli = tmp_path / "orchestrator" / "words", tmp_path / "orchestrator" / "cli"
    for folder in (words, cli):
        folder.mkdir()
        (folder / "__init__.py").write_text("")
    (cli / "run.py").write_text("from orchestrator.words.outcome import OOM\n")
    (words / "outcome.py").write_text("OOM = 'oom'\n\ndef late():\n    from orchestrator.cli import run\n")
    assert imports_up_a_floor(import_graph(tmp_path)) == [
        "orchestrator.words.outcome imports orchestrator.cli",
        "orchestrator.words.outcome imports orchestrator.cli.run",
    ]


def test_the_orchestrator_imports_only_the_trainer_childs_face():
    import trainers

    outside = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module.startswith("orchestrator")
        for target in targets
        if target.startswith("trainers.")
        and not any(target == f or target.startswith(f + ".") for f in trainers.FACE)
    )
    assert outside == []
    named = {module_name(p) for p in (ROOT / "trainers").rglob("*.py")}
    assert set(trainers.FACE) <= named, "every module FACE names exists"


def test_the_project_modules_import_one_another_without_a_cycle():
    graph = import_graph()
    # A package's __init__ importing its own submodules while they import it back is how Python packages
    # work, not a cycle between modules with separate jobs.
    graph = {
        m: {t for t in ts if not (m in graph.get(t, ()) and _parent_and_child(m, t))}
        for m, ts in graph.items()
    }
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


def _parent_and_child(a: str, b: str) -> bool:
    return a.startswith(b + ".") or b.startswith(a + ".")
