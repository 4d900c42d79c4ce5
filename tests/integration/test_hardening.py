"""A real local sweep as an adversary sees it: what it listens on, what it writes, and a trial no node can
host."""

import ipaddress
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from orchestrator.running.driver import run_sweep
from orchestrator.spec.load import load_sweep
from orchestrator.words.outcome import UNAVAILABLE
from tests.helpers.processes import descendants, kill_trees
from tests.helpers.sweeps import tiny_sweep

pytestmark = pytest.mark.slow

SECRET_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "MLFLOW_TRACKING_PASSWORD",
    "HF_TOKEN",
)


def loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def listening(root: psutil.Process) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every TCP/UDP socket in LISTEN state in root's process tree."""
    found = []
    for proc in [root, *root.children(recursive=True)]:
        try:
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((proc.name(), conn.laddr.ip, conn.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def files_holding(roots: list[Path], needles: dict[str, bytes]) -> list[str]:
    hits = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink() and not stat.S_ISSOCK(path.lstat().st_mode):
                data = path.read_bytes()
                hits += [f"{path}: {name}" for name, value in needles.items() if value in data]
    return hits


def test_a_local_sweep_listens_on_loopback_only_and_writes_no_credential(tmp_path):
    out = tmp_path / "out"
    sentinels = {name: f"SENTINEL-{name}-{secrets.token_hex(8)}" for name in SECRET_VARS}
    path = tiny_sweep(
        tmp_path / "s.yaml",
        "sealed",
        {"mode": ["grpo"]},
        tracking={"mlflow_uri": f"sqlite:///{out}/mlflow.db"},  # MLflow's files inside the greped tree
        fixed={"max_steps": 3},
    )
    system_tmp = Path(tempfile.mkdtemp(prefix="rls-t-", dir="/tmp"))  # the run's system temp dir
    env = {**os.environ, **sentinels, "RAY_ADDRESS": "", "TMPDIR": str(system_tmp)}
    driver = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", str(path), "--output-dir", str(out)],
        cwd=Path(__file__).parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 240
        while not list(out.glob("trials/*/trainer.pid")) and time.monotonic() < deadline:
            assert driver.poll() is None, driver.communicate()
            time.sleep(0.2)
        assert list(out.glob("trials/*/trainer.pid")), "no trainer started"
        started = descendants(driver.pid)
        sockets = listening(psutil.Process(driver.pid))
        (private,) = system_tmp.glob("rls-ray-*")
        ray_temp = private / "ray"
        mode = stat.S_IMODE(private.stat().st_mode)
        leaks_while_running = files_holding([out, ray_temp], {k: v.encode() for k, v in sentinels.items()})
        assert list(ray_temp.rglob("runtime_env_agent*.log")), "Ray's runtime-env agent log was looked at"
        _, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            started += descendants(driver.pid)
            driver.kill()
        kill_trees(started)
    assert driver.returncode == 0, err[-3000:]

    names = {name for name, _, _ in sockets}
    assert {"gcs_server", "raylet"} <= names, sockets  # Ray's services were seen listening
    assert [s for s in sockets if not loopback(s[1])] == [], sockets
    assert mode == 0o700 and not str(ray_temp).startswith(str(out))
    assert leaks_while_running == []
    assert files_holding([out, system_tmp], {k: v.encode() for k, v in sentinels.items()}) == []
    assert not private.exists()  # removed with the local Ray at the end
    assert pq.read_table(out / "trials.parquet").column("status").to_pylist() == ["completed"]
    shutil.rmtree(system_tmp, ignore_errors=True)


def test_a_sweep_no_node_can_host_ends_every_trial_unavailable_and_starts_none(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "")
    path = tiny_sweep(
        tmp_path / "s.yaml",
        "toobig",
        {"num_generations": [2, 4]},
        tracking={"enabled": False},
        resources={"cpus_per_trial": 2, "gpus_per_trial": 0},
    )
    started = time.monotonic()
    outcome = run_sweep(load_sweep(path), output_dir=tmp_path / "out", ray_init_kwargs={"num_cpus": 1})
    trials = pq.read_table(outcome.output_dir / "trials.parquet").to_pandas()
    assert outcome.counts == {UNAVAILABLE: 2} and (trials.status == UNAVAILABLE).all()
    assert trials.status_detail.str.contains("asks for CPU 2 and the largest node has CPU 1").all()
    assert not (outcome.output_dir / "trials").exists()  # no trainer started
    assert time.monotonic() - started < 120
