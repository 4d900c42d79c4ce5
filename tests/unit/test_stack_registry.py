"""Adding a stack is one module and one registry line: a stub stack registered with one
StackEntry (tests/helpers/stacks.py) is accepted by validation, the trial CLI, the fork server, the plan,
the report's base and gpu-check with no other code changed, and no code outside trainers/stacks/ names
a stack. test_stacks.py takes the same stub through the report and compare."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import build_parser
from orchestrator.running.gpu_check import check_specs
from orchestrator.spec.load import parse_sweep
from orchestrator.spec.plan import expand, plan
from tests.helpers.stacks import CAPABLE, THIRD, registered
from trainers import forkserver, stacks
from trainers.trial import TrialSpec

ROOT = Path(__file__).parents[2]

# The settings each capability lets a stack run, and the rule a stack without it breaks.
NEEDS = {
    "multi_rank": {"num_processes": 2, "distributed": "ddp"},
    "full_finetune": {"adapter": "none", "quantization": "none"},
    "vllm_sleep_mode": {"generation": "vllm", "vllm_enable_sleep_mode": True, "probe_steps": 0},
    "vllm_min_tokens": {"generation": "vllm", "probe_steps": 2},
}


@pytest.fixture
def third():
    with registered(THIRD):
        yield THIRD


@pytest.mark.parametrize("capability", NEEDS)
def test_a_capable_stub_stack_runs_what_its_entry_claims_and_a_bare_one_is_refused(capability):
    settings = NEEDS[capability] | ({"vllm_mode": "colocate"} if "generation" in NEEDS[capability] else {})
    with registered(THIRD), registered(CAPABLE):
        assert TrialSpec(stack="capable", **settings).problems() == []
        refused = TrialSpec(stack="third", **settings).problems()
        assert refused, f"third claims no {capability}: its settings {settings} must be refused"
        # the fix names every registered stack that can, read from the registry
        assert all(re.search(r"\btrl\b.*\bcapable\b", problem) for problem in refused), refused
        assert not any(re.search(r"\bthird\b.*\bthird\b", problem) for problem in refused), refused


def test_a_refusal_names_the_stacks_that_can_as_the_fix():
    with registered(CAPABLE):
        assert TrialSpec(stack="unsloth", num_processes=2, distributed="ddp").problems() == [
            "stack: unsloth with num_processes 2: only trl, capable run a trial over several ranks "
            "(accelerate's launcher); set stack: trl or capable or num_processes: 1"
        ]
        assert TrialSpec(stack="unsloth", generation="vllm", vllm_enable_sleep_mode=True).problems()[-1] == (
            "vllm_enable_sleep_mode: true with stack unsloth; only TRL, Capable expose vLLM's sleep mode: "
            "set vllm_enable_sleep_mode: false or stack trl or capable"
        )
    assert TrialSpec(stack="unsloth", adapter="none", quantization="none").problems() == [
        "adapter: none with stack unsloth: full fine-tuning runs on trl; set stack: trl or adapter: lora"
    ]


def test_the_trial_cli_offers_a_registered_stack_and_builds_its_trial(third):
    parser = build_parser()
    trial = next(
        a for a in parser._subparsers._group_actions[0].choices["trial"]._actions if a.dest == "stack"
    )
    assert trial.help.endswith("[trl|unsloth|liger|third]")
    args = parser.parse_args(["trial", "--stack", "third"])
    assert TrialSpec(stack=args.stack).problems() == []
    report = parser.parse_args(["report", "out", "--base-stack", "third"])
    assert report.base_stack == "third"


def test_a_registered_stack_forks_from_its_own_profile(third):
    assert forkserver.profile_for(TrialSpec(stack="third")) == "third"
    assert forkserver.profile_modules("third") == forkserver.BARE  # no preload named: the trainer's entry
    with registered(CAPABLE):
        assert forkserver.profile_modules("capable") == CAPABLE.preload
    with pytest.raises(KeyError):
        forkserver.profile_modules("third-gone")


def test_a_stacks_modules_that_need_no_gpu_to_import_are_preloaded_only_where_no_gpu_is_visible():
    cpu_only = dataclasses.replace(CAPABLE, preload_without_gpu=("tasks.names",))
    with registered(cpu_only):
        assert forkserver.profile_modules("capable", gpu=True) == CAPABLE.preload
        assert forkserver.profile_modules("capable", gpu=False) == (*CAPABLE.preload, "tasks.names")
        assert forkserver.profile_modules("capable") == CAPABLE.preload  # a GPU unless told otherwise


PRELOAD_STUB = """
import json, sys
from tests.helpers.stacks import CAPABLE, registered
from trainers import forkserver
with registered(CAPABLE):
    why = forkserver.preload("capable")
