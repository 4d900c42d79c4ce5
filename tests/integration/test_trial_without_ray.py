"""The trial path on a GPU host that has the training stack only: no Ray, no MLflow.

A sitecustomize on PYTHONPATH marks ray and mlflow as absent in every interpreter of the run (the
command and its trainer child), the way Python and transformers see a package that is not installed.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
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
    args = "trial --stack trl --model tiny --max-steps 2 --num-generations 2 --batch-size 1"
    args += " --max-completion-length 8 --max-prompt-length 96 --quantization none"
    proc = run("-m", "orchestrator.cli", *args.split(), "--output-dir", str(out), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    steps = pq.read_table(out / "steps.parquet").to_pydict()
    assert steps["step"] == [1, 2]


def test_gpu_check_help_works_without_ray_or_mlflow(env_without_ray):
    proc = run("-m", "orchestrator.cli", "gpu-check", "--help", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage: rlsweep gpu-check")


@pytest.fixture
def checkout_not_installed(tmp_path):
    """An offline GPU host's layout: the source checkout (no rlsweep metadata anywhere) and the
    packages beside it, found through PYTHONPATH alone (`python -S`: no site-packages, no .pth hooks,
    so neither the editable install's finder nor its dist-info is seen)."""
    checkout = tmp_path / "checkout"
    for part in ("orchestrator", "trainers", "tasks"):
        shutil.copytree(ROOT / part, checkout / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", checkout)
    site = tmp_path / "site"
    site.mkdir()
    packages = Path(sysconfig.get_paths()["purelib"])
    for entry in packages.iterdir():
        if "rlsweep" not in entry.name and entry.suffix != ".pth":
            (site / entry.name).symlink_to(entry)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": f"{site}{os.pathsep}{checkout}"}
    return checkout, env | {"HF_HUB_OFFLINE": "1", "RLSWEEP_CACHE": str(tmp_path / "cache")}


def offline(checkout_env, *args: str) -> subprocess.CompletedProcess:
    checkout, env = checkout_env
    return subprocess.run(
        [sys.executable, "-S", "-m", "orchestrator.cli", *args],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_the_documented_offline_commands_run_from_a_checkout_that_is_not_installed(
    checkout_not_installed, tmp_path
):
    version = offline(checkout_not_installed, "--version")
    assert version.returncode == 0, version.stderr[-3000:]
    assert version.stdout.strip() == "rlsweep 0.1.0 (source checkout, not installed)"
    check = offline(checkout_not_installed, "gpu-check", "--output-dir", str(tmp_path / "gpu-check"))
    assert check.returncode == 2 and "no NVIDIA GPU found" in check.stdout, check.stderr[-3000:]
    out = tmp_path / "trial"
    args = "trial --stack trl --model tiny --max-steps 1 --num-generations 2 --batch-size 1"
    args += " --max-completion-length 8 --max-prompt-length 96 --quantization none"
    trial = offline(checkout_not_installed, *args.split(), "--output-dir", str(out))
    assert trial.returncode == 0, trial.stdout[-2000:] + trial.stderr[-3000:]
    assert pq.read_table(out / "steps.parquet").to_pydict()["step"] == [1]
