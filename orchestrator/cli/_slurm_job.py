"""Inside a Slurm job of `rlsweep submit --slurm` (orchestrator.running.slurm writes its script):
`python -m orchestrator.cli._slurm_job env|node|driver`. `env` prints the exports of the head's address
and a Ray token for this job; `node` runs `ray start --block` on one node (the head on node 0) until
SIGTERM; `driver` waits for every node, then runs `rlsweep run`, with SIGTERM as Ctrl-C."""

from __future__ import annotations

import ipaddress
import os
import secrets
import shlex
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


def cmd_env() -> int:
    """Shell exports for the batch script, run on the head's node (the first of the allocation)."""
    head = node_address(os.environ["SLURMD_NODENAME"])
    exports = {
        "RAY_ADDRESS": f"{head}:{free_port()}",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
    }
    if is_loopback(head):  # one machine on loopback: keep Ray there (Linux swaps in the machine's address)
        exports["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    print("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in exports.items()))
    return 0


def _wait_for_head(address: str, what: str) -> None:
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"rlsweep slurm {what}: Ray's head at {address} did not answer in {START_TIMEOUT_S} s")


def cmd_node() -> int:
    """`ray start --block` on this node (the head on node 0), until SIGTERM; its temp dir removed."""
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
        _wait_for_head(os.environ["RAY_ADDRESS"], "node")
        command += ["--address", os.environ["RAY_ADDRESS"]]
    print(f"rlsweep slurm node {os.environ['SLURMD_NODENAME']}: {shlex.join(command)}", flush=True)
    ray_start = subprocess.Popen(command)
    signal.signal(signal.SIGTERM, lambda *_: ray_start.send_signal(signal.SIGTERM))
    signal.signal(signal.SIGINT, lambda *_: ray_start.send_signal(signal.SIGTERM))
    try:
        return ray_start.wait()
    finally:
        shutil.rmtree(temp.parent, ignore_errors=True)


def cmd_driver(run_args: list[str]) -> int:
    """Wait for every node of the allocation in Ray, then `rlsweep run` with this cluster as its Ray.
    SIGTERM stops the sweep as SIGINT (Ctrl-C) does."""
    stopping = []

    def stop(*_):
        if not stopping:
            stopping.append(True)
            os.kill(os.getpid(), signal.SIGINT)

    signal.signal(signal.SIGTERM, stop)
    address = os.environ["RAY_ADDRESS"]
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    _wait_for_head(address, "driver")
    import ray

    from orchestrator.cli import main
    from orchestrator.running.ray_env import init_ray

    init_ray(address)
    deadline = time.monotonic() + START_TIMEOUT_S
    while (alive := sum(n["Alive"] for n in ray.nodes())) < nodes:
        if time.monotonic() > deadline:
            print(
                f"rlsweep slurm driver: {alive} of {nodes} nodes joined Ray in {START_TIMEOUT_S} s",
                flush=True,
            )
            return 1
        time.sleep(1)
    print(f"rlsweep slurm driver: {nodes} node(s) in Ray at {address}: {ray.cluster_resources()}", flush=True)
    return main(["run", *run_args])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    what, rest = (argv[0], argv[1:]) if argv else ("", [])
    if what == "env":
        return cmd_env()
    if what == "node":
        return cmd_node()
    if what == "driver":
        return cmd_driver(rest)
    print("usage: python -m orchestrator.cli._slurm_job env|node|driver RUN-ARGS (inside a Slurm job)")
    return 2


if __name__ == "__main__":
    sys.exit(main())
