"""bench/gpu/probe.py, the first command on a new GPU host: each check runs in its own bounded child,
and one that fails or hangs reports why without hiding the others."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _probe():
    spec = importlib.util.spec_from_file_location("gpu_probe", ROOT / "bench" / "gpu" / "probe.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_probe"] = module
    spec.loader.exec_module(module)
    return module


def test_a_check_returns_its_result_and_its_wall_time():
    found = _probe().run_check("sum", "import os\nresult = {'answer': 1 + 1, 'pid': os.getpid()}", 30)
    assert found["answer"] == 2 and found["pid"] > 0 and found["wall_s"] >= 0


def test_a_failing_check_reports_its_exit_and_the_end_of_its_traceback():
    found = _probe().run_check("broken", "raise ValueError('no CUDA here')", 30)
    assert found["error"] == "exit 1" and "ValueError: no CUDA here" in found["stderr_tail"]


def test_a_hanging_check_is_stopped_at_its_timeout():
    found = _probe().run_check("hang", "import time\ntime.sleep(60)\nresult = {}", 1)
    assert found == {"error": "timed out after 1 s"}


def test_the_versions_check_names_every_package_a_trial_records_and_none_for_a_missing_one():
    found = _probe().run_check("versions", _probe().CHECKS["versions"], 60)
    packages = found["packages"]
    assert {"torch", "transformers", "trl", "peft", "bitsandbytes", "unsloth"} <= set(packages)
    assert packages["torch"] == __import__("torch").__version__
    assert found["python"] == ".".join(map(str, sys.version_info[:3]))


def test_a_check_runs_from_a_file_so_its_functions_have_source_as_triton_jit_needs():
    # triton.jit reads each kernel's source with inspect; `python -c` text has none, and the probe's
    # Triton check failed on every host (on an H100 too) until checks ran from a file.
    body = "import inspect\ndef kernel():\n    return 1\nresult = {'source': inspect.getsource(kernel)}"
    found = _probe().run_check("source", body, 30)
    assert found["source"] == "def kernel():\n    return 1\n"
