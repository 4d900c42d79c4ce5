"""Inside a Slurm job of `rlsweep submit --slurm` (orchestrator.running.slurm writes its script):
`python -m orchestrator.cli._slurm_job env|node|driver`, the commands its batch script runs, and what they
print; what they do is orchestrator/running/slurm_job.py's. `env` prints the exports of the head's address
and a Ray token for this job; `node` runs `ray start --block` on one node (the head on node 0) until
SIGTERM; `driver` waits for every node, then runs `rlsweep run`, with SIGTERM as Ctrl-C."""

from __future__ import annotations

import os
import shlex
import sys

from orchestrator.running import slurm_job


def cmd_env() -> int:
    """Shell exports for the batch script, run on the head's node (the first of the allocation)."""
    exports = slurm_job.head_exports()
    print("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in exports.items()))
    return 0


def cmd_node() -> int:
    """`ray start --block` on this node (the head on node 0), until SIGTERM; its temp dir removed."""
    command, temp = slurm_job.node_command()
    print(f"rlsweep slurm node {os.environ['SLURMD_NODENAME']}: {shlex.join(command)}", flush=True)
    return slurm_job.run_node(command, temp)


def cmd_driver(run_args: list[str]) -> int:
    """Wait for every node of the allocation in Ray, then `rlsweep run` with this cluster as its Ray.
    SIGTERM stops the sweep as SIGINT (Ctrl-C) does."""
    slurm_job.stop_as_interrupt()
    address = os.environ["RAY_ADDRESS"]
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    alive, resources = slurm_job.join_cluster(address, nodes)
    if alive < nodes:
        print(
            f"rlsweep slurm driver: {alive} of {nodes} nodes joined Ray in {slurm_job.START_TIMEOUT_S} s",
            flush=True,
        )
        return 1
    print(f"rlsweep slurm driver: {nodes} node(s) in Ray at {address}: {resources}", flush=True)
    from orchestrator.cli import main

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
