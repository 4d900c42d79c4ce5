"""`rlsweep gpu-check`: the stacks against each other on this GPU."""

from __future__ import annotations

import argparse


def cmd_gpu_check(args: argparse.Namespace) -> int:
    from orchestrator.running import gpu_check

    return gpu_check.run(args)


def add_gpu_check(sub) -> None:
    from orchestrator.running.gpu_check import add_arguments

    p = sub.add_parser(
        "gpu-check",
        help="the registered stacks (TRL, Unsloth), GRPO vs GSPO on this GPU: one table (needs a GPU)",
    )
    add_arguments(p)
    p.set_defaults(func=cmd_gpu_check)
