"""Inside a Slurm job of `rlsweep submit --slurm` (orchestrator.running.slurm writes its script): what its
commands do on the allocation's nodes. orchestrator/cli/_slurm_job.py is their entry
(`python -m orchestrator.cli._slurm_job env|node|driver`) and prints what they say: `env` the exports of the
head's address and a Ray token for this job (`head_exports`); `node` runs `ray start --block` on one node
(the head on node 0) until SIGTERM (`node_command`, `run_node`); `driver` waits for every node
(`join_cluster`), then runs `rlsweep run`, with SIGTERM as Ctrl-C (`stop_as_interrupt`)."""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

START_TIMEOUT_S = int(os.environ.get("RLSWEEP_SLURM_START_S", "300"))  # Ray's head up, every node joined


def free_port() -> int:
    """A free port on this node, between Ray's worker ports (10002-19999) and the ephemeral range."""
    start = 20000 + secrets.randbelow(10000)
    for port in (*range(start, 30000), *range(20000, start)):
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-29999")


def node_address(node: str) -> str:
    """The node's NodeAddr in Slurm (the address Slurm itself reaches it at), else its name."""
    done = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True)
    for field in done.stdout.split():
        if field.startswith("NodeAddr="):
            return socket.gethostbyname(field.split("=", 1)[1])
    return socket.gethostbyname(node)


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def head_exports() -> dict[str, str]:
    """The batch script's exports, run on the head's node (the first of the allocation): the head's
    address, a free GCS port there and a fresh Ray auth token for this job only."""
    head = node_address(os.environ["SLURMD_NODENAME"])
    exports = {
        "RAY_ADDRESS": f"{head}:{free_port()}",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
    }
    if is_loopback(head):  # one machine on loopback: keep Ray there (Linux swaps in the machine's address)
        exports["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    return exports


def wait_for_head(address: str, what: str) -> None:
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"rlsweep slurm {what}: Ray's head at {address} did not answer in {START_TIMEOUT_S} s")


def node_command() -> tuple[list[str], Path]:
    """The `ray start --block` command of this node (the head on node 0; another node waits for the head
    first) and its private Ray temp dir."""
    from orchestrator.running.ray_env import private_ray_temp_dir

    first = os.environ["SLURM_NODEID"] == "0"
    address = node_address(os.environ["SLURMD_NODENAME"])
    ray = str(Path(sys.executable).parent / "ray")
    temp = private_ray_temp_dir()
    ports = ["--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--metrics-export-port"]
    command = [ray, "start", "--block", "--disable-usage-stats", "--node-ip-address", address]
    command += ["--num-cpus", os.environ.get("SLURM_CPUS_ON_NODE", "1"), "--temp-dir", str(temp)]
    command += [arg for flag in ports for arg in (flag, str(free_port()))]
    if first:
        command += [
            "--head",
            "--port",
            os.environ["RAY_ADDRESS"].rsplit(":", 1)[1],
            "--include-dashboard=false",
        ]
        command += ["--ray-client-server-port", str(free_port())]
    else:
        wait_for_head(os.environ["RAY_ADDRESS"], "node")
        command += ["--address", os.environ["RAY_ADDRESS"]]
    return command, temp


def run_node(command: list[str], temp: Path) -> int:
    """Run the node's `ray start --block` until SIGTERM (or SIGINT), passed on to it; its temp dir removed."""
    ray_start = subprocess.Popen(command)
    signal.signal(signal.SIGTERM, lambda *_: ray_start.send_signal(signal.SIGTERM))
    signal.signal(signal.SIGINT, lambda *_: ray_start.send_signal(signal.SIGTERM))
    try:
        return ray_start.wait()
    finally:
        shutil.rmtree(temp.parent, ignore_errors=True)


def stop_as_interrupt() -> None:
    """SIGTERM (the batch script's, on scancel --batch or the time limit's warning) stops this process as
    SIGINT (Ctrl-C) does, once."""
    stopping = []

    def stop(*_):
        if not stopping:
            stopping.append(True)
            os.kill(os.getpid(), signal.SIGINT)

    signal.signal(signal.SIGTERM, stop)


def join_cluster(address: str, nodes: int) -> tuple[int, dict]:
    """Wait for Ray's head at `address`, join it as the driver, and wait up to START_TIMEOUT_S for `nodes`
    nodes to be alive in it: (the nodes alive, Ray's cluster resources), fewer alive when time ran out."""
    wait_for_head(address, "driver")
    import ray

    from orchestrator.running.ray_env import init_ray

    init_ray(address)
    deadline = time.monotonic() + START_TIMEOUT_S
    while (alive := sum(n["Alive"] for n in ray.nodes())) < nodes:
        if time.monotonic() > deadline:
            return alive, ray.cluster_resources()
        time.sleep(1)
    return alive, ray.cluster_resources()
