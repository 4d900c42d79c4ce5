"""rlsweep submit without a cluster: what it refuses, and the job command line it builds (run by a real sh)."""

import shlex
import subprocess
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.running.submit import (
    PROJECT_ROOT,
    SubmitError,
    entrypoint,
    job_output_dir,
    job_tracking_uri,
)
from orchestrator.words.storage import RemotePath, output_location


@pytest.mark.parametrize("value", [None, "outputs/x", "relative"])
def test_output_dir_must_survive_the_job(value):
    with pytest.raises(SubmitError, match=r"--output-dir: .*s3://BUCKET/PREFIX.*absolute path"):
        job_output_dir(value, None)


def test_output_dir_uri_or_absolute_path_from_flag_or_sweep():
    assert job_output_dir("s3://b/p", "ignored") == "s3://b/p"
    assert job_output_dir(None, "/shared/x") == "/shared/x"
    assert job_output_dir(None, "gs://b/p") == "gs://b/p"


def test_tracking_needs_a_server(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(SubmitError, match="--tracking-uri: not set.*mlflow"):
        job_tracking_uri(None, None, enabled=True)
    with pytest.raises(SubmitError, match="local sqlite file"):
        job_tracking_uri("sqlite:///x.db", None, enabled=True)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://h:5000")
    assert job_tracking_uri(None, None, enabled=True) == "http://h:5000"
    assert job_tracking_uri(None, "http://in-sweep:5000", enabled=True) is None  # the sweep carries it
    assert job_tracking_uri(None, None, enabled=False) is None


def test_entrypoint_in_tree_sweep_is_a_relative_path():
    line = entrypoint(PROJECT_ROOT / "sweeps" / "cpu-smoke.yaml", ["max_steps=2"], "s3://b/p", "t")
    assert shlex.split(line) == [
        "python",
        "-m",
        "orchestrator.cli",
        "run",
        "sweeps/cpu-smoke.yaml",
        "--set=max_steps=2",
        "--output-dir",
        "s3://b/p",
    ]


def test_entrypoint_writes_an_outside_sweep_into_the_job_dir(tmp_path):
    text = 'name: it\'s\ngrid: {mode: [grpo, gspo]}  # $HOME `x` \\n "q"\n'
    sweep = tmp_path / "mine.yaml"
    sweep.write_text(text)
    line = entrypoint(sweep, ["grid.k=[1, 2]"], "/shared/o", "tag")
    prefix, command = line.split(" && ", 1)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    subprocess.run(["sh", "-c", prefix], cwd=job_dir, check=True)
    written = job_dir / ".rlsweep-tag-mine.yaml"
    assert written.read_text() == text
    assert shlex.split(command)[4:] == [written.name, "--set=grid.k=[1, 2]", "--output-dir", "/shared/o"]


def test_cli_refuses_before_contacting_anything(capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://h:5000")
    assert main(["submit", str(PROJECT_ROOT / "sweeps" / "cpu-smoke.yaml"), "--output-dir", "/o"]) == 2
    assert "--address: not set" in capsys.readouterr().err
    assert main(["submit"]) == 2
    assert "SWEEP: missing" in capsys.readouterr().err
    assert (
        main(["submit", str(PROJECT_ROOT / "sweeps" / "cpu-smoke.yaml"), "--set", "grid.mode=[grpo, x]"]) == 2
    )
    assert "grid.mode[1]: unknown value" in capsys.readouterr().err


def test_output_location_kinds(tmp_path):
    assert output_location(tmp_path) == tmp_path
    assert output_location(f"file://{tmp_path}") == tmp_path
    assert output_location("rel") == Path("rel").resolve()
    remote = output_location("s3://bucket/a/b?region=us-east-1")
    assert (
        isinstance(remote, RemotePath) and str(remote / "trials.parquet") == "s3://bucket/a/b/trials.parquet"
    )
