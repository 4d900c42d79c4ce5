"""rlsweep submit --slurm without Slurm: the sbatch script it writes (--dry-run), its defaults, its refusals.
tests/integration/test_slurm.py runs the script on a real loopback Slurm."""

import subprocess
from types import SimpleNamespace

import pytest

from orchestrator.cli import main
from orchestrator.running.slurm import cpus_per_node, slurm_output_dir
from orchestrator.words.storage import PROJECT_ROOT

SWEEP = str(PROJECT_ROOT / "sweeps" / "cpu-smoke.yaml")


def dry_run(capsys, *args: str) -> str:
    assert main(["submit", "--slurm", SWEEP, "--dry-run", *args]) == 0
    return capsys.readouterr().out


def test_dry_run_prints_the_script_with_every_option(capsys, tmp_path):
    script = dry_run(
        capsys,
        *["--nodes", "3", "--gpus-per-node", "4", "--partition", "gpu", "--time", "04:00:00"],
        *["--account", "proj", "--sbatch=--mem=0", "--sbatch", "#SBATCH --constraint=a100"],
        *["--output-dir", str(tmp_path / "out"), "--set", "max_steps=1", "--tracking-uri", "http://h:5000"],
    )
    directives = [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        "--job-name=rlsweep-cpu-smoke",
        "--nodes=3",
        "--ntasks-per-node=1",
        "--cpus-per-task=4",  # 4 GPUs, 1 GPU and 1 CPU per trial
        "--gpus-per-node=4",
        "--partition=gpu",
        "--time=04:00:00",
        "--account=proj",
        f"--output={tmp_path}/out/slurm/slurm-%j.out",
        "--signal=B:TERM@120",
        "--mem=0",
        "--constraint=a100",
    ]
    assert f"driver {SWEEP} --set=max_steps=1 --output-dir {tmp_path}/out &" in script
    assert "MLFLOW_TRACKING_URI=http://h:5000" in script
    assert 'srun --overlap --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task=4' in script
    assert not (tmp_path / "out").exists()  # nothing written, nothing submitted
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_defaults_one_node_no_gpu_no_partition_and_a_relative_output_dir_made_absolute(
    capsys, monkeypatch, tmp_path
):
    monkeypatch.chdir(tmp_path)
    script = dry_run(capsys, "--output-dir", "outputs/x")
    assert "#SBATCH --nodes=1\n" in script and "--cpus-per-task=2\n" in script  # max_concurrent: 2
    assert "--gpus-per-node" not in script and "--partition" not in script and "--time" not in script
    assert f"--output-dir {tmp_path}/outputs/x &" in script


def test_output_dir_uri_kept_path_resolved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert slurm_output_dir("s3://b/p", None, "n") == "s3://b/p"
    assert slurm_output_dir(None, "rel", "n") == str(tmp_path / "rel")
    assert slurm_output_dir(None, None, "n") == str(tmp_path / "outputs" / "n")


@pytest.mark.parametrize(
    ("gpus_per_trial", "cpus_per_trial", "max_concurrent", "gpus", "cpus"),
    [(1, 1, None, 0, 1), (1, 2, 3, 0, 6), (1, 4, None, 8, 32), (2, 3, None, 8, 12), (0.5, 1, None, 2, 4)],
)
def test_cpus_per_node(gpus_per_trial, cpus_per_trial, max_concurrent, gpus, cpus):
    resources = SimpleNamespace(
        gpus_per_trial=gpus_per_trial, cpus_per_trial=cpus_per_trial, max_concurrent=max_concurrent
    )
    assert cpus_per_node(resources, gpus) == cpus


def test_refusals(capsys, monkeypatch):
    assert main(["submit", SWEEP, "--dry-run"]) == 2
    assert "add --slurm" in capsys.readouterr().err
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["submit", "--slurm", SWEEP]) == 2
    assert "sbatch: not found on PATH" in capsys.readouterr().err
    assert main(["submit", "--slurm", "--stop", "12"]) == 2
    assert "scontrol: not found" in capsys.readouterr().err
