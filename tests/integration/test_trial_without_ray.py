"""The trial path on a GPU host that has the training stack only: no Ray, no MLflow.

A sitecustomize on PYTHONPATH marks ray and mlflow as absent in every interpreter of the run (the
command and its trainer child), the way Python and transformers see a package that is not installed.
"""

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[2]
ABSENT = ("ray", "mlflow")


@pytest.fixture
def env_without_ray(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        f"import sys\nfor name in {ABSENT!r}:\n    sys.modules[name] = None  # import raises ImportError\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    return site


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_blocker_makes_ray_and_mlflow_unimportable(env_without_ray, tmp_path):
    for name in ABSENT:
        proc = run("-c", f"import {name}", cwd=tmp_path)
        assert proc.returncode == 1 and "ModuleNotFoundError" in proc.stderr, proc.stderr[-2000:]


def test_trial_completes_and_writes_steps_without_ray_or_mlflow(env_without_ray, tmp_path):
    out = tmp_path / "trial"
    args = "trial --framework trl --model-name tiny --max-steps 2 --num-generations 2 --batch-size 1"
    args += " --max-completion-length 8 --max-prompt-length 96 --quantization none"
    proc = run("-m", "orchestrator.cli", *args.split(), "--output-dir", str(out), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    steps = pq.read_table(out / "steps.parquet").to_pydict()
    assert steps["step"] == [1, 2]


def test_gpu_check_help_works_without_ray_or_mlflow(env_without_ray):
    proc = run("-m", "orchestrator.cli", "gpu-check", "--help", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage: rlsweep gpu-check")
