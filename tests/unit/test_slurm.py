"""rlsweep submit --slurm without Slurm: the sbatch script it writes (--dry-run), its defaults, its refusals.
tests/integration/test_slurm.py runs the script on a real loopback Slurm."""

import subprocess
import sys
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


# -- inside the job: `python -m orchestrator.cli._slurm_job env|node|driver` (tests/integration/test_slurm.py
# runs them in a real Slurm job; here each one's wiring, with Slurm and Ray stood in for)


def test_the_job_env_exports_the_heads_address_and_a_token_for_this_job_only(capsys, monkeypatch):
    from orchestrator.cli import _slurm_job
    from orchestrator.running import slurm_job

    monkeypatch.setenv("SLURMD_NODENAME", "node0")
    monkeypatch.setattr(slurm_job, "node_address", lambda node: "127.0.0.1")
    assert _slurm_job.main(["env"]) == 0
    first = capsys.readouterr().out
    assert _slurm_job.main(["env"]) == 0
    exports = dict(pair.split("=", 1) for pair in first.removeprefix("export ").split())
    assert (
        exports["RAY_ADDRESS"].startswith("127.0.0.1:") and 20000 <= int(exports["RAY_ADDRESS"][10:]) < 30000
    )
    assert exports["RAY_AUTH_MODE"] == "token" and len(exports["RAY_AUTH_TOKEN"]) == 64
    assert exports["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"  # loopback: Ray kept there
    assert exports["RAY_AUTH_TOKEN"] not in capsys.readouterr().out  # a fresh token each time


def test_the_job_driver_runs_the_sweep_once_every_node_joined_ray(capsys, monkeypatch):
    import orchestrator.cli
    from orchestrator.cli import _slurm_job
    from orchestrator.running import slurm_job

    ran = []
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:20001")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setattr(slurm_job, "stop_as_interrupt", lambda: None)
    monkeypatch.setattr(slurm_job, "join_cluster", lambda address, nodes: (nodes, {"CPU": 8.0}))
    monkeypatch.setattr(orchestrator.cli, "main", lambda argv: ran.append(argv) or 0)
    assert _slurm_job.main(["driver", SWEEP, "--set=max_steps=1"]) == 0
    assert ran == [["run", SWEEP, "--set=max_steps=1"]]
    assert "2 node(s) in Ray at 10.0.0.1:20001: {'CPU': 8.0}" in capsys.readouterr().out


def test_the_job_driver_short_of_nodes_says_how_many_joined_and_runs_nothing(capsys, monkeypatch):
    import orchestrator.cli
    from orchestrator.cli import _slurm_job
    from orchestrator.running import slurm_job

    ran = []
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:20001")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "3")
    monkeypatch.setattr(slurm_job, "stop_as_interrupt", lambda: None)
    monkeypatch.setattr(slurm_job, "join_cluster", lambda address, nodes: (1, {}))
    monkeypatch.setattr(orchestrator.cli, "main", lambda argv: ran.append(argv) or 0)
    assert _slurm_job.main(["driver", SWEEP]) == 1
    assert ran == []
    assert f"1 of 3 nodes joined Ray in {slurm_job.START_TIMEOUT_S} s" in capsys.readouterr().out


def test_sigterm_stops_the_job_driver_as_ctrl_c_does():
    code = (
        "import os, signal, time\n"
        "from orchestrator.running.slurm_job import stop_as_interrupt\n"
        "stop_as_interrupt()\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=PROJECT_ROOT
    )
    assert done.stdout.strip() == "interrupted", done.stderr


def test_the_job_entry_names_its_commands_when_given_none(capsys):
    from orchestrator.cli import _slurm_job

    assert _slurm_job.main([]) == 2
    assert "env|node|driver" in capsys.readouterr().out