print(json.dumps({"refused": why, "stub_loaded": "tests.helpers.stacks" in sys.modules}))
"""


def test_a_fork_server_preloads_a_registered_stub_stacks_modules():
    out = subprocess.run(
        [sys.executable, "-c", PRELOAD_STUB], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"refused": None, "stub_loaded": True}


def test_a_sweep_over_a_registered_stack_plans_its_trials(third):
    sweep = parse_sweep(
        {
            "name": "s",
            "grid": {"stack": ["trl", "third"], "num_generations": [2, 4]},
            "fixed": {"model": "tiny"},
        }
    )
    assert sorted((t.stack, t.num_generations) for t in expand(sweep)) == [
        ("third", 2), ("third", 4), ("trl", 2), ("trl", 4)
    ]  # fmt: skip
    planned = plan(sweep)
    assert planned.problems == []
    assert sorted({t.stack for t in planned.trials}) == ["third", "trl"]


def test_gpu_check_runs_every_registered_stack(third, tmp_path):
    assert [s.stack for s in check_specs(tmp_path, ("grpo",))] == ["trl", "unsloth", "liger", "third"]
    assert stacks.label("third") == "Third"


# ------------------------------------------------------------------------------------------------
# No code outside trainers/stacks/ names a stack
# ------------------------------------------------------------------------------------------------
CHECKED = ("orchestrator", "trainers", "tasks")
# (path, the string) that may name a stack outside trainers/stacks/, and why. An entry that no longer
# matches fails the test: take it out.
ALLOWED: dict[tuple[str, str], str] = {}


def _strings(path: Path):
    """Every string constant in a module's code, f-strings' literal parts included, with its line;
    docstrings (prose, where an example may name a stack) left out, as comments are."""
    tree = ast.parse(path.read_text(), str(path))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


def test_no_code_outside_the_stacks_package_names_a_stack():
    names = stacks.names()
    assert names == ("trl", "unsloth", "liger"), "the check reads the registered names: run it without stubs"
    # A stack's name as a value ("trl"), or as a setting's value in a message's fix ("stack trl"; the
    # flag's example "--stack trl" is a verb's help, not a rule about a stack).
    named = re.compile(rf"(?<!--)\bstack:? ({'|'.join(names)})\b")
    found: dict[tuple[str, str], list[int]] = {}
    for package in CHECKED:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith("trainers/stacks/"):
                continue
            for line, text in _strings(path):
                if text in names:
                    found.setdefault((relative, text), []).append(line)
                elif match := named.search(text):
                    found.setdefault((relative, match.group(0)), []).append(line)
    unexpected = {key: lines for key, lines in found.items() if key not in ALLOWED}
    assert unexpected == {}, (
        "a stack named outside trainers/stacks/: put what the stack does differently in its module or "
        "its StackEntry (trainers/stacks/__init__.py) and read it from there"
    )
    stale = sorted(set(ALLOWED) - set(found))
    assert stale == [], "these allowed names are gone from the code: take them out of ALLOWED"


def test_a_registered_stub_stack_simulates_its_step_through_the_shared_skeleton(third):
    from trainers.simulate import simulate

    spec = TrialSpec(stack="third", model="tiny", num_generations=4, batch_size=2, max_completion_length=32,
                     num_iterations=2, quantization="none", lora_r=8, learning_rate=2e-4)  # fmt: skip
    step = simulate(spec, 34, cache=False)
    assert set(step.phase_gib) == {"generation", "scoring", "training"}
    assert step.allocated_gib == max(step.phase_gib.values()) > step.resting_gib > 0
    assert step.simulated == {"micro_batch": 8, "prompt_tokens": 34, "num_iterations": 2}


def test_no_stacks_simulator_imports_another_stacks_private_names():
    import ast

    stacks_dir = Path(stacks.__file__).parent
    own = {p.stem: p for p in stacks_dir.glob("_simulate_*.py")}
    assert {"_simulate_trl", "_simulate_unsloth"} <= set(own)
    for name, path in own.items():
        stack = name.removeprefix("_simulate_").split("_")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("trainers.stacks"):
                continue
            module = node.module.removeprefix("trainers.stacks").lstrip(".")
            ours = module.startswith((f"_simulate_{stack}", f"_{stack}", stack)) or module in ("", "_base")
            for alias in node.names:
                name = f"{module}.{alias.name}" if module else alias.name
                mine = ours if module else alias.name.startswith((f"_simulate_{stack}", f"_{stack}", stack))
                assert mine or not alias.name.startswith("_"), (
                    f"{path.name} imports {name}, another stack's private name: the step's shared parts "
                    "are trainers/simulate/_step.py's"
                )
