"""Importing Unsloth patches transformers and TRL for the whole process, so it may only happen inside an
Unsloth trainer child. The orchestrator, the TRL runner, the measurement code and the tasks must not
pull it in, not even indirectly."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_orchestrator_and_trl_stack_leave_unsloth_unimported():
    modules = sorted(f"orchestrator.{p.stem}" for p in (ROOT / "orchestrator").glob("*.py"))
    modules = [m.removesuffix(".__init__") for m in modules]
    modules += [
        "trainers",
        "trainers.__main__",
        "trainers.run_trl",
        "trainers.run_unsloth",
        "trainers.measure",
    ]
    modules += ["tasks"]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('unsloth', 'unsloth_zoo')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "orchestrator" in modules and "trainers.run_trl" in modules
    assert proc.stdout.strip().splitlines()[-1] == "[]"
